//! The agent runtime over a real store on both backends: the loop, the tool-call WAL,
//! recovery after a crash at each tool class, request fidelity after resume, budgets,
//! stop reasons, compaction and damaged checkpoints. The model and the tools are in-test
//! fakes behind the runtime's ports; crashes are simulated by aborting the handler's task
//! mid-step (nothing more is written, as after SIGKILL) and reclaiming after lease expiry.
//!
//! The loop from prompt to result is here; crashes in `recovery`, budgets, stop reasons and
//! failures in `endings`, and `compaction`.

mod compaction;
mod endings;
mod forks;
mod mcp;
mod recovery;
mod skills;
mod storage;

use std::sync::Arc;

use nightshift_llm::{Message, StopReason};
use nightshift_store::RunStatus;
use nightshift_tests::{TestDb, on_both_backends};
use serde_json::json;

use super::fakes::*;
use compaction::{compaction, context_too_long, cut_off_summary};
use endings::{
    cancel_stops_model_call, corrupt_checkpoint, cut_off_reply, pause_turn_resends,
    refusal_ends_the_run, token_budget, unknown_agent,
};
use forks::{
    a_fork_applies_its_changes, a_fork_reuses_side_effects_and_sends_the_parents_request,
    a_fork_that_cannot_be_is_refused_whole, a_rerun_sends_the_first_request_again,
    retention_keeps_a_parent_while_its_fork_is_kept,
};
use mcp::{
    a_changed_list_is_logged_and_offered, listed_once_and_offered_the_same_across_a_crash,
    the_config_rules_over_the_logged_listing,
};
use recovery::{
    crash_in_idempotent_tool, crash_in_read_only_tool, crash_in_side_effect_tool,
    resumed_request_is_byte_identical, round_cap_holds_across_a_crash, unresolved_outcome,
};
use skills::skills_are_listed_loaded_and_stable_across_a_crash;
use storage::{
    a_run_stored_before_v22_resumes_with_the_same_request, one_checkpoint_refers_to_the_logged_text,
};

on_both_backends! {
    a_run_goes_from_prompt_through_tools_to_result => prompt_to_result;
    a_crash_in_a_read_only_tool_reruns_it_with_the_same_key => crash_in_read_only_tool;
    a_crash_in_an_idempotent_tool_reruns_it_with_the_same_key => crash_in_idempotent_tool;
    a_crash_in_a_side_effect_tool_never_runs_it_again => crash_in_side_effect_tool;
    an_unresolved_outcome_keeps_a_repeatable_call_open_for_the_next_try => unresolved_outcome;
    the_resumed_request_is_byte_identical => resumed_request_is_byte_identical;
    the_round_cap_holds_across_a_crash => round_cap_holds_across_a_crash;
    a_token_budget_ends_the_run_as_budget_exhausted => token_budget;
    a_cut_off_reply_never_runs_its_tool => cut_off_reply;
    pause_turn_is_sent_again => pause_turn_resends;
    a_refusal_ends_the_run => refusal_ends_the_run;
    compaction_replaces_old_messages_with_a_summary => compaction;
    a_summary_cut_off_by_a_full_context_window_is_not_accepted => cut_off_summary;
    context_too_long_compacts_once_then_fails => context_too_long;
    a_corrupt_checkpoint_fails_the_run_with_a_clear_error => corrupt_checkpoint;
    an_unknown_agent_fails_the_run => unknown_agent;
    cancel_stops_a_model_call_in_flight => cancel_stops_model_call;
    a_run_keeps_one_checkpoint_that_refers_to_its_logged_text =>
        one_checkpoint_refers_to_the_logged_text;
    a_run_stored_before_v22_resumes_with_the_same_request =>
        a_run_stored_before_v22_resumes_with_the_same_request;
    a_fork_reuses_side_effects_and_sends_the_parents_request =>
        a_fork_reuses_side_effects_and_sends_the_parents_request;
    a_rerun_sends_the_first_request_again => a_rerun_sends_the_first_request_again;
    a_fork_applies_its_changes => a_fork_applies_its_changes;
    a_fork_that_cannot_be_is_refused_whole => a_fork_that_cannot_be_is_refused_whole;
    retention_keeps_a_parent_while_its_fork_is_kept =>
        retention_keeps_a_parent_while_its_fork_is_kept;
    mcp_tools_are_listed_once_and_offered_the_same_across_a_crash =>
        listed_once_and_offered_the_same_across_a_crash;
    a_changed_mcp_tool_list_is_logged_and_offered => a_changed_list_is_logged_and_offered;
    the_agents_config_rules_over_a_logged_mcp_listing => the_config_rules_over_the_logged_listing;
    skills_are_listed_loaded_and_stable_across_a_crash =>
        skills_are_listed_loaded_and_stable_across_a_crash;
}

async fn prompt_to_result(db: &TestDb) {
    let model = ScriptModel::new(vec![
        reply(
            vec![text("Let me look."), call("c1", "read"), call("c2", "send")],
            StopReason::ToolUse,
        ),
        reply(vec![text("All done.")], StopReason::EndTurn),
    ]);
    let tools = Arc::new(FakeTools::default());
    let h = Harness::new(db, agent(json!({})), model.clone(), tools.clone()).await;
    let run_id = h.enqueue("helper", "do the thing").await;
    h.run_once().await;
    assert_eq!(
        h.status(&run_id).await,
        (RunStatus::Succeeded, Some("All done.".into()), None)
    );
    let names: Vec<String> = tools.calls().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, vec!["read", "send"]);
    assert_eq!(
        h.kinds(&run_id).await,
        vec![
            "run_started",
            "user_message",
            "assistant_message",
            "tool_started",
            "tool_result",
            "tool_started",
            "tool_result",
            "assistant_message",
            "finished"
        ]
    );
    let second = model.request(1);
    assert_eq!(second.system, "You help.");
    assert_eq!(second.messages[0], Message::user_text("do the thing"));
    let results = tool_results(second.messages.last().unwrap());
    assert_eq!(
        results,
        vec![
            ("c1".into(), "read says \"c1\"".into(), false),
            ("c2".into(), "send says \"c2\"".into(), false)
        ],
        "all results of one reply in one user message, matched by id"
    );
    let run = h.store.run(&run_id).await.unwrap().unwrap();
    assert_eq!(
        (run.turns, run.input_tokens, run.output_tokens),
        (2, 20, 10)
    );
    assert!(run.agent_hash.is_some());
    let cp = h.store.latest_checkpoint(&run_id).await.unwrap().unwrap();
    assert_eq!(cp.through_seq, 9, "checkpointed through the last event");
}
