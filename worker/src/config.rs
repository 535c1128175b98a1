//! Settings of the worker pool, read from the `[worker]` table of `nightshift.toml`. Every
//! field is optional; [`PoolConfig::validate`] explains any value it refuses with a
//! [`ConfigError`].

use std::collections::BTreeMap;
use std::time::Duration;

use nightshift_store::Backoff;
use serde::Deserialize;

/// A `[worker]` value [`PoolConfig::validate`] refuses; its `Display` names the key and says
/// what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("worker.slots must be at least 1")]
    NoSlots,
    #[error(
        "worker.lanes reserve {reserved} slots but worker.slots is {slots}; reserve at most as \
         many slots as there are"
    )]
    LanesOverSlots { reserved: usize, slots: usize },
    #[error("worker.lanes.{lane} is 0; reserve at least 1 slot or remove the lane")]
    EmptyLane { lane: String },
    /// `worker.{key}` is below `min`.
    #[error("worker.{key} must be at least {min}")]
    TooSmall { key: &'static str, min: u64 },
    #[error(
        "worker.heartbeat_ms ({heartbeat_ms}) must be above 0 and below worker.lease_ms \
         ({lease_ms}); a third of the lease is a good value"
    )]
    Heartbeat { heartbeat_ms: u64, lease_ms: u64 },
    #[error(
        "worker.retry_base_ms ({base_ms}) must be above 0 and at most worker.retry_cap_ms ({cap_ms})"
    )]
    Retry { base_ms: u64, cap_ms: u64 },
}

/// The `[worker]` settings.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PoolConfig {
    /// How many jobs run at once in this process. Default 4.
    pub slots: usize,
    /// Slots kept for one lane each, e.g. `{ interactive = 1 }`: a burst in other lanes
    /// never takes them. The rest are shared by all lanes. Default none.
    pub lanes: BTreeMap<String, usize>,
    /// How long a claim holds a job without a heartbeat, in ms. Default 30000.
    pub lease_ms: u64,
    /// How often a running job's lease is extended, in ms; below `lease_ms`. Default 10000.
    pub heartbeat_ms: u64,
    /// The longest an idle pool waits before looking for work without being woken, in ms.
    /// Default 1000.
    pub poll_interval_ms: u64,
    /// On SIGTERM, how long running jobs may take to finish before their leases are released
    /// for another worker, in ms. Default 30000.
    pub shutdown_grace_ms: u64,
    /// The first retry delay of a failed job (before jitter), in ms. Default 5000.
    pub retry_base_ms: u64,
    /// The longest retry delay, in ms. Default 3600000 (one hour).
    pub retry_cap_ms: u64,
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            slots: 4,
            lanes: BTreeMap::new(),
            lease_ms: 30_000,
            heartbeat_ms: 10_000,
            poll_interval_ms: 1_000,
            shutdown_grace_ms: 30_000,
            retry_base_ms: 5_000,
            retry_cap_ms: 3_600_000,
        }
    }
}

impl PoolConfig {
    /// Checks every value; the [`ConfigError`] names the key and says what is allowed.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.slots == 0 {
            return Err(ConfigError::NoSlots);
        }
        let reserved: usize = self.lanes.values().sum();
        if reserved > self.slots {
            return Err(ConfigError::LanesOverSlots {
                reserved,
                slots: self.slots,
            });
        }
        if let Some((lane, _)) = self.lanes.iter().find(|(_, n)| **n == 0) {
            return Err(ConfigError::EmptyLane { lane: lane.clone() });
        }
        if self.lease_ms < 100 {
            return Err(ConfigError::TooSmall {
                key: "lease_ms",
                min: 100,
            });
        }
        if self.heartbeat_ms == 0 || self.heartbeat_ms >= self.lease_ms {
            return Err(ConfigError::Heartbeat {
                heartbeat_ms: self.heartbeat_ms,
                lease_ms: self.lease_ms,
            });
        }
        if self.poll_interval_ms == 0 {
            return Err(ConfigError::TooSmall {
                key: "poll_interval_ms",
                min: 1,
            });
        }
        if self.retry_base_ms == 0 || self.retry_cap_ms < self.retry_base_ms {
            return Err(ConfigError::Retry {
                base_ms: self.retry_base_ms,
                cap_ms: self.retry_cap_ms,
            });
        }
        Ok(())
    }

    pub fn lease(&self) -> Duration {
        Duration::from_millis(self.lease_ms)
    }

    pub fn heartbeat(&self) -> Duration {
        Duration::from_millis(self.heartbeat_ms)
    }

    pub fn poll_interval(&self) -> Duration {
        Duration::from_millis(self.poll_interval_ms)
    }

    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_millis(self.shutdown_grace_ms)
    }

    pub fn backoff(&self) -> Backoff {
        Backoff {
            base: Duration::from_millis(self.retry_base_ms),
            cap: Duration::from_millis(self.retry_cap_ms),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_beyond_the_slots_are_refused() {
        let mut c = PoolConfig::default();
        c.lanes.insert("interactive".into(), 5);
        let err = c.validate().unwrap_err().to_string();
        assert!(
            err.contains("reserve 5 slots") && err.contains("worker.slots is 4"),
            "{err}"
        );
        c.lanes.insert("interactive".into(), 1);
        assert!(c.validate().is_ok());
        c.heartbeat_ms = c.lease_ms;
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("worker.heartbeat_ms")
        );
    }
}
