//! The notifier: delivers run notices from the store's outbox to the agents' notify URLs.
//!
//! How a notice travels, and why none is lost:
//! 1. The run's terminal transition writes an outbox row in the same transaction (a trigger
//!    in the store; see `nightshift_store::notifications`) when the run notifies: its agent
//!    had URLs when it was enqueued (`nightshift::open_store` tells the store which agents do).
//!    A crash before that commit loses the transition too; after it, the row is durable.
//! 2. [`Notifier::tick`] expands each new outbox row of an agent this daemon knows into one
//!    delivery per `[[agents.notify]]` URL (once, even with several daemons on one
//!    PostgreSQL). Rows of agents whose URLs were removed since expand into nothing; runs
//!    enqueued before an agent had URLs left no row, so adding a URL does not replay them.
//!    The daemon that expands a row decides its URLs from its own config, so daemons sharing
//!    a database should run the same `[[agents]]`; rows of agents a daemon does not know are
//!    left for one that does.
//! 3. It claims due deliveries with a lease and POSTs each. A 2xx answer marks it
//!    `delivered`; anything else (an error status, a refused connection, a timeout, a
//!    redirect, which is never followed) is retried after a capped exponential backoff with
//!    jitter, until `max_attempts`, then the delivery is `dead` with its last error kept. A
//!    daemon that dies mid-POST leaves a claim whose lease runs out; the delivery is then due
//!    again on any daemon.
//!
//! On SIGTERM the notifier keeps going while the worker pool drains, so runs ending in the
//! drain are notified before the daemon exits; POSTs still in flight after a short grace are
//! left to their claims and sent again later.
//!
//! So delivery is at-least-once: after a crash between a receiver's 2xx and the record of it,
//! the receiver gets the same notice again. Every POST carries the delivery's stable id
//! (`X-Nightshift-Delivery`, and `delivery_id` in the body) to dedupe on.
//!
//! Every POST carries the run's W3C `traceparent` (naming the run's span), so a receiver that
//! traces its work joins the run's trace.
//!
//! Each body is signed with HMAC-SHA256 under the secret in the environment variable the
//! entry names: `X-Nightshift-Signature-256: sha256=<hex>`, GitHub's shape, over the raw
//! body. The body's `sent_at` (also in `X-Nightshift-Timestamp`) is covered by the signature,
//! so a receiver can refuse stale replays. Secrets are read when signing and never logged;
//! logs and the API show notify URLs without their path and query (which often hold tokens).
//!
//! A failed attempt's error — a receiver's answer body (which may echo what it was sent, or
//! anything), a transport error, GitHub's answer for a check run — is redacted with every
//! secret the daemon holds before it is cut, logged or stored as the delivery's `last_error`
//! (served by `GET /v1/notifications` and `/ui/notifications`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use hmac::{Hmac, KeyInit, Mac};
use nightshift_agent::{AgentConfig, NotifyTarget};
use nightshift_store::{AttemptOutcome, Backoff, Millis, NewDelivery, Notification, Run, Store};
use nightshift_tools::Redactor;
use serde_json::{Value, json};
use sha2::Sha256;
use tokio_util::sync::CancellationToken;

/// The signature header: `sha256=<hex of HMAC-SHA256(secret, raw body)>`.
pub(crate) const SIGNATURE_HEADER: &str = "X-Nightshift-Signature-256";
/// The W3C Trace Context header naming the run's span.
pub(crate) const TRACEPARENT_HEADER: &str = "traceparent";

/// The `traceparent` a notice of `run` carries: the run's span in the run's trace.
pub(crate) fn run_traceparent(run: &Run) -> String {
    nightshift_telemetry::traces::RunTrace::of(&run.id, run.trace_parent.as_deref()).traceparent()
}
/// The delivery's stable id, the same on every attempt.
pub(crate) const DELIVERY_HEADER: &str = "X-Nightshift-Delivery";
/// When this attempt was sent, in milliseconds since the Unix epoch (also `sent_at` in the
/// signed body).
pub(crate) const TIMESTAMP_HEADER: &str = "X-Nightshift-Timestamp";
/// What happened: always `run.finished` for now.
pub(crate) const EVENT_HEADER: &str = "X-Nightshift-Event";
/// The event name.
pub(crate) const RUN_FINISHED: &str = "run.finished";

/// Deliveries attempted at once.
const BATCH: usize = 16;
/// How often the outbox is looked at when nothing wakes the notifier sooner.
const POLL: Duration = Duration::from_millis(500);
/// How much longer a claim lasts than the slowest POST may take.
const LEASE_MARGIN: Duration = Duration::from_secs(5);

/// Looks up a signing secret by the name of its environment variable.
pub type SecretSource = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Secrets from the process environment (empty counts as unset).
pub(crate) fn env_secrets() -> SecretSource {
    Arc::new(|name| std::env::var(name).ok().filter(|v| !v.is_empty()))
}

/// The check runs a run's end completes: the one its agent's config names now, then those
/// the run recorded opening that the config no longer names (renamed or removed by a reload
/// while the run had them open), each once.
fn check_runs_to_complete(configured: Option<&String>, opened: Vec<String>) -> Vec<String> {
    let mut names: Vec<String> = configured.cloned().into_iter().collect();
    for name in opened {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

/// Why a notifier cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum NotifierError {
    /// A notify entry names a signing secret that is not set: a notice is never sent
    /// unsigned.
    #[error(
        "agents.{agent}.notify[{index}].secret_env names ${variable}, which is not set; set it \
         to the secret the receiver at {url} verifies signatures with"
    )]
    SecretUnset {
        agent: String,
        index: usize,
        variable: String,
        /// The receiver's URL as logs show it (without path and query).
        url: String,
    },
    #[error("cannot build the HTTP client for notifications")]
    Client(#[source] reqwest::Error),
}

/// Delivers run notices; see the module docs.
pub struct Notifier {
    store: Store,
    secrets: SecretSource,
    agents: Vec<String>,
    targets: HashMap<String, Vec<NotifyTarget>>,
    http: reqwest::Client,
    lease: Duration,
    /// The check run each agent keeps (see [`crate::checks`]), and the GitHub to reach.
    check_runs: HashMap<String, String>,
    github: Option<Arc<nightshift_github::GithubAccess>>,
    /// Every secret the daemon holds: a failed attempt's error is redacted with it.
    redactor: Redactor,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier")
            .field("agents", &self.agents)
            .finish_non_exhaustive()
    }
}

impl Notifier {
    /// A notifier for `agents`, signing with secrets from the environment. Fails, naming the
    /// agent and the variable, when a notify entry's `secret_env` is not set: a notice is
    /// never sent unsigned.
    pub fn new(store: Store, agents: &[AgentConfig]) -> Result<Notifier, NotifierError> {
        Self::with_secrets(store, agents, env_secrets())
    }

    /// A notifier that looks secrets up with `secrets` instead of in the environment.
    pub fn with_secrets(
        store: Store,
        agents: &[AgentConfig],
        secrets: SecretSource,
    ) -> Result<Notifier, NotifierError> {
        for a in agents {
            for (index, t) in a.notify.iter().enumerate() {
                if secrets(&t.secret_env).is_none() {
                    return Err(NotifierError::SecretUnset {
                        agent: a.name.clone(),
                        index,
                        variable: t.secret_env.clone(),
                        url: shown_url(&t.url),
                    });
                }
            }
        }
        nightshift_llm::http::install_crypto_provider();
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("nightshift/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(NotifierError::Client)?;
        let slowest = agents
            .iter()
            .flat_map(|a| &a.notify)
            .map(|t| t.timeout_ms)
            .max()
            .unwrap_or(10_000);
        Ok(Notifier {
            store,
            secrets,
            agents: agents.iter().map(|a| a.name.clone()).collect(),
            targets: agents
                .iter()
                .map(|a| (a.name.clone(), a.notify.clone()))
                .collect(),
            http,
            lease: Duration::from_millis(slowest) + LEASE_MARGIN,
            check_runs: agents
                .iter()
                .filter_map(|a| Some((a.name.clone(), a.github.check_run.clone()?)))
                .collect(),
            github: None,
            redactor: Redactor::default(),
        })
    }

    /// This notifier, redacting every failed attempt's error with `redactor` before it is
    /// logged or stored.
    pub fn with_redactor(mut self, redactor: Redactor) -> Notifier {
        self.redactor = redactor;
        self
    }

    /// This notifier, completing the agents' check runs through `github` (none: a check
    /// run's completion fails, saying `[github]` is not configured, and is retried).
    pub fn with_github(mut self, github: Option<Arc<nightshift_github::GithubAccess>>) -> Notifier {
        self.github = github;
        self
    }

    /// Delivers until `stop` is cancelled, then makes one last pass, so runs that ended
    /// before the stop are notified now; store errors are logged and retried.
    pub async fn run(self, stop: CancellationToken) {
        let mut signal = self.store.subscribe();
        loop {
            let stopping = stop.is_cancelled();
            let busy = match self.tick().await {
                Ok(n) => n >= BATCH,
                Err(e) => {
                    tracing::warn!(error = %e, "notifier: store unavailable; retrying");
                    false
                }
            };
            if stopping {
                return;
            }
            if !busy {
                tokio::select! {
                    _ = stop.cancelled() => {}
                    _ = signal.wait(POLL) => {}
                }
            }
        }
    }

    /// One pass: expands new outbox rows, then makes one attempt on each due delivery (up to
    /// a batch). Returns how many attempts it made.
    pub async fn tick(&self) -> nightshift_store::Result<usize> {
        self.expand().await?;
        let due = self.store.claim_notifications(BATCH, self.lease).await?;
        let n = due.len();
        futures::stream::iter(due)
            .for_each_concurrent(BATCH, |d| self.attempt(d))
            .await;
        Ok(n)
    }

    async fn expand(&self) -> nightshift_store::Result<()> {
        for entry in self.store.unexpanded_outbox(&self.agents, 100).await? {
            let mut deliveries: Vec<NewDelivery> = self
                .targets
                .get(&entry.agent)
                .into_iter()
                .flatten()
                .map(|t| NewDelivery {
                    url: t.url.clone(),
                    secret_env: t.secret_env.clone(),
                    max_attempts: i64::from(t.max_attempts),
                })
                .collect();
            let opened = self.store.check_runs_of(&entry.run_id).await?;
            for name in check_runs_to_complete(self.check_runs.get(&entry.agent), opened) {
                deliveries.push(NewDelivery {
                    url: format!("{}{name}", crate::checks::TARGET_PREFIX),
                    secret_env: String::new(),
                    max_attempts: i64::from(NotifyTarget::new("", "").max_attempts),
                });
            }
            if self.store.expand_outbox(entry.id, &deliveries).await? && !deliveries.is_empty() {
                tracing::info!(run_id = %entry.run_id, status = %entry.status,
                    deliveries = deliveries.len(), "run notices queued");
            }
        }
        Ok(())
    }

    /// The target a delivery was made for (the current config's entry for its URL, or the
    /// defaults when the entry is gone).
    fn target(&self, agent: &str, d: &Notification) -> NotifyTarget {
        self.targets
            .get(agent)
            .and_then(|ts| ts.iter().find(|t| t.url == d.url))
            .cloned()
            .unwrap_or_else(|| NotifyTarget::new(&d.url, &d.secret_env))
    }

    /// One attempt on a claimed delivery, its outcome recorded under the claim.
    async fn attempt(&self, d: Notification) {
        let run = match self.store.run(&d.run_id).await {
            Ok(Some(run)) => run,
            Ok(None) => return, // runs are never deleted; nothing sensible to send
            Err(e) => {
                tracing::warn!(error = %e, delivery = %d.delivery_id, "cannot read the run");
                return; // the claim runs out and the delivery is tried again
            }
        };
        // Stored redacted; redacted again with today's secrets (rows may predate a secret).
        let run = self.redacted(run);
        let target = self.target(&run.agent, &d);
        let sent = match d.url.strip_prefix(crate::checks::TARGET_PREFIX) {
            Some(name) => self.complete_check_run(&run, name).await,
            None => self.post(&run, &d, &target).await,
        };
        let outcome = match sent {
            Ok(status_code) => AttemptOutcome::Delivered { status_code },
            Err((error, status_code)) => {
                let error = self.redactor.redact(&error);
                let backoff = Backoff {
                    base: Duration::from_millis(target.retry_base_ms),
                    cap: Duration::from_millis(target.retry_cap_ms),
                };
                let delay = i64::try_from(backoff.delay(d.attempts).as_millis()).unwrap_or(0);
                let last = d.attempts >= d.max_attempts;
                let url = shown_url(&d.url);
                if last {
                    tracing::error!(run_id = %d.run_id, delivery = %d.delivery_id, %url,
                        attempts = d.attempts, %error, "run notice given up");
                } else {
                    tracing::warn!(run_id = %d.run_id, delivery = %d.delivery_id, %url,
                        attempt = d.attempts, retry_in_ms = delay, %error, "run notice failed");
                }
                AttemptOutcome::Failed {
                    error,
                    status_code,
                    retry_at: self.store.now().saturating_add(delay),
                }
            }
        };
        match self.store.record_attempt(&d, &outcome).await {
            Ok(true) => {
                let status = match &outcome {
                    AttemptOutcome::Delivered { .. } => "delivered",
                    AttemptOutcome::Failed { .. } if d.attempts >= d.max_attempts => "dead",
                    AttemptOutcome::Failed { .. } => "retrying",
                };
                let agent = nightshift_telemetry::labels::configured(
                    &run.agent,
                    self.targets.contains_key(&run.agent),
                );
                nightshift_telemetry::notification_delivery(agent, status);
                if matches!(outcome, AttemptOutcome::Delivered { .. }) {
                    tracing::info!(run_id = %d.run_id, delivery = %d.delivery_id,
                        attempt = d.attempts, "run notice delivered");
                }
            }
            Ok(false) => tracing::warn!(delivery = %d.delivery_id,
                "the claim on this delivery ran out before its outcome was recorded; \
                 it is tried again (the receiver may see it twice)"),
            Err(e) => tracing::warn!(error = %e, delivery = %d.delivery_id,
                "cannot record a delivery's outcome; it is tried again"),
        }
    }

    /// `run` with its result and error redacted: they are sent (the notice's body, the check
    /// run's summary).
    fn redacted(&self, mut run: Run) -> Run {
        run.result = run.result.map(|r| self.redactor.redact(&r));
        run.error = run.error.map(|e| self.redactor.redact(&e));
        run
    }

    /// Completes the run's check run `name`; 200 when done (or nothing to do), else the
    /// error and GitHub's status if any.
    async fn complete_check_run(
        &self,
        run: &Run,
        name: &str,
    ) -> Result<u16, (String, Option<u16>)> {
        let Some(gh) = &self.github else {
            return Err(("[github] is not configured on this daemon".into(), None));
        };
        // Never longer than the claim lasts, or another daemon could complete it meanwhile.
        let bound = self.lease.saturating_sub(LEASE_MARGIN);
        let done = tokio::time::timeout(bound, crate::checks::complete(gh, &self.store, name, run))
            .await
            .unwrap_or_else(|_| {
                Err(nightshift_github::GithubError::Transport {
                    origin: "GitHub".into(),
                    reason: format!("no answer within {} s", bound.as_secs()),
                }
                .into())
            });
        match done {
            Ok(done) => {
                if let Some(done) = done {
                    tracing::info!(run_id = %run.id, check_run = name, ?done, "check run completed");
                }
                Ok(200)
            }
            Err(e) => Err((e.to_string(), e.status())),
        }
    }

    /// POSTs the signed notice; the 2xx status, or the error and the status if any.
    async fn post(
        &self,
        run: &Run,
        d: &Notification,
        target: &NotifyTarget,
    ) -> Result<u16, (String, Option<u16>)> {
        // The current config's entry for the URL decides the secret (a renamed variable
        // applies to pending deliveries too); the name stored with the delivery is the fallback.
        let secret = (self.secrets)(&target.secret_env).ok_or_else(|| {
            let e = format!("${} (the signing secret) is not set", target.secret_env);
            (e, None)
        })?;
        let sent_at = self.store.now();
        let body = serde_json::to_vec(&payload(run, d, sent_at)).expect("JSON serialises");
        let signature = sign(secret.as_bytes(), &body);
        let sent = self
            .http
            .post(&d.url)
            // Never longer than the claim lasts, or another daemon could send it meanwhile.
            .timeout(Duration::from_millis(target.timeout_ms).min(self.lease - LEASE_MARGIN))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(EVENT_HEADER, RUN_FINISHED)
            .header(DELIVERY_HEADER, &d.delivery_id)
            .header(TIMESTAMP_HEADER, sent_at.to_string())
            .header(SIGNATURE_HEADER, signature)
            .header(TRACEPARENT_HEADER, run_traceparent(run))
            .body(body)
            .send()
            .await
            .map_err(|e| (describe(&e), None))?;
        let status = sent.status();
        if status.is_success() {
            return Ok(status.as_u16());
        }
        let why = if status.is_redirection() {
            " (redirects are not followed; configure the final URL)".to_string()
        } else {
            let text = sent.text().await.unwrap_or_default();
            // Redacted before the cut, so the cut cannot leave a piece of a secret behind.
            let text = self.redactor.redact(text.trim());
            if text.is_empty() {
                String::new()
            } else {
                format!(": {}", truncate(&text, 200))
            }
        };
        Err((
            format!("HTTP {}{why}", status.as_u16()),
            Some(status.as_u16()),
        ))
    }
}

/// The most of a run's `result` or `error` a notice carries, in bytes; the full text stays
/// on the run (`GET /v1/runs/{id}`).
pub(crate) const NOTICE_TEXT_CAP: usize = 16 * 1024;

/// `text` cut to [`NOTICE_TEXT_CAP`] at a character boundary, and whether it was cut.
fn capped(text: Option<&str>) -> (Option<String>, bool) {
    match text {
        Some(t) if t.len() > NOTICE_TEXT_CAP => (Some(truncate(t, NOTICE_TEXT_CAP)), true),
        other => (other.map(str::to_string), false),
    }
}

/// The notice for `run`: what a receiver gets as the POST body. A `result` or `error` longer
/// than [`NOTICE_TEXT_CAP`] is cut (ending in `…`) and `result_truncated` /
/// `error_truncated` say so.
pub(crate) fn payload(run: &Run, d: &Notification, sent_at: Millis) -> Value {
    let (result, result_truncated) = capped(run.result.as_deref());
    let (error, error_truncated) = capped(run.error.as_deref());
    json!({
        "event": RUN_FINISHED,
        "delivery_id": d.delivery_id,
        "attempt": d.attempts,
        "sent_at": sent_at,
        "run": {
            "id": run.id,
            "agent": run.agent,
            "status": run.status,
            "trigger": run.trigger_kind,
            "result": result,
            "result_truncated": result_truncated,
            "error": error,
            "error_truncated": error_truncated,
            "usage": {
                "turns": run.turns,
                "input_tokens": run.input_tokens,
                "output_tokens": run.output_tokens,
                "cache_read_tokens": run.cache_read_tokens,
                "cache_write_tokens": run.cache_write_tokens,
            },
            "cost_usd": run.cost_usd,
            "idempotency_key": run.idempotency_key,
            "concurrency_key": run.concurrency_key,
            "created_at": run.created_at,
            "started_at": run.started_at,
            "finished_at": run.finished_at,
        },
    })
}

/// `sha256=<hex>` of HMAC-SHA256 over `body` with `secret`.
pub(crate) fn sign(secret: &[u8], body: &[u8]) -> String {
    let mut mac =
        <Hmac<Sha256> as KeyInit>::new_from_slice(secret).expect("HMAC takes a key of any length");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

pub use nightshift_store::notifications::shown_url;

/// A reqwest error without its URL, with its causes.
fn describe(e: &reqwest::Error) -> String {
    let mut out = if e.is_timeout() {
        "timed out".to_string()
    } else if e.is_connect() {
        "cannot connect".to_string()
    } else {
        "request failed".to_string()
    };
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_completes_the_configured_check_run_and_every_one_it_opened() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let current = "Review".to_string();
        assert_eq!(
            check_runs_to_complete(Some(&current), vec![]),
            names(&["Review"])
        );
        assert_eq!(
            check_runs_to_complete(Some(&current), names(&["Review"])),
            names(&["Review"])
        );
        // Renamed while the run had the old one open: both.
        assert_eq!(
            check_runs_to_complete(Some(&current), names(&["Old review"])),
            names(&["Review", "Old review"])
        );
        // Removed from the config: the opened one still.
        assert_eq!(
            check_runs_to_complete(None, names(&["Old review"])),
            names(&["Old review"])
        );
        assert!(check_runs_to_complete(None, vec![]).is_empty());
    }

    #[test]
    fn signatures_match_a_known_vector() {
        // RFC 4231, test case 2.
        assert_eq!(
            sign(b"Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn long_results_are_cut_at_a_character_boundary_and_flagged() {
        assert_eq!(capped(None), (None, false));
        assert_eq!(capped(Some("short")), (Some("short".into()), false));
        let long = "é".repeat(NOTICE_TEXT_CAP); // two bytes each
        let (cut, flagged) = capped(Some(&long));
        let cut = cut.unwrap();
        assert!(flagged);
        assert!(
            cut.len() <= NOTICE_TEXT_CAP + '…'.len_utf8(),
            "{}",
            cut.len()
        );
        assert!(cut.ends_with("é…"), "cut between characters");
    }
}
