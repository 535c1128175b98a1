//! Text the database might refuse, and stop reasons the runtime must not guess at (issue 13,
//! items 8 and 9): NUL bytes round-trip in prompts and final texts on both backends;
//! `model_context_window_exceeded` takes the compaction path; an unknown stop reason fails
//! the run, naming it.

use nightshift_agent::runtime::SUMMARY_REQUEST;
use nightshift_tests::{TestDb, on_both_backends};
use serde_json::json;

use super::daemon::{Daemon, Setup, describe};
use super::script::{Block, Wire, reply, text};
use super::server::Hostile;
use super::{assert_all_valid, assert_succeeded, settle};

on_both_backends! {
    a_prompt_with_a_nul_byte_is_accepted_and_reads_back_identical => nul_in_prompt;
    a_final_text_with_a_nul_byte_is_the_runs_result => nul_in_result;
    model_context_window_exceeded_compacts_and_the_run_continues => context_window_exceeded;
    an_unknown_stop_reason_fails_the_run_naming_it => unknown_stop_reason;
}

async fn nul_in_prompt(db: &TestDb) {
    let key = "[nul-prompt]";
    let prompt = format!("{key} before\u{0}after");
    let hostile = Hostile::start().await;
    hostile.script(key, vec![text("Read it.")]);
    let d = Daemon::start(db, &hostile, Setup::new(Wire::Anthropic, true)).await;
    let (status, created) = d
        .post_run(json!({"agent": "hostile", "prompt": prompt}))
        .await;
    assert!(
        (200..300).contains(&status),
        "a prompt with a NUL byte is accepted: {status} {created}"
    );
    let run_id = created["run_id"].as_str().unwrap();
    assert_eq!(
        d.run(run_id).await["input"].as_str(),
        Some(prompt.as_str()),
        "and reads back identical"
    );
    let (run, events) = settle(&d, run_id, |ev| ev.len() >= 40).await;
    assert_succeeded(&run, &events, "Read it.");
    assert_eq!(
        hostile.requests()[0].last_user_text(),
        prompt,
        "the model got the prompt byte for byte"
    );
}

async fn nul_in_result(db: &TestDb) {
    let key = "[nul-result] Answer with a NUL byte.";
    let answer = "before\u{0}after";
    let hostile = Hostile::start().await;
    hostile.script(key, vec![text(answer)]);
    let d = Daemon::start(db, &hostile, Setup::new(Wire::OpenAi, false)).await;
    let run_id = d.enqueue(key, 2).await;
    let (run, events) = settle(&d, &run_id, |ev| ev.len() >= 40).await;
    assert_succeeded(&run, &events, answer);
}

async fn context_window_exceeded(db: &TestDb) {
    let key = "[context] Work until the window is full.";
    let hostile = Hostile::start().await;
    hostile.script(
        key,
        vec![
            reply(
                vec![Block::Text("I was about to say more, but".into())],
                "model_context_window_exceeded",
            ),
            text(&format!("The task was: {key} Nothing is done yet.")),
            text("Finished after compaction."),
        ],
    );
    let d = Daemon::start(db, &hostile, Setup::new(Wire::Anthropic, true)).await;
    let run_id = d.enqueue(key, 2).await;
    let (run, events) = settle(&d, &run_id, |ev| ev.len() >= 40).await;

    assert!(
        events.iter().any(|e| e.event_type == "compacted"),
        "running out of context compacts the conversation: {}",
        describe(&run, &events)
    );
    assert!(
        hostile
            .requests()
            .iter()
            .any(|r| r.last_user_text().ends_with(SUMMARY_REQUEST)),
        "the fake was asked for a summary (at the bottom of the last user message)"
    );
    assert_all_valid(&hostile);
    assert_succeeded(&run, &events, "Finished after compaction.");
}

async fn unknown_stop_reason(db: &TestDb) {
    let key = "[stop-reason] Stop in a new way.";
    let hostile = Hostile::start().await;
    hostile.script(
        key,
        vec![reply(
            vec![Block::Text("Stopping, somehow.".into())],
            "weird_new_reason",
        )],
    );
    let d = Daemon::start(db, &hostile, Setup::new(Wire::Anthropic, false)).await;
    let run_id = d.enqueue(key, 2).await;
    let (run, events) = settle(&d, &run_id, |ev| ev.len() >= 40).await;
    assert_eq!(
        run["status"],
        "failed",
        "an unknown stop reason is not a success: {}",
        describe(&run, &events)
    );
    let error = run["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("weird_new_reason"),
        "the error names the stop reason: {error}"
    );
}
