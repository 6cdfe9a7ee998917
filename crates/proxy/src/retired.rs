//! Retired routing snapshots are freed on a thread of their own.
//!
//! A snapshot of 10,000 routes takes milliseconds to free. Without this, whichever thread
//! let go of it last would pay that: usually a worker, in the middle of serving a request,
//! after the table was swapped. [`Retired`] keeps one reference to every replaced snapshot
//! and frees it once nobody else holds it, on the `sluice-retired` thread.

use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often held snapshots are checked while some are still in use.
const CHECK_EVERY: Duration = Duration::from_millis(50);

/// Takes replaced values and frees each on its own thread once it holds the last reference.
#[derive(Debug)]
pub(crate) struct Retired<T: Send + Sync + 'static> {
    /// `None` when the thread could not be started: values are then freed where retired.
    to_thread: Option<Mutex<Sender<Arc<T>>>>,
}

impl<T: Send + Sync + 'static> Retired<T> {
    /// Starts the freeing thread; it ends once this is dropped and all it holds is freed.
    pub(crate) fn new() -> Retired<T> {
        let (send, receive) = mpsc::channel::<Arc<T>>();
        let started = std::thread::Builder::new()
            .name("sluice-retired".into())
            .spawn(move || {
                let mut held: Vec<Arc<T>> = Vec::new();
                loop {
                    let next = if held.is_empty() {
                        receive.recv().map_err(|_| RecvTimeoutError::Disconnected)
                    } else {
                        receive.recv_timeout(CHECK_EVERY)
                    };
                    match next {
                        Ok(value) => held.push(value),
                        Err(RecvTimeoutError::Timeout) => {}
                        Err(RecvTimeoutError::Disconnected) => break,
                    }
                    held.retain(|value| Arc::strong_count(value) > 1);
                }
                // The owner is gone: free the rest here, when their last holders let go.
                while !held.is_empty() {
                    held.retain(|value| Arc::strong_count(value) > 1);
                    std::thread::sleep(CHECK_EVERY);
                }
            });
        match started {
            Ok(_) => Retired {
                to_thread: Some(Mutex::new(send)),
            },
            Err(error) => {
                tracing::warn!(%error, "cannot start the thread that frees old routing tables; they are freed where released");
                Retired { to_thread: None }
            }
        }
    }

    /// Hands `value` over; it is freed on the thread once no other reference is left.
    pub(crate) fn retire(&self, value: Arc<T>) {
        let Some(to_thread) = &self.to_thread else {
            return;
        };
        let sender = to_thread.lock().unwrap_or_else(|e| e.into_inner());
        // A failed send gives the value back in the error, freed here.
        let _ = sender.send(value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// Records the name of the thread that frees it.
    struct Tracked(Arc<Mutex<Option<String>>>);

    impl Drop for Tracked {
        fn drop(&mut self) {
            let name = std::thread::current().name().map(str::to_owned);
            *self.0.lock().unwrap() = Some(name.unwrap_or_default());
        }
    }

    fn freed_by(slot: &Arc<Mutex<Option<String>>>) -> Option<String> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(name) = slot.lock().unwrap().clone() {
                return Some(name);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn a_value_still_held_elsewhere_is_freed_on_the_thread_after_its_last_holder_lets_go() {
        let retired = Retired::new();
        let slot = Arc::new(Mutex::new(None));
        let value = Arc::new(Tracked(Arc::clone(&slot)));
        // A worker still holds it when the table is swapped.
        let worker = Arc::clone(&value);
        retired.retire(value);
        std::thread::sleep(CHECK_EVERY * 3);
        assert!(
            slot.lock().unwrap().is_none(),
            "freed while a worker held it"
        );
        // The worker's release is not what frees it.
        drop(worker);
        assert_eq!(freed_by(&slot).as_deref(), Some("sluice-retired"));
    }

    #[test]
    fn values_left_when_the_owner_is_dropped_are_still_freed_on_the_thread() {
        let retired = Retired::new();
        let slot = Arc::new(Mutex::new(None));
        let value = Arc::new(Tracked(Arc::clone(&slot)));
        let worker = Arc::clone(&value);
        retired.retire(value);
        drop(retired);
        std::thread::sleep(CHECK_EVERY * 2);
        drop(worker);
        assert_eq!(freed_by(&slot).as_deref(), Some("sluice-retired"));
    }
}
