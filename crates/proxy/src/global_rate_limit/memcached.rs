//! The counters in memcached (what ingress-nginx's lua-resty-global-throttle uses), through
//! the `async-memcached` client.
//!
//! A count is one meta arithmetic command, `ma <key> N<ttl> J1 v`: increment, or create at
//! 1 with the window's expiry when missing (memcached 1.6 and later), in one round trip.
//! The previous window's count, when the decision cache does not have it, is a `get` sent
//! at the same time on a second connection, so a request waits for one round trip.
//!
//! Connections are pooled per worker thread (the client is not shared between tasks): a
//! request takes one, and gives it back when the command completed. At most `pool_size`
//! idle ones are kept per thread, none idle longer than `max_idle` (ingress-nginx's
//! `global-rate-limit-memcached-pool-size` and `-max-idle-timeout`). A command cut by its
//! timeout drops its connection (its reply may still come).

use std::cell::RefCell;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use async_memcached::{AsciiProtocol, Client, MetaProtocol};

use super::StoreError;

thread_local! {
    /// Idle connections per limiter (by id) on this thread, most recent last.
    static IDLE: RefCell<HashMap<u64, Vec<(Client, Instant)>>> = RefCell::new(HashMap::new());
}

/// A memcached server.
#[derive(Debug, Clone)]
pub(crate) struct Memcached {
    /// The limiter's id: pools of two proxies in one process never mix.
    pub(crate) id: u64,
    /// `host:port`.
    pub(crate) address: String,
    /// Connect, and each command.
    pub(crate) timeout: Duration,
    /// Idle connections kept per thread.
    pub(crate) pool_size: usize,
    /// Longest an idle connection is kept.
    pub(crate) max_idle: Duration,
}

impl Memcached {
    /// Increments `key` (created with `ttl_secs` when missing) and reads `last_key`: the
    /// count after the increment, and the previous count (0 when absent).
    pub(crate) async fn count(
        &self,
        key: &str,
        last_key: Option<&str>,
        ttl_secs: u64,
    ) -> Result<(u64, Option<u64>), StoreError> {
        let increment = async {
            let mut client = self.checkout().await?;
            let ttl = format!("N{ttl_secs}");
            let flags = [ttl.as_str(), "J1", "v"];
            let answer = tokio::time::timeout(
                self.timeout,
                client.meta_increment(key, false, None, None, Some(&flags)),
            )
            .await
            .map_err(|_| StoreError::Timeout)?
            .map_err(|e| StoreError::Failed(e.to_string()))?;
            let count = answer
                .and_then(|value| value.data)
                .and_then(|data| number(&data))
                .ok_or_else(|| StoreError::Failed("meta arithmetic returned no number".into()))?;
            self.checkin(client);
            Ok::<u64, StoreError>(count)
        };
        let read_last = async {
            let Some(last_key) = last_key else {
                return Ok(None);
            };
            let mut client = self.checkout().await?;
            let value = tokio::time::timeout(self.timeout, client.get(last_key))
                .await
                .map_err(|_| StoreError::Timeout)?
                .map_err(|e| StoreError::Failed(e.to_string()))?;
            self.checkin(client);
            Ok(Some(
                value
                    .and_then(|value| value.data)
                    .and_then(|data| number(&data))
                    .unwrap_or(0),
            ))
        };
        let (count, last) = tokio::join!(increment, read_last);
        Ok((count?, last?))
    }

    /// Takes one off `key` (a refused request's increment); a missing key stays missing.
    pub(crate) async fn uncount(&self, key: &str) -> Result<(), StoreError> {
        let mut client = self.checkout().await?;
        tokio::time::timeout(
            self.timeout,
            client.meta_decrement(key, false, None, None, None),
        )
        .await
        .map_err(|_| StoreError::Timeout)?
        .map_err(|e| StoreError::Failed(e.to_string()))?;
        self.checkin(client);
        Ok(())
    }

    /// An idle connection of this thread, or a new one.
    async fn checkout(&self) -> Result<Client, StoreError> {
        let now = Instant::now();
        let idle = IDLE.with(|idle| {
            let mut idle = idle.borrow_mut();
            let list = idle.get_mut(&self.id)?;
            while let Some((client, since)) = list.pop() {
                if now.saturating_duration_since(since) <= self.max_idle && !client.is_closed() {
                    return Some(client);
                }
            }
            None
        });
        if let Some(client) = idle {
            return Ok(client);
        }
        let dsn = format!("tcp://{}", self.address);
        tokio::time::timeout(self.timeout, Client::new(&dsn))
            .await
            .map_err(|_| StoreError::Timeout)?
            .map_err(|e| StoreError::Unreachable(e.to_string()))
    }

    /// Keeps a connection whose command completed, within the pool size.
    fn checkin(&self, client: Client) {
        if client.is_closed() {
            return;
        }
        IDLE.with(|idle| {
            let mut idle = idle.borrow_mut();
            let list = idle.entry(self.id).or_default();
            if list.len() < self.pool_size {
                list.push((client, Instant::now()));
            }
        });
    }
}

/// A counter's value: ASCII digits.
fn number(data: &[u8]) -> Option<u64> {
    std::str::from_utf8(data).ok()?.trim().parse().ok()
}
