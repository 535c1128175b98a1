//! Webhook intake over real HTTP on loopback, on both backends: GitHub payloads (as GitHub
//! sends them, from `tests/fixtures/github/`) signed with a test secret are routed, templated
//! and deduped on redelivery; every refusal has its status and enqueues nothing; concurrent
//! copies of one delivery make one run; a crash between claiming a delivery and recording its
//! runs is finished by the redelivery; timestamped signatures follow the store's clock; and a
//! real `nightshift serve` runs the agent a delivery started, and a newer push supersedes the
//! review of the older head, whose post is refused.
//!
//! One module per concern (`routing`, `refusals`, `copies`, `timestamps`, `cancel`,
//! `comment_states`, and the real daemon's `daemon` and `supersede`), over the intake of
//! `harness`; the table of cases is here.

mod cancel;
mod comment_states;
mod copies;
mod daemon;
pub(crate) mod harness;
mod refusals;
mod routing;
mod supersede;
mod timestamps;

use nightshift_tests::on_both_backends;

use cancel::cancel_routes_mentions_and_ignored;
use comment_states::a_comment_in_each_run_state;
use copies::{concurrent_copies_make_one_run, copies_across_two_daemons, crash_between_steps};
use daemon::serve_end_to_end;
use refusals::refusals_enqueue_nothing;
use routing::{
    redelivered_after_a_reload, resume_redelivered_after_its_run_ended, routed_templated_deduped,
};
use supersede::two_pushes_supersede_the_first_review;
use timestamps::timestamped_signatures;

on_both_backends! {
    github_deliveries_are_routed_templated_and_deduped => routed_templated_deduped;
    a_closed_pull_request_cancels_its_review_and_only_mentions_steer_it =>
        cancel_routes_mentions_and_ignored;
    every_refusal_has_its_status_and_enqueues_nothing => refusals_enqueue_nothing;
    concurrent_copies_of_one_delivery_make_one_run => concurrent_copies_make_one_run;
    copies_taken_by_two_daemons_make_one_run_and_one_202 => copies_across_two_daemons;
    a_crash_between_claim_and_record_is_finished_by_the_redelivery => crash_between_steps;
    timestamped_signatures_follow_the_store_clock => timestamped_signatures;
    nightshift_serve_runs_the_agent_a_delivery_started => serve_end_to_end;
    nightshift_serve_takes_a_comment_to_a_queued_or_running_run_and_refuses_one_to_an_ended_run =>
        a_comment_in_each_run_state;
    a_newer_push_supersedes_the_review_of_the_older_head => two_pushes_supersede_the_first_review;
    a_redelivered_resume_whose_run_ended_is_answered_from_its_record => resume_redelivered_after_its_run_ended;
    a_redelivery_the_reloaded_config_would_refuse_is_answered_from_its_record => redelivered_after_a_reload;
}
