//! TLS client helpers for tests: a CA with a leaf it signs, and a GET whose handshake
//! verifies the server's certificate against that CA.
#![allow(dead_code)]

use rustls::pki_types::CertificateDer;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A CA, and a leaf it signs for `names` (DNS names or IP addresses): (leaf PEM, key PEM,
/// CA DER).
pub fn ca_and_leaf(names: &[&str]) -> anyhow::Result<(String, String, CertificateDer<'static>)> {
    let ca_key = rcgen::KeyPair::generate()?;
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key)?;
    let leaf_key = rcgen::KeyPair::generate()?;
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let leaf = rcgen::CertificateParams::new(names)?.signed_by(&leaf_key, &ca)?;
    Ok((leaf.pem(), leaf_key.serialize_pem(), ca.der().clone()))
}

/// A response over TLS: status, and the body's JSON object when there is one.
#[derive(Debug)]
pub struct TlsReply {
    pub status: u16,
    pub body: String,
}

impl TlsReply {
    /// The echo backend's service name, or "" when something else answered.
    pub fn service(&self) -> String {
        serde_json::from_str::<serde_json::Value>(&self.body)
            .ok()
            .and_then(|j| j["service"].as_str().map(String::from))
            .unwrap_or_default()
    }
}

/// GET `/` over TLS with server name `sni` (an IP address sends no SNI), verifying the
/// server's certificate against `ca`. `Err` when it does not verify.
pub async fn tls_get(
    addr: SocketAddr,
    ca: &CertificateDer<'static>,
    sni: &str,
) -> anyhow::Result<TlsReply> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.clone())?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = rustls::pki_types::ServerName::try_from(sni.to_string())?;
    let mut tls =
        tokio::time::timeout(Duration::from_secs(10), connector.connect(name, tcp)).await??;
    let req = format!("GET / HTTP/1.1\r\nHost: {sni}\r\nConnection: close\r\n\r\n");
    tls.write_all(req.as_bytes()).await?;
    let mut buf = Vec::new();
    // A peer may close TLS without close_notify; what arrived is enough.
    let _ = tokio::time::timeout(Duration::from_secs(10), tls.read_to_end(&mut buf)).await?;
    let text = String::from_utf8_lossy(&buf);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    // The echo backend's JSON, with any chunk framing around it cut off.
    let body = match (body.find('{'), body.rfind('}')) {
        (Some(start), Some(end)) if start < end => body[start..=end].to_string(),
        _ => body.to_string(),
    };
    Ok(TlsReply { status, body })
}

/// Polls until a handshake for `sni` verifies against `ca` and the request gets `status`
/// from `service` ("" for sluice itself).
pub async fn until_tls(
    addr: SocketAddr,
    ca: &CertificateDer<'static>,
    sni: &str,
    service: &str,
    status: u16,
) -> anyhow::Result<()> {
    sluice_testenv::eventually(
        Duration::from_secs(20),
        &format!("{sni} verified by the CA, {service} {status}"),
        || async {
            let r = tls_get(addr, ca, sni).await.ok()?;
            (r.status == status && r.service() == service).then_some(())
        },
    )
    .await
}
