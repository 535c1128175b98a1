//! Queue conformance: the same behaviour on every backend — enqueue and dedupe, claims in
//! order, leases reclaimed and fenced, retries and dead letters, parking, cancel, release,
//! rescue, and the gauges.
//!
//! One module per part of a job's way: [`enqueue`], [`claims`], [`leases`], [`outcomes`] and
//! [`gauges`]; each case is re-exported here, where `exercise!` finds it.

pub mod claims;
pub mod enqueue;
pub mod gauges;
pub mod leases;
pub mod outcomes;

use std::time::Duration;

pub use claims::{
    claims_follow_run_at_priority_and_lane, claims_past_sleeping_jobs,
    eight_claimers_claim_each_job_once, next_due_sees_jobs_queued_every_way,
};
pub use enqueue::{
    both_enqueue_paths_write_the_same_rows, concurrent_enqueues_of_one_key_make_one_job,
    dedupe_returns_the_existing_ids, dropped_enqueues_leave_no_transaction,
    resume_dedupe_and_finished_runs,
};
pub use gauges::{backlog_gauges, gauges_mean_their_names};
pub use leases::{
    claims_rescue_once_a_second, expired_lease_is_reclaimed,
    expired_lease_on_last_attempt_dead_letters, rescue_expired_returns_expired_jobs,
};
pub use outcomes::{
    cancel_stops_queued_and_flags_running_jobs, park_arms_a_resume_job_for_later,
    release_returns_the_job_at_once, retry_backoff_grows_then_dead_letters,
};

const LEASE: Duration = Duration::from_secs(30);
