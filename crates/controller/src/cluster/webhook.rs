//! The validating admission webhook (`--validating-webhook`): HTTPS, `POST /validate` with an
//! `admission.k8s.io/v1` AdmissionReview, answered by [`crate::admission::answer`] against
//! the objects of the controller's last rebuild. It runs inside the controller because the
//! controller already holds those objects in its caches and compiles with the same options:
//! the verdict and the Events come from one code path, and no second set of watches (on
//! every Secret) is needed.
//!
//! The serving certificate and key are PEM files (a mounted `kubernetes.io/tls` Secret); they
//! are read again when their modification time changes, so a renewed Secret (cert-manager)
//! takes effect without a restart. Bodies are limited to [`MAX_BODY`]; nothing from a
//! request is executed or templated.

use crate::rebuild::Rebuilder;
use anyhow::Context;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio_util::sync::CancellationToken;

/// The largest AdmissionReview accepted (the API server's own limit on an object is 1.5 MiB;
/// a review carries the object and its old version).
pub const MAX_BODY: usize = 8 << 20;

/// How many reviews compile at once (the rest wait their turn).
const COMPILES: usize = 2;

fn compiles() -> &'static tokio::sync::Semaphore {
    static SEMAPHORE: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(COMPILES);
    &SEMAPHORE
}

/// Time allowed for one connection's request (the API server's webhook timeout is at most
/// 30 s).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The TLS configuration, reloaded when the files change.
struct Certificate {
    cert: PathBuf,
    key: PathBuf,
    loaded: Mutex<(
        Option<SystemTime>,
        Option<SystemTime>,
        Arc<rustls::ServerConfig>,
    )>,
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

fn load(cert: &Path, key: &Path) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .with_context(|| format!("--validating-webhook-certificate {}", cert.display()))?;
    anyhow::ensure!(
        !certs.is_empty(),
        "--validating-webhook-certificate {}: no certificate in it",
        cert.display()
    );
    let key = PrivateKeyDer::from_pem_file(key)
        .with_context(|| format!("--validating-webhook-key {}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .context("the webhook's certificate and key do not match")?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

impl Certificate {
    fn new(cert: PathBuf, key: PathBuf) -> anyhow::Result<Certificate> {
        let config = load(&cert, &key)?;
        let stamps = (modified(&cert), modified(&key));
        Ok(Certificate {
            loaded: Mutex::new((stamps.0, stamps.1, config)),
            cert,
            key,
        })
    }

    /// The current configuration; reloaded when a file changed (a file that no longer
    /// loads keeps the previous configuration, with a warning).
    fn config(&self) -> Arc<rustls::ServerConfig> {
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        let stamps = (modified(&self.cert), modified(&self.key));
        if (loaded.0, loaded.1) != stamps {
            match load(&self.cert, &self.key) {
                Ok(config) => {
                    tracing::info!("webhook certificate reloaded");
                    *loaded = (stamps.0, stamps.1, config);
                }
                Err(error) => {
                    tracing::warn!(%error, "webhook certificate changed but does not load; keeping the previous one");
                    loaded.0 = stamps.0;
                    loaded.1 = stamps.1;
                }
            }
        }
        loaded.2.clone()
    }
}

/// A bound webhook listener; [`Webhook::serve`] answers on it until stopped.
pub struct Webhook {
    listener: tokio::net::TcpListener,
    certificate: Arc<Certificate>,
}

impl Webhook {
    /// Binds `addr` and loads the certificate (errors name the flag).
    pub async fn bind(addr: SocketAddr, cert: PathBuf, key: PathBuf) -> anyhow::Result<Webhook> {
        let certificate = Arc::new(Certificate::new(cert, key)?);
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("--validating-webhook {addr}"))?;
        Ok(Webhook {
            listener,
            certificate,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Answers reviews until `stop`.
    pub async fn serve(self, rebuilder: Arc<Rebuilder>, stop: CancellationToken) {
        loop {
            let (stream, peer) = tokio::select! {
                _ = stop.cancelled() => return,
                accepted = self.listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(error) => {
                        tracing::warn!(%error, "webhook: accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            let acceptor = tokio_rustls::TlsAcceptor::from(self.certificate.config());
            let rebuilder = rebuilder.clone();
            tokio::spawn(async move {
                let served =
                    tokio::time::timeout(REQUEST_TIMEOUT, async move {
                        let tls = acceptor.accept(stream).await?;
                        let service = hyper::service::service_fn(move |req| {
                            let rebuilder = rebuilder.clone();
                            async move {
                                Ok::<_, std::convert::Infallible>(handle(req, &rebuilder).await)
                            }
                        });
                        hyper::server::conn::http1::Builder::new()
                            .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                            .await
                            .map_err(std::io::Error::other)
                    })
                    .await;
                match served {
                    Ok(Ok(())) => {}
                    Ok(Err(error)) => tracing::debug!(%peer, %error, "webhook connection failed"),
                    Err(_) => tracing::debug!(%peer, "webhook connection timed out"),
                }
            });
        }
    }
}

fn reply(status: StatusCode, body: impl Into<Bytes>, json: bool) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    let kind = if json {
        "application/json"
    } else {
        "text/plain; charset=utf-8"
    };
    if let Ok(v) = hyper::header::HeaderValue::from_str(kind) {
        response
            .headers_mut()
            .insert(hyper::header::CONTENT_TYPE, v);
    }
    response
}

async fn handle(req: Request<Incoming>, rebuilder: &Rebuilder) -> Response<Full<Bytes>> {
    if req.uri().path() != "/validate" {
        return reply(StatusCode::NOT_FOUND, "not found: POST /validate\n", false);
    }
    if req.method() != hyper::Method::POST {
        return reply(StatusCode::METHOD_NOT_ALLOWED, "POST /validate\n", false);
    }
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(error) => {
            return reply(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("request body refused: {error}\n"),
                false,
            );
        }
    };
    let review: serde_json::Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(error) => {
            return reply(
                StatusCode::BAD_REQUEST,
                format!("not JSON: {error}\n"),
                false,
            );
        }
    };
    let (inputs, options) = rebuilder.admission_inputs();
    // A review compiles every object of the cluster (twice for an UPDATE): on a blocking
    // thread, never on the control runtime's, and at most COMPILES at a time so that a
    // flood of reviews cannot starve the rebuilds.
    let Ok(_permit) = compiles().acquire().await else {
        return reply(StatusCode::SERVICE_UNAVAILABLE, "shutting down\n", false);
    };
    let answered = tokio::task::spawn_blocking(move || {
        let answer = crate::admission::answer(&review, &inputs, &options);
        (review, answer)
    })
    .await;
    let Ok((review, answered)) = answered else {
        return reply(StatusCode::INTERNAL_SERVER_ERROR, "review failed\n", false);
    };
    match answered {
        Ok(answer) => {
            let allowed = answer["response"]["allowed"].as_bool().unwrap_or(false);
            if !allowed {
                tracing::info!(
                    object = %format_args!("{}/{}", review["request"]["namespace"].as_str().unwrap_or(""),
                        review["request"]["name"].as_str().unwrap_or("")),
                    message = answer["response"]["status"]["message"].as_str().unwrap_or(""),
                    "webhook refused an Ingress"
                );
            }
            reply(StatusCode::OK, answer.to_string(), true)
        }
        Err(error) => reply(StatusCode::BAD_REQUEST, format!("{error}\n"), false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_certificate_files_are_named_with_their_flag() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        let e = load(&cert, &key).expect_err("missing").to_string();
        assert!(e.contains("--validating-webhook-certificate"), "{e}");
        std::fs::write(&cert, "not PEM").expect("write");
        std::fs::write(&key, "not PEM").expect("write");
        let e = load(&cert, &key).expect_err("empty").to_string();
        assert!(e.contains("no certificate"), "{e}");
        let a = rcgen::generate_simple_self_signed(vec!["a.test".into()]).expect("cert");
        let b = rcgen::generate_simple_self_signed(vec!["b.test".into()]).expect("cert");
        std::fs::write(&cert, a.cert.pem()).expect("write");
        std::fs::write(&key, b.signing_key.serialize_pem()).expect("write");
        let e = format!("{:#}", load(&cert, &key).expect_err("mismatch"));
        assert!(e.contains("do not match"), "{e}");
        std::fs::write(&key, a.signing_key.serialize_pem()).expect("write");
        assert!(load(&cert, &key).is_ok());
    }
}
