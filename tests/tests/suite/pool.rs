//! The worker pool over both backends: outcomes, cancellation, lane reservations, drain,
//! ends written in batches (group commit) under concurrency, and a sleeping pool woken for an
//! earlier job armed elsewhere.
//!
//! The cases are in `handlers`, `claims` and `ends`; the pool's config is here.

mod claims;
mod ends;
mod handlers;

use nightshift_store::{RunStatus, Store};
use nightshift_tests::on_both_backends;
use nightshift_worker::PoolConfig;

use claims::{
    idle_pool_is_woken_by_enqueue, pool_wakes_for_earlier_job, reserved_lane_is_never_starved,
};
use ends::{
    lost_lease_in_a_pool_batch, lost_lease_stops_the_handler, two_pools_end_every_job_once,
};
use handlers::{
    cancel_reaches_running_handler, outcomes_are_written, shutdown_drains_then_releases,
};

on_both_backends! {
    handler_outcomes_are_written_and_retries_run_again => outcomes_are_written;
    cancel_reaches_a_running_handler_within_a_heartbeat => cancel_reaches_running_handler;
    reserved_lane_runs_while_a_batch_burst_fills_the_rest => reserved_lane_is_never_starved;
    shutdown_drains_then_releases_unfinished_jobs => shutdown_drains_then_releases;
    an_idle_pool_is_woken_by_an_enqueue_not_by_polling => idle_pool_is_woken_by_enqueue;
    a_lost_lease_stops_the_handler_and_drops_its_outcome => lost_lease_stops_the_handler;
    two_pools_end_every_job_once_in_batches => two_pools_end_every_job_once;
    a_batched_end_whose_lease_was_lost_is_dropped_the_job_runs_again_and_its_handler_hears_it =>
        lost_lease_in_a_pool_batch;
    a_sleeping_pool_wakes_for_an_earlier_job_armed_elsewhere => pool_wakes_for_earlier_job;
}

fn config() -> PoolConfig {
    PoolConfig {
        slots: 2,
        lease_ms: 2_000,
        heartbeat_ms: 200,
        poll_interval_ms: 100,
        shutdown_grace_ms: 5_000,
        retry_base_ms: 10,
        retry_cap_ms: 20,
        ..PoolConfig::default()
    }
}

async fn status(store: &Store, run_id: &str) -> RunStatus {
    store.run(run_id).await.unwrap().unwrap().status
}
