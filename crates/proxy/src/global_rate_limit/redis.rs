//! The counters in Redis (what Traefik and Envoy Gateway use), through the `redis` client.
//!
//! A count is one pipeline, one round trip: `SET <key> 0 EX <ttl> NX` (the window's
//! expiry, set once), `INCR <key>`, and `GET <last key>` when the decision cache does not
//! have the previous window's count.
//!
//! Each worker thread holds one multiplexed connection per limiter (requests pipeline over
//! it; its driver runs on that thread's runtime); a failed command drops it and the next
//! request connects again (at once, for a command the server's restart cut).

use std::cell::RefCell;
use std::collections::HashMap;
use std::time::Duration;

use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;

use super::StoreError;

thread_local! {
    /// The connection per limiter (by id) on this thread.
    static CONNECTIONS: RefCell<HashMap<u64, MultiplexedConnection>> = RefCell::new(HashMap::new());
}

/// A Redis server.
#[derive(Debug, Clone)]
pub(crate) struct Redis {
    /// The limiter's id: connections of two proxies in one process never mix.
    pub(crate) id: u64,
    /// The client (address and database).
    pub(crate) client: redis::Client,
    /// Connect, and each command.
    pub(crate) timeout: Duration,
}

impl Redis {
    /// Increments `key` (expiring after `ttl_secs`) and reads `last_key`: the count after
    /// the increment, and the previous count (0 when absent).
    pub(crate) async fn count(
        &self,
        key: &str,
        last_key: Option<&str>,
        ttl_secs: u64,
    ) -> Result<(u64, Option<u64>), StoreError> {
        let mut pipe = redis::pipe();
        pipe.cmd("SET")
            .arg(key)
            .arg(0)
            .arg("EX")
            .arg(ttl_secs)
            .arg("NX")
            .ignore()
            .cmd("INCR")
            .arg(key);
        match last_key {
            Some(last_key) => {
                pipe.cmd("GET").arg(last_key);
                self.query::<(u64, Option<u64>)>(&pipe)
                    .await
                    .map(|(count, last)| (count, Some(last.unwrap_or(0))))
            }
            None => self
                .query::<(u64,)>(&pipe)
                .await
                .map(|(count,)| (count, None)),
        }
    }

    /// Takes one off `key` (a refused request's increment), never below 0 nor creating it.
    pub(crate) async fn uncount(&self, key: &str) -> Result<(), StoreError> {
        // DECR would create a missing key at -1: only an existing counter above 0 moves.
        let mut pipe = redis::pipe();
        pipe.cmd("EVAL")
            .arg(
                "local n = tonumber(redis.call('GET', KEYS[1]) or '0') \
                 if n > 0 then return redis.call('DECR', KEYS[1]) end return 0",
            )
            .arg(1)
            .arg(key);
        self.query::<(i64,)>(&pipe).await.map(|_| ())
    }

    /// Sends `pipe` in one round trip. A failure drops this thread's connection; when the
    /// connection was an old one that the server dropped (it restarted), the pipeline goes
    /// once more on a new connection, so a store restart lets no request through uncounted.
    async fn query<T: redis::FromRedisValue>(
        &self,
        pipe: &redis::Pipeline,
    ) -> Result<T, StoreError> {
        let mut retried = false;
        loop {
            let (mut connection, reused) = self.connection().await?;
            let answer =
                tokio::time::timeout(self.timeout, pipe.query_async::<T>(&mut connection)).await;
            let error = match answer {
                Ok(Ok(value)) => return Ok(value),
                Ok(Err(error)) => error,
                Err(_) => {
                    self.forget();
                    return Err(StoreError::Timeout);
                }
            };
            self.forget();
            if reused && !retried && (error.is_connection_dropped() || error.is_io_error()) {
                retried = true;
                continue;
            }
            return Err(StoreError::Failed(error.to_string()));
        }
    }

    /// Drops this thread's connection: the next command connects again.
    fn forget(&self) {
        CONNECTIONS.with(|c| c.borrow_mut().remove(&self.id));
    }

    /// This thread's connection, or a new one; and whether it was made earlier.
    async fn connection(&self) -> Result<(MultiplexedConnection, bool), StoreError> {
        if let Some(connection) = CONNECTIONS.with(|c| c.borrow().get(&self.id).cloned()) {
            return Ok((connection, true));
        }
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout));
        let connect = self
            .client
            .get_multiplexed_async_connection_with_config(&config);
        let connection = tokio::time::timeout(self.timeout, connect)
            .await
            .map_err(|_| StoreError::Timeout)?
            .map_err(|e| StoreError::Unreachable(e.to_string()))?;
        CONNECTIONS.with(|c| c.borrow_mut().insert(self.id, connection.clone()));
        Ok((connection, false))
    }
}
