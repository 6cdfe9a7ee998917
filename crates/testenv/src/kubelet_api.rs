//! The node agent's side of `kubectl logs`: each container's stdout and stderr captured to a
//! file, one line per write with the time it was read, and the kubelet's
//! `/containerLogs/{namespace}/{pod}/{container}` endpoint, which kube-apiserver proxies
//! `pods/log` to (HTTPS on the Node's InternalIP and `daemonEndpoints.kubeletEndpoint.port`,
//! mutual TLS with certificates of the test CA).
//!
//! A log file holds `RFC3339-nanosecond-time SP line` per line. Query parameters honoured:
//! `sinceTime`, `sinceSeconds`, `tailLines`, `timestamps`, `limitBytes`, `follow`.

use anyhow::Context;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The port kube-apiserver finds in the Node's `daemonEndpoints` (a kubelet's default).
pub(crate) const KUBELET_PORT: u16 = 10250;

/// The longest a `follow` request streams, so that no test waits on one forever.
const MAX_FOLLOW: Duration = Duration::from_secs(600);

/// One container's log.
#[derive(Debug)]
pub(crate) struct LogFile {
    path: PathBuf,
    /// Set when the container's output ended (the process and its children are gone).
    closed: AtomicBool,
}

/// `(namespace, pod, container)` -> its log, for the pods running now.
pub(crate) type Logs = Arc<Mutex<HashMap<(String, String, String), Arc<LogFile>>>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Starts a thread that copies `output` (the read end of the container's stdout and stderr)
/// into `path`, each line prefixed by the time it was read; registers it in `logs`.
pub(crate) fn capture(
    logs: &Logs,
    key: (String, String, String),
    output: std::io::PipeReader,
    path: PathBuf,
) -> anyhow::Result<()> {
    let mut file = std::fs::File::create(&path).with_context(|| format!("{}", path.display()))?;
    let entry = Arc::new(LogFile {
        path,
        closed: AtomicBool::new(false),
    });
    lock(logs).insert(key, entry.clone());
    std::thread::Builder::new()
        .name("testenv-log".into())
        .spawn(move || {
            let mut reader = std::io::BufReader::new(output);
            let mut line = Vec::new();
            loop {
                line.clear();
                match reader.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                if !line.ends_with(b"\n") {
                    line.push(b'\n');
                }
                let stamp = Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.9fZ");
                if write!(file, "{stamp} ")
                    .and_then(|_| file.write_all(&line))
                    .is_err()
                {
                    break;
                }
            }
            entry.closed.store(true, Ordering::Relaxed);
        })
        .context("spawn a log capture thread")?;
    Ok(())
}

/// Forgets the logs of pod `namespace/name` (its files go with the pod's directory).
pub(crate) fn forget(logs: &Logs, namespace: &str, name: &str) {
    lock(logs).retain(|(ns, pod, _), _| !(ns == namespace && pod == name));
}

/// A TLS acceptor that asks for a client certificate of the test CA: kube-apiserver's
/// `--kubelet-client-certificate`. Anything else is refused, as a kubelet refuses it.
pub(crate) fn acceptor(pki: &crate::pki::Pki) -> anyhow::Result<tokio_rustls::TlsAcceptor> {
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(pki.ca_der.clone()))?;
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()?;
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            vec![CertificateDer::from(pki.serving_cert_der.clone())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pki.serving_key_der.clone())),
        )?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// Serves the kubelet endpoint on `listener` until the runtime stops.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    logs: Logs,
) {
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let acceptor = acceptor.clone();
        let logs = logs.clone();
        tokio::spawn(async move {
            let Ok(Ok(tls)) =
                tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp)).await
            else {
                return;
            };
            if let Err(e) = handle(tls, &logs).await {
                tracing::debug!(error = %format!("{e:#}"), "node agent: kubelet endpoint");
            }
        });
    }
}

/// What a `/containerLogs` request asks for.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct LogQuery {
    pub since: Option<Timestamp>,
    pub tail_lines: Option<usize>,
    pub timestamps: bool,
    pub limit_bytes: Option<usize>,
    pub follow: bool,
}

impl LogQuery {
    /// From the request's query string, `now` standing for the time of the request.
    pub(crate) fn parse(query: &str, now: Timestamp) -> anyhow::Result<LogQuery> {
        let mut q = LogQuery::default();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let v = percent_decode(v);
            let truthy = v.is_empty() || v == "true" || v == "1";
            match k {
                "sinceTime" => {
                    q.since = Some(v.parse().with_context(|| format!("sinceTime {v:?}"))?)
                }
                "sinceSeconds" => {
                    let s: i64 = v.parse().with_context(|| format!("sinceSeconds {v:?}"))?;
                    q.since = Some(now.checked_sub(SignedDuration::from_secs(s))?);
                }
                "tailLines" => q.tail_lines = Some(v.parse().context("tailLines")?),
                "limitBytes" => q.limit_bytes = Some(v.parse().context("limitBytes")?),
                "timestamps" => q.timestamps = truthy,
                "follow" => q.follow = truthy,
                _ => {}
            }
        }
        Ok(q)
    }

    /// The lines of `text` (a whole log file) this query selects, as they are to be sent.
    pub(crate) fn select(&self, text: &str) -> String {
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| {
                self.since
                    .is_none_or(|since| stamp(l).is_some_and(|t| t >= since))
            })
            .collect();
        let start = self.tail_lines.map_or(0, |n| lines.len().saturating_sub(n));
        let mut out = String::new();
        for l in &lines[start..] {
            out.push_str(&self.render(l));
        }
        out
    }

    fn render(&self, line: &str) -> String {
        let body = if self.timestamps {
            line
        } else {
            line.split_once(' ').map_or("", |(_, rest)| rest)
        };
        format!("{body}\n")
    }
}

fn stamp(line: &str) -> Option<Timestamp> {
    line.split_once(' ')?.0.parse().ok()
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let hex = |c: u8| (c as char).to_digit(16);
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2]))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
            continue;
        }
        out.push(if b[i] == b'+' { b' ' } else { b[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn handle<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, logs: &Logs) -> anyhow::Result<()> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        anyhow::ensure!(head.len() < 16 * 1024, "request head too large");
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf)).await??;
        anyhow::ensure!(n > 0, "connection closed before the request head ended");
        head.extend_from_slice(&buf[..n]);
    }
    let head = String::from_utf8_lossy(&head);
    let target = head
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .context("no request line")?
        .to_string();
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let entry = match segments[..] {
        ["containerLogs", ns, pod, container] => lock(logs)
            .get(&(ns.to_string(), pod.to_string(), container.to_string()))
            .cloned(),
        _ => None,
    };
    let Some(entry) = entry else {
        return respond(&mut s, "404 Not Found", "not found\n").await;
    };
    let q = match LogQuery::parse(query, Timestamp::now()) {
        Ok(q) => q,
        Err(e) => return respond(&mut s, "400 Bad Request", &format!("{e:#}\n")).await,
    };
    s.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\
          Connection: close\r\n\r\n",
    )
    .await?;
    let mut budget = q.limit_bytes.unwrap_or(usize::MAX);
    let text = tokio::fs::read(&entry.path).await.unwrap_or_default();
    // Only whole lines: a line being written now comes with the next read.
    let mut offset = text.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    let first = q.select(&String::from_utf8_lossy(&text[..offset]));
    send(&mut s, &first, &mut budget).await?;
    if q.follow {
        // Until the container's output ends, the API server hangs up (a write fails) or
        // MAX_FOLLOW has passed.
        let deadline = tokio::time::Instant::now() + MAX_FOLLOW;
        while budget > 0 && tokio::time::Instant::now() < deadline {
            let closed = entry.closed.load(Ordering::Relaxed);
            let text = tokio::fs::read(&entry.path).await.unwrap_or_default();
            let end = text.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
            if end > offset {
                let new = String::from_utf8_lossy(&text[offset..end]);
                let out: String = new
                    .lines()
                    .filter(|l| q.since.is_none_or(|t| stamp(l).is_some_and(|s| s >= t)))
                    .map(|l| q.render(l))
                    .collect();
                send(&mut s, &out, &mut budget).await?;
                offset = end;
            } else if closed {
                break;
            } else {
                // An empty chunk would end the body: probe liveness with nothing.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    s.write_all(b"0\r\n\r\n").await?;
    s.flush().await?;
    Ok(())
}

async fn send<S: AsyncWrite + Unpin>(
    s: &mut S,
    text: &str,
    budget: &mut usize,
) -> anyhow::Result<()> {
    let bytes = &text.as_bytes()[..text.len().min(*budget)];
    *budget -= bytes.len();
    if bytes.is_empty() {
        return Ok(());
    }
    s.write_all(format!("{:x}\r\n", bytes.len()).as_bytes())
        .await?;
    s.write_all(bytes).await?;
    s.write_all(b"\r\n").await?;
    s.flush().await?;
    Ok(())
}

async fn respond<S: AsyncWrite + Unpin>(s: &mut S, status: &str, body: &str) -> anyhow::Result<()> {
    s.write_all(
        format!(
            "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
    .await?;
    s.flush().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_select_by_time_tail_and_strip_timestamps() {
        let log = "2026-01-01T00:00:01.000000000Z one\n\
                   2026-01-01T00:00:02.500000000Z two words\n\
                   2026-01-01T00:00:03.000000000Z three\n";
        let now: Timestamp = "2026-01-01T00:00:04Z".parse().unwrap();
        let q = LogQuery::parse("sinceTime=2026-01-01T00%3A00%3A02Z", now).unwrap();
        assert_eq!(q.select(log), "two words\nthree\n");
        let q = LogQuery::parse("tailLines=1&timestamps=true", now).unwrap();
        assert_eq!(q.select(log), "2026-01-01T00:00:03.000000000Z three\n");
        let q = LogQuery::parse("sinceSeconds=2&follow=true", now).unwrap();
        assert!(q.follow);
        assert_eq!(q.select(log), "two words\nthree\n");
        assert!(LogQuery::parse("sinceTime=yesterday", now).is_err());
        assert_eq!(percent_decode("a%3Ab%2"), "a:b%2");
    }
}
