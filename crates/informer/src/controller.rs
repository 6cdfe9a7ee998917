//! A worker pool over a rate-limited work queue (the loop of client-go's sample controller).
//!
//! [`Controller::run`] starts `workers` tasks; each takes a key, calls the reconcile function
//! and then:
//! - on `Ok`: forgets the key's failure history;
//! - on `Err`: re-adds it rate-limited while it has been requeued fewer than `max_retries`
//!   times, else forgets it and logs an error ("dropping key out of the queue").
//!
//! The queue guarantees a key is never reconciled by two workers at once.

use std::{
    fmt::{Debug, Display},
    future::Future,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use crate::workqueue::{QueueItem, RateLimitingQueue};

/// Counters of a running [`Controller`].
#[derive(Debug, Default)]
pub struct ControllerStats {
    /// Reconciles that returned `Ok`.
    pub succeeded: AtomicU64,
    /// Reconciles that returned `Err`.
    pub failed: AtomicU64,
    /// Keys re-added rate-limited after an error.
    pub requeued: AtomicU64,
    /// Keys dropped after `max_retries` requeues.
    pub dropped: AtomicU64,
}

impl ControllerStats {
    /// Successful reconciles.
    pub fn succeeded(&self) -> u64 {
        self.succeeded.load(Ordering::Relaxed)
    }
    /// Failed reconciles.
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }
    /// Rate-limited requeues.
    pub fn requeued(&self) -> u64 {
        self.requeued.load(Ordering::Relaxed)
    }
    /// Dropped keys.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// What happened to a key after one reconcile (see [`handle_result`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Reconciled; failure history forgotten.
    Done,
    /// Failed; re-added rate-limited.
    Requeued,
    /// Failed too often; dropped.
    Dropped,
}

/// The retry policy applied after a reconcile of `key` returned `result`.
pub fn handle_result<T: QueueItem + Debug, E: Display>(
    queue: &RateLimitingQueue<T>,
    key: &T,
    result: Result<(), E>,
    max_retries: u32,
) -> Outcome {
    match result {
        Ok(()) => {
            queue.forget(key);
            Outcome::Done
        }
        Err(err) => {
            if queue.num_requeues(key) < max_retries {
                tracing::info!(key = ?key, error = %err, "error reconciling, retrying");
                queue.add_rate_limited(key.clone());
                Outcome::Requeued
            } else {
                tracing::error!(key = ?key, error = %err, "dropping {key:?} out of the queue after {max_retries} retries");
                queue.forget(key);
                Outcome::Dropped
            }
        }
    }
}

type OutcomeHook<T> = Arc<dyn Fn(&T, Outcome, Option<&str>) + Send + Sync>;

/// A pool of workers reconciling keys from a [`RateLimitingQueue`].
pub struct Controller<T> {
    queue: RateLimitingQueue<T>,
    workers: usize,
    max_retries: u32,
    stats: Arc<ControllerStats>,
    on_outcome: Option<OutcomeHook<T>>,
}

impl<T: QueueItem + Debug> Controller<T> {
    /// A controller over `queue` with 1 worker and 5 retries (the client-go sample's values).
    pub fn new(queue: RateLimitingQueue<T>) -> Self {
        Self {
            queue,
            workers: 1,
            max_retries: 5,
            stats: Arc::default(),
            on_outcome: None,
        }
    }

    /// Number of concurrent workers (at least 1).
    #[must_use]
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = n.max(1);
        self
    }

    /// Requeues allowed before a failing key is dropped.
    #[must_use]
    pub fn max_retries(mut self, n: u32) -> Self {
        self.max_retries = n;
        self
    }

    /// Calls `hook(key, outcome, error message)` after every reconcile (for logging/metrics).
    #[must_use]
    pub fn on_outcome(
        mut self,
        hook: impl Fn(&T, Outcome, Option<&str>) + Send + Sync + 'static,
    ) -> Self {
        self.on_outcome = Some(Arc::new(hook));
        self
    }

    /// The queue workers read from.
    pub fn queue(&self) -> &RateLimitingQueue<T> {
        &self.queue
    }

    /// Counters, readable while running.
    pub fn stats(&self) -> Arc<ControllerStats> {
        self.stats.clone()
    }

    /// Runs the workers until `shutdown` completes (then the queue is shut down and drained)
    /// or until someone else shuts the queue down.
    pub async fn run<F, Fut, E>(self, reconcile: F, shutdown: impl Future<Output = ()>)
    where
        F: Fn(T) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Display + Send + 'static,
    {
        let reconcile = Arc::new(reconcile);
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..self.workers {
            let queue = self.queue.clone();
            let reconcile = reconcile.clone();
            let stats = self.stats.clone();
            let max_retries = self.max_retries;
            let hook = self.on_outcome.clone();
            workers.spawn(async move {
                while let Some(key) = queue.get().await {
                    let result = reconcile(key.clone()).await;
                    let message = match &result {
                        Ok(()) => {
                            stats.succeeded.fetch_add(1, Ordering::Relaxed);
                            None
                        }
                        Err(e) => {
                            stats.failed.fetch_add(1, Ordering::Relaxed);
                            hook.as_ref().map(|_| e.to_string())
                        }
                    };
                    let outcome = handle_result(&queue, &key, result, max_retries);
                    match outcome {
                        Outcome::Requeued => stats.requeued.fetch_add(1, Ordering::Relaxed),
                        Outcome::Dropped => stats.dropped.fetch_add(1, Ordering::Relaxed),
                        Outcome::Done => 0,
                    };
                    if let Some(h) = &hook {
                        h(&key, outcome, message.as_deref());
                    }
                    queue.done(&key);
                }
            });
        }
        let token = self.queue.shutdown_token();
        tokio::select! {
            _ = shutdown => {}
            _ = token.cancelled() => {}
        }
        self.queue.shut_down_with_drain().await;
        while let Some(res) = workers.join_next().await {
            if let Err(err) = res {
                tracing::error!(error = %err, "controller worker failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;
    use std::{collections::HashMap, time::Duration};

    #[tokio::test(start_paused = true)]
    async fn retries_then_drops_and_forgets_on_success() {
        let queue = RateLimitingQueue::<String>::with_default_rate_limiter();
        let controller = Controller::new(queue.clone()).workers(2).max_retries(5);
        let stats = controller.stats();
        let calls = Arc::new(Mutex::new(HashMap::<String, u32>::new()));
        let c = calls.clone();
        let reconcile = move |key: String| {
            let c = c.clone();
            async move {
                let n = {
                    let mut m = c.lock();
                    let n = m.entry(key.clone()).or_insert(0);
                    *n += 1;
                    *n
                };
                match key.as_str() {
                    "bad" => Err(format!("{key} always fails")),
                    "flaky" if n < 3 => Err(format!("{key} fails twice")),
                    _ => Ok(()),
                }
            }
        };
        for k in ["good", "bad", "flaky"] {
            queue.add(k.to_string());
        }
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let run = tokio::spawn(controller.run(reconcile, async move {
            let _ = stop_rx.await;
        }));
        // 5 retries of "bad": 5+10+20+40+80 ms of backoff; give it plenty of (virtual) time.
        tokio::time::sleep(Duration::from_secs(5)).await;
        let _ = stop_tx.send(());
        run.await.unwrap();
        let calls = calls.lock().clone();
        assert_eq!(calls["good"], 1);
        assert_eq!(calls["bad"], 6, "one try + 5 retries");
        assert_eq!(calls["flaky"], 3);
        assert_eq!(stats.dropped(), 1);
        assert_eq!(stats.requeued(), 5 + 2);
        assert_eq!(stats.succeeded(), 2);
        assert_eq!(stats.failed(), 8);
        assert_eq!(
            queue.num_requeues(&"bad".to_string()),
            0,
            "forgotten when dropped"
        );
        assert_eq!(
            queue.num_requeues(&"flaky".to_string()),
            0,
            "forgotten on success"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn retry_delays_follow_the_limiter() {
        let queue = RateLimitingQueue::<u32>::with_default_rate_limiter();
        let times = Arc::new(Mutex::new(Vec::new()));
        let t = times.clone();
        let start = tokio::time::Instant::now();
        let controller = Controller::new(queue.clone()).max_retries(3);
        queue.add(1);
        let run = tokio::spawn(controller.run(
            move |_k: u32| {
                t.lock().push(start.elapsed().as_millis());
                async { Err::<(), _>("no") }
            },
            std::future::pending(),
        ));
        tokio::time::sleep(Duration::from_secs(2)).await;
        queue.shut_down();
        run.await.unwrap();
        // tries at 0, +5, +10, +20 ms (cumulative 0, 5, 15, 35), then dropped
        assert_eq!(*times.lock(), vec![0, 5, 15, 35]);
    }

    #[tokio::test]
    async fn handle_result_policy() {
        let queue = RateLimitingQueue::<&str>::with_default_rate_limiter();
        assert_eq!(
            handle_result(&queue, &"a", Ok::<(), &str>(()), 2),
            Outcome::Done
        );
        assert_eq!(handle_result(&queue, &"a", Err("x"), 2), Outcome::Requeued);
        assert_eq!(handle_result(&queue, &"a", Err("x"), 2), Outcome::Requeued);
        assert_eq!(handle_result(&queue, &"a", Err("x"), 2), Outcome::Dropped);
        assert_eq!(queue.num_requeues(&"a"), 0);
        assert_eq!(handle_result(&queue, &"b", Err("x"), 0), Outcome::Dropped);
        queue.shut_down();
    }
}
