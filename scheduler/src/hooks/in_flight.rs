//! The deliveries of one hook this process is taking now, so that copies of one delivery
//! arriving at once are taken one after another.
//!
//! [`InFlight::hold`] waits until no other copy of the same delivery id is between its
//! parse and its answer in this process, then holds it until the returned [`Held`] is
//! dropped. The next copy's claim then finds the delivery `done` and it answers as a
//! redelivery (200, the original runs) instead of racing the first to enqueue. Copies taken
//! by different processes on one database are handled by the store (see `delivery.rs`:
//! only the copy that moves the row to `done` answers 202). An entry lives only while a copy
//! holds or waits for it, so the map never grows past the deliveries in flight.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Per-delivery locks of one hook.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// One delivery held by this copy; dropping it lets the next copy in.
#[derive(Debug)]
pub(crate) struct Held<'a> {
    set: &'a InFlight,
    id: String,
    lock: Arc<tokio::sync::Mutex<()>>,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl InFlight {
    /// Waits for the other copies of delivery `id` in this process, then holds it.
    pub(crate) async fn hold(&self, id: &str) -> Held<'_> {
        let lock = self
            .locks
            .lock()
            .expect("the in-flight map is never poisoned")
            .entry(id.to_string())
            .or_default()
            .clone();
        let guard = lock.clone().lock_owned().await;
        Held {
            set: self,
            id: id.to_string(),
            lock,
            guard: Some(guard),
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.locks.lock().unwrap().len()
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.guard.take();
        let mut locks = self
            .set
            .locks
            .lock()
            .expect("the in-flight map is never poisoned");
        // Clones are only taken under the map's lock: two references (the map's and ours)
        // mean no other copy holds or waits for this delivery.
        if Arc::strong_count(&self.lock) == 2 {
            locks.remove(&self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn copies_of_one_delivery_take_turns_and_leave_nothing_behind() {
        let set = InFlight::default();
        let first = set.hold("d-1").await;
        let other = set.hold("d-2").await; // another delivery is not held up
        let second = tokio::time::timeout(Duration::from_millis(50), set.hold("d-1")).await;
        assert!(
            second.is_err(),
            "the second copy waits while the first holds it"
        );
        drop(first);
        let second = set.hold("d-1").await;
        drop(second);
        drop(other);
        assert_eq!(set.len(), 0, "no entry outlives its copies");
    }
}
