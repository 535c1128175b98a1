//! The typed rows the commands print, the same whichever side of the [`super::Operator`]
//! seam they come from: the local store's rows are read into them through the JSON the API
//! sends (see `row` there), the remote API's answers decoded into them directly, so a field
//! the two disagree on is an error, not a silent difference.

use std::time::Duration;

use nightshift_store::{DeliveryStatus, JobState, RunStatus, TaskStatus, Trigger};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What `nightshift run` asks for.
#[derive(Debug, Clone)]
pub struct NewRunArgs {
    pub agent: String,
    pub prompt: String,
    pub idempotency_key: Option<String>,
    pub lane: Option<String>,
    pub priority: Option<i64>,
    pub delay_seconds: Option<u64>,
    pub max_attempts: Option<i64>,
}

/// An enqueued run.
#[derive(Debug, Clone, Deserialize)]
pub struct Submitted {
    pub run_id: String,
    pub job_id: i64,
    pub duplicate: bool,
}

/// A row of `runs list`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunRow {
    pub id: String,
    pub agent: String,
    pub status: RunStatus,
    pub trigger_kind: Trigger,
    pub concurrency_key: Option<String>,
    pub idempotency_key: Option<String>,
    pub prompt_head: String,
    pub turns: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cost_usd: f64,
    pub error_head: Option<String>,
    pub created_at: i64,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
}

/// What following a run needs of it.
#[derive(Debug, Clone, Deserialize)]
pub struct RunState {
    pub id: String,
    pub status: RunStatus,
    pub turns: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cost_usd: f64,
    pub error: Option<String>,
}

/// One event of a run, its payload as JSON (as `GET /v1/runs/{id}/events` gives it).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EventRow {
    pub seq: i64,
    #[serde(rename = "type")]
    pub event_type: String,
    pub created_at: i64,
    pub payload: Value,
}

/// A sleeping run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WakeupRow {
    pub run_id: String,
    pub agent: String,
    pub due_at: i64,
    pub reason: Option<String>,
}

/// A tool call waiting for a decision.
#[derive(Debug, Clone, Deserialize)]
pub struct ApprovalRow {
    pub run_id: String,
    pub call_id: String,
    pub tool: String,
    pub input: String,
    pub requested_at: i64,
    pub expires_at: i64,
}

/// An operator action from the audit trail.
#[derive(Debug, Clone, Deserialize)]
pub struct AuditRow {
    pub at: i64,
    pub actor: String,
    pub action: String,
    pub run_id: Option<String>,
    pub target: String,
    pub detail: Option<String>,
}

/// The queue at a glance, with the clock of whoever read it.
#[derive(Debug, Clone, Deserialize)]
pub struct QueueView {
    pub now: i64,
    pub by_state_lane: Vec<LaneCount>,
    pub oldest_queued_at: Option<i64>,
    pub workers: Vec<WorkerView>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct LaneCount {
    pub lane: String,
    pub state: JobState,
    pub count: i64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct WorkerView {
    pub id: String,
    pub host: String,
    pub pid: i64,
    pub started_at: i64,
    pub last_heartbeat_at: i64,
}

/// A worker whose heartbeat is older than this is not counted as consuming the queue.
pub const LIVE_WORKER: Duration = Duration::from_secs(60);

impl QueueView {
    /// Whether some worker has beaten its heart lately (see [`LIVE_WORKER`]).
    pub fn has_live_worker(&self) -> bool {
        let fresh = i64::try_from(LIVE_WORKER.as_millis()).unwrap_or(i64::MAX);
        self.workers
            .iter()
            .any(|w| self.now - w.last_heartbeat_at < fresh)
    }
}

/// A run notice delivery (its URL without path and query).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NotificationRow {
    pub delivery_id: String,
    pub run_id: String,
    pub url: String,
    pub status: DeliveryStatus,
    pub attempts: i64,
    pub max_attempts: i64,
    pub last_error: Option<String>,
}

/// A background task.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskRow {
    pub id: String,
    pub run_id: String,
    pub status: TaskStatus,
    pub detail: Option<String>,
    pub command: String,
}

/// A schedule as listed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScheduleRow {
    pub name: String,
    pub source: String,
    pub cron: String,
    pub timezone: String,
    pub enabled: bool,
    pub next_fire_local: Option<String>,
    pub next_fire_utc: Option<String>,
    pub last_fire_local: Option<String>,
    pub last_run_id: Option<String>,
    pub last_run_status: Option<RunStatus>,
    pub fired_count: i64,
    pub skipped_count: i64,
    pub missed_count: i64,
}

/// What firing a schedule by hand did.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Fired {
    Enqueued { run_id: String, duplicate: bool },
    Skipped { active_run: String },
}
