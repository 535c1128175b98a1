//! A value per key, each behind a lock of its own: callers about the same key take turns
//! (so one of them fetches what the others then find cached), callers about different keys
//! never wait for each other — above all not while one of them waits on GitHub.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use tokio::sync::OwnedMutexGuard;

/// Values of type `V` (starting as `V::default()`) per key `K`. Keys are never removed:
/// they are installations and repositories a daemon works with, a bounded set.
#[derive(Debug)]
pub(crate) struct Keyed<K, V> {
    slots: Mutex<HashMap<K, Arc<tokio::sync::Mutex<V>>>>,
}

impl<K: Eq + Hash, V: Default> Keyed<K, V> {
    pub(crate) fn new() -> Keyed<K, V> {
        Keyed {
            slots: Mutex::new(HashMap::new()),
        }
    }

    /// The value of `key`, held until the guard is dropped (across awaits: a fetch made while
    /// holding it is the one every other caller about `key` waits for).
    pub(crate) async fn lock(&self, key: K) -> OwnedMutexGuard<V> {
        let slot = {
            // Held only to find or add the slot, never across an await.
            let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
            slots.entry(key).or_default().clone()
        };
        slot.lock_owned().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn callers_about_other_keys_do_not_wait() {
        let keyed: Keyed<u64, Option<u32>> = Keyed::new();
        let held = keyed.lock(1).await;
        // Key 2 is free while key 1 is held (a wait here would never end).
        *keyed.lock(2).await = Some(2);
        let waiting = keyed.lock(1);
        tokio::pin!(waiting);
        tokio::select! {
            biased;
            _ = &mut waiting => panic!("key 1 is held: a second caller must wait"),
            () = std::future::ready(()) => {}
        }
        drop(held);
        assert_eq!(*waiting.await, None);
        assert_eq!(*keyed.lock(2).await, Some(2), "values are kept per key");
    }
}
