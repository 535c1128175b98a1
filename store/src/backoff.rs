//! Retry delays: exponential with "equal jitter", capped.
//!
//! The n-th retry waits a random time in `[d/2, d]` where `d = min(cap, base · 2^(n-1))`, so
//! delays grow with every attempt (each window starts where the previous one ends) while
//! retries of many jobs that failed together spread out instead of arriving at once.

use std::time::Duration;

use rand::Rng;

/// How long to wait before retrying a failed job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The delay before the first retry, before jitter.
    pub base: Duration,
    /// No delay exceeds this.
    pub cap: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            base: Duration::from_secs(5),
            cap: Duration::from_secs(3600),
        }
    }
}

impl Backoff {
    /// The upper bound of the delay after failed attempt number `attempt` (1-based).
    pub fn ceiling(&self, attempt: i64) -> Duration {
        let exp = u32::try_from(attempt.saturating_sub(1).clamp(0, 62)).unwrap_or(62);
        let factor = 1u128 << exp;
        let nanos = self.base.as_nanos().saturating_mul(factor);
        let capped = nanos.min(self.cap.as_nanos());
        Duration::from_nanos(u64::try_from(capped).unwrap_or(u64::MAX))
    }

    /// A jittered delay after failed attempt number `attempt` (1-based).
    pub fn delay(&self, attempt: i64) -> Duration {
        let ceiling = self.ceiling(attempt);
        let half = ceiling / 2;
        let spread = u64::try_from((ceiling - half).as_nanos()).unwrap_or(u64::MAX);
        let jitter = if spread == 0 {
            0
        } else {
            rand::rng().random_range(0..=spread)
        };
        half + Duration::from_nanos(jitter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_and_stop_at_the_cap() {
        let b = Backoff {
            base: Duration::from_millis(100),
            cap: Duration::from_secs(1),
        };
        assert_eq!(b.ceiling(1), Duration::from_millis(100));
        assert_eq!(b.ceiling(2), Duration::from_millis(200));
        assert_eq!(b.ceiling(4), Duration::from_millis(800));
        assert_eq!(b.ceiling(5), Duration::from_secs(1));
        assert_eq!(b.ceiling(500), Duration::from_secs(1));
        for attempt in 1..8 {
            for _ in 0..50 {
                let d = b.delay(attempt);
                assert!(
                    d >= b.ceiling(attempt) / 2 && d <= b.ceiling(attempt),
                    "{d:?}"
                );
            }
        }
    }
}
