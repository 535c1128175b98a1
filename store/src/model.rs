//! The rows the store hands out and the inputs it takes. Rows are snapshots: they are true as
//! of the statement that read them, and only a lease handle may change a job.

use crate::clock::Millis;
use crate::states::{JobKind, JobState, RunStatus, Trigger};

/// The lane a job runs in when none is given.
pub const DEFAULT_LANE: &str = "default";
/// How many times a job runs before it is dead-lettered, when not given.
pub const DEFAULT_MAX_ATTEMPTS: i64 = 5;

/// A run, as stored.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow, serde::Serialize)]
pub struct Run {
    pub id: String,
    pub agent: String,
    #[sqlx(try_from = "String")]
    pub status: RunStatus,
    #[sqlx(try_from = "String")]
    pub trigger_kind: Trigger,
    #[sqlx(try_from = "crate::text::DbText")]
    pub input: String,
    #[sqlx(try_from = "crate::text::DbOptText")]
    pub idempotency_key: Option<String>,
    #[sqlx(try_from = "crate::text::DbOptText")]
    pub concurrency_key: Option<String>,
    pub agent_hash: Option<String>,
    /// Whether the run's end is written to the outbox, to be delivered to its agent's notify
    /// URLs (set at enqueue; see [`Store::set_notifying_agents`](crate::Store::set_notifying_agents)).
    pub notify: bool,
    pub turns: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cache_read_tokens: i64,
    pub cache_write_tokens: i64,
    pub cost_usd: f64,
    #[sqlx(try_from = "crate::text::DbOptText")]
    pub result: Option<String>,
    #[sqlx(try_from = "crate::text::DbOptText")]
    pub error: Option<String>,
    pub cancel_requested_at: Option<Millis>,
    pub created_at: Millis,
    pub updated_at: Millis,
    pub started_at: Option<Millis>,
    pub finished_at: Option<Millis>,
    /// The W3C `traceparent` the run was started with (a webhook delivery's or an API
    /// request's), normalised: its trace continues that one. `None`: a trace of its own.
    pub trace_parent: Option<String>,
    /// What is known about what started the run, as a JSON object written at enqueue from
    /// trusted data (a GitHub delivery's repository, number, head SHA and installation).
    pub context: Option<String>,
    /// When retention purged the run's history (migration 0023): only this row is left, as
    /// its summary. `None` while the run has its history.
    #[sqlx(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub purged_at: Option<Millis>,
    /// The run this one was forked from (migration 0024): its log starts with the parent's
    /// events up to [`Run::fork_seq`]. `None` for a run that is not a fork.
    #[sqlx(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<String>,
    /// The last of the parent's events a fork shares; its own start after it.
    #[sqlx(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fork_seq: Option<i64>,
}

/// A job, as stored.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow, serde::Serialize)]
pub struct Job {
    pub id: i64,
    pub run_id: String,
    #[sqlx(try_from = "String")]
    pub kind: JobKind,
    pub lane: String,
    pub priority: i64,
    #[sqlx(try_from = "crate::text::DbText")]
    pub payload: String,
    pub run_at: Millis,
    pub attempts: i64,
    pub max_attempts: i64,
    #[sqlx(try_from = "crate::text::DbOptText")]
    pub dedupe_key: Option<String>,
    #[sqlx(try_from = "String")]
    pub status: JobState,
    pub lease_owner: Option<String>,
    pub lease_token: i64,
    pub lease_expires_at: Option<Millis>,
    pub cancel_requested_at: Option<Millis>,
    #[sqlx(try_from = "crate::text::DbOptText")]
    pub last_error: Option<String>,
    pub created_at: Millis,
    pub updated_at: Millis,
    pub finished_at: Option<Millis>,
    /// The run's concurrency key: at most one job per key runs at a time.
    #[sqlx(try_from = "crate::text::DbOptText")]
    pub concurrency_key: Option<String>,
}

/// One event of a run's write-ahead log.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow, serde::Serialize)]
pub struct Event {
    pub run_id: String,
    pub seq: i64,
    pub job_id: i64,
    pub lease_token: i64,
    #[sqlx(rename = "type")]
    #[sqlx(try_from = "crate::text::DbText")]
    pub event_type: String,
    #[sqlx(try_from = "crate::text::DbText")]
    pub payload: String,
    pub created_at: Millis,
}

/// A stored checkpoint: a snapshot of the run's state covering events up to `through_seq`.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    pub run_id: String,
    pub through_seq: i64,
    pub format_version: i64,
    /// The document as the writer gave it (stored as a skeleton whose long strings are the
    /// run's blobs, see `content/`).
    pub document: String,
    /// Bytes the checkpoint's own row takes (its skeleton, gzipped).
    pub size_bytes: i64,
    pub job_id: i64,
    pub lease_token: i64,
    pub created_at: Millis,
}

/// A registered worker process.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow, serde::Serialize)]
pub struct WorkerRow {
    pub id: String,
    pub host: String,
    pub pid: i64,
    pub started_at: Millis,
    pub last_heartbeat_at: Millis,
}

/// How many jobs are in one state (`Store::job_counts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct JobCount {
    pub state: JobState,
    pub count: i64,
}

/// Where and when a job should run.
#[derive(Debug, Clone, PartialEq)]
pub struct JobOptions {
    /// The lane; worker slots can be reserved per lane.
    pub lane: String,
    /// Higher runs first among due jobs.
    pub priority: i64,
    /// Not before this time; `None` means now.
    pub run_at: Option<Millis>,
    /// Dead-letter after this many attempts.
    pub max_attempts: i64,
}

impl Default for JobOptions {
    fn default() -> Self {
        Self {
            lane: DEFAULT_LANE.to_string(),
            priority: 0,
            run_at: None,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
        }
    }
}

/// A request to start a new run.
#[derive(Debug, Clone, PartialEq)]
pub struct NewRun {
    pub agent: String,
    pub trigger: Trigger,
    /// The run's input (the prompt, or a JSON document); also the start job's payload.
    pub input: String,
    /// A second enqueue with the same key returns the first run and enqueues nothing (the
    /// runs' `idempotency_key` column, the API's `idempotency_key`).
    pub idempotency_key: Option<String>,
    /// Runs with the same key run one at a time; what happens to a new run while the key is
    /// held depends on `concurrency_policy`.
    pub concurrency_key: Option<String>,
    pub concurrency_policy: ConcurrencyPolicy,
    pub job: JobOptions,
    /// The W3C `traceparent` the request that starts the run carried, if valid (normalised
    /// with `nightshift_telemetry::traces::TraceParent::normalise`).
    pub trace_parent: Option<String>,
    /// What is known about what started the run (a JSON object; see [`Run::context`]).
    pub context: Option<String>,
}

/// What a new run does when an earlier run with its concurrency key is still active (queued,
/// running, waiting or awaiting approval). Whatever the policy, at most one job per key runs at
/// a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case", tag = "policy")]
pub enum ConcurrencyPolicy {
    /// Wait: the new run starts when the key's running job lets go.
    #[default]
    Queue,
    /// Drop the new run while an active run holds the key; the enqueue returns the active run
    /// with `skipped: true`.
    Skip,
    /// End every active run of the key as `superseded` (a running one is stopped at its next
    /// heartbeat, and its side-effect tools are refused from now on); the new run goes ahead.
    Supersede,
    /// Wait `window_ms` for further runs with the key: a newer one supersedes a run that has
    /// not started yet, so only the latest runs.
    Debounce { window_ms: i64 },
}

/// A concurrency policy [`ConcurrencyPolicy::from_name`] refuses; its `Display` says what was
/// wrong and what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("the debounce policy needs debounce_seconds, 1 to 86400")]
    DebounceSeconds,
    #[error("debounce_seconds only applies to the debounce policy, not '{name}'")]
    NotDebounce { name: String },
    #[error("unknown concurrency policy '{name}'; use queue, skip, supersede or debounce")]
    Unknown { name: String },
}

impl ConcurrencyPolicy {
    /// The policy named `name` (`queue`, `skip`, `supersede`, `debounce`); `debounce` needs
    /// `debounce_seconds`, which the others refuse.
    pub fn from_name(name: &str, debounce_seconds: Option<u64>) -> Result<Self, PolicyError> {
        let policy = match (name, debounce_seconds) {
            ("queue", None) => ConcurrencyPolicy::Queue,
            ("skip", None) => ConcurrencyPolicy::Skip,
            ("supersede", None) => ConcurrencyPolicy::Supersede,
            ("debounce", Some(s)) if (1..=86_400).contains(&s) => ConcurrencyPolicy::Debounce {
                window_ms: i64::try_from(s * 1000).unwrap_or(i64::MAX),
            },
            ("debounce", _) => return Err(PolicyError::DebounceSeconds),
            ("queue" | "skip" | "supersede", Some(_)) => {
                return Err(PolicyError::NotDebounce {
                    name: name.to_string(),
                });
            }
            _ => {
                return Err(PolicyError::Unknown {
                    name: name.to_string(),
                });
            }
        };
        Ok(policy)
    }

    /// The policy's name, as config spells it.
    pub fn name(&self) -> &'static str {
        match self {
            ConcurrencyPolicy::Queue => "queue",
            ConcurrencyPolicy::Skip => "skip",
            ConcurrencyPolicy::Supersede => "supersede",
            ConcurrencyPolicy::Debounce { .. } => "debounce",
        }
    }
}

impl NewRun {
    /// A run of `agent` with `input`, triggered from the API, with default job options.
    pub fn new(agent: impl Into<String>, input: impl Into<String>) -> Self {
        Self {
            agent: agent.into(),
            trigger: Trigger::Api,
            input: input.into(),
            idempotency_key: None,
            concurrency_key: None,
            concurrency_policy: ConcurrencyPolicy::Queue,
            job: JobOptions::default(),
            trace_parent: None,
            context: None,
        }
    }

    /// Sets the trace the run continues (a valid, normalised `traceparent`).
    pub fn trace_parent(mut self, traceparent: impl Into<String>) -> Self {
        self.trace_parent = Some(traceparent.into());
        self
    }

    /// Sets the idempotency key.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// Sets the concurrency key and what to do while it is held.
    pub fn concurrency(mut self, key: impl Into<String>, policy: ConcurrencyPolicy) -> Self {
        self.concurrency_key = Some(key.into());
        self.concurrency_policy = policy;
        self
    }

    /// Sets the lane.
    pub fn lane(mut self, lane: impl Into<String>) -> Self {
        self.job.lane = lane.into();
        self
    }

    /// Sets the priority (higher runs first).
    pub fn priority(mut self, priority: i64) -> Self {
        self.job.priority = priority;
        self
    }

    /// Sets the earliest time the job may run.
    pub fn run_at(mut self, at: Millis) -> Self {
        self.job.run_at = Some(at);
        self
    }

    /// Sets the attempt limit.
    pub fn max_attempts(mut self, n: i64) -> Self {
        self.job.max_attempts = n;
        self
    }
}

/// A request to resume an existing run with a new job.
#[derive(Debug, Clone, PartialEq)]
pub struct NewResume {
    pub run_id: String,
    /// Why the run resumes (a JSON document the runtime reads).
    pub payload: String,
    pub dedupe_key: Option<String>,
    pub job: JobOptions,
}

/// The answer to an enqueue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enqueued {
    pub run_id: String,
    pub job_id: i64,
    /// True when the idempotency key was already taken: the ids are the existing ones and nothing
    /// was enqueued.
    pub duplicate: bool,
    /// True when the `skip` policy dropped the new run: `run_id` is the active run that holds
    /// the concurrency key, `job_id` its newest job, and nothing was enqueued.
    pub skipped: bool,
    /// The runs this enqueue ended as `superseded` (policies `supersede` and `debounce`).
    pub superseded: Vec<String>,
    /// Of `superseded`, those no job of which was running: their end is this enqueue's alone
    /// (a running one's job still stops, and the end is told of where that job stops).
    pub superseded_idle: Vec<String>,
    /// The runs a cancelling delivery cancelled (`DeliveryWork::Cancel`; `run_id` is then
    /// empty): each is `cancelled` now, or its running job stops at its next heartbeat.
    pub cancelled: Vec<String>,
    /// Of `cancelled`, those no job of which was running (ended by this delivery alone).
    pub cancelled_idle: Vec<String>,
}

/// Why a run resumes: the payload of a `resume` job, read by the agent runtime, which tells
/// the model about it at the bottom of the conversation.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResumeReason {
    /// A new message for the run (a webhook `resume` route, the API).
    Message { text: String },
    /// A decision on call `call_id` was made, or its approval timed out.
    Approval { call_id: String },
    /// A wakeup the agent set for itself is due.
    Wakeup {
        /// What the agent said it was waiting for.
        reason: String,
        /// When it went to sleep and when it asked to wake.
        slept_at: Millis,
        due_at: Millis,
    },
    /// A background task of the run ended while the run slept.
    Task { task_id: String },
}

impl ResumeReason {
    /// The JSON a resume job carries.
    pub fn to_payload(&self) -> String {
        serde_json::to_string(self).expect("a resume reason serialises")
    }

    /// Reads a resume job's payload; `None` for payloads that carry no reason.
    pub fn from_payload(payload: &str) -> Option<ResumeReason> {
        // Through a `Value`: read straight from text, a tagged enum refuses its own numbers
        // (`serde_json` is built with `arbitrary_precision`; see `nightshift_llm::json`).
        serde_json::from_str(payload)
            .and_then(serde_json::from_value)
            .ok()
    }
}

/// How a run ends when its job is acknowledged.
#[derive(Debug, Clone, PartialEq)]
pub enum RunEnd {
    /// The run produced its result.
    Succeeded { result: Option<String> },
    /// The run failed for good; no retry.
    Failed { error: String },
    /// The run stopped because cancellation was requested.
    Cancelled,
    /// The run stopped on one of its budgets.
    BudgetExhausted { detail: String },
    /// The run reached its round cap; its work is kept.
    MaxRounds { detail: String },
    /// A newer run took the run's concurrency key (policy `supersede`) and the job stopped
    /// for it; the store already recorded the run `superseded`, with the newer run's id.
    Superseded,
}

impl RunEnd {
    /// The run status this end records.
    pub fn run_status(&self) -> RunStatus {
        match self {
            RunEnd::Succeeded { .. } => RunStatus::Succeeded,
            RunEnd::Failed { .. } => RunStatus::Failed,
            RunEnd::Cancelled => RunStatus::Cancelled,
            RunEnd::BudgetExhausted { .. } => RunStatus::BudgetExhausted,
            RunEnd::MaxRounds { .. } => RunStatus::MaxRounds,
            RunEnd::Superseded => RunStatus::Superseded,
        }
    }

    /// The job state this end records.
    pub fn job_state(&self) -> JobState {
        match self {
            RunEnd::Succeeded { .. }
            | RunEnd::BudgetExhausted { .. }
            | RunEnd::MaxRounds { .. } => JobState::Succeeded,
            RunEnd::Failed { .. } => JobState::Dead,
            RunEnd::Cancelled | RunEnd::Superseded => JobState::Cancelled,
        }
    }

    pub(crate) fn result(&self) -> Option<&str> {
        match self {
            RunEnd::Succeeded { result } => result.as_deref(),
            _ => None,
        }
    }

    /// The job's `last_error` this end records: the error of a failed run, nothing else
    /// (other ends keep the job's last error as it was).
    pub(crate) fn job_error(&self) -> Option<&str> {
        match self {
            RunEnd::Failed { error } => Some(error),
            _ => None,
        }
    }

    pub(crate) fn error(&self) -> Option<&str> {
        match self {
            RunEnd::Failed { error } => Some(error),
            RunEnd::BudgetExhausted { detail } | RunEnd::MaxRounds { detail } => Some(detail),
            RunEnd::Cancelled => Some("cancelled on request"),
            // The supersession wrote the run's error (the newer run's id): kept.
            RunEnd::Succeeded { .. } | RunEnd::Superseded => None,
        }
    }
}

/// A run's usage totals, as the runtime projects them from the run's events.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunProgress {
    pub turns: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cache_read_tokens: i64,
    pub cache_write_tokens: i64,
    pub cost_usd: f64,
    /// Recorded once: the hash of the agent definition the run started with.
    pub agent_hash: Option<String>,
}

/// What a heartbeat found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heartbeat {
    /// The lease now runs until this time.
    Extended { expires_at: Millis },
    /// Cancellation was requested: the lease was not extended; finish up and acknowledge
    /// with [`RunEnd::Cancelled`].
    CancelRequested,
    /// A newer run superseded the run: the lease was not extended; finish up and acknowledge
    /// with [`RunEnd::Superseded`].
    Superseded,
}

/// Why a lease holder is asked to stop (its write was refused, the lease still held).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopRequest {
    /// Someone cancelled the run.
    Cancel,
    /// A newer run took the run's concurrency key.
    Supersede,
}

/// What a retry did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryOutcome {
    /// The job runs again at this time.
    Scheduled { run_at: Millis },
    /// It was the last attempt: the job is dead-lettered and the run failed.
    DeadLettered,
}

/// What a cancel request did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelOutcome {
    /// Nothing was running: the run is cancelled now.
    Cancelled,
    /// A worker holds the run's job; it sees the request at its next heartbeat.
    Requested,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_resume_reason_reads_back_from_its_payload() {
        let reasons = [
            ResumeReason::Message { text: "hi".into() },
            ResumeReason::Approval {
                call_id: "c".into(),
            },
            ResumeReason::Wakeup {
                reason: "ci".into(),
                slept_at: 1_700_000_000_000,
                due_at: 1_700_000_360_000,
            },
            ResumeReason::Task {
                task_id: "t".into(),
            },
        ];
        for reason in reasons {
            assert_eq!(
                ResumeReason::from_payload(&reason.to_payload()),
                Some(reason)
            );
        }
        assert_eq!(ResumeReason::from_payload("{}"), None);
    }

    #[test]
    fn policy_names_parse_and_refusals_say_what_is_allowed() {
        assert_eq!(
            ConcurrencyPolicy::from_name("debounce", Some(2)),
            Ok(ConcurrencyPolicy::Debounce { window_ms: 2000 })
        );
        assert_eq!(
            ConcurrencyPolicy::from_name("skip", None),
            Ok(ConcurrencyPolicy::Skip)
        );
        assert_eq!(
            ConcurrencyPolicy::from_name("debounce", Some(0)),
            Err(PolicyError::DebounceSeconds)
        );
        let not_debounce = ConcurrencyPolicy::from_name("queue", Some(5)).unwrap_err();
        assert_eq!(
            not_debounce.to_string(),
            "debounce_seconds only applies to the debounce policy, not 'queue'"
        );
        let unknown = ConcurrencyPolicy::from_name("later", None).unwrap_err();
        assert_eq!(
            unknown,
            PolicyError::Unknown {
                name: "later".into()
            }
        );
        assert!(
            unknown
                .to_string()
                .contains("use queue, skip, supersede or debounce")
        );
    }
}
