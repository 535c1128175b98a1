//! Time as a dependency. Every timestamp the store writes or compares comes from a [`Clock`]
//! and is bound into SQL as a parameter, so both backends agree and tests can jump hours.
//!
//! Timestamps are [`Millis`]: integer milliseconds since the Unix epoch.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch.
pub type Millis = i64;

/// A source of the current time.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current time.
    fn now(&self) -> Millis;

    /// Whether this is the machine's wall clock. Time that several daemons must agree on (the
    /// schedule timer's) is then read from a shared database instead
    /// ([`Store::schedule_now`](crate::Store::schedule_now)); any other clock is a test's, and
    /// its time is used as given.
    fn is_wall_clock(&self) -> bool {
        false
    }
}

/// The wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Millis {
        let since = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
    }

    fn is_wall_clock(&self) -> bool {
        true
    }
}

/// A clock that only moves when told to; clones share one time.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<AtomicI64>,
}

impl ManualClock {
    /// A manual clock standing at `start`.
    pub fn new(start: Millis) -> Self {
        Self {
            now: Arc::new(AtomicI64::new(start)),
        }
    }

    /// A manual clock standing at the current wall-clock time.
    pub fn starting_now() -> Self {
        Self::new(SystemClock.now())
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        self.now.fetch_add(duration_millis(by), Ordering::SeqCst);
    }

    /// Sets the clock to `to`.
    pub fn set(&self, to: Millis) {
        self.now.store(to, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Millis {
        self.now.load(Ordering::SeqCst)
    }
}

/// A duration in whole milliseconds, saturating.
pub fn duration_millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
