//! [`ModelClient`]: one shared client per (provider, model, key) that every worker slot calls
//! through, adding retries, rate-limit pauses, a circuit breaker and fallback to a provider.
//!
//! Guarantees:
//! - Retries wrap only the provider call, only for retryable errors
//!   ([`ProviderError::is_retryable`]), at most `max_attempts` attempts in all, waiting
//!   `retry-after` when the provider sent one, else `min(max_delay, base_delay·2^n)` with
//!   jitter (a uniformly random point in its upper half). Malformed 200 replies are retried
//!   like broken streams, within the same budget. Giving up returns the last real error —
//!   or, when the circuit is open by then, [`ProviderError::CircuitOpen`] carrying it. A
//!   `retry-after` longer than `max_retry_after` is not waited out: the error is returned at
//!   once (so a fallback model can answer instead).
//! - A 429 pauses **every** caller of the client: no new attempt starts before the shared
//!   `paused_until` (calls already in flight are not interrupted).
//! - Circuit breaker: `failure_threshold` consecutive provider failures (5xx, 529, 408,
//!   network, broken stream, malformed reply — not 429 or other 4xx) open it; while open,
//!   calls fail at once with [`ProviderError::CircuitOpen`] without touching the network. It
//!   stays open for `cooldown`, or for the failure's `retry-after` when that is longer (capped
//!   at `max_retry_after`); then exactly one call is let through as a probe (others keep
//!   failing fast); its success closes the circuit, its failure reopens it, and a neutral
//!   outcome (4xx, cancellation, the probe being dropped) frees the probe slot for the next
//!   caller.
//! - The breaker remembers the failure that opened it ([`ModelClient::opened_by`]) and the
//!   latest one ([`ModelClient::last_failure`]); every `CircuitOpen` carries the latest as
//!   `last_error` and `retry_in` (the time until the next probe; one cooldown while a probe is
//!   in flight), so the real cause — "HTTP 529 overloaded_error: Overloaded" — is never lost
//!   and a caller knows how long to wait ([`ProviderError::retry_hint`]).
//! - Cancellation aborts the call in flight and any wait at once with
//!   [`ProviderError::Cancelled`].
//! - [`send_with_fallback`] moves to the next client only when one gives up with a
//!   retryable error (malformed replies included) or an open circuit; 400/401/403,
//!   context-too-long and cancellation end the chain at once. The reply's `model` says which
//!   model answered.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::{ConfigError, ProviderConfig, ProviderKind};
use crate::message::{ModelRequest, ModelResponse, RateLimits};
use crate::provider::{Provider, ProviderError, with_cancel};

/// Retry and breaker knobs (durations, so tests can use milliseconds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientConfig {
    /// Attempts per call, the first included (at least 1).
    pub max_attempts: u32,
    pub base_delay: Duration,
    pub max_delay: Duration,
    /// The longest `retry-after` that is waited out rather than returned.
    pub max_retry_after: Duration,
    /// Randomise backoff delays (off only for tests that measure them).
    pub jitter: bool,
    /// Consecutive provider failures that open the circuit (at least 1).
    pub failure_threshold: u32,
    pub cooldown: Duration,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            max_attempts: 5,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
            max_retry_after: Duration::from_secs(300),
            jitter: true,
            failure_threshold: 5,
            cooldown: Duration::from_secs(30),
        }
    }
}

impl ClientConfig {
    /// The un-jittered delay before retry number `n` (0-based): `min(max, base·2^n)`.
    pub fn backoff(&self, n: u32) -> Duration {
        let factor = 2u32.saturating_pow(n.min(30));
        self.base_delay.saturating_mul(factor).min(self.max_delay)
    }
}

/// The circuit breaker as seen from outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    Closed { consecutive_failures: u32 },
    Open { retry_in: Duration },
    HalfOpen { probe_in_flight: bool },
}

#[derive(Debug, Clone, Copy)]
enum Breaker {
    Closed { failures: u32 },
    Open { until: Instant },
    HalfOpen { probing: bool },
}

#[derive(Debug)]
struct State {
    paused_until: Option<Instant>,
    breaker: Breaker,
    rate_limits: Option<RateLimits>,
    /// The provider failure that last opened the circuit (cleared by a success).
    opened_by: Option<ProviderError>,
    /// The latest provider failure (cleared by a success).
    last_failure: Option<ProviderError>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Success,
    Failure,
    Neutral,
}

/// A provider plus the model it serves, shared (in an `Arc`) by all callers.
pub struct ModelClient {
    provider: Arc<dyn Provider>,
    model: String,
    cfg: ClientConfig,
    state: Mutex<State>,
    /// Told of every failed attempt (see [`ModelClient::on_failed_attempt`]).
    failed_attempt: std::sync::OnceLock<FailedAttempt>,
}

/// What [`ModelClient::on_failed_attempt`] calls.
type FailedAttempt = Box<dyn Fn(&ProviderError) + Send + Sync>;

impl std::fmt::Debug for ModelClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelClient")
            .field("provider", &self.provider.name())
            .field("model", &self.model)
            .field("breaker", &self.breaker_state())
            .finish()
    }
}

impl ModelClient {
    pub fn new(provider: Arc<dyn Provider>, model: impl Into<String>, cfg: ClientConfig) -> Self {
        let cfg = ClientConfig {
            max_attempts: cfg.max_attempts.max(1),
            failure_threshold: cfg.failure_threshold.max(1),
            ..cfg
        };
        Self {
            provider,
            model: model.into(),
            cfg,
            state: Mutex::new(State {
                paused_until: None,
                breaker: Breaker::Closed { failures: 0 },
                rate_limits: None,
                opened_by: None,
                last_failure: None,
            }),
            failed_attempt: std::sync::OnceLock::new(),
        }
    }

    /// Calls `tell` with the error of every attempt that fails from now on (each retry, and
    /// the last; a cancellation too), for the metrics. A client shared through a
    /// [`ClientRegistry`] takes the first `tell` it is given; later ones are dropped and
    /// `false` is returned.
    pub fn on_failed_attempt(&self, tell: impl Fn(&ProviderError) + Send + Sync + 'static) -> bool {
        self.failed_attempt.set(Box::new(tell)).is_ok()
    }

    /// The model every request through this client is sent to.
    pub fn model(&self) -> &str {
        &self.model
    }

    pub fn provider_name(&self) -> &str {
        self.provider.name()
    }

    pub fn config(&self) -> &ClientConfig {
        &self.cfg
    }

    /// The rate-limit headers of the latest response (or error) that carried any.
    pub fn rate_limits(&self) -> Option<RateLimits> {
        self.lock().rate_limits.clone()
    }

    /// How long new calls will still wait because of a 429, if at all.
    pub fn paused_for(&self) -> Option<Duration> {
        let until = self.lock().paused_until?;
        let now = Instant::now();
        (until > now).then(|| until - now)
    }

    /// The provider failure that last opened the circuit, until a success closes it.
    pub fn opened_by(&self) -> Option<ProviderError> {
        self.lock().opened_by.clone()
    }

    /// The latest provider failure (5xx, 529, 408, network, broken stream, malformed reply),
    /// until a success clears it.
    pub fn last_failure(&self) -> Option<ProviderError> {
        self.lock().last_failure.clone()
    }

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

    /// Sends `req` (to this client's model) with retries, pauses and the breaker.
    pub async fn send(
        &self,
        req: &ModelRequest,
        cancel: &CancellationToken,
    ) -> Result<ModelResponse, ProviderError> {
        let req: Cow<'_, ModelRequest> = if req.model == self.model {
            Cow::Borrowed(req)
        } else {
            Cow::Owned(ModelRequest {
                model: self.model.clone(),
                ..req.clone()
            })
        };
        let mut last_err = None;
        for attempt in 0..self.cfg.max_attempts {
            self.wait_while_paused(cancel).await?;
            let probe = match self.admit() {
                Ok(probe) => probe,
                Err(retry_in) => return Err(self.circuit_open(retry_in)),
            };
            let mut guard = ProbeGuard {
                client: self,
                probe,
                done: false,
            };
            let result = with_cancel(cancel, self.provider.send(&req, cancel)).await;
            let err = match result {
                Ok(mut resp) => {
                    guard.finish(Outcome::Success, None);
                    if resp.model.is_empty() {
                        resp.model = self.model.clone();
                    }
                    resp.retries = attempt;
                    if resp.rate_limits != RateLimits::default() {
                        self.lock().rate_limits = Some(resp.rate_limits.clone());
                    }
                    return Ok(resp);
                }
                Err(e) => e,
            };
            if let Some(tell) = self.failed_attempt.get() {
                tell(&err);
            }
            let outcome = if err.is_provider_failure() {
                Outcome::Failure
            } else {
                Outcome::Neutral
            };
            guard.finish(outcome, Some(&err));
            if let ProviderError::Http {
                rate_limits: Some(limits),
                ..
            } = &err
            {
                self.lock().rate_limits = Some((**limits).clone());
            }
            if !err.is_retryable() {
                return Err(err);
            }
            if let Some(retry_in) = self.open_for() {
                // This failure (or another caller's) opened the circuit: waiting and trying
                // again would only fail fast, so say so now, with the real cause.
                tracing::warn!(model = %self.model, error = %err, "model call failed; circuit open");
                return Err(self.circuit_open(retry_in));
            }
            let delay = match err.retry_after() {
                Some(d) if d > self.cfg.max_retry_after => {
                    tracing::warn!(model = %self.model, ?d, "retry-after too long; giving up");
                    return Err(err);
                }
                Some(d) => d,
                None => self.jittered(attempt),
            };
            let rate_limited = err.is_rate_limited();
            if rate_limited {
                self.pause_for(delay);
            }
            tracing::warn!(model = %self.model, attempt = attempt + 1, error = %err, ?delay,
                "model call failed; retrying");
            last_err = Some(err);
            if attempt + 1 < self.cfg.max_attempts && !rate_limited {
                with_cancel(cancel, async {
                    tokio::time::sleep(delay).await;
                    Ok(())
                })
                .await?;
            }
        }
        Err(last_err.expect("max_attempts is at least 1"))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn jittered(&self, attempt: u32) -> Duration {
        let d = self.cfg.backoff(attempt);
        if !self.cfg.jitter || d.is_zero() {
            return d;
        }
        d / 2 + d.mul_f64(rand::random::<f64>() / 2.0)
    }

    fn pause_for(&self, d: Duration) {
        let until = Instant::now() + d;
        let mut st = self.lock();
        if st.paused_until.is_none_or(|u| u < until) {
            st.paused_until = Some(until);
        }
    }

    async fn wait_while_paused(&self, cancel: &CancellationToken) -> Result<(), ProviderError> {
        loop {
            let until = self.lock().paused_until;
            match until {
                Some(u) if u > Instant::now() => {
                    with_cancel(cancel, async {
                        tokio::time::sleep_until(u).await;
                        Ok(())
                    })
                    .await?
                }
                _ => return Ok(()),
            }
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
    fn open_for(&self) -> Option<Duration> {
        match self.lock().breaker {
            Breaker::Open { until } => {
                let now = Instant::now();
                (until > now).then(|| until - now)
            }
            _ => None,
        }
    }

    /// The fail-fast error, carrying the latest real failure.
    fn circuit_open(&self, retry_in: Duration) -> ProviderError {
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
struct ProbeGuard<'a> {
    client: &'a ModelClient,
    probe: bool,
    done: bool,
}

impl ProbeGuard<'_> {
    fn finish(&mut self, outcome: Outcome, err: Option<&ProviderError>) {
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

/// Tries each client in turn; see the module doc for when it moves on.
pub async fn send_with_fallback(
    chain: &[Arc<ModelClient>],
    req: &ModelRequest,
    cancel: &CancellationToken,
) -> Result<ModelResponse, ProviderError> {
    let mut last = None;
    for (i, client) in chain.iter().enumerate() {
        match client.send(req, cancel).await {
            Ok(resp) => return Ok(resp),
            Err(e) if e.is_transient() => {
                match chain.get(i + 1) {
                    Some(next) => {
                        tracing::warn!(model = client.model(), next = next.model(), error = %e,
                                                 "model failed; falling back to the next model")
                    }
                    None if chain.len() > 1 => tracing::warn!(model = client.model(), error = %e,
                                                 "the last model of the fallback chain failed too"),
                    None => tracing::warn!(model = client.model(), error = %e,
                                           "model call failed (no fallback model is configured)"),
                }
                last = Some(e);
            }
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| ProviderError::Config("the fallback chain is empty".into())))
}

/// What identifies a shared client: the provider endpoint, the key's variable and the model.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClientKey {
    pub kind: ProviderKind,
    pub base_url: Option<String>,
    pub api_key_env: Option<String>,
    pub script: Option<PathBuf>,
    pub model: String,
}

impl ClientKey {
    pub fn new(cfg: &ProviderConfig, model: &str) -> Self {
        Self {
            kind: cfg.kind,
            base_url: cfg.resolved_base_url(),
            api_key_env: cfg.key_env().map(str::to_string),
            script: cfg.script.clone(),
            model: model.to_string(),
        }
    }
}

/// Hands out one shared [`ModelClient`] per [`ClientKey`].
#[derive(Debug, Default)]
pub struct ClientRegistry {
    clients: Mutex<HashMap<ClientKey, Arc<ModelClient>>>,
}

impl ClientRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// The client for `model` on the provider `cfg`, built on first use.
    pub fn client(
        &self,
        cfg: &ProviderConfig,
        model: &str,
    ) -> Result<Arc<ModelClient>, ConfigError> {
        self.get_or_insert_with(ClientKey::new(cfg, model), || {
            let provider = cfg.build_provider()?;
            Ok(ModelClient::new(provider, model, cfg.client_config()))
        })
    }

    /// The client under `key`, made by `make` if there is none yet.
    pub fn get_or_insert_with(
        &self,
        key: ClientKey,
        make: impl FnOnce() -> Result<ModelClient, ConfigError>,
    ) -> Result<Arc<ModelClient>, ConfigError> {
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = clients.get(&key) {
            return Ok(c.clone());
        }
        let client = Arc::new(make()?);
        clients.insert(key, client.clone());
        Ok(client)
    }

    pub fn len(&self) -> usize {
        self.clients.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let cfg = ClientConfig {
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(1000),
            ..ClientConfig::default()
        };
        let got: Vec<u128> = (0..6).map(|n| cfg.backoff(n).as_millis()).collect();
        assert_eq!(got, vec![100, 200, 400, 800, 1000, 1000]);
        assert_eq!(cfg.backoff(u32::MAX), Duration::from_millis(1000));
    }

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
