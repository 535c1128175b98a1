//! # nightshift-store
//!
//! The durable store and the fenced job queue everything in Nightshift stands on. One
//! [`Store`] over SQLite (one file, the embedded default) or PostgreSQL (many daemons on many
//! machines), with the same schema and the same semantics on both.
//!
//! What it guarantees:
//! - **Nothing accepted is lost.** An enqueue that returned is committed (SQLite in WAL mode
//!   with `synchronous=FULL` by default).
//! - **Dedupe is exact.** A second enqueue with a used dedupe key returns the existing run and
//!   job and enqueues nothing, also when both race.
//! - **A claimed job has one owner at a time.** Claiming issues a fresh lease token; every
//!   write of a worker (heartbeat, event, checkpoint, ack, retry, park, release) is one
//!   statement or transaction guarded by that token. A stale writer gets
//!   [`Error::LeaseLost`] and changes nothing.
//! - **Dead workers' jobs come back.** A job whose lease expired is claimable again (with a
//!   new token), or dead-lettered when that was its last attempt. An attempt that recorded
//!   progress before its worker died is not counted, so crashes alone never dead-letter a
//!   job that keeps making progress (`docs/states.md`, "How attempts are counted").
//! - **Any text round-trips.** Text holding NUL bytes (which PostgreSQL's `TEXT` cannot
//!   hold) is stored through a reversible escape on PostgreSQL and read back unchanged
//!   (`text.rs`); SQLite stores it as it is.
//! - **Time is injected.** Every timestamp comes from a [`Clock`] bound into SQL, so tests
//!   move time instead of sleeping.
//!
//! How it fails: every error is an [`Error`] whose message says what to do;
//! [`Error::is_transient`] tells whether retrying can help.

mod announce;
pub mod approvals;
pub mod audit;
mod backend;
pub mod backoff;
mod batch;
pub mod check_runs;
pub mod clock;
pub mod config;
mod error;
mod event_reads;
mod group;
pub mod inbox;
mod intake;
mod intake_together;
pub mod listing;
pub mod migrate;
pub mod model;
pub mod notifications;
mod postgres;
mod queue;
pub mod schedules;
mod sqlite;
pub mod states;
mod store;
pub mod tasks;
mod text;
pub mod wakeups;
mod warm;
mod webhooks;
mod writer;

pub use approvals::{Approval, ApprovalStatus, NewApproval};
pub use audit::{AuditEntry, NewAudit};
pub use backoff::Backoff;
pub use batch::{ClaimRequest, RESCUE_INTERVAL, Settled};
pub use check_runs::CheckRunClaim;
pub use clock::{Clock, ManualClock, Millis, SystemClock};
pub use config::{BackendKind, ConfigError, StoreConfig, Synchronous};
pub use error::{Error, LeaseLostReason, Result};
pub use inbox::QueuedMessage;
pub use intake::{DeliveryRecord, DeliveryTaken, DeliveryWork};
pub use listing::{
    BacklogGauges, JobGauges, LaneCount, LeaseRow, QueueOverview, RunFilter, RunPage, RunSummary,
};
pub use model::{
    CancelOutcome, Checkpoint, ConcurrencyPolicy, Enqueued, Event, Heartbeat, Job, JobCount,
    JobOptions, NewResume, NewRun, PolicyError, ResumeReason, RetryOutcome, Run, RunEnd,
    RunProgress, WorkerRow,
};
pub use notifications::{AttemptOutcome, DeliveryStatus, NewDelivery, Notification, OutboxEntry};
/// How PostgreSQL claims are planned (a session setting), for tests that read their plans.
#[doc(hidden)]
pub use postgres::CLAIM_PLANNER_SETTINGS as POSTGRES_CLAIM_PLANNER_SETTINGS;
/// How PostgreSQL's claiming transactions cache plans, for tests that read their plans.
#[doc(hidden)]
pub use postgres::CLAIMING_PLAN_CACHE_MODE as POSTGRES_CLAIMING_PLAN_CACHE_MODE;
/// How PostgreSQL plans the queue overview's reads (a session setting), for tests that read
/// their plans.
#[doc(hidden)]
pub use postgres::OVERVIEW_PLANNER_SETTINGS as POSTGRES_OVERVIEW_PLANNER_SETTINGS;
/// The settings of PostgreSQL's warm settle connection, for tests that read its plans.
#[doc(hidden)]
pub use postgres::WARM_SETTINGS as POSTGRES_WARM_SETTINGS;
pub use schedules::{
    LeaderFence, LeaderLease, Missed, Overlap, ScheduleAdvance, ScheduleDef, ScheduleRow,
    ScheduleSource,
};
pub use states::{JobKind, JobState, RunStatus, TaskStatus, Trigger, UnknownName};
pub use store::{LeasedJob, RunEndedHook, Store, WorkSignal};
pub use tasks::{NewTask, Task, TaskBeat, TaskEnd, TaskToWake};
pub use wakeups::PendingWakeup;
pub use webhooks::{WebhookDelivery, WebhookDeliveryStatus};
