//! Feeds a [`DeltaFifo`] from a [`ListWatch`] (client-go `Reflector.ListAndWatch`).
//!
//! The heavy lifting (paginated list, watch from the list's resourceVersion, resume after a
//! dropped connection, relist on 410 Gone, bookmarks, backoff) is done by
//! [`kube::runtime::watcher`]. The reflector only maps its events to deltas:
//!
//! | watcher event | delta queue |
//! |---|---|
//! | `Init` | start buffering a relist |
//! | `InitApply(obj)` | buffer `obj` |
//! | `InitDone` | [`DeltaFifo::replace`] with the buffer (tombstones for what vanished) |
//! | `Apply(obj)` | [`DeltaFifo::apply`]: `Updated` if known, else `Added` |
//! | `Delete(obj)` | [`DeltaFifo::delete`] |
//! | error | logged; the watcher retries after backoff |
//!
//! Every object passes the informer's transform (by default: `managedFields` stripped, see
//! [`crate::transform`]) before it is wrapped in its `Arc`, so nothing downstream ever holds
//! what the transform drops.

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use futures::StreamExt;
use kube::Resource;
use tokio_util::sync::CancellationToken;

use crate::{
    delta_fifo::DeltaFifo,
    list_watch::{Event, ListWatch, ListWatchError},
    transform::Transform,
};

/// Counters a reflector keeps, readable while it runs.
#[derive(Debug, Default)]
pub struct ReflectorStats {
    /// Completed lists (the first one and every relist).
    pub lists: AtomicU64,
    /// `Apply` and `Delete` events received from the watch.
    pub watch_events: AtomicU64,
    /// Errors reported by the source.
    pub errors: AtomicU64,
}

impl ReflectorStats {
    /// Completed lists so far.
    pub fn lists(&self) -> u64 {
        self.lists.load(Ordering::Relaxed)
    }

    /// Watch events so far.
    pub fn watch_events(&self) -> u64 {
        self.watch_events.load(Ordering::Relaxed)
    }

    /// Source errors so far.
    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }
}

/// Maps source events to deltas in a [`DeltaFifo`].
pub struct Reflector<K> {
    fifo: Arc<DeltaFifo<K>>,
    buffer: Option<Vec<Arc<K>>>,
    stats: Arc<ReflectorStats>,
    name: String,
    transform: Transform<K>,
}

impl<K: Resource + Send + Sync + 'static> Reflector<K> {
    /// A reflector feeding `fifo`.
    pub fn new(fifo: Arc<DeltaFifo<K>>) -> Self {
        Self {
            fifo,
            buffer: None,
            stats: Arc::default(),
            name: String::new(),
            transform: Transform::default(),
        }
    }

    /// Keeps `metadata.managedFields` (stripped by default) and applies `user`, if any, to
    /// every object before it enters the delta queue (see [`crate::transform`]).
    #[must_use]
    pub fn with_transform(
        mut self,
        keep_managed_fields: bool,
        user: Option<crate::transform::TransformFn<K>>,
    ) -> Self {
        self.transform = Transform {
            strip_managed_fields: !keep_managed_fields,
            user,
        };
        self
    }

    /// Names the reflector in logs.
    #[must_use]
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Uses `stats` as the counters of this reflector.
    #[must_use]
    pub fn with_stats(mut self, stats: Arc<ReflectorStats>) -> Self {
        self.stats = stats;
        self
    }

    /// The counters of this reflector.
    pub fn stats(&self) -> Arc<ReflectorStats> {
        self.stats.clone()
    }

    /// Applies one source event to the delta queue.
    pub fn handle(&mut self, event: Result<Event<K>, ListWatchError>) {
        let event = match event {
            Ok(ev) => ev,
            Err(err) => {
                self.stats.errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(reflector = %self.name, error = %err, "list/watch error, retrying");
                return;
            }
        };
        let res = match event {
            Event::Init => {
                tracing::debug!(reflector = %self.name, "(re)list started");
                self.buffer = Some(Vec::new());
                Ok(())
            }
            Event::InitApply(obj) => {
                let obj = Arc::new(self.transform.apply(obj));
                self.buffer.get_or_insert_with(Vec::new).push(obj);
                Ok(())
            }
            Event::InitDone => {
                let list = self.buffer.take().unwrap_or_default();
                tracing::debug!(reflector = %self.name, objects = list.len(), "list done");
                self.fifo.replace(list);
                self.stats.lists.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Event::Apply(obj) => {
                tracing::trace!(reflector = %self.name, "watch event: apply");
                self.stats.watch_events.fetch_add(1, Ordering::Relaxed);
                self.fifo.apply(Arc::new(self.transform.apply(obj)))
            }
            Event::Delete(obj) => {
                tracing::trace!(reflector = %self.name, "watch event: delete");
                self.stats.watch_events.fetch_add(1, Ordering::Relaxed);
                self.fifo.delete(Arc::new(self.transform.apply(obj)))
            }
        };
        if let Err(err) = res {
            tracing::warn!(reflector = %self.name, error = %err, "dropping event for an object without a key");
        }
    }

    /// Reads `source` until `shutdown` is cancelled or the stream ends.
    pub async fn run(mut self, source: &dyn ListWatch<K>, shutdown: CancellationToken) {
        let mut stream = source.stream();
        loop {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                ev = stream.next() => match ev {
                    Some(ev) => self.handle(ev),
                    None => {
                        tracing::debug!(reflector = %self.name, "source ended");
                        break;
                    }
                },
            }
        }
    }
}
