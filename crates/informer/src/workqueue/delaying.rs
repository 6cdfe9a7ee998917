//! A work queue whose items can be added after a delay (client-go `DelayingInterface`).
//!
//! Waiting items live in a timer task (spawned on the current tokio runtime when the queue is
//! created) and enter the underlying [`WorkQueue`] when their time comes. An item added again
//! while it waits keeps the earlier of the two ready times. The timer uses `tokio::time`, so
//! tests can drive it with a paused clock.

use std::{
    collections::{BTreeMap, HashMap},
    ops::Deref,
    time::Duration,
};

use tokio::{sync::mpsc, time::Instant};

use super::queue::{QueueItem, WorkQueue};

/// A [`WorkQueue`] with [`DelayingQueue::add_after`]. Derefs to the [`WorkQueue`]. Cheap to clone.
pub struct DelayingQueue<T> {
    queue: WorkQueue<T>,
    tx: mpsc::UnboundedSender<(T, Instant)>,
}

impl<T> Clone for DelayingQueue<T> {
    fn clone(&self) -> Self {
        Self {
            queue: self.queue.clone(),
            tx: self.tx.clone(),
        }
    }
}

impl<T> std::fmt::Debug for DelayingQueue<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DelayingQueue")
            .field("queue", &self.queue)
            .finish()
    }
}

impl<T> Deref for DelayingQueue<T> {
    type Target = WorkQueue<T>;
    fn deref(&self) -> &WorkQueue<T> {
        &self.queue
    }
}

impl<T: QueueItem> Default for DelayingQueue<T> {
    /// Same as [`DelayingQueue::new`] (must be called inside a tokio runtime).
    fn default() -> Self {
        Self::new()
    }
}

impl<T: QueueItem> DelayingQueue<T> {
    /// A new delaying queue.
    ///
    /// # Panics
    /// When called outside a tokio runtime (the timer task is spawned here).
    pub fn new() -> Self {
        Self::wrap(WorkQueue::new())
    }

    /// Adds delays to an existing queue.
    ///
    /// # Panics
    /// When called outside a tokio runtime.
    pub fn wrap(queue: WorkQueue<T>) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(timer_loop(queue.clone(), rx));
        Self { queue, tx }
    }

    /// Adds `item` once `delay` has passed (at once for a zero delay).
    pub fn add_after(&self, item: T, delay: Duration) {
        if self.queue.is_shutting_down() {
            return;
        }
        if delay.is_zero() {
            self.queue.add(item);
            return;
        }
        // The timer task only ends on shutdown, when adds are ignored anyway.
        let _ = self.tx.send((item, Instant::now() + delay));
    }

    /// The underlying work queue.
    pub fn queue(&self) -> &WorkQueue<T> {
        &self.queue
    }
}

async fn timer_loop<T: QueueItem>(
    queue: WorkQueue<T>,
    mut rx: mpsc::UnboundedReceiver<(T, Instant)>,
) {
    let shutdown = queue.shutdown_token();
    // (ready time, sequence) -> item, and item -> its slot, to keep the earliest time.
    let mut waiting: BTreeMap<(Instant, u64), T> = BTreeMap::new();
    let mut slots: HashMap<T, (Instant, u64)> = HashMap::new();
    let mut seq = 0u64;
    loop {
        // Move everything that is ready.
        let now = Instant::now();
        while let Some(entry) = waiting.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let item = entry.remove();
            slots.remove(&item);
            queue.add(item);
        }
        let next = waiting.keys().next().map(|(t, _)| *t);
        let sleep = async {
            match next {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = sleep => {}
            msg = rx.recv() => match msg {
                None => return,
                Some((item, at)) => {
                    if let Some(&slot) = slots.get(&item) {
                        if slot.0 <= at {
                            continue;
                        }
                        waiting.remove(&slot);
                    }
                    seq += 1;
                    slots.insert(item.clone(), (at, seq));
                    waiting.insert((at, seq), item);
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn items_arrive_after_their_delay_earliest_wins() {
        let q = DelayingQueue::new();
        q.add_after("late", Duration::from_secs(10));
        q.add_after("soon", Duration::from_secs(1));
        q.add_after("late", Duration::from_secs(2)); // earlier time wins
        q.add_after("soon", Duration::from_secs(5)); // later time ignored
        q.add_after("now", Duration::ZERO);
        assert_eq!(q.try_get(), Some("now"));
        let t0 = Instant::now();
        assert_eq!(q.get().await, Some("soon"));
        assert_eq!(t0.elapsed(), Duration::from_secs(1));
        assert_eq!(q.get().await, Some("late"));
        assert_eq!(t0.elapsed(), Duration::from_secs(2));
        tokio::time::sleep(Duration::from_secs(20)).await;
        assert_eq!(q.try_get(), None, "each item arrives once");
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_drops_waiting_items() {
        let q = DelayingQueue::new();
        q.add_after(1, Duration::from_secs(1));
        q.shut_down();
        q.add_after(2, Duration::from_secs(1));
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(q.get().await, None);
    }
}
