//! The circuit breaker of a [`ModelClient`]: which calls it lets through, and what each
//! admitted call's outcome does to it.
//!
//! Guarantees: `failure_threshold` consecutive provider failures open the circuit; while it
//! is open no call reaches the network (each gets [`ProviderError::CircuitOpen`] carrying
//! the latest real failure and the time until the next probe). It stays open for the
//! cooldown, or the failure's `retry-after` when that is longer (capped at
//! `max_retry_after`); then exactly one call goes through as a probe. The probe's success
//! closes the circuit, its failure reopens it, and a neutral outcome (a 4xx, a cancellation,
//! the probe dropped mid-call, by [`ProbeGuard`]) frees the probe slot for the next caller.
//! The transitions are a pure function ([`next_breaker`]), tested without a clock.

use std::time::Duration;

use tokio::time::Instant;

use super::{ClientConfig, ModelClient};
use crate::provider::ProviderError;

/// The circuit breaker as seen from outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    Closed { consecutive_failures: u32 },
    Open { retry_in: Duration },
    HalfOpen { probe_in_flight: bool },
}

#[derive(Debug, Clone, Copy)]
pub(super) enum Breaker {
    Closed { failures: u32 },
    Open { until: Instant },
    HalfOpen { probing: bool },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    Success,
    Failure,
    Neutral,
}

impl ModelClient {
    pub fn breaker_state(&self) -> BreakerState {
        match self.lock().breaker {
            Breaker::Closed { failures } => BreakerState::Closed {
                consecutive_failures: failures,
            },
            Breaker::Open { until } => BreakerState::Open {
                retry_in: until.saturating_duration_since(Instant::now()),
            },
            Breaker::HalfOpen { probing } => BreakerState::HalfOpen {
                probe_in_flight: probing,
            },
        }
    }

    /// Admits a call through the breaker (its [`ProbeGuard`] records the outcome), or the
    /// fail-fast error while the circuit is open.
    pub(super) fn admit_call(&self) -> Result<ProbeGuard<'_>, ProviderError> {
        match self.admit() {
            Ok(probe) => Ok(ProbeGuard {
                client: self,
                probe,
                done: false,
            }),
            Err(retry_in) => Err(self.circuit_open(retry_in)),
        }
    }

    /// Lets a call through (`Ok(is_probe)`) or says how long until the next probe.
    fn admit(&self) -> Result<bool, Duration> {
        let mut st = self.lock();
        let now = Instant::now();
        match st.breaker {
            Breaker::Closed { .. } => Ok(false),
            Breaker::Open { until } if now < until => Err(until - now),
            Breaker::Open { .. } | Breaker::HalfOpen { probing: false } => {
                st.breaker = Breaker::HalfOpen { probing: true };
                Ok(true)
            }
            // The probe's outcome is unknown; if it fails, the next one is a cooldown away.
            Breaker::HalfOpen { probing: true } => Err(self.cfg.cooldown),
        }
    }

    /// How long the circuit stays open, if it is open now.
    pub(super) fn open_for(&self) -> Option<Duration> {
        match self.lock().breaker {
            Breaker::Open { until } => {
                let now = Instant::now();
                (until > now).then(|| until - now)
            }
            _ => None,
        }
    }

    /// The fail-fast error, carrying the latest real failure.
    pub(super) fn circuit_open(&self, retry_in: Duration) -> ProviderError {
        ProviderError::CircuitOpen {
            model: self.model.clone(),
            retry_in,
            last_error: self.lock().last_failure.clone().map(Box::new),
        }
    }

    fn record(&self, probe: bool, outcome: Outcome, err: Option<&ProviderError>) {
        let mut st = self.lock();
        let until = Instant::now() + open_span(&self.cfg, err);
        let prev = st.breaker;
        st.breaker = next_breaker(prev, probe, outcome, self.cfg.failure_threshold, until);
        match outcome {
            Outcome::Success => {
                st.opened_by = None;
                st.last_failure = None;
            }
            Outcome::Failure => {
                st.last_failure = err.cloned();
                if matches!(st.breaker, Breaker::Open { .. })
                    && !matches!(prev, Breaker::Open { .. })
                {
                    st.opened_by = err.cloned();
                    match err {
                        Some(e) => {
                            tracing::warn!(model = %self.model, error = %e, "circuit opened")
                        }
                        None => tracing::warn!(model = %self.model, "circuit opened"),
                    }
                }
            }
            Outcome::Neutral => {}
        }
    }
}

/// Records the outcome of an admitted call; frees the probe slot if the call is dropped.
pub(super) struct ProbeGuard<'a> {
    client: &'a ModelClient,
    probe: bool,
    done: bool,
}

impl ProbeGuard<'_> {
    pub(super) fn finish(&mut self, outcome: Outcome, err: Option<&ProviderError>) {
        self.done = true;
        self.client.record(self.probe, outcome, err);
    }
}

impl Drop for ProbeGuard<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.client.record(self.probe, Outcome::Neutral, None);
        }
    }
}

/// How long a failure keeps the circuit open: the cooldown, or the failure's `retry-after`
/// when that is longer (capped at `max_retry_after`), so a provider that asked for two
/// minutes is not probed after thirty seconds.
fn open_span(cfg: &ClientConfig, err: Option<&ProviderError>) -> Duration {
    let asked = err
        .and_then(ProviderError::retry_after)
        .unwrap_or_default()
        .min(cfg.max_retry_after);
    cfg.cooldown.max(asked)
}

/// The breaker after an admitted call's outcome (`open_until` is used if it opens).
fn next_breaker(
    prev: Breaker,
    probe: bool,
    outcome: Outcome,
    threshold: u32,
    open_until: Instant,
) -> Breaker {
    let open = Breaker::Open { until: open_until };
    match (outcome, prev) {
        (Outcome::Success, _) => Breaker::Closed { failures: 0 },
        (Outcome::Failure, Breaker::Closed { failures }) if failures + 1 >= threshold => open,
        (Outcome::Failure, Breaker::Closed { failures }) => Breaker::Closed {
            failures: failures + 1,
        },
        (Outcome::Failure, Breaker::HalfOpen { .. }) if probe => open,
        (Outcome::Neutral, Breaker::HalfOpen { .. }) if probe => {
            Breaker::HalfOpen { probing: false }
        }
        (_, unchanged) => unchanged,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e529(retry_after: Option<Duration>) -> ProviderError {
        ProviderError::Http {
            status: 529,
            error_type: Some("overloaded_error".into()),
            message: "Overloaded".into(),
            retry_after,
            rate_limits: None,
        }
    }

    #[test]
    fn the_circuit_stays_open_for_the_longer_of_cooldown_and_retry_after_capped() {
        let cfg = ClientConfig {
            cooldown: Duration::from_secs(30),
            max_retry_after: Duration::from_secs(300),
            ..ClientConfig::default()
        };
        let span = |d: Option<u64>| open_span(&cfg, Some(&e529(d.map(Duration::from_secs))));
        assert_eq!(span(None), Duration::from_secs(30));
        assert_eq!(span(Some(5)), Duration::from_secs(30));
        assert_eq!(span(Some(120)), Duration::from_secs(120));
        assert_eq!(span(Some(86_400)), Duration::from_secs(300));
        assert_eq!(open_span(&cfg, None), Duration::from_secs(30));
    }

    #[test]
    fn breaker_transitions() {
        let at = Instant::now();
        let closed = |failures| Breaker::Closed { failures };
        let step = |prev, probe, outcome| next_breaker(prev, probe, outcome, 3, at);
        assert!(matches!(
            step(closed(1), false, Outcome::Failure),
            Breaker::Closed { failures: 2 }
        ));
        assert!(
            matches!(step(closed(2), false, Outcome::Failure), Breaker::Open { until } if until == at)
        );
        assert!(matches!(
            step(closed(2), false, Outcome::Neutral),
            Breaker::Closed { failures: 2 }
        ));
        assert!(matches!(
            step(closed(2), false, Outcome::Success),
            Breaker::Closed { failures: 0 }
        ));
        let probing = Breaker::HalfOpen { probing: true };
        assert!(matches!(
            step(probing, true, Outcome::Failure),
            Breaker::Open { .. }
        ));
        assert!(matches!(
            step(probing, true, Outcome::Neutral),
            Breaker::HalfOpen { probing: false }
        ));
        assert!(matches!(
            step(probing, false, Outcome::Failure),
            Breaker::HalfOpen { probing: true }
        ));
        assert!(matches!(
            step(probing, true, Outcome::Success),
            Breaker::Closed { failures: 0 }
        ));
    }
}
