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

mod breaker;
mod registry;

use std::borrow::Cow;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::message::{ModelRequest, ModelResponse, RateLimits};
use crate::provider::{Provider, ProviderError, with_cancel};
use breaker::{Breaker, Outcome, ProbeGuard};

pub use breaker::BreakerState;
pub use registry::{ClientKey, ClientRegistry};

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

    /// Sends `req` (to this client's model) with retries, pauses and the breaker: each
    /// attempt waits out a shared pause, passes the breaker and calls the provider
    /// (`attempt`); a failure either ends the call or sets the wait before the next attempt
    /// (`after_failure`).
    pub async fn send(
        &self,
        req: &ModelRequest,
        cancel: &CancellationToken,
    ) -> Result<ModelResponse, ProviderError> {
        let req = self.for_this_model(req);
        let mut last_err = None;
        for attempt in 0..self.cfg.max_attempts {
            self.wait_while_paused(cancel).await?;
            let guard = self.admit_call()?;
            let err = match self.attempt(guard, &req, attempt, cancel).await {
                Ok(resp) => return Ok(resp),
                Err(err) => err,
            };
            let delay = match self.after_failure(&err, attempt) {
                AfterFailure::Retry(delay) => delay,
                AfterFailure::GiveUp => return Err(err),
                AfterFailure::CircuitOpen(retry_in) => return Err(self.circuit_open(retry_in)),
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

    /// `req` addressed to this client's model (borrowed when it already is).
    fn for_this_model<'r>(&self, req: &'r ModelRequest) -> Cow<'r, ModelRequest> {
        if req.model == self.model {
            Cow::Borrowed(req)
        } else {
            Cow::Owned(ModelRequest {
                model: self.model.clone(),
                ..req.clone()
            })
        }
    }

    /// One admitted call to the provider. Its outcome goes to the breaker (through `guard`),
    /// a failure to the failed-attempt listener, and any rate-limit headers to
    /// [`ModelClient::rate_limits`]; a reply is stamped with the model and the retries.
    async fn attempt(
        &self,
        mut guard: ProbeGuard<'_>,
        req: &ModelRequest,
        attempt: u32,
        cancel: &CancellationToken,
    ) -> Result<ModelResponse, ProviderError> {
        let err = match with_cancel(cancel, self.provider.send(req, cancel)).await {
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
        Err(err)
    }

    /// What follows the failed attempt number `attempt` (0-based): giving up (not retryable,
    /// or a `retry-after` longer than `max_retry_after`), failing fast (the circuit is open
    /// now), or a retry after the provider's `retry-after` or the jittered backoff.
    fn after_failure(&self, err: &ProviderError, attempt: u32) -> AfterFailure {
        if !err.is_retryable() {
            return AfterFailure::GiveUp;
        }
        if let Some(retry_in) = self.open_for() {
            // This failure (or another caller's) opened the circuit: waiting and trying
            // again would only fail fast, so say so now, with the real cause.
            tracing::warn!(model = %self.model, error = %err, "model call failed; circuit open");
            return AfterFailure::CircuitOpen(retry_in);
        }
        match err.retry_after() {
            Some(d) if d > self.cfg.max_retry_after => {
                tracing::warn!(model = %self.model, ?d, "retry-after too long; giving up");
                AfterFailure::GiveUp
            }
            Some(d) => AfterFailure::Retry(d),
            None => AfterFailure::Retry(self.jittered(attempt)),
        }
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
}

/// What [`ModelClient::send`] does after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AfterFailure {
    /// Try again after this wait.
    Retry(Duration),
    /// Return the attempt's error.
    GiveUp,
    /// Fail fast: the circuit is open for this long.
    CircuitOpen(Duration),
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
}
