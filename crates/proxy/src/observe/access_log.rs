//! The access log: one JSON line per request on stdout.
//!
//! A request formats its line into its own buffer and hands it over a bounded channel to a
//! writer thread, which batches lines into a buffered stdout and flushes whenever the channel
//! runs dry. The request path therefore never waits on stdout; if the writer falls far behind,
//! lines are dropped (and counted) rather than letting memory grow.

use std::fmt::Write as _;
use std::io::{BufWriter, Write};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::uri::PathAndQuery;
use http::{HeaderValue, Method};
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
}

/// What is known when the response is over.
#[derive(Debug)]
pub(crate) struct LogOutcome<'a> {
    pub(crate) status: u16,
    pub(crate) bytes: u64,
    pub(crate) duration: Duration,
    pub(crate) upstream: Option<SocketAddr>,
    pub(crate) service: &'a str,
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
        let line = format_line(record, outcome);
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
        };
        let line = format_line(
            &record,
            &LogOutcome {
                status: 200,
                bytes: 12,
                duration: Duration::from_micros(1500),
                upstream: Some("127.0.0.1:9".parse().unwrap()),
                service: "default/web:80",
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
