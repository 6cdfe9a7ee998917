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
//! timeout drops its connection (its reply may still come); one that fails on a pooled
//! connection is sent again once on a new one.

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

/// One memcached command.
#[derive(Debug, Clone, Copy)]
enum Command<'a> {
    /// `ma <key> N<ttl> J1 v`: increment, or create at 1 expiring after `ttl` seconds.
    Increment(&'a str, u64),
    /// `get <key>`.
    Get(&'a str),
    /// `ma <key> MD`: decrement, never below 0; a missing key stays missing.
    Decrement(&'a str),
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
            let data = self.run(Command::Increment(key, ttl_secs)).await?;
            data.as_deref()
                .and_then(number)
                .ok_or_else(|| StoreError::Failed("meta arithmetic returned no number".into()))
        };
        let read_last = async {
            match last_key {
                None => Ok(None),
                Some(last_key) => {
                    let data = self.run(Command::Get(last_key)).await?;
                    Ok(Some(data.as_deref().and_then(number).unwrap_or(0)))
                }
            }
        };
        let (count, last) = tokio::join!(increment, read_last);
        Ok((count?, last?))
    }

    /// Takes one off `key` (a refused request's increment); a missing key stays missing.
    pub(crate) async fn uncount(&self, key: &str) -> Result<(), StoreError> {
        self.run(Command::Decrement(key)).await.map(|_| ())
    }

    /// Runs `command` on a pooled connection: the value it returns, if any. A pooled
    /// connection that fails to carry it (the server restarted or closed it) empties this
    /// thread's pool, whose other connections are as old, and the command goes once more
    /// on a new connection, so a store restart lets no request through uncounted.
    async fn run(&self, command: Command<'_>) -> Result<Option<Vec<u8>>, StoreError> {
        let mut fresh_only = false;
        loop {
            let (mut client, reused) = self.checkout(fresh_only).await?;
            let answer = tokio::time::timeout(self.timeout, send(&mut client, command))
                .await
                .map_err(|_| StoreError::Timeout)?;
            match answer {
                Ok(data) => {
                    self.checkin(client);
                    return Ok(data);
                }
                Err(async_memcached::Error::Io(_) | async_memcached::Error::ConnectionClosed)
                    if reused && !fresh_only =>
                {
                    IDLE.with(|idle| idle.borrow_mut().remove(&self.id));
                    fresh_only = true;
                }
                Err(error) => return Err(StoreError::Failed(error.to_string())),
            }
        }
    }

    /// An idle connection of this thread (unless `fresh_only`), or a new one; and whether it
    /// was idle.
    async fn checkout(&self, fresh_only: bool) -> Result<(Client, bool), StoreError> {
        let now = Instant::now();
        let idle = IDLE.with(|idle| {
            let mut idle = idle.borrow_mut();
            let list = idle.get_mut(&self.id).filter(|_| !fresh_only)?;
            while let Some((client, since)) = list.pop() {
                if now.saturating_duration_since(since) <= self.max_idle && !client.is_closed() {
                    return Some(client);
                }
            }
            None
        });
        if let Some(client) = idle {
            return Ok((client, true));
        }
        let dsn = format!("tcp://{}", self.address);
        let client = tokio::time::timeout(self.timeout, Client::new(&dsn))
            .await
            .map_err(|_| StoreError::Timeout)?
            .map_err(|e| StoreError::Unreachable(e.to_string()))?;
        Ok((client, false))
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

/// Sends `command` on `client`: the value it returns, if any.
async fn send(
    client: &mut Client,
    command: Command<'_>,
) -> Result<Option<Vec<u8>>, async_memcached::Error> {
    match command {
        Command::Increment(key, ttl_secs) => {
            let ttl = format!("N{ttl_secs}");
            let flags = [ttl.as_str(), "J1", "v"];
            let answer = client
                .meta_increment(key, false, None, None, Some(&flags))
                .await?;
            Ok(answer.and_then(|value| value.data))
        }
        Command::Get(key) => Ok(client.get(key).await?.and_then(|value| value.data)),
        Command::Decrement(key) => {
            client.meta_decrement(key, false, None, None, None).await?;
            Ok(None)
        }
    }
}

/// A counter's value: ASCII digits.
fn number(data: &[u8]) -> Option<u64> {
    std::str::from_utf8(data).ok()?.trim().parse().ok()
}
