//! Checking and enqueueing requests to start a run.

use std::time::Duration;

use nightshift_store::{
    ConcurrencyPolicy, Enqueued, JobOptions, NewResume, NewRun, ResumeReason, Store, Trigger,
};

/// The most a prompt may hold, in bytes.
pub const MAX_PROMPT_BYTES: usize = 1 << 20;
/// Priorities outside this range are refused.
pub const PRIORITY_RANGE: std::ops::RangeInclusive<i64> = -1000..=1000;
/// The furthest ahead a run may be scheduled.
pub const MAX_DELAY: Duration = Duration::from_secs(366 * 24 * 3600);

/// A request to start a run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRequest {
    pub agent: String,
    pub prompt: String,
    pub trigger: Trigger,
    pub idempotency_key: Option<String>,
    pub lane: Option<String>,
    pub priority: Option<i64>,
    /// Start no earlier than this long from now.
    pub delay: Option<Duration>,
    pub max_attempts: Option<i64>,
    /// Runs with the same key run one at a time (see [`ConcurrencyPolicy`]).
    pub concurrency_key: Option<String>,
    pub concurrency_policy: ConcurrencyPolicy,
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
            delay: None,
            max_attempts: None,
            concurrency_key: None,
            concurrency_policy: ConcurrencyPolicy::Queue,
        }
    }
}

/// A request to continue an unfinished run with a new message: the newest unfinished run
/// whose concurrency key is `run_key` gets a `resume` job, and the model reads `message` at
/// the bottom of the same conversation.
#[derive(Debug, Clone, PartialEq)]
pub struct ResumeRequest {
    pub run_key: String,
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

/// Checks `req` and enqueues it. A request whose idempotency key was used before returns the
/// first run with `duplicate: true`.
pub async fn submit(store: &Store, req: RunRequest) -> Result<Enqueued, IntakeError> {
    let new = check(&req, store.now())?;
    Ok(store.enqueue(&new).await?)
}

/// Continues the newest unfinished run whose concurrency key is `req.run_key`.
pub async fn resume(store: &Store, req: ResumeRequest) -> Result<Enqueued, IntakeError> {
    if req.run_key.is_empty() || req.run_key.len() > 255 {
        return Err(IntakeError::Invalid(
            "the run key must be 1-255 bytes".into(),
        ));
    }
    check_prompt(&req.message)?;
    let Some(run) = store.active_run_by_concurrency_key(&req.run_key).await? else {
        return Err(IntakeError::NotFound(format!(
            "no unfinished run has the key '{}'; start one first",
            req.run_key
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
    let new = NewResume {
        run_id: run.id,
        payload: ResumeReason::Message { text: req.message }.to_payload(),
        dedupe_key: req.idempotency_key,
        job: JobOptions::default(),
    };
    Ok(store.enqueue_resume(&new).await?)
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

fn check(req: &RunRequest, now: i64) -> Result<NewRun, IntakeError> {
    let invalid = |m: String| Err(IntakeError::Invalid(m));
    let name_ok = |s: &str| {
        !s.is_empty()
            && s.len() <= 64
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    };
    if !name_ok(&req.agent) {
        return invalid(format!(
            "agent name '{}' is not allowed; use 1-64 letters, digits, '-', '_' or '.'",
            req.agent
        ));
    }
    check_prompt(&req.prompt)?;
    let mut new = NewRun::new(&req.agent, &req.prompt);
    new.trigger = req.trigger;
    if let Some(key) = &req.concurrency_key {
        if key.is_empty() || key.len() > 255 {
            return invalid("the concurrency key must be 1-255 bytes".into());
        }
        if let ConcurrencyPolicy::Debounce { window_ms } = req.concurrency_policy
            && !(1..=86_400_000).contains(&window_ms)
        {
            return invalid(format!(
                "the debounce window is {window_ms} ms; use 1 ms to 24 hours"
            ));
        }
        new.concurrency_key = Some(key.clone());
        new.concurrency_policy = req.concurrency_policy;
    }
    if let Some(key) = &req.idempotency_key {
        if key.is_empty() || key.len() > 255 {
            return invalid("the idempotency key must be 1-255 bytes".into());
        }
        new.dedupe_key = Some(key.clone());
    }
    if let Some(lane) = &req.lane {
        if !name_ok(lane) {
            return invalid(format!(
                "lane '{lane}' is not allowed; use 1-64 letters, digits, '-', '_' or '.'"
            ));
        }
        new.job.lane = lane.clone();
    }
    if let Some(p) = req.priority {
        if !PRIORITY_RANGE.contains(&p) {
            return invalid(format!(
                "priority {p} is out of range; use {} to {} (higher runs first)",
                PRIORITY_RANGE.start(),
                PRIORITY_RANGE.end()
            ));
        }
        new.job.priority = p;
    }
    if let Some(delay) = req.delay {
        if delay > MAX_DELAY {
            return invalid("a run can be scheduled at most 366 days ahead".into());
        }
        let ms = i64::try_from(delay.as_millis()).unwrap_or(i64::MAX);
        new.job.run_at = Some(now.saturating_add(ms));
    }
    if let Some(n) = req.max_attempts {
        if !(1..=100).contains(&n) {
            return invalid(format!("max_attempts {n} is out of range; use 1 to 100"));
        }
        new.job.max_attempts = n;
    }
    Ok(new)
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
        ];
        for (req, expect) in cases {
            let err = check(&req, 0).unwrap_err().to_string();
            assert!(err.contains(expect), "{err}");
        }
        let delayed = RunRequest {
            delay: Some(Duration::from_secs(60)),
            ..ok
        };
        assert_eq!(check(&delayed, 1000).unwrap().job.run_at, Some(61_000));
    }
}
