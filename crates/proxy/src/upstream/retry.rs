//! The retry rules: which endpoints a request may still try and whether a failed try is
//! tried again, for the [driver](super::driver) of every transport.
//!
//! The rules are nginx's `proxy_next_upstream` (`error timeout` by default) with
//! `proxy_next_upstream_tries`: a failed connect sends the request elsewhere for any method
//! (nothing was sent); after something was sent only a resendable request (bodiless, and
//! idempotent unless `non_idempotent`) is sent again, on `error`, `timeout` (of a Gateway
//! API `backendRequest` try), `invalid_header` or a listed status. A pooled connection that
//! turned out closed before it took the request costs no try, twice at most. Endpoints that
//! failed are skipped for the rest of the request, unless that would leave none.

use std::io;
use std::net::SocketAddr;

use sluice_routing::NextUpstream;

use crate::backend::balancer::MAX_ATTEMPTS;
use crate::observe::metrics::UpstreamErrorKind;
use crate::snapshot::BackendState;

/// How many closed pooled connections a request may meet without it costing a try.
const STALE_ALLOWANCE: u8 = 2;

/// Why a request gives up: the upstream step answers 502 or 504.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GiveUp {
    /// No usable answer (502).
    BadGateway,
    /// A try timed out and may not be repeated (504).
    Timeout,
}

/// Why a try failed, as far as retrying is concerned.
pub(crate) enum Failed<'e> {
    /// No connection could be made.
    Connect(&'e io::Error),
    /// A pooled connection was closed before it took the request.
    Stale(&'e dyn std::fmt::Display),
    /// The try took longer than the route's `backendRequest` timeout.
    TryTimeout,
    /// The answer was not valid HTTP.
    Protocol(&'e dyn std::fmt::Display),
    /// The exchange broke before a response head.
    Io(&'e dyn std::fmt::Display),
}

/// The retry state of one request.
#[derive(Debug)]
pub(crate) struct Retries<'r> {
    retry: &'r NextUpstream,
    resendable: bool,
    tries: usize,
    attempt: usize,
    stale_allowance: u8,
    excluded: [usize; MAX_ATTEMPTS],
    excluded_len: usize,
    /// When the first try began (`proxy-next-upstream-timeout` counts from it).
    started: Option<std::time::Instant>,
    /// A try failed in a way that counts (not a stale pooled connection): the next one
    /// waits for the rules' backoff.
    backoff_due: bool,
}

impl<'r> Retries<'r> {
    /// For a request with these retry rules; `bodiless`: its body is empty (a body cannot
    /// be sent twice: only connect failures try another endpoint).
    pub(crate) fn new(retry: &'r NextUpstream, idempotent: bool, bodiless: bool) -> Retries<'r> {
        Retries {
            retry,
            resendable: bodiless && (idempotent || retry.non_idempotent),
            tries: usize::from(retry.tries).clamp(1, MAX_ATTEMPTS),
            attempt: 0,
            stale_allowance: STALE_ALLOWANCE,
            excluded: [usize::MAX; MAX_ATTEMPTS],
            excluded_len: 0,
            started: None,
            backoff_due: false,
        }
    }

    /// Whether `proxy-next-upstream-timeout` has passed since the first try began.
    fn out_of_time(&self) -> bool {
        match (self.retry.time_limit, self.started) {
            (Some(limit), Some(started)) => started.elapsed() >= limit,
            _ => false,
        }
    }

    /// Starts the next try: its number (from 1), or `None` when none is left.
    pub(crate) fn next_try(&mut self) -> Option<usize> {
        if self.attempt > 0 && self.out_of_time() {
            return None;
        }
        self.started.get_or_insert_with(std::time::Instant::now);
        (self.attempt < self.tries).then(|| {
            self.attempt += 1;
            self.attempt
        })
    }

    /// The wait before the try about to start (Gateway API `retry.backoff`): after a try
    /// that failed, not before the first or after a stale pooled connection.
    pub(crate) fn backoff(&mut self) -> Option<std::time::Duration> {
        std::mem::take(&mut self.backoff_due)
            .then_some(self.retry.backoff)
            .flatten()
    }

    /// The endpoints this request skips.
    pub(crate) fn tried(&self) -> &[usize] {
        &self.excluded[..self.excluded_len]
    }

    /// Whether an answer with `status` from endpoint `index` is dropped and the next
    /// endpoint asked (`proxy_next_upstream http_5xx`, ...).
    pub(crate) fn retries_status(&mut self, status: u16, index: usize, endpoints: usize) -> bool {
        let again = self.attempt < self.tries
            && self.resendable
            && self.retry.statuses.binary_search(&status).is_ok()
            && !self.out_of_time();
        if again {
            self.skip(index, endpoints);
            self.backoff_due = true;
        }
        again
    }

    /// After try of endpoint `index` (at `addr`) failed: `Ok` to try again, or the failure
    /// to answer with. Counts the failure in the backend's metrics.
    pub(crate) fn after_failure(
        &mut self,
        failed: Failed<'_>,
        backend: &BackendState,
        index: usize,
        addr: SocketAddr,
        now_ms: u64,
    ) -> Result<(), GiveUp> {
        let endpoints = backend.balancer.len();
        let again = match failed {
            Failed::Connect(error) => {
                // Every failed connect excludes its endpoint, so connects give up once every
                // endpoint (at most `tries`) failed.
                self.excluded[self.excluded_len] = index;
                self.excluded_len += 1;
                self.backoff_due = true;
                return if connect_failed(backend, index, now_ms, error, self.retry) {
                    Ok(())
                } else {
                    Err(GiveUp::BadGateway)
                };
            }
            Failed::Stale(error) => {
                tracing::debug!(upstream = %addr, %error, "pooled connection was closed");
                if self.stale_allowance > 0 {
                    self.stale_allowance -= 1;
                    self.attempt -= 1;
                }
                return Ok(());
            }
            Failed::TryTimeout => {
                backend.metrics.upstream_error(UpstreamErrorKind::Timeout);
                tracing::debug!(upstream = %addr, "upstream try timed out");
                if self.attempt >= self.tries || !(self.retry.timeout && self.resendable) {
                    return Err(GiveUp::Timeout);
                }
                true
            }
            Failed::Protocol(error) => {
                backend.metrics.upstream_error(UpstreamErrorKind::Io);
                warn_or_debug(
                    backend,
                    index,
                    addr,
                    now_ms,
                    error,
                    "invalid upstream response",
                );
                self.retry.invalid_header && self.resendable
            }
            Failed::Io(error) => {
                backend.metrics.upstream_error(UpstreamErrorKind::Io);
                warn_or_debug(
                    backend,
                    index,
                    addr,
                    now_ms,
                    error,
                    "upstream request failed",
                );
                // As nginx does by default, a request the connection broke under before any
                // response head may be sent again when it can do no harm.
                self.retry.error && self.resendable
            }
        };
        if !again {
            return Err(GiveUp::BadGateway);
        }
        self.skip(index, endpoints);
        self.backoff_due = true;
        Ok(())
    }

    /// Skips `index` for the rest of the request unless that leaves no endpoint (then the
    /// failure was likely its connection's, and a fresh one will do).
    fn skip(&mut self, index: usize, endpoints: usize) {
        if self.excluded_len + 1 < endpoints && self.excluded_len < MAX_ATTEMPTS {
            self.excluded[self.excluded_len] = index;
            self.excluded_len += 1;
        }
    }
}

/// A failed connect: counted, the endpoint avoided for a while. Returns whether the
/// route's `proxy-next-upstream` sends the request elsewhere (nothing was sent, so any
/// method may go).
fn connect_failed(
    backend: &BackendState,
    index: usize,
    now_ms: u64,
    error: &io::Error,
    retry: &NextUpstream,
) -> bool {
    backend.metrics.upstream_error(UpstreamErrorKind::Connect);
    backend.balancer.mark_down(index, now_ms);
    let upstream = backend.balancer.get(index).addr;
    warn_or_debug(
        backend,
        index,
        upstream,
        now_ms,
        error,
        "upstream connect failed",
    );
    let timed_out = error.kind() == io::ErrorKind::TimedOut;
    (timed_out && retry.timeout) || (!timed_out && retry.error)
}

/// Logs an endpoint's failure at warn, naming the Service and the endpoint, at most once per
/// `balancer::WARN_EVERY` per endpoint; the others at debug.
fn warn_or_debug(
    backend: &BackendState,
    index: usize,
    upstream: SocketAddr,
    now_ms: u64,
    error: &dyn std::fmt::Display,
    what: &str,
) {
    let service = &backend.metrics.service;
    if backend.balancer.warn_due(index, now_ms) {
        tracing::warn!(
            %service, %upstream, %error,
            "{what} (more failures of this endpoint within 10 s are logged at debug)"
        );
    } else {
        tracing::debug!(%service, %upstream, %error, "{what}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(tries: u8) -> NextUpstream {
        NextUpstream {
            error: true,
            timeout: true,
            invalid_header: false,
            statuses: vec![502, 503],
            non_idempotent: false,
            tries,
            time_limit: None,
            backoff: None,
        }
    }

    /// nginx `proxy_next_upstream_timeout`: no next try once the limit has passed since
    /// the first began; the first try always happens.
    #[test]
    fn no_next_try_after_proxy_next_upstream_timeout() {
        let mut expired = rules(3);
        expired.time_limit = Some(std::time::Duration::ZERO);
        let mut retries = Retries::new(&expired, true, true);
        assert_eq!(retries.next_try(), Some(1));
        assert_eq!(retries.next_try(), None);
        assert!(!retries.retries_status(502, 0, 2));
        let mut long = rules(3);
        long.time_limit = Some(std::time::Duration::from_secs(3600));
        let mut retries = Retries::new(&long, true, true);
        assert_eq!(retries.next_try(), Some(1));
        assert!(retries.retries_status(502, 0, 2));
        assert_eq!(retries.next_try(), Some(2));
    }

    #[test]
    fn a_body_is_never_resent_after_it_was_sent() {
        let rules = rules(3);
        let mut retries = Retries::new(&rules, true, false);
        assert_eq!(retries.next_try(), Some(1));
        assert!(!retries.retries_status(502, 0, 3));
    }

    #[test]
    fn statuses_move_to_the_next_endpoint_until_the_last_try() {
        let rules = rules(3);
        let mut retries = Retries::new(&rules, true, true);
        assert_eq!(retries.next_try(), Some(1));
        assert!(retries.retries_status(502, 0, 3));
        assert_eq!(retries.tried(), &[0]);
        assert_eq!(retries.next_try(), Some(2));
        assert!(!retries.retries_status(500, 1, 3), "not listed");
        assert!(retries.retries_status(503, 1, 3));
        // Skipping endpoint 2 as well would leave none.
        assert_eq!(retries.next_try(), Some(3));
        assert!(!retries.retries_status(503, 2, 3), "last try answers");
        assert_eq!(retries.tried(), &[0, 1]);
        assert_eq!(retries.next_try(), None);
    }

    #[test]
    fn nginx_retries_non_idempotent_requests_only_with_non_idempotent() {
        let mut rules = rules(3);
        let mut retries = Retries::new(&rules, false, true);
        retries.next_try();
        assert!(!retries.retries_status(502, 0, 3));
        rules.non_idempotent = true;
        let mut retries = Retries::new(&rules, false, true);
        retries.next_try();
        assert!(retries.retries_status(502, 0, 3));
    }
}
