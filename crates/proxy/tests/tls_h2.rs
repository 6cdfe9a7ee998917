//! TLS termination (SNI, default certificate, ALPN) and HTTP/2 (over TLS and h2c).

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use common::*;
use http::{Request, Version};
use http_body_util::Full;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A client trusting only `ca`, offering `alpn`.
fn verifying_client(ca: CertificateDer<'static>, alpn: &[&[u8]]) -> ClientConfig {
    let mut roots = RootCertStore::empty();
    roots.add(ca).unwrap();
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    config
}

/// Accepts any certificate and remembers the leaf it was shown.
#[derive(Debug, Default)]
struct Recorder {
    seen: Mutex<Option<CertificateDer<'static>>>,
}

impl ServerCertVerifier for Recorder {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        *self.seen.lock().unwrap() = Some(end_entity.clone().into_owned());
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The leaf certificate the proxy presents for `server_name`.
async fn presented_cert(
    addr: SocketAddr,
    server_name: ServerName<'static>,
) -> CertificateDer<'static> {
    let recorder = Arc::new(Recorder::default());
    let config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(recorder.clone())
        .with_no_client_auth();
    let stream = TcpStream::connect(addr).await.unwrap();
    let _tls = TlsConnector::from(Arc::new(config))
        .connect(server_name, stream)
        .await
        .expect("handshake");
    recorder
        .seen
        .lock()
        .unwrap()
        .clone()
        .expect("a certificate")
}

#[tokio::test]
async fn h2_over_tls_with_certificate_from_secret() {
    init_tracing();
    bounded(async {
        let backend = echo("secure", "secure-0").await;
        let (cert_pem, key_pem, ca) = ca_and_leaf("secure.example.com");
        let proxy = TestProxy::with_routes(&[Route::new(
            "secure.example.com",
            "secure",
            vec![backend.addr()],
        )
        .with_tls(cert_pem, key_pem)])
        .await;

        // Verifies the chain and the host name against our CA.
        let config = verifying_client(ca.clone(), &[b"h2", b"http/1.1"]);
        let stream = TcpStream::connect(proxy.https).await.unwrap();
        let tls = TlsConnector::from(Arc::new(config))
            .connect(ServerName::try_from("secure.example.com").unwrap(), stream)
            .await
            .expect("certificate from the Secret verifies");
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        let (mut sender, connection) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
                .await
                .unwrap();
        tokio::spawn(connection);
        for i in 0..3 {
            let request = Request::get(format!("https://secure.example.com/h2/{i}?q=1"))
                .header("cookie", "a=1")
                .header("cookie", "b=2")
                .body(Full::new(Bytes::new()))
                .unwrap();
            let response = sender.send_request(request).await.unwrap();
            assert_eq!(response.version(), Version::HTTP_2);
            let answer = collect(response).await;
            assert_eq!(answer.status, 200);
            // ingress-nginx's hsts defaults on HTTPS responses.
            assert_eq!(
                answer.headers["strict-transport-security"],
                "max-age=31536000; includeSubDomains"
            );
            let report = answer.report();
            assert_eq!(report.path, format!("/h2/{i}"));
            assert_eq!(report.protocol, "HTTP/1.1");
            assert_eq!(report.host.as_deref(), Some("secure.example.com"));
            assert_eq!(report.headers["x-forwarded-proto"], "https");
            assert_eq!(
                report.headers["x-forwarded-port"],
                proxy.https.port().to_string()
            );
            assert_eq!(report.headers["cookie"], "a=1; b=2");
        }

        // HTTP/1.1 over TLS when the client offers only that.
        let config = verifying_client(ca, &[b"http/1.1"]);
        let stream = TcpStream::connect(proxy.https).await.unwrap();
        let tls = TlsConnector::from(Arc::new(config))
            .connect(ServerName::try_from("secure.example.com").unwrap(), stream)
            .await
            .unwrap();
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .unwrap();
        tokio::spawn(connection);
        let request = Request::get("/h1")
            .header("host", "secure.example.com")
            .body(Full::new(Bytes::new()))
            .unwrap();
        let answer = collect(sender.send_request(request).await.unwrap()).await;
        assert_eq!(answer.status, 200);
        assert_eq!(answer.report().headers["x-forwarded-proto"], "https");
        // The own HTTP/1.1 loop sets it too; plain HTTP never gets it.
        assert_eq!(
            answer.headers["strict-transport-security"],
            "max-age=31536000; includeSubDomains"
        );
    })
    .await;
}

#[tokio::test]
async fn unknown_or_absent_sni_gets_the_default_certificate() {
    init_tracing();
    bounded(async {
        let backend = echo("secure", "secure-0").await;
        let (cert_pem, key_pem, _ca) = ca_and_leaf("secure.example.com");
        use rustls::pki_types::pem::PemObject;
        let leaf = CertificateDer::from_pem_slice(cert_pem.as_bytes()).unwrap();
        let proxy = TestProxy::with_routes(&[Route::new(
            "secure.example.com",
            "secure",
            vec![backend.addr()],
        )
        .with_tls(cert_pem, key_pem)])
        .await;

        let known = presented_cert(
            proxy.https,
            ServerName::try_from("secure.example.com").unwrap(),
        )
        .await;
        assert_eq!(known, leaf);
        let unknown = presented_cert(
            proxy.https,
            ServerName::try_from("other.example.com").unwrap(),
        )
        .await;
        assert_eq!(unknown, proxy.default_cert);
        // An IP address as server name sends no SNI at all.
        let absent = presented_cert(
            proxy.https,
            ServerName::IpAddress("127.0.0.1".parse::<std::net::IpAddr>().unwrap().into()),
        )
        .await;
        assert_eq!(absent, proxy.default_cert);

        // Once the Ingress is gone, the name falls back to the default certificate.
        proxy.route(&[]);
        let removed = presented_cert(
            proxy.https,
            ServerName::try_from("secure.example.com").unwrap(),
        )
        .await;
        assert_eq!(removed, proxy.default_cert);
    })
    .await;
}

#[tokio::test]
async fn the_tables_default_certificate_replaces_the_generated_one() {
    use rustls::pki_types::pem::PemObject;
    use sluice_routing::{CompileOptions, ObjectRef, compile};
    init_tracing();
    bounded(async {
        let backend = echo("secure", "secure-0").await;
        let (cert_pem, key_pem, _) = ca_and_leaf("secure.example.com");
        let (default_pem, default_key, _) = ca_and_leaf("fallback.example.com");
        let leaf = CertificateDer::from_pem_slice(cert_pem.as_bytes()).unwrap();
        let default_leaf = CertificateDer::from_pem_slice(default_pem.as_bytes()).unwrap();
        let routes = [
            Route::new("secure.example.com", "secure", vec![backend.addr()])
                .with_tls(cert_pem, key_pem),
        ];
        let proxy = TestProxy::with_routes(&routes).await;

        // `--default-ssl-certificate default/fallback-tls`, as the controller compiles it.
        let mut objects = inputs(&routes);
        objects.secrets.push(Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "fallback-tls", "namespace": NS},
                "type": "kubernetes.io/tls",
                "stringData": {"tls.crt": default_pem, "tls.key": default_key},
            }))
            .unwrap(),
        ));
        let options = CompileOptions {
            default_certificate: Some(ObjectRef::secret(NS, "fallback-tls")),
            ..CompileOptions::default()
        };
        let compiled = compile(&objects, &options);
        assert!(compiled.flag_diagnostics.is_empty());
        proxy
            .table
            .update(compiled.table, std::time::Duration::ZERO);

        let name = |n: &str| ServerName::try_from(n.to_owned()).unwrap();
        let ip = ServerName::IpAddress("127.0.0.1".parse::<std::net::IpAddr>().unwrap().into());
        assert_eq!(
            presented_cert(proxy.https, name("secure.example.com")).await,
            leaf
        );
        assert_eq!(
            presented_cert(proxy.https, name("other.example.com")).await,
            default_leaf
        );
        assert_eq!(presented_cert(proxy.https, ip.clone()).await, default_leaf);

        // A table without one: the generated certificate again.
        proxy.route(&routes);
        assert_eq!(
            presented_cert(proxy.https, name("other.example.com")).await,
            proxy.default_cert
        );
        assert_eq!(presented_cert(proxy.https, ip).await, proxy.default_cert);
    })
    .await;
}

#[tokio::test]
async fn h2c_prior_knowledge_on_the_plain_port() {
    init_tracing();
    bounded(async {
        let backend = echo("plain", "plain-0").await;
        let proxy =
            TestProxy::with_routes(&[Route::new("h2c.example.com", "plain", vec![backend.addr()])])
                .await;
        let stream = TcpStream::connect(proxy.http).await.unwrap();
        let (mut sender, connection) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                .await
                .unwrap();
        tokio::spawn(connection);
        // Several concurrent streams on one connection.
        let requests = (0..8).map(|i| {
            let mut sender = sender.clone();
            async move {
                let request = Request::post(format!("http://h2c.example.com/stream/{i}"))
                    .body(Full::new(Bytes::from(vec![b'z'; 1000 * i])))
                    .unwrap();
                collect(sender.send_request(request).await.unwrap()).await
            }
        });
        let answers = futures::future::join_all(requests).await;
        for (i, answer) in answers.iter().enumerate() {
            assert_eq!(answer.status, 200);
            let report = answer.report();
            assert_eq!(report.path, format!("/stream/{i}"));
            assert_eq!(report.body_bytes, 1000 * i as u64);
            assert_eq!(report.host.as_deref(), Some("h2c.example.com"));
            assert_eq!(report.headers["x-forwarded-host"], "h2c.example.com");
            assert_eq!(report.headers["x-forwarded-proto"], "http");
        }
        let request = Request::get("http://unknown.example.com/")
            .body(Full::new(Bytes::new()))
            .unwrap();
        assert_eq!(sender.send_request(request).await.unwrap().status(), 404);
    })
    .await;
}

/// The suite a client offering `offered` (in its order of preference) gets.
async fn negotiated(addr: SocketAddr, offered: &[rustls::CipherSuite]) -> rustls::CipherSuite {
    let mut client = rustls::crypto::ring::default_provider();
    client
        .cipher_suites
        .retain(|s| offered.contains(&s.suite()));
    client
        .cipher_suites
        .sort_by_key(|s| offered.iter().position(|o| *o == s.suite()));
    let config = ClientConfig::builder_with_provider(Arc::new(client))
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Recorder::default()))
        .with_no_client_auth();
    let stream = TcpStream::connect(addr).await.unwrap();
    let tls = TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("any.example.com").unwrap(), stream)
        .await
        .expect("handshake");
    tls.get_ref()
        .1
        .negotiated_cipher_suite()
        .expect("a suite")
        .suite()
}

/// Go crypto/tls's rule (`aesgcmPreferred`): a client that lists AES-GCM first has AES
/// hardware and gets AES-128-GCM (the cheaper SHA-256 key schedule), whatever AES-GCM
/// suite it put first; a client that lists ChaCha20 first keeps it.
#[tokio::test]
async fn cipher_suite_follows_the_clients_hardware_and_prefers_aes_128() {
    use rustls::CipherSuite::*;
    init_tracing();
    bounded(async {
        let proxy = TestProxy::with_routes(&[]).await;
        // OpenSSL's default order (curl, wrk, nginx as a client).
        let openssl = [
            TLS13_AES_256_GCM_SHA384,
            TLS13_CHACHA20_POLY1305_SHA256,
            TLS13_AES_128_GCM_SHA256,
        ];
        assert_eq!(
            negotiated(proxy.https, &openssl).await,
            TLS13_AES_128_GCM_SHA256
        );
        // A phone without AES instructions lists ChaCha20 first.
        let mobile = [
            TLS13_CHACHA20_POLY1305_SHA256,
            TLS13_AES_128_GCM_SHA256,
            TLS13_AES_256_GCM_SHA384,
        ];
        assert_eq!(
            negotiated(proxy.https, &mobile).await,
            TLS13_CHACHA20_POLY1305_SHA256
        );
        // Only AES-256 offered: it gets it.
        assert_eq!(
            negotiated(proxy.https, &[TLS13_AES_256_GCM_SHA384]).await,
            TLS13_AES_256_GCM_SHA384
        );
        // TLS 1.2 clients too.
        let tls12 = [
            TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
            TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
            TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        ];
        assert_eq!(
            negotiated(proxy.https, &tls12).await,
            TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
        );
        proxy.shutdown().await;
    })
    .await;
}
