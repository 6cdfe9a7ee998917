//! The access log: one line per request on stdout, sluice's JSON object or, where the
//! ConfigMap sets `log-format-upstream`, that nginx format rendered ([`AccessFormat`]).
//!
//! A request formats its line into its own buffer and hands it over a bounded channel to a
//! writer thread, which batches lines into a buffered stdout and flushes whenever the channel
//! runs dry. The request path therefore never waits on stdout; if the writer falls far behind,
//! lines are dropped (and counted) rather than letting memory grow.

use std::fmt::Write as _;
use std::io::{BufWriter, Write};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::uri::PathAndQuery;
use http::{HeaderValue, Method, Version};
use sluice_routing::{Backend, LogEscape, LogFormat, LogVariable, RouteEntry};
use tracing::warn;

/// Lines that may wait for the writer thread before new ones are dropped.
const QUEUE_LINES: usize = 64 * 1024;

/// The sending side of the access log.
#[derive(Debug)]
pub(crate) struct AccessLog {
    tx: SyncSender<String>,
    dropped: AtomicU64,
}

/// What is known about a request when it starts; completed by [`AccessLog::write`].
#[derive(Debug)]
pub(crate) struct LogRecord {
    pub(crate) time: SystemTime,
    pub(crate) client: IpAddr,
    pub(crate) method: Method,
    pub(crate) host: HeaderValue,
    pub(crate) path: PathAndQuery,
    /// What `log-format-upstream` needs beyond these, when the ConfigMap sets one.
    pub(crate) captured: Option<Box<Captured>>,
}

/// `log-format-upstream` with its escaping, and which request facts it needs kept at the
/// request's start (worked out once per routing table, so a request keeps only those).
#[derive(Debug)]
pub(crate) struct AccessFormat {
    /// The format.
    pub(crate) format: LogFormat,
    /// `log-format-escape-json` / `log-format-escape-none`.
    pub(crate) escape: LogEscape,
    /// `$uri` is used: keep the normalised path.
    pub(crate) keeps_uri: bool,
    /// `$remote_user` is used: decode the `Authorization` field.
    pub(crate) keeps_user: bool,
    /// `$req_id` is used: keep `X-Request-ID` or make an id.
    pub(crate) keeps_req_id: bool,
    /// `$request_length` is used: count the head's bytes.
    pub(crate) keeps_length: bool,
    /// The `$http_<name>` fields used, lower case.
    pub(crate) fields: Vec<Box<str>>,
}

impl AccessFormat {
    /// What rendering `format` takes.
    pub(crate) fn new(format: LogFormat, escape: LogEscape) -> AccessFormat {
        let mut fields: Vec<Box<str>> = Vec::new();
        for variable in format.variables() {
            if let LogVariable::Header(name) = variable
                && !fields.contains(name)
            {
                fields.push(name.clone());
            }
        }
        AccessFormat {
            keeps_uri: format.uses(&LogVariable::Uri),
            keeps_user: format.uses(&LogVariable::RemoteUser),
            keeps_req_id: format.uses(&LogVariable::ReqId),
            keeps_length: format.uses(&LogVariable::RequestLength),
            fields,
            format,
            escape,
        }
    }
}

/// The request facts a `log-format-upstream` line needs (only those it uses are filled).
#[derive(Debug)]
pub(crate) struct Captured {
    /// The format in force when the request started.
    pub(crate) format: Arc<AccessFormat>,
    /// The client connected over TLS (`$scheme`).
    pub(crate) tls: bool,
    /// `$server_protocol`.
    pub(crate) version: Version,
    /// `$remote_port`.
    pub(crate) remote_port: u16,
    /// `$server_port`.
    pub(crate) server_port: u16,
    /// `$ssl_protocol` and `$ssl_cipher`.
    pub(crate) tls_names: Option<(&'static str, &'static str)>,
    /// `$uri`: the normalised path.
    pub(crate) uri: Option<Box<str>>,
    /// `$remote_user`.
    pub(crate) user: Option<Box<str>>,
    /// `$req_id`.
    pub(crate) req_id: Option<Box<str>>,
    /// `$request_length`.
    pub(crate) request_length: u64,
    /// The `$http_<name>` values, as [`AccessFormat::fields`] (several fields of one name
    /// joined by `, `, as nginx does).
    pub(crate) fields: Vec<Option<Box<[u8]>>>,
}

/// What is known when the response is over.
#[derive(Debug)]
pub(crate) struct LogOutcome<'a> {
    pub(crate) status: u16,
    pub(crate) bytes: u64,
    pub(crate) duration: Duration,
    pub(crate) upstream: Option<SocketAddr>,
    pub(crate) service: &'a str,
    /// The route entry the request matched, if any (`$proxy_upstream_name`, `$namespace`).
    pub(crate) route: Option<&'a RouteEntry>,
    /// The backend that answered, if one was chosen (`$proxy_alternative_upstream_name`).
    pub(crate) backend: Option<&'a Backend>,
}

impl AccessLog {
    /// Starts the writer thread on stdout.
    pub(crate) fn spawn() -> std::io::Result<AccessLog> {
        let (tx, rx) = mpsc::sync_channel(QUEUE_LINES);
        std::thread::Builder::new()
            .name("sluice-access-log".into())
            .spawn(move || write_lines(rx, std::io::stdout()))?;
        Ok(AccessLog {
            tx,
            dropped: AtomicU64::new(0),
        })
    }

    /// Queues the line of one finished request.
    pub(crate) fn write(&self, record: &LogRecord, outcome: &LogOutcome<'_>) {
        let line = match &record.captured {
            Some(captured) => format_custom(record, captured, outcome),
            None => format_line(record, outcome),
        };
        match self.tx.try_send(line) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                // Report the first loss and every 10000th after it, not every line.
                if self
                    .dropped
                    .fetch_add(1, Ordering::Relaxed)
                    .is_multiple_of(10_000)
                {
                    warn!("access log writer is behind; dropping lines");
                }
            }
            Err(TrySendError::Disconnected(_)) => {}
        }
    }
}

/// The writer thread: batch, write, flush when idle. Ends when every sender is gone.
fn write_lines(rx: Receiver<String>, out: impl Write) {
    let mut out = BufWriter::with_capacity(64 * 1024, out);
    while let Ok(line) = rx.recv() {
        let mut ok = out.write_all(line.as_bytes()).is_ok();
        while let Ok(line) = rx.try_recv() {
            ok &= out.write_all(line.as_bytes()).is_ok();
        }
        ok &= out.flush().is_ok();
        if !ok {
            // stdout is gone (closed pipe): keep draining so senders never block.
            continue;
        }
    }
    let _ = out.flush();
}

/// `{"time":…,"client":…,…}\n`.
fn format_line(record: &LogRecord, outcome: &LogOutcome<'_>) -> String {
    let mut line = String::with_capacity(256);
    line.push_str("{\"time\":\"");
    push_rfc3339(&mut line, record.time);
    let _ = write!(line, "\",\"client\":\"{}\",\"method\":", record.client);
    push_json_str(&mut line, record.method.as_str().as_bytes());
    line.push_str(",\"host\":");
    push_json_str(&mut line, record.host.as_bytes());
    line.push_str(",\"path\":");
    push_json_str(&mut line, record.path.path().as_bytes());
    let _ = write!(
        line,
        ",\"status\":{},\"bytes\":{},\"duration_ms\":{:.3},\"upstream\":",
        outcome.status,
        outcome.bytes,
        outcome.duration.as_secs_f64() * 1000.0
    );
    match outcome.upstream {
        Some(addr) => {
            let _ = write!(line, "\"{addr}\"");
        }
        None => line.push_str("null"),
    }
    line.push_str(",\"service\":");
    push_json_str(&mut line, outcome.service.as_bytes());
    line.push_str("}\n");
    line
}

/// The line `log-format-upstream` makes of one request; a value the request does not have
/// is `-`, as nginx logs it.
fn format_custom(record: &LogRecord, captured: &Captured, outcome: &LogOutcome<'_>) -> String {
    let access = &*captured.format;
    let mut line = String::with_capacity(256);
    let upstream = outcome.upstream;
    access
        .format
        .render(access.escape, &mut line, |variable, out| {
            use LogVariable::*;
            let mut text = |args: std::fmt::Arguments<'_>| {
                let _ = std::io::Write::write_fmt(out, args);
                true
            };
            match variable {
                RemoteAddr => text(format_args!("{}", record.client)),
                RemotePort => text(format_args!("{}", captured.remote_port)),
                ServerPort => text(format_args!("{}", captured.server_port)),
                SslProtocol => put(out, captured.tls_names.map(|(p, _)| p.as_bytes())),
                SslCipher => put(out, captured.tls_names.map(|(_, c)| c.as_bytes())),
                RemoteUser => put(out, captured.user.as_deref().map(str::as_bytes)),
                TimeLocal => {
                    let (date, clock) = civil(record.time);
                    let (y, m, d) = date;
                    let month = MONTHS[(m as usize).saturating_sub(1) % 12];
                    text(format_args!("{d:02}/{month}/{y:04}:{clock} +0000"))
                }
                TimeIso8601 => {
                    let ((y, m, d), clock) = civil(record.time);
                    text(format_args!("{y:04}-{m:02}-{d:02}T{clock}+00:00"))
                }
                Msec => {
                    let now = SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .unwrap_or_default();
                    text(format_args!("{}.{:03}", now.as_secs(), now.subsec_millis()))
                }
                Request => text(format_args!(
                    "{} {} {}",
                    record.method,
                    record.path,
                    protocol(captured.version)
                )),
                RequestMethod => put(out, Some(record.method.as_str().as_bytes())),
                RequestUri => put(out, Some(record.path.as_str().as_bytes())),
                Uri => put(out, captured.uri.as_deref().map(str::as_bytes)),
                Args => put(out, record.path.query().map(str::as_bytes)),
                ServerProtocol => put(out, Some(protocol(captured.version).as_bytes())),
                Scheme => put(
                    out,
                    Some(if captured.tls { "https" } else { "http" }.as_bytes()),
                ),
                Host => {
                    out.extend(host_without_port(record.host.as_bytes()).to_ascii_lowercase());
                    true
                }
                Status => text(format_args!("{}", outcome.status)),
                BodyBytesSent | BytesSent => text(format_args!("{}", outcome.bytes)),
                RequestLength => text(format_args!("{}", captured.request_length)),
                RequestTime => text(format_args!("{:.3}", outcome.duration.as_secs_f64())),
                Header(name) => {
                    let at = access.fields.iter().position(|f| f == name);
                    put(out, at.and_then(|at| captured.fields.get(at)?.as_deref()))
                }
                ProxyUpstreamName => match outcome.route {
                    Some(route) if !route.backend.service.name.is_empty() => {
                        upstream_name(out, route.backend.as_ref())
                    }
                    _ => false,
                },
                ProxyAlternativeUpstreamName => {
                    // ingress-nginx sets it (else empty) when the canary takes the request.
                    let canary = outcome.route.and_then(|route| route.canary.as_ref());
                    if let (Some(canary), Some(backend)) = (canary, outcome.backend)
                        && canary.backend.id == backend.id
                    {
                        upstream_name(out, backend);
                    }
                    true
                }
                UpstreamAddr => match upstream {
                    Some(addr) => text(format_args!("{addr}")),
                    None => false,
                },
                UpstreamResponseLength => {
                    upstream.is_some() && text(format_args!("{}", outcome.bytes))
                }
                UpstreamResponseTime => {
                    upstream.is_some()
                        && text(format_args!("{:.3}", outcome.duration.as_secs_f64()))
                }
                UpstreamStatus => upstream.is_some() && text(format_args!("{}", outcome.status)),
                ReqId => put(out, captured.req_id.as_deref().map(str::as_bytes)),
                Namespace => put(out, outcome.route.map(|r| r.source.namespace.as_bytes())),
                IngressName => put(out, outcome.route.map(|r| r.source.name.as_bytes())),
                ServiceName => match outcome.route {
                    Some(r) if !r.backend.service.name.is_empty() => {
                        put(out, Some(r.backend.service.name.as_bytes()))
                    }
                    _ => false,
                },
                ServicePort => match outcome.route {
                    Some(r) if !r.backend.service.name.is_empty() => {
                        text(format_args!("{}", r.backend.service.port))
                    }
                    _ => false,
                },
            }
        });
    line.push('\n');
    line
}

/// The protocol and cipher of a TLS connection as OpenSSL (and so nginx's `$ssl_protocol`
/// and `$ssl_cipher`) names them.
pub(crate) fn tls_names(tls: &rustls::CommonState) -> Option<(&'static str, &'static str)> {
    let suite = u16::from(tls.negotiated_cipher_suite()?.suite());
    Some(openssl_names(tls.protocol_version()?, suite))
}

/// OpenSSL's names of a TLS version and a cipher suite code point.
fn openssl_names(version: rustls::ProtocolVersion, suite: u16) -> (&'static str, &'static str) {
    let protocol = match version {
        rustls::ProtocolVersion::TLSv1_3 => "TLSv1.3",
        rustls::ProtocolVersion::TLSv1_2 => "TLSv1.2",
        _ => "unknown",
    };
    let cipher = match suite {
        // TLS 1.3 suites keep their IANA names in OpenSSL.
        0x1301 => "TLS_AES_128_GCM_SHA256",
        0x1302 => "TLS_AES_256_GCM_SHA384",
        0x1303 => "TLS_CHACHA20_POLY1305_SHA256",
        code => sluice_routing::Tls12Suite::ALL
            .into_iter()
            .find(|s| s.iana_code() == code)
            .map_or("unknown", sluice_routing::Tls12Suite::openssl_name),
    };
    (protocol, cipher)
}

/// Month names as nginx's `$time_local` writes them.
const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// Copies `value` into `out`; `false` when there is none.
fn put(out: &mut Vec<u8>, value: Option<&[u8]>) -> bool {
    match value {
        Some(value) => {
            out.extend_from_slice(value);
            true
        }
        None => false,
    }
}

/// ingress-nginx's upstream name: `namespace-service-port`.
fn upstream_name(out: &mut Vec<u8>, backend: &Backend) -> bool {
    let service = &backend.service;
    let _ = std::io::Write::write_fmt(
        out,
        format_args!("{}-{}-{}", service.namespace, service.name, service.port),
    );
    true
}

/// `$server_protocol`.
fn protocol(version: Version) -> &'static str {
    match version {
        Version::HTTP_10 => "HTTP/1.0",
        Version::HTTP_2 => "HTTP/2.0",
        Version::HTTP_3 => "HTTP/3.0",
        Version::HTTP_09 => "HTTP/0.9",
        _ => "HTTP/1.1",
    }
}

/// nginx's `$host`: the host asked for without its port (`[v6]` kept whole).
fn host_without_port(host: &[u8]) -> &[u8] {
    if host.starts_with(b"[") {
        return match host.iter().position(|&b| b == b']') {
            Some(end) => &host[..=end],
            None => host,
        };
    }
    match host.iter().rposition(|&b| b == b':') {
        Some(colon) => &host[..colon],
        None => host,
    }
}

/// The UTC date and `HH:MM:SS` of `time`.
fn civil(time: SystemTime) -> ((i64, u32, u32), String) {
    let secs = time
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let clock = format!("{:02}:{:02}:{:02}", rem / 3600, rem % 3600 / 60, rem % 60);
    (civil_from_days(days as i64), clock)
}

/// Appends `bytes` as a JSON string; bytes that are not UTF-8 become U+FFFD.
fn push_json_str(out: &mut String, bytes: &[u8]) {
    out.push('"');
    for c in String::from_utf8_lossy(bytes).chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Appends `time` as `YYYY-MM-DDTHH:MM:SS.mmmZ` (UTC).
fn push_rfc3339(out: &mut String, time: SystemTime) {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days as i64);
    let _ = write!(
        out,
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        since.subsec_millis()
    );
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(20_454), (2026, 1, 1));
        let mut s = String::new();
        push_rfc3339(
            &mut s,
            UNIX_EPOCH + Duration::from_millis(1_767_225_600_123),
        );
        assert_eq!(s, "2026-01-01T00:00:00.123Z");
    }

    #[test]
    fn line_is_json() {
        let record = LogRecord {
            time: UNIX_EPOCH,
            client: "127.0.0.1".parse().unwrap(),
            method: Method::GET,
            host: HeaderValue::from_static("a\"b.example"),
            path: PathAndQuery::from_static("/x?secret=1"),
            captured: None,
        };
        let line = format_line(
            &record,
            &LogOutcome {
                status: 200,
                bytes: 12,
                duration: Duration::from_micros(1500),
                upstream: Some("127.0.0.1:9".parse().unwrap()),
                service: "default/web:80",
                route: None,
                backend: None,
            },
        );
        assert!(line.ends_with('\n'));
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["host"], "a\"b.example");
        assert_eq!(v["path"], "/x");
        assert_eq!(v["status"], 200);
        assert_eq!(v["duration_ms"], 1.5);
        assert_eq!(v["upstream"], "127.0.0.1:9");
        assert_eq!(v["time"], "1970-01-01T00:00:00.000Z");
    }

    /// ingress-nginx's default `log-format-upstream`, rendered as nginx would: `$time_local`,
    /// `$request`, `-` for what the request lacks, `\xXX` escaping.
    #[test]
    fn ingress_nginx_default_format_renders() {
        let format = LogFormat::parse(sluice_routing::INGRESS_NGINX_LOG_FORMAT).unwrap();
        let access = Arc::new(AccessFormat::new(format, LogEscape::Default));
        assert!(access.keeps_user && access.keeps_req_id && access.keeps_length);
        assert!(!access.keeps_uri, "$uri is not in the default format");
        let fields: Vec<&str> = access.fields.iter().map(|f| &**f).collect();
        assert_eq!(fields, ["referer", "user-agent"]);
        let record = LogRecord {
            time: UNIX_EPOCH + Duration::from_secs(1_767_225_600),
            client: "192.0.2.7".parse().unwrap(),
            method: Method::POST,
            host: HeaderValue::from_static("Web.Example:8080"),
            path: PathAndQuery::from_static("/a?b=1"),
            captured: Some(Box::new(Captured {
                format: Arc::clone(&access),
                tls: true,
                version: Version::HTTP_11,
                remote_port: 5555,
                server_port: 80,
                tls_names: None,
                uri: None,
                user: Some("alice".into()),
                req_id: Some("abc".into()),
                request_length: 321,
                fields: vec![None, Some(b"curl \"8\"".to_vec().into_boxed_slice())],
            })),
        };
        let line = AccessLogLine::of(&record, Some("127.0.0.1:9".parse().unwrap()));
        assert_eq!(
            line,
            "192.0.2.7 - alice [01/Jan/2026:00:00:00 +0000] \"POST /a?b=1 HTTP/1.1\" 201 12 \
             \"-\" \"curl \\x228\\x22\" 321 1.500 [-] [] 127.0.0.1:9 12 1.500 201 abc\n"
        );
        let line = AccessLogLine::of(&record, None);
        assert!(line.contains(" [-] [] - - - - abc"), "{line}");
    }

    /// The line `format_custom` makes with a fixed outcome (no route).
    struct AccessLogLine;

    impl AccessLogLine {
        fn of(record: &LogRecord, upstream: Option<SocketAddr>) -> String {
            let captured = record.captured.as_deref().unwrap();
            format_custom(
                record,
                captured,
                &LogOutcome {
                    status: 201,
                    bytes: 12,
                    duration: Duration::from_millis(1500),
                    upstream,
                    service: "",
                    route: None,
                    backend: None,
                },
            )
        }
    }

    /// nginx's `$ssl_protocol` / `$ssl_cipher` are OpenSSL's names.
    #[test]
    fn tls_names_are_openssl_s() {
        use rustls::ProtocolVersion::{TLSv1_2, TLSv1_3};
        assert_eq!(
            openssl_names(TLSv1_3, 0x1301),
            ("TLSv1.3", "TLS_AES_128_GCM_SHA256")
        );
        assert_eq!(
            openssl_names(TLSv1_2, 0xC02F),
            ("TLSv1.2", "ECDHE-RSA-AES128-GCM-SHA256")
        );
    }

    #[test]
    fn hosts_lose_their_port() {
        assert_eq!(host_without_port(b"a.example:80"), b"a.example");
        assert_eq!(host_without_port(b"[::1]:80"), b"[::1]");
        assert_eq!(host_without_port(b"a.example"), b"a.example");
    }

    #[test]
    fn writer_batches_and_ends() {
        let (tx, rx) = mpsc::sync_channel(8);
        for i in 0..3 {
            tx.send(format!("{i}\n")).unwrap();
        }
        drop(tx);
        let mut out = Vec::new();
        write_lines(rx, &mut out);
        assert_eq!(out, b"0\n1\n2\n");
    }
}
