//! The one door for work: every request to start or continue a run — from the API, the CLI,
//! a webhook route or a schedule's fire — is checked here and enqueued by [`Intake`].
//!
//! What it guarantees: a request that reaches the store names a configured agent, has a
//! prompt of 1 byte to [`MAX_PROMPT_BYTES`], keys of 1-255 bytes, a concurrency policy only
//! with the key it applies to, and options in range. A refused request changes nothing and
//! its [`IntakeError`] says what to change. Config loaders that want to refuse a bad file at
//! start (webhook routes, schedules) ask the same questions through [`check_agent`].

use std::sync::{Arc, RwLock};
use std::time::Duration;

use nightshift_store::{
    ConcurrencyPolicy, Enqueued, JobOptions, Millis, NewResume, NewRun, ResumeReason, Store,
    Trigger,
};

/// The most a run's context may hold, in bytes (JSON).
pub const MAX_CONTEXT_BYTES: usize = 16 * 1024;

/// The most a prompt may hold, in bytes.
pub const MAX_PROMPT_BYTES: usize = 1 << 20;
/// Priorities outside this range are refused.
pub const PRIORITY_RANGE: std::ops::RangeInclusive<i64> = -1000..=1000;
/// The furthest ahead a run may be scheduled.
pub const MAX_DELAY: Duration = Duration::from_secs(366 * 24 * 3600);

/// When a requested run may start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StartAt {
    /// As soon as a worker is free.
    #[default]
    Now,
    /// This long after the request is checked (the store's clock, read once).
    After(Duration),
    /// At this time of the store's clock (ms since the epoch), passed through as the job's
    /// `run_at`; a time already past is now.
    At(Millis),
}

/// A request to start a run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRequest {
    pub agent: String,
    pub prompt: String,
    pub trigger: Trigger,
    pub idempotency_key: Option<String>,
    pub lane: Option<String>,
    pub priority: Option<i64>,
    /// When the run may start (default: now).
    pub start_at: StartAt,
    pub max_attempts: Option<i64>,
    /// Runs with the same key run one at a time (see [`ConcurrencyPolicy`]).
    pub concurrency_key: Option<String>,
    /// How a run meets an active run with its key (`None`: queue behind it). Refused without
    /// a `concurrency_key`.
    pub concurrency_policy: Option<ConcurrencyPolicy>,
    /// The W3C `traceparent` of the request that starts the run: its trace continues that
    /// one. An invalid value is ignored (a trace of its own), as the W3C spec asks.
    pub trace_parent: Option<String>,
    /// What is known about what starts the run (a JSON object from trusted data, such as a
    /// GitHub delivery's repository and head SHA), stored with it for its tools.
    pub context: Option<serde_json::Value>,
}

impl RunRequest {
    /// A request to run `agent` on `prompt` now.
    pub fn new(agent: impl Into<String>, prompt: impl Into<String>, trigger: Trigger) -> Self {
        Self {
            agent: agent.into(),
            prompt: prompt.into(),
            trigger,
            idempotency_key: None,
            lane: None,
            priority: None,
            start_at: StartAt::Now,
            max_attempts: None,
            concurrency_key: None,
            concurrency_policy: None,
            trace_parent: None,
            context: None,
        }
    }
}

/// A request to continue an unfinished run with a new message: the newest unfinished run
/// whose concurrency key is `concurrency_key` gets a `resume` job, and the model reads `message` at
/// the bottom of the same conversation.
#[derive(Debug, Clone, PartialEq)]
pub struct ResumeRequest {
    pub concurrency_key: String,
    pub message: String,
    /// A second request with the same key returns the first resume job.
    pub idempotency_key: Option<String>,
}

/// Why a request was refused, or the store's error.
#[derive(Debug, thiserror::Error)]
pub enum IntakeError {
    #[error("{0}")]
    Invalid(String),
    /// A resume request found no unfinished run for its key.
    #[error("{0}")]
    NotFound(String),
    #[error(transparent)]
    Store(#[from] nightshift_store::Error),
}

/// The intake of one deployment: its store and the agents it runs. Clones share the agent
/// list, so [`Intake::set_agents`] (a config reload) reaches every one of them at once.
#[derive(Debug, Clone)]
pub struct Intake {
    store: Store,
    agents: Arc<RwLock<Arc<[String]>>>,
    batch_limit: Arc<std::sync::atomic::AtomicUsize>,
}

/// The most runs one batch enqueue may hold unless configured otherwise.
pub const DEFAULT_BATCH_LIMIT: usize = 1_000;

impl Intake {
    /// The intake for `store`, taking runs of `agents` (the configured agent names).
    pub fn new<S: Into<String>>(store: Store, agents: impl IntoIterator<Item = S>) -> Self {
        Self {
            store,
            agents: Arc::new(RwLock::new(agents.into_iter().map(Into::into).collect())),
            batch_limit: Arc::new(std::sync::atomic::AtomicUsize::new(DEFAULT_BATCH_LIMIT)),
        }
    }

    /// The store it enqueues into.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The configured agent names, as they are now.
    pub fn agents(&self) -> Arc<[String]> {
        self.agents
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// From now on this intake and all its clones take runs of `agents` (a reloaded config).
    /// Runs already enqueued are not touched.
    pub fn set_agents<S: Into<String>>(&self, agents: impl IntoIterator<Item = S>) {
        let agents: Arc<[String]> = agents.into_iter().map(Into::into).collect();
        *self.agents.write().unwrap_or_else(|e| e.into_inner()) = agents;
    }

    /// Checks `req` and enqueues it. A request whose idempotency key was used before returns
    /// the first run with `duplicate: true`.
    pub async fn submit(&self, req: RunRequest) -> Result<Enqueued, IntakeError> {
        let new = self.check_run(&req)?;
        Ok(self.store.enqueue(&new).await?)
    }

    /// [`Intake::submit`] as an operator's `action` on `target` (a manual schedule trigger),
    /// with its audit row written in the enqueue's transaction
    /// ([`AsOperator::enqueue`](nightshift_store::AsOperator::enqueue)).
    pub async fn submit_as(
        &self,
        req: RunRequest,
        by: &str,
        action: &str,
        target: &str,
    ) -> Result<Enqueued, IntakeError> {
        let new = self.check_run(&req)?;
        Ok(self
            .store
            .as_operator(by)
            .enqueue(&new, action, target)
            .await?)
    }

    /// Checks each request as [`Intake::submit`] does and enqueues the good ones in one
    /// transaction ([`Store::enqueue_many`]), answering per request in order: a refused
    /// request refuses only itself. A store error fails the whole call (and then nothing of
    /// it was enqueued).
    pub async fn submit_many(
        &self,
        reqs: Vec<Result<RunRequest, IntakeError>>,
    ) -> Result<Vec<Result<Enqueued, IntakeError>>, IntakeError> {
        let checked: Vec<Result<NewRun, IntakeError>> = reqs
            .into_iter()
            .map(|req| req.and_then(|req| self.check_run(&req)))
            .collect();
        let good: Vec<NewRun> = checked
            .iter()
            .filter_map(|c| c.as_ref().ok().cloned())
            .collect();
        let mut written = self.store.enqueue_many(&good).await?.into_iter();
        Ok(checked
            .into_iter()
            .map(|c| match c {
                Ok(_) => match written.next() {
                    Some(Ok(e)) => Ok(e),
                    Some(Err(e)) => Err(IntakeError::from(e)),
                    None => Err(IntakeError::Store(nightshift_store::Error::Corrupt(
                        "a batch enqueue lost an answer".into(),
                    ))),
                },
                Err(e) => Err(e),
            })
            .collect())
    }

    /// The most runs one batch may hold (`server.max_batch_runs`).
    pub fn batch_limit(&self) -> usize {
        self.batch_limit.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// From now on batches may hold up to `limit` runs (a loaded or reloaded config).
    pub fn set_batch_limit(&self, limit: usize) {
        self.batch_limit
            .store(limit, std::sync::atomic::Ordering::Relaxed);
    }

    /// Checks `req` as [`Intake::submit`] does and returns the run it would enqueue, for a
    /// caller that enqueues it with other writes (a webhook delivery's record).
    pub fn check_run(&self, req: &RunRequest) -> Result<NewRun, IntakeError> {
        check_agent(&self.agents(), &req.agent)?;
        check(req, self.store.now())
    }

    /// Continues the newest unfinished run whose concurrency key is `req.concurrency_key`.
    pub async fn resume(&self, req: ResumeRequest) -> Result<Enqueued, IntakeError> {
        let new = find_resume(&self.store, req).await?;
        Ok(self.store.enqueue_resume(&new).await?)
    }

    /// Checks `req` and finds the run it continues, as [`Intake::resume`] does, and returns
    /// the resume job it would enqueue.
    pub async fn check_resume(&self, req: ResumeRequest) -> Result<NewResume, IntakeError> {
        find_resume(&self.store, req).await
    }
}

/// Refuses an agent name that is not one of `agents`, naming the ones there are.
pub fn check_agent<S: AsRef<str>>(agents: &[S], agent: &str) -> Result<(), IntakeError> {
    if agents.iter().any(|a| a.as_ref() == agent) {
        return Ok(());
    }
    let configured = if agents.is_empty() {
        "configured: none".to_string()
    } else {
        let names: Vec<&str> = agents.iter().map(AsRef::as_ref).collect();
        format!("configured: {}", names.join(", "))
    };
    Err(IntakeError::Invalid(format!(
        "agent '{agent}' is not configured ({configured}); add an [[agents]] entry to \
         nightshift.toml or name one of those"
    )))
}

async fn find_resume(store: &Store, req: ResumeRequest) -> Result<NewResume, IntakeError> {
    if req.concurrency_key.is_empty() || req.concurrency_key.len() > 255 {
        return Err(IntakeError::Invalid(
            "the run key must be 1-255 bytes".into(),
        ));
    }
    check_prompt(&req.message)?;
    let Some(run) = store
        .active_run_by_concurrency_key(&req.concurrency_key)
        .await?
    else {
        return Err(IntakeError::NotFound(format!(
            "no unfinished run has the key '{}'; start one first",
            req.concurrency_key
        )));
    };
    if run.status == nightshift_store::RunStatus::AwaitingApproval {
        // Its pending call must be decided first: a message cannot land between a tool call
        // and its result.
        return Err(IntakeError::Invalid(format!(
            "run {} is awaiting approval of a tool call; decide it (nightshift approvals) and \
             send the message again",
            run.id
        )));
    }
    Ok(NewResume {
        run_id: run.id,
        payload: ResumeReason::Message { text: req.message }.to_payload(),
        dedupe_key: req.idempotency_key,
        job: JobOptions::default(),
    })
}

fn check_prompt(prompt: &str) -> Result<(), IntakeError> {
    if prompt.trim().is_empty() {
        return Err(IntakeError::Invalid(
            "the prompt is empty; say what the agent should do".into(),
        ));
    }
    if prompt.len() > MAX_PROMPT_BYTES {
        return Err(IntakeError::Invalid(format!(
            "the prompt is {} bytes; the limit is {MAX_PROMPT_BYTES} — put large inputs in a file \
             the agent can read",
            prompt.len()
        )));
    }
    Ok(())
}

/// A start request checked field by field, in the order a reader meets them (agent, prompt,
/// context, keys, then the job's options): the run to enqueue, or the first refusal.
fn check(req: &RunRequest, now: i64) -> Result<NewRun, IntakeError> {
    if !name_ok(&req.agent) {
        return Err(IntakeError::Invalid(format!(
            "agent name '{}' is not allowed; use 1-64 letters, digits, '-', '_' or '.'",
            req.agent
        )));
    }
    check_prompt(&req.prompt)?;
    let mut new = NewRun::new(&req.agent, &req.prompt);
    new.trigger = req.trigger;
    new.trace_parent = req
        .trace_parent
        .as_deref()
        .and_then(nightshift_telemetry::traces::TraceParent::normalise);
    if let Some(context) = &req.context {
        new.context = Some(check_context(context)?);
    }
    if let Some((key, policy)) = check_concurrency(req)? {
        new.concurrency_key = Some(key);
        new.concurrency_policy = policy;
    }
    if let Some(key) = &req.idempotency_key {
        if key.is_empty() || key.len() > 255 {
            return Err(IntakeError::Invalid(
                "the idempotency key must be 1-255 bytes".into(),
            ));
        }
        new.idempotency_key = Some(key.clone());
    }
    check_job(req, now, &mut new.job)?;
    Ok(new)
}

/// A name as agents and lanes are named: 1-64 letters, digits, `-`, `_` or `.`.
fn name_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

/// A run's context: a JSON object of at most [`MAX_CONTEXT_BYTES`], as the text stored.
fn check_context(context: &serde_json::Value) -> Result<String, IntakeError> {
    if !context.is_object() {
        return Err(IntakeError::Invalid(
            "a run's context must be a JSON object".into(),
        ));
    }
    let text = context.to_string();
    if text.len() > MAX_CONTEXT_BYTES {
        return Err(IntakeError::Invalid(format!(
            "a run's context is {} bytes; the limit is {MAX_CONTEXT_BYTES}",
            text.len()
        )));
    }
    Ok(text)
}

/// The concurrency key and policy, when a key is given: a policy needs its key, a key is
/// 1-255 bytes, and a debounce window is 1 ms to 24 hours. No policy is `queue`.
fn check_concurrency(req: &RunRequest) -> Result<Option<(String, ConcurrencyPolicy)>, IntakeError> {
    let (key, policy) = match (&req.concurrency_key, req.concurrency_policy) {
        (None, Some(_)) => {
            return Err(IntakeError::Invalid(
                "a concurrency_policy needs a concurrency_key (the runs it applies to)".into(),
            ));
        }
        (None, None) => return Ok(None),
        (Some(key), policy) => (key, policy),
    };
    if key.is_empty() || key.len() > 255 {
        return Err(IntakeError::Invalid(
            "the concurrency key must be 1-255 bytes".into(),
        ));
    }
    let policy = policy.unwrap_or(ConcurrencyPolicy::Queue);
    if let ConcurrencyPolicy::Debounce { window_ms } = policy
        && !(1..=86_400_000).contains(&window_ms)
    {
        return Err(IntakeError::Invalid(format!(
            "the debounce window is {window_ms} ms; use 1 ms to 24 hours"
        )));
    }
    Ok(Some((key.clone(), policy)))
}

/// The start job's options into `job`: the lane's name, the priority in [`PRIORITY_RANGE`],
/// a start at most [`MAX_DELAY`] ahead (a past time is now), and 1 to 100 attempts.
fn check_job(req: &RunRequest, now: i64, job: &mut JobOptions) -> Result<(), IntakeError> {
    let invalid = |m: String| Err(IntakeError::Invalid(m));
    if let Some(lane) = &req.lane {
        if !name_ok(lane) {
            return invalid(format!(
                "lane '{lane}' is not allowed; use 1-64 letters, digits, '-', '_' or '.'"
            ));
        }
        job.lane = lane.clone();
    }
    if let Some(p) = req.priority {
        if !PRIORITY_RANGE.contains(&p) {
            return invalid(format!(
                "priority {p} is out of range; use {} to {} (higher runs first)",
                PRIORITY_RANGE.start(),
                PRIORITY_RANGE.end()
            ));
        }
        job.priority = p;
    }
    let max_ms = i64::try_from(MAX_DELAY.as_millis()).unwrap_or(i64::MAX);
    let run_at = match req.start_at {
        StartAt::Now => None,
        StartAt::After(delay) => {
            Some(now.saturating_add(i64::try_from(delay.as_millis()).unwrap_or(i64::MAX)))
        }
        StartAt::At(at) => Some(at.max(now)),
    };
    if run_at.is_some_and(|at| at.saturating_sub(now) > max_ms) {
        return invalid("a run can be scheduled at most 366 days ahead".into());
    }
    job.run_at = run_at;
    if let Some(n) = req.max_attempts {
        if !(1..=100).contains(&n) {
            return invalid(format!("max_attempts {n} is out of range; use 1 to 100"));
        }
        job.max_attempts = n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_requests_say_what_to_change() {
        let ok = RunRequest::new("reviewer", "look at PR 7", Trigger::Cli);
        assert!(check(&ok, 0).is_ok());
        let cases = [
            (
                RunRequest {
                    agent: "no spaces".into(),
                    ..ok.clone()
                },
                "agent name",
            ),
            (
                RunRequest {
                    prompt: "  ".into(),
                    ..ok.clone()
                },
                "prompt is empty",
            ),
            (
                RunRequest {
                    priority: Some(5000),
                    ..ok.clone()
                },
                "priority 5000",
            ),
            (
                RunRequest {
                    lane: Some("a/b".into()),
                    ..ok.clone()
                },
                "lane 'a/b'",
            ),
            (
                RunRequest {
                    max_attempts: Some(0),
                    ..ok.clone()
                },
                "max_attempts 0",
            ),
            (
                RunRequest {
                    concurrency_policy: Some(ConcurrencyPolicy::Skip),
                    ..ok.clone()
                },
                "needs a concurrency_key",
            ),
        ];
        for (req, expect) in cases {
            let err = check(&req, 0).unwrap_err().to_string();
            assert!(err.contains(expect), "{err}");
        }
        let delayed = RunRequest {
            start_at: StartAt::After(Duration::from_secs(60)),
            ..ok.clone()
        };
        assert_eq!(check(&delayed, 1000).unwrap().job.run_at, Some(61_000));
        // A time is passed through as it is; one already past is now; too far is refused.
        let at = |ms| RunRequest {
            start_at: StartAt::At(ms),
            ..ok.clone()
        };
        assert_eq!(
            check(&at(1_234_567), 1000).unwrap().job.run_at,
            Some(1_234_567)
        );
        assert_eq!(check(&at(5), 1000).unwrap().job.run_at, Some(1000));
        let year_and_more = 1000 + 367 * 24 * 3600 * 1000;
        let err = check(&at(year_and_more), 1000).unwrap_err().to_string();
        assert!(err.contains("at most 366 days ahead"), "{err}");
        assert_eq!(check(&ok, 1000).unwrap().job.run_at, None);
    }

    #[test]
    fn an_unknown_agent_is_refused_naming_the_configured_ones() {
        let agents = ["reviewer".to_string(), "digest".to_string()];
        assert!(check_agent(&agents, "digest").is_ok());
        let err = check_agent(&agents, "nobody").unwrap_err().to_string();
        assert!(
            err.contains("agent 'nobody' is not configured (configured: reviewer, digest)"),
            "{err}"
        );
        let none = check_agent::<&str>(&[], "x").unwrap_err().to_string();
        assert!(none.contains("(configured: none)"), "{none}");
    }
}
