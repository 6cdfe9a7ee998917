//! The basic work queue (client-go `workqueue.Type`): FIFO + dedup + processing set.
//!
//! Rules:
//! - an item added while it waits in the queue is not added twice (the *dirty* set);
//! - [`WorkQueue::get`] moves an item into the *processing* set; until [`WorkQueue::done`] it is
//!   never handed out again, so two workers never hold the same item;
//! - an item added while it is processing is remembered (dirty) and queued again by `done`.

use std::{
    collections::{HashSet, VecDeque},
    fmt,
    hash::Hash,
    sync::Arc,
};

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// What a work queue can hold: keys are usually `String`s (`namespace/name`).
pub trait QueueItem: Clone + Eq + Hash + Send + Sync + 'static {}
impl<T: Clone + Eq + Hash + Send + Sync + 'static> QueueItem for T {}

struct State<T> {
    queue: VecDeque<T>,
    dirty: HashSet<T>,
    processing: HashSet<T>,
    shutting_down: bool,
    drain: bool,
}

struct Inner<T> {
    state: Mutex<State<T>>,
    /// Wakes getters (one per added item; all on shutdown).
    items: Notify,
    /// Wakes `shut_down_with_drain` when processing becomes empty.
    idle: Notify,
    shutdown: CancellationToken,
}

/// A deduplicating work queue. Cheap to clone; clones share the queue.
pub struct WorkQueue<T> {
    inner: Arc<Inner<T>>,
}

impl<T> Clone for WorkQueue<T> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<T> fmt::Debug for WorkQueue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.inner.state.lock();
        f.debug_struct("WorkQueue")
            .field("queued", &s.queue.len())
            .field("processing", &s.processing.len())
            .field("shutting_down", &s.shutting_down)
            .finish()
    }
}

impl<T: QueueItem> Default for WorkQueue<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: QueueItem> WorkQueue<T> {
    /// An empty queue.
    pub fn new() -> Self {
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    queue: VecDeque::new(),
                    dirty: HashSet::new(),
                    processing: HashSet::new(),
                    shutting_down: false,
                    drain: false,
                }),
                items: Notify::new(),
                idle: Notify::new(),
                shutdown: CancellationToken::new(),
            }),
        }
    }

    /// Marks `item` as needing processing. Ignored after shutdown, and while the item already
    /// waits in the queue; if it is being processed it is queued again on [`WorkQueue::done`].
    pub fn add(&self, item: T) {
        let mut s = self.inner.state.lock();
        if s.shutting_down || s.dirty.contains(&item) {
            return;
        }
        s.dirty.insert(item.clone());
        if s.processing.contains(&item) {
            return;
        }
        s.queue.push_back(item);
        drop(s);
        self.inner.items.notify_one();
    }

    /// Waits for an item and marks it as processing. Returns `None` once the queue is shut
    /// down and empty. Every item received must be passed to [`WorkQueue::done`].
    pub async fn get(&self) -> Option<T> {
        loop {
            let notified = self.inner.items.notified();
            {
                let mut s = self.inner.state.lock();
                if let Some(item) = Self::take(&mut s) {
                    let more = !s.queue.is_empty();
                    drop(s);
                    if more {
                        // Pass the wake-up on so that idle workers pick up the rest.
                        self.inner.items.notify_one();
                    }
                    return Some(item);
                }
                if s.shutting_down {
                    return None;
                }
            }
            notified.await;
        }
    }

    /// Like [`WorkQueue::get`] without waiting: `None` if nothing is queued right now.
    pub fn try_get(&self) -> Option<T> {
        Self::take(&mut self.inner.state.lock())
    }

    fn take(s: &mut State<T>) -> Option<T> {
        let item = s.queue.pop_front()?;
        s.processing.insert(item.clone());
        s.dirty.remove(&item);
        Some(item)
    }

    /// Marks `item` as done. If it was added again meanwhile, it is queued again now.
    pub fn done(&self, item: &T) {
        let mut s = self.inner.state.lock();
        s.processing.remove(item);
        if s.dirty.contains(item) {
            s.queue.push_back(item.clone());
            drop(s);
            self.inner.items.notify_one();
        } else if s.processing.is_empty() {
            drop(s);
            self.inner.idle.notify_waiters();
        }
    }

    /// Number of items waiting (not counting those being processed).
    pub fn len(&self) -> usize {
        self.inner.state.lock().queue.len()
    }

    /// Whether no item is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of items being processed.
    pub fn processing(&self) -> usize {
        self.inner.state.lock().processing.len()
    }

    /// Stops accepting items. Workers still receive what is queued, then `None`.
    pub fn shut_down(&self) {
        let mut s = self.inner.state.lock();
        s.shutting_down = true;
        drop(s);
        self.inner.shutdown.cancel();
        self.inner.items.notify_waiters();
    }

    /// Like [`WorkQueue::shut_down`], then waits until no item is being processed (items still
    /// queued are handed to workers that keep calling [`WorkQueue::get`]).
    pub async fn shut_down_with_drain(&self) {
        self.inner.state.lock().drain = true;
        self.shut_down();
        loop {
            let idle = self.inner.idle.notified();
            {
                let s = self.inner.state.lock();
                if s.processing.is_empty() {
                    return;
                }
            }
            idle.await;
        }
    }

    /// Whether [`WorkQueue::shut_down`] was called.
    pub fn is_shutting_down(&self) -> bool {
        self.inner.state.lock().shutting_down
    }

    /// Whether a drain was requested (see [`WorkQueue::shut_down_with_drain`]).
    pub fn should_drain(&self) -> bool {
        self.inner.state.lock().drain
    }

    /// A token cancelled on shutdown (lets helper tasks stop with the queue).
    pub fn shutdown_token(&self) -> CancellationToken {
        self.inner.shutdown.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;
    use std::time::Duration;

    #[test]
    fn dedup_and_requeue_after_done() {
        let q = WorkQueue::new();
        q.add("a");
        q.add("b");
        q.add("a");
        assert_eq!(q.len(), 2);
        assert_eq!(q.try_get(), Some("a"));
        // re-added while processing: not handed out again before done
        q.add("a");
        q.add("a");
        assert_eq!(q.try_get(), Some("b"));
        assert_eq!(q.try_get(), None);
        q.done(&"a");
        assert_eq!(q.try_get(), Some("a"));
        assert_eq!(q.try_get(), None);
        q.done(&"a");
        q.done(&"b");
        assert_eq!(q.try_get(), None);
        assert_eq!(q.processing(), 0);
    }

    #[tokio::test]
    async fn shutdown_hands_out_remaining_then_none() {
        let q = WorkQueue::new();
        q.add(1);
        q.add(2);
        q.shut_down();
        q.add(3); // ignored
        assert_eq!(q.get().await, Some(1));
        assert_eq!(q.get().await, Some(2));
        assert_eq!(q.get().await, None);
    }

    #[tokio::test]
    async fn shutdown_wakes_waiting_workers() {
        let q = WorkQueue::<u32>::new();
        let mut workers = Vec::new();
        for _ in 0..3 {
            let q = q.clone();
            workers.push(tokio::spawn(async move { q.get().await }));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        q.shut_down();
        for w in workers {
            assert_eq!(
                tokio::time::timeout(Duration::from_secs(5), w)
                    .await
                    .unwrap()
                    .unwrap(),
                None
            );
        }
    }

    #[tokio::test]
    async fn drain_waits_for_in_flight_work() {
        let q = WorkQueue::new();
        q.add("x");
        let item = q.get().await.unwrap();
        let q2 = q.clone();
        let drained = tokio::spawn(async move { q2.shut_down_with_drain().await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !drained.is_finished(),
            "drain returned while an item was processing"
        );
        q.done(&item);
        tokio::time::timeout(Duration::from_secs(5), drained)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(q.get().await, None);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn never_two_workers_on_one_key() {
        let q = WorkQueue::<u32>::new();
        let in_hand = Arc::new(Mutex::new(HashSet::new()));
        let handled = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let mut workers = Vec::new();
        for _ in 0..8 {
            let (q, in_hand, handled) = (q.clone(), in_hand.clone(), handled.clone());
            workers.push(tokio::spawn(async move {
                while let Some(k) = q.get().await {
                    assert!(in_hand.lock().insert(k), "key {k} handed to two workers");
                    tokio::task::yield_now().await;
                    assert!(in_hand.lock().remove(&k));
                    handled.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    q.done(&k);
                }
            }));
        }
        for i in 0..5000u32 {
            q.add(i % 7);
            if i % 100 == 0 {
                tokio::task::yield_now().await;
            }
        }
        q.shut_down_with_drain().await;
        for w in workers {
            w.await.unwrap();
        }
        assert!(handled.load(std::sync::atomic::Ordering::Relaxed) >= 7);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Add(u8),
        Get,
        Done(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..5).prop_map(Op::Add),
            Just(Op::Get),
            (0usize..8).prop_map(Op::Done),
        ]
    }

    /// A straightforward model of the queue's contract.
    #[derive(Default)]
    struct Model {
        queue: Vec<u8>,
        processing: Vec<u8>,
        readd: HashSet<u8>,
    }

    proptest! {
        #[test]
        fn behaves_like_the_model(ops in proptest::collection::vec(op(), 0..200)) {
            let q = WorkQueue::<u8>::new();
            let mut m = Model::default();
            for op in ops {
                match op {
                    Op::Add(k) => {
                        q.add(k);
                        if m.processing.contains(&k) {
                            m.readd.insert(k);
                        } else if !m.queue.contains(&k) {
                            m.queue.push(k);
                        }
                    }
                    Op::Get => {
                        let got = q.try_get();
                        let want = if m.queue.is_empty() { None } else { Some(m.queue.remove(0)) };
                        prop_assert_eq!(got, want);
                        if let Some(k) = got {
                            prop_assert!(!m.processing.contains(&k), "handed out twice");
                            m.processing.push(k);
                        }
                    }
                    Op::Done(i) => {
                        if m.processing.is_empty() { continue; }
                        let k = m.processing.remove(i % m.processing.len());
                        q.done(&k);
                        if m.readd.remove(&k) {
                            m.queue.push(k);
                        }
                    }
                }
                prop_assert_eq!(q.len(), m.queue.len());
                prop_assert_eq!(q.processing(), m.processing.len());
            }
            // Finishing everything delivers each re-added key exactly once more.
            loop {
                while let Some(k) = m.processing.pop() {
                    q.done(&k);
                    if m.readd.remove(&k) { m.queue.push(k); }
                }
                match q.try_get() {
                    Some(k) => {
                        prop_assert!(!m.queue.is_empty());
                        prop_assert_eq!(k, m.queue.remove(0));
                        m.processing.push(k);
                    }
                    None => { prop_assert!(m.queue.is_empty()); break; }
                }
            }
        }
    }
}
