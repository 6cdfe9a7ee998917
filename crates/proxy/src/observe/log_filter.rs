//! The log filter the binaries install: the user's, plus a cap on client-caused noise.

/// The rustls module whose warnings are about what a client sent (an IP address as SNI,
/// an unknown extension). A client doing that on every connection (wrk, scripts, scanners
/// connecting by address) would otherwise cost one warning line per connection. nginx logs
/// none of these.
const CLIENT_NOISE: &str = "rustls::msgs::handshake";

/// `filter` (tracing's env-filter syntax) with rustls' per-handshake client warnings capped
/// at `error`, unless `filter` names rustls itself (then it is the user's choice) or is
/// `off` (which the cap would raise).
pub fn log_filter(filter: &str) -> String {
    if filter.contains("rustls") || filter.trim() == "off" {
        return filter.to_owned();
    }
    let filter = filter.trim().trim_end_matches(',');
    if filter.is_empty() {
        format!("{CLIENT_NOISE}=error")
    } else {
        format!("{filter},{CLIENT_NOISE}=error")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_noise_is_capped_unless_rustls_is_named() {
        assert_eq!(log_filter("info"), "info,rustls::msgs::handshake=error");
        assert_eq!(
            log_filter("warn,sluice_proxy=debug,"),
            "warn,sluice_proxy=debug,rustls::msgs::handshake=error"
        );
        assert_eq!(log_filter(""), "rustls::msgs::handshake=error");
        assert_eq!(log_filter("info,rustls=debug"), "info,rustls=debug");
        assert_eq!(log_filter("off"), "off");
    }

    #[test]
    fn the_result_parses_as_an_env_filter() {
        for filter in ["info", "off", "debug,hyper=warn", ""] {
            let built = log_filter(filter);
            assert!(
                tracing_subscriber::EnvFilter::try_new(&built).is_ok(),
                "{built}"
            );
        }
    }

    #[test]
    fn a_client_warning_from_rustls_is_not_logged_at_info() {
        use std::sync::{Arc, Mutex};
        let lines = Arc::new(Mutex::new(Vec::<u8>::new()));
        let sink = Arc::clone(&lines);
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(log_filter("info")))
            .with_ansi(false)
            .with_writer(move || SinkWriter(Arc::clone(&sink)))
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            // What rustls logs for wrk's `SNI 127.0.0.1`, as rustls logs it.
            tracing::warn!(
                target: "rustls::msgs::handshake",
                "Illegal SNI extension: ignoring IP address presented as hostname"
            );
            tracing::error!(target: "rustls::msgs::handshake", "still shown");
            tracing::warn!(target: "rustls::server", "other rustls warnings stay");
        });
        let text = String::from_utf8(lines.lock().unwrap().clone()).unwrap();
        assert!(!text.contains("Illegal SNI"), "{text}");
        assert!(text.contains("still shown"), "{text}");
        assert!(text.contains("other rustls warnings stay"), "{text}");
    }

    struct SinkWriter(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for SinkWriter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
}
