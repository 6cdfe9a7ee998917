//! Client certificate authentication on Ingress hosts (ingress-nginx `auth-tls-*`, docs
//! section "Client Certificate Authentication"; nginx `ssl_verify_client`) through the real
//! proxy and real TLS: what each mode answers with and without a certificate, the fields the
//! backend gets, and that a host without the annotations asks for nothing.

mod common;

use std::sync::Arc;

use common::*;
use http_body_util::BodyExt;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use sluice_proxy::ProxyArgs;
use sluice_routing::{CompileOptions, compile};
use tokio::net::TcpStream;

const NGINX: &str = "nginx.ingress.kubernetes.io/";

/// A CA and a client certificate it signed (CN `client-1`), as DER.
struct ClientIdentity {
    ca_pem: String,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

fn client_identity(cn: &str) -> ClientIdentity {
    client_identities(&[cn]).remove(0)
}

/// Client certificates for `cns`, all signed by one new CA.
fn client_identities(cns: &[&str]) -> Vec<ClientIdentity> {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "client CA");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
    cns.iter()
        .map(|cn| {
            let key = rcgen::KeyPair::generate().unwrap();
            let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, *cn);
            params
                .distinguished_name
                .push(rcgen::DnType::OrganizationName, "Example");
            let cert = params.signed_by(&key, &ca).unwrap();
            ClientIdentity {
                ca_pem: ca.pem(),
                chain: vec![cert.der().clone()],
                key: PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            }
        })
        .collect()
}

/// GET `https://host/` through the proxy, showing `identity` if given: (status, Location,
/// the backend's view of the request headers), or the TLS error.
async fn get(
    proxy: &TestProxy,
    server_ca: &CertificateDer<'static>,
    host: &str,
    identity: Option<&ClientIdentity>,
) -> (u16, Option<String>, serde_json::Value) {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(server_ca.clone()).unwrap();
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let mut config = match identity {
        Some(id) => builder
            .with_client_auth_cert(id.chain.clone(), id.key.clone_key())
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tcp = TcpStream::connect(proxy.https).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from(host.to_owned()).unwrap(), tcp)
        .await
        .expect("the handshake never fails on the client certificate");
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .unwrap();
    tokio::spawn(conn);
    let request = http::Request::get("/")
        .header("host", host)
        .header("ssl-client-verify", "SUCCESS")
        .header("ssl-client-subject-dn", "CN=spoofed")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status().as_u16();
    let location = response
        .headers()
        .get("location")
        .map(|v| v.to_str().unwrap().to_owned());
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let report = serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
    (status, location, report["headers"].clone())
}

/// A proxy serving `host` over TLS with `annotations` (the client CA in Secret `client-ca`),
/// and `plain.test` without them.
async fn proxy_with(
    host: &str,
    annotations: &[(&str, &str)],
    client_ca_pem: &str,
) -> (
    TestProxy,
    sluice_echo::EchoServer,
    CertificateDer<'static>,
    CertificateDer<'static>,
) {
    let backend = echo("web", "web-1").await;
    let (cert, key, server_ca) = ca_and_leaf(host);
    let (plain_cert, plain_key, plain_ca) = ca_and_leaf("plain.test");
    let mut route = Route::new(host, "web", vec![backend.addr()]).with_tls(cert, key);
    for (k, v) in annotations {
        route = route.with_annotation(&format!("{NGINX}{k}"), v);
    }
    let plain =
        Route::new("plain.test", "web", vec![backend.addr()]).with_tls(plain_cert, plain_key);
    let mut inputs = inputs(&[route, plain]);
    inputs.secrets.push(Arc::new(
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "client-ca", "namespace": NS},
            "type": "Opaque",
            "stringData": {"ca.crt": client_ca_pem}
        }))
        .unwrap(),
    ));
    let proxy = TestProxy::start(ProxyArgs::loopback()).await;
    proxy.table.update(
        compile(&inputs, &CompileOptions::default()).table,
        std::time::Duration::from_millis(1),
    );
    (proxy, backend, server_ca, plain_ca)
}

/// ingress-nginx "Client Certificate Authentication", `auth-tls-verify-client: on` (the
/// default): a verified certificate passes with its subject upstream; none, or one from
/// another CA, gets 400; the fields the client sent under those names never reach the backend.
#[tokio::test]
async fn auth_tls_verify_client_on_requires_a_verified_certificate() {
    init_tracing();
    bounded(async {
        let good = client_identity("client-1");
        let stranger = client_identity("client-1");
        let secret = format!("{NS}/client-ca");
        let (proxy, _backend, ca, plain_ca) = proxy_with(
            "mtls.test",
            &[
                ("auth-tls-secret", secret.as_str()),
                ("auth-tls-pass-certificate-to-upstream", "true"),
            ],
            &good.ca_pem,
        )
        .await;

        let (status, _, headers) = get(&proxy, &ca, "mtls.test", Some(&good)).await;
        assert_eq!(status, 200);
        assert_eq!(headers["ssl-client-verify"], "SUCCESS");
        assert_eq!(headers["ssl-client-subject-dn"], "O=Example,CN=client-1");
        assert_eq!(headers["ssl-client-issuer-dn"], "CN=client CA");
        let pem = headers["ssl-client-cert"].as_str().unwrap_or("");
        assert!(pem.starts_with("-----BEGIN%20CERTIFICATE-----%0A"), "{pem}");

        assert_eq!(get(&proxy, &ca, "mtls.test", None).await.0, 400);
        assert_eq!(get(&proxy, &ca, "mtls.test", Some(&stranger)).await.0, 400);

        // Another host on the same listener asks for nothing and forwards no verdict.
        let (status, _, headers) = get(&proxy, &plain_ca, "plain.test", None).await;
        assert_eq!(status, 200);
        assert_eq!(
            headers["ssl-client-verify"], "SUCCESS",
            "not ours to touch there"
        );
        proxy.shutdown().await;
    })
    .await;
}

/// `optional`, `optional_no_ca`, `auth-tls-error-page` and `auth-tls-match-cn`.
#[tokio::test]
async fn auth_tls_optional_modes_error_page_and_match_cn() {
    init_tracing();
    bounded(async {
        let mut same_ca = client_identities(&["client-1", "intruder"]);
        let intruder = same_ca.remove(1);
        let good = same_ca.remove(0);
        let stranger = client_identity("client-1");
        let secret = format!("{NS}/client-ca");

        let (proxy, _b, ca, _) = proxy_with(
            "opt.test",
            &[
                ("auth-tls-secret", secret.as_str()),
                ("auth-tls-verify-client", "optional"),
            ],
            &good.ca_pem,
        )
        .await;
        let (status, _, headers) = get(&proxy, &ca, "opt.test", None).await;
        assert_eq!(
            (status, headers["ssl-client-verify"].as_str()),
            (200, Some("NONE"))
        );
        assert_eq!(
            headers.get("ssl-client-subject-dn"),
            None,
            "a spoofed field is dropped"
        );
        assert_eq!(get(&proxy, &ca, "opt.test", Some(&stranger)).await.0, 400);
        assert_eq!(get(&proxy, &ca, "opt.test", Some(&good)).await.0, 200);
        proxy.shutdown().await;

        let (proxy, _b, ca, _) = proxy_with(
            "noca.test",
            &[
                ("auth-tls-secret", secret.as_str()),
                ("auth-tls-verify-client", "optional_no_ca"),
            ],
            &good.ca_pem,
        )
        .await;
        let (status, _, headers) = get(&proxy, &ca, "noca.test", Some(&stranger)).await;
        assert_eq!(status, 200);
        let verdict = headers["ssl-client-verify"].as_str().unwrap_or("");
        assert!(verdict.starts_with("FAILED:"), "{verdict}");
        proxy.shutdown().await;

        let (proxy, _b, ca, _) = proxy_with(
            "page.test",
            &[
                ("auth-tls-secret", secret.as_str()),
                ("auth-tls-error-page", "https://login.example.com/cert"),
                ("auth-tls-match-cn", "CN=client-[0-9]+"),
            ],
            &good.ca_pem,
        )
        .await;
        let (status, location, _) = get(&proxy, &ca, "page.test", None).await;
        assert_eq!(
            (status, location.as_deref()),
            (302, Some("https://login.example.com/cert"))
        );
        assert_eq!(get(&proxy, &ca, "page.test", Some(&good)).await.0, 200);
        // Verified, but its subject does not match: 403 (nginx's `if` in the server).
        assert_eq!(get(&proxy, &ca, "page.test", Some(&intruder)).await.0, 403);
        proxy.shutdown().await;
    })
    .await;
}

/// An `auth-tls-secret` that does not exist closes the Ingress's routes (503) rather than
/// serving them without the check.
#[tokio::test]
async fn a_missing_auth_tls_secret_fails_closed() {
    init_tracing();
    bounded(async {
        let good = client_identity("client-1");
        let missing = format!("{NS}/nope");
        let (proxy, _b, ca, _) = proxy_with(
            "gone.test",
            &[("auth-tls-secret", missing.as_str())],
            &good.ca_pem,
        )
        .await;
        assert_eq!(get(&proxy, &ca, "gone.test", Some(&good)).await.0, 503);
        proxy.shutdown().await;
    })
    .await;
}
