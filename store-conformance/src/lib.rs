//! The store's conformance suite, as a library: what every backend of `nightshift-store` must
//! do the same, and the harness that gives each test a database of its own.
//!
//! It depends on the store and plain crates only (no runner, scheduler, agent or worker), so
//! the cases compile against the store alone, and each backend runs the same ones:
//!
//! - [`TestDb`] is one test's database: a temp SQLite file, or a fresh schema on the
//!   PostgreSQL server of `NIGHTSHIFT_TEST_PG_URL` (else a throwaway cluster made with the
//!   machine's `initdb`/`pg_ctl`, see [`pg`]; else the PostgreSQL tests print a loud
//!   `SKIPPED` line and pass). [`on_both_backends!`] runs a test body of one's own on both.
//! - One module per concern holds the cases, each a `pub async fn(&TestDb)`: [`queue`]
//!   (enqueue, dedupe, claims, leases, retries, parking, cancel, rescue, gauges), [`attempts`]
//!   (how attempts are counted: expiries after progress, deferrals), [`batch`] (group commit:
//!   ends and claims in one settle, each end fenced), [`batch_enqueue`] (batch and concurrent
//!   enqueues, a webhook delivery claimed, enqueued and recorded in one commit),
//!   [`concurrency`] (concurrency keys and their policies), [`run_ends`] (runs ended while no
//!   job runs are told of once), [`outbox`] (the notification outbox and its deliveries),
//!   [`check_runs`] (who makes a run's check run), [`content`] (a run's content stored once:
//!   read back exactly, linear in what it holds, old rows, damage, failed checkpoint writes),
//!   [`audit`] (operator actions and their audit rows commit together), [`tasks`]
//!   (background commands' rows), [`retention`] (purges take exactly what their rules name,
//!   never a live run),
//!   [`nul_text`] (text with NUL bytes round-trips), [`runs_list`] (listing runs, the queue
//!   overview), [`write_paths`] (the same writes down each path of the store's write seam,
//!   forced, answer alike) and [`setup`] (migrations: concurrent starters, a newer schema).
//! - [`exercise!`] runs every case against one backend, each as a `#[tokio::test]` of its
//!   own named `<module>::<concern>::<case>` (`sqlite::queue::dedupe_returns_the_existing_ids`),
//!   so a failure names the backend and the case. Its table is the catalogue of cases.
//!
//! This crate's own tests call it: `tests/sqlite.rs` with `exercise!(sqlite = Sqlite)` and
//! `tests/postgres/main.rs` with `exercise!(postgres = Postgres)`; beside the call each has its
//! backend's own tests, which no other backend could share (PostgreSQL's query plans in
//! `tests/postgres/plans.rs`, its kept settle connection closed by the server, two schemas in
//! one database; an in-memory SQLite database; the errors of a bad URL, an unreachable
//! server, a missing directory).
//!
//! # A third backend
//!
//! Once the store has it (`Backend`, the statements traits and `QueuePaths` implemented, its
//! SQL and migrations; see `docs/architecture.md`), its conformance is:
//!
//! 1. a variant of [`Backend`] here, with its arm in [`TestDb::new`] (a fresh, empty database
//!    per test, and `None` after a `SKIPPED` line when its server is not there) and in
//!    [`TestDb::cleanup`]; the compiler then names the one case that writes raw SQL per
//!    backend (`setup::newer_schema_is_refused`), which needs its arm too;
//! 2. a test file that calls the catalogue for it — here `tests/mysql.rs`, or in a crate of
//!    its own that depends on this one and on `tokio` (the cases are `#[tokio::test]`s):
//!
//! ```text
//! //! The store's conformance cases on MySQL.
//! nightshift_store_conformance::exercise!(mysql = Mysql);
//! ```
//!
//! `cargo test -p nightshift-store-conformance --test mysql` then runs every case on it, one
//! test each (`mysql::queue::…`, `mysql::batch::…`); `-- mysql::queue::` runs one concern.
//!
//! A case added to a concern module is run by every backend once it has its line in
//! [`exercise!`]'s table.

pub mod pg;

mod db;

pub mod attempts;
pub mod audit;
pub mod batch;
pub mod batch_enqueue;
pub mod check_runs;
pub mod concurrency;
pub mod content;
pub mod forks;
pub mod nul_text;
pub mod outbox;
pub mod queue;
pub mod retention;
pub mod run_ends;
pub mod runs_list;
pub mod setup;
pub mod tasks;
pub mod write_paths;

pub use db::{Arg, Backend, TestDb};

/// Runs every conformance case against the backend `Backend::$backend`, as one
/// `#[tokio::test]` per case in a module `$module` (`exercise!(sqlite = Sqlite)` makes
/// `sqlite::queue::dedupe_returns_the_existing_ids`, …). Each case gets a fresh [`TestDb`];
/// when the backend's server is not there it prints `SKIPPED` and passes. The caller's crate
/// needs `tokio` (with `macros` and `rt-multi-thread`).
///
/// The table below is the catalogue: per concern module, each test's name and the case
/// (`pub async fn(&TestDb)` in that module) it runs.
#[macro_export]
macro_rules! exercise {
    ($module:ident = $backend:ident) => {
        mod $module {
            $crate::__exercise_cases! { $backend;
                queue {
                    enqueues_dropped_midway_never_wedge_the_writer =>
                        dropped_enqueues_leave_no_transaction;
                    dedupe_returns_the_existing_ids => dedupe_returns_the_existing_ids;
                    both_enqueue_paths_write_the_same_rows =>
                        both_enqueue_paths_write_the_same_rows;
                    concurrent_enqueues_of_one_key_make_one_job =>
                        concurrent_enqueues_of_one_key_make_one_job;
                    eight_claimers_claim_each_of_2000_jobs_exactly_once =>
                        eight_claimers_claim_each_job_once;
                    expired_lease_is_reclaimed_and_the_old_holder_is_fenced =>
                        expired_lease_is_reclaimed;
                    claims_follow_run_at_priority_and_lane =>
                        claims_follow_run_at_priority_and_lane;
                    claims_take_due_jobs_in_order_past_sleeping_ones => claims_past_sleeping_jobs;
                    retry_backoff_grows_then_dead_letters => retry_backoff_grows_then_dead_letters;
                    expired_lease_on_last_attempt_dead_letters =>
                        expired_lease_on_last_attempt_dead_letters;
                    park_arms_a_resume_job_for_later => park_arms_a_resume_job_for_later;
                    cancel_stops_queued_and_flags_running_jobs =>
                        cancel_stops_queued_and_flags_running_jobs;
                    release_returns_the_job_at_once => release_returns_the_job_at_once;
                    next_due_sees_jobs_queued_every_way => next_due_sees_jobs_queued_every_way;
                    rescue_expired_returns_expired_jobs_to_the_queue =>
                        rescue_expired_returns_expired_jobs;
                    a_claim_rescues_expired_leases_at_most_once_a_second =>
                        claims_rescue_once_a_second;
                    resume_dedupe_and_finished_runs => resume_dedupe_and_finished_runs;
                    the_gauges_count_due_and_delayed_apart_and_parked_only_for_live_runs =>
                        gauges_mean_their_names;
                    the_backlog_gauges_count_pending_approvals_and_undelivered_notices =>
                        backlog_gauges;
                }
                content {
                    events_and_checkpoints_read_back_exactly =>
                        events_and_checkpoints_read_back_exactly;
                    a_long_run_stores_its_content_once => a_long_run_stores_its_content_once;
                    rows_written_before_v22_read_as_written =>
                        rows_written_before_v22_read_as_written;
                    damaged_content_is_an_error_naming_the_run =>
                        damaged_content_is_an_error_naming_the_run;
                    a_checkpoint_write_failing_at_any_step_leaves_the_run_as_it_was =>
                        a_checkpoint_write_failing_at_any_step_leaves_the_run_as_it_was;
                }
                forks {
                    a_forks_log_is_its_ancestors_up_to_each_fork_point =>
                        a_forks_log_is_its_ancestors_up_to_each_fork_point;
                    a_fork_that_cannot_be_makes_nothing_and_a_key_makes_one =>
                        a_fork_that_cannot_be_makes_nothing_and_a_key_makes_one;
                }
                attempts {
                    expiries_after_progress_never_count => expiries_after_progress_never_count;
                    expiries_without_progress_dead_letter_at_max_attempts =>
                        expiries_without_progress_count;
                    progress_of_an_earlier_attempt_does_not_save_a_later_one => mixed_expiries;
                    an_explicit_retry_counts_even_after_progress => retry_after_progress_counts;
                    expiry_after_progress_with_cancel_requested_cancels =>
                        expiry_after_progress_cancels;
                    stale_progress_is_lease_lost_and_marks_nothing =>
                        stale_progress_marks_nothing;
                    deferred_job_comes_back_at_until_with_attempts_unchanged =>
                        deferral_comes_back_at_until;
                    deferred_beyond_max_attempts_is_never_dead => deferral_never_dead_letters;
                    deferral_after_a_cancel_request_cancels =>
                        deferral_after_cancel_request_cancels;
                    deferral_with_a_stale_token_is_lease_lost => stale_deferral_is_lease_lost;
                }
                batch {
                    a_batched_end_whose_lease_was_lost_changes_nothing_while_the_others_end =>
                        lost_lease_in_a_batch;
                    settle_ends_jobs_and_claims_per_request_in_one_call => settle_ends_and_claims;
                    a_batch_of_ends_wakes_jobs_waiting_for_a_concurrency_key =>
                        batch_frees_concurrency_keys;
                    a_stale_end_is_refused_when_the_same_settle_claims_the_job_again =>
                        stale_end_and_reclaim_in_one_settle;
                    a_batch_records_every_kind_of_end_and_awkward_text_exactly =>
                        batch_ends_round_trip;
                }
                batch_enqueue {
                    a_batch_answers_per_run_as_single_enqueues_would => a_batch_answers_per_run;
                    a_batch_without_keys_writes_the_rows_a_single_enqueue_writes =>
                        plain_batch_rows;
                    concurrent_enqueues_each_get_their_own_committed_run => concurrent_enqueues;
                    a_delivery_is_claimed_enqueued_and_recorded_in_one_commit =>
                        delivery_in_one_commit;
                    concurrent_deliveries_refused_and_accepted_stay_apart => concurrent_deliveries;
                }
                concurrency {
                    one_job_per_key_runs_at_a_time => one_job_per_key_runs_at_a_time;
                    concurrent_claimers_never_run_two_jobs_of_one_key =>
                        concurrent_claimers_respect_keys;
                    skip_drops_the_new_run_while_the_key_is_active => skip_drops_the_new_run;
                    supersede_ends_the_older_runs_and_fences_their_side_effects =>
                        supersede_ends_older_runs;
                    debounce_runs_only_the_latest => debounce_runs_only_the_latest;
                    resuming_a_busy_run_needs_a_key_and_replaces_a_pending_wakeup => resume_rules;
                }
                write_paths {
                    every_write_path_answers_alike => every_path_answers_alike;
                    concurrent_grouped_deliveries_answer_as_alone =>
                        concurrent_grouped_deliveries_answer_as_alone;
                    each_batch_shape_takes_its_group_path_on_purpose =>
                        batch_shapes_take_their_paths;
                }
                run_ends {
                    runs_ended_while_no_job_runs_are_told_of_once => told_once;
                    runs_a_rescue_ends_are_told_of_once => rescue_told_once;
                }
                outbox {
                    every_terminal_path_leaves_exactly_one_outbox_row =>
                        every_terminal_path_leaves_one_row;
                    non_terminal_changes_leave_no_outbox_row => non_terminal_changes_leave_none;
                    runs_of_agents_that_do_not_notify_leave_no_outbox_row =>
                        quiet_agents_leave_none;
                    outbox_rows_expand_once_and_only_for_known_agents => expansion_happens_once;
                    deliveries_retry_then_die_keeping_the_last_error => deliveries_retry_then_die;
                    a_dead_claimants_delivery_comes_back_and_its_stale_outcome_is_refused =>
                        dead_claimant;
                    a_run_records_the_check_runs_it_opens_once_each_in_order =>
                        check_runs_are_recorded;
                }
                audit {
                    operator_actions_commit_with_their_audit_rows =>
                        actions_commit_with_their_rows;
                    an_action_whose_audit_row_cannot_be_stored_does_not_happen =>
                        no_row_no_action;
                }
                check_runs {
                    a_check_run_claim_is_held_recorded_released_and_taken_over_when_stale =>
                        claim_rules;
                }
                tasks {
                    task_rows_end_once_go_stale_and_wake_sleeping_runs => task_rows;
                }
                retention {
                    purge_takes_exactly_what_its_rule_names =>
                        purge_takes_exactly_what_its_rule_names;
                    without_a_summary_the_row_goes_and_the_audit_trail_stays =>
                        without_a_summary_the_row_goes_and_the_audit_trail_stays;
                    batches_are_bounded_and_a_second_purge_finds_nothing =>
                        batches_are_bounded_and_a_second_purge_finds_nothing;
                    a_live_state_is_refused_and_a_preview_changes_nothing =>
                        a_live_state_is_refused_and_a_preview_changes_nothing;
                    ended_runs_with_work_still_running_are_kept =>
                        ended_runs_with_work_still_running_are_kept;
                    concurrent_purgers_purge_each_run_once =>
                        concurrent_purgers_purge_each_run_once;
                }
                nul_text {
                    a_prompt_with_nul_reads_back_identical => prompt_round_trips;
                    a_batch_with_a_nul_prompt_reads_back_identical => batch_prompt_round_trips;
                    results_and_errors_with_nul_are_written => results_and_errors_round_trip;
                    events_with_raw_nul_round_trip => events_round_trip;
                    job_errors_with_nul_round_trip => job_errors_round_trip;
                    idempotency_keys_with_nul_dedupe_exactly => idempotency_keys_dedupe;
                    concurrency_keys_with_nul_hold_and_find => concurrency_keys_work;
                    approvals_and_tasks_with_nul_round_trip => approvals_and_tasks_round_trip;
                }
                runs_list {
                    each_filter_alone_and_combined_lists_exactly_its_runs => filters;
                    pages_walk_every_run_once_in_order_across_equal_times => pagination;
                    search_finds_ids_keys_and_literal_prompt_text => search;
                    the_queue_overview_counts_live_jobs_and_leases => overview;
                }
                setup {
                    a_newer_schema_is_refused_and_left_alone => newer_schema_is_refused;
                    concurrent_starters_migrate_once => concurrent_starters_migrate_once;
                }
            }
        }
    };
}

/// [`exercise!`]'s expansion: per concern a module, per case a test on a fresh database of
/// `Backend::$backend`, dropped after a passing case.
#[doc(hidden)]
#[macro_export]
macro_rules! __exercise_cases {
    ($backend:ident; $($concern:ident { $($case:ident => $body:ident;)+ })+) => {
        $(
            mod $concern {
                $(
                    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                    async fn $case() {
                        let Some(db) = $crate::TestDb::new(
                            $crate::Backend::$backend,
                            stringify!($case),
                        )
                        .await
                        else {
                            return;
                        };
                        $crate::$concern::$body(&db).await;
                        db.cleanup().await;
                    }
                )+
            }
        )+
    };
}
