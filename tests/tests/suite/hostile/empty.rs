//! Replies with nothing in them never put an empty assistant message in a non-final position
//! (issue 13, item 4): a `max_tokens` reply that is only a cut-off tool call, and two empty
//! `pause_turn`s in a row. The fake refuses such a request with the real API's 400, which
//! would fail the run; so the run succeeding with no refused request is the proof.

use super::daemon::{Daemon, Setup, describe, ledger, ledger_tool};
use super::script::{Block, Wire, reply, text};
use super::server::Hostile;
use super::{assert_all_valid, assert_succeeded, settle};
use nightshift_tests::{TestDb, on_both_backends};

on_both_backends! {
    a_max_tokens_reply_that_is_only_a_cut_off_tool_call_sends_no_empty_message => cut_off_tool_call;
    two_empty_pause_turns_in_a_row_send_no_empty_message => empty_pause_turns;
}

async fn cut_off_tool_call(db: &TestDb) {
    let key = "[cut-off] Pay 42.";
    let hostile = Hostile::start().await;
    hostile.script(
        key,
        vec![
            reply(
                vec![Block::CutToolUse {
                    id: Some("toolu_cut".into()),
                    name: "pay".into(),
                    partial_json: r#"{"amount": 4"#.into(),
                }],
                "max_tokens",
            ),
            text("I stopped before paying."),
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let book = dir.path().join("ledger");
    let mut setup = Setup::new(Wire::Anthropic, true);
    setup.tools = vec!["pay".into()];
    setup.command_tools = ledger_tool("pay", &book, None);
    setup.sandbox_write.push(dir.path().to_path_buf());
    let d = Daemon::start(db, &hostile, setup).await;
    let run_id = d.enqueue(key, 3).await;
    let (run, events) = settle(&d, &run_id, |ev| ev.len() >= 40).await;

    assert_all_valid(&hostile);
    assert!(
        ledger(&book).is_empty(),
        "a cut-off call never runs: {:?}",
        ledger(&book)
    );
    assert_succeeded(&run, &events, "I stopped before paying.");
}

async fn empty_pause_turns(db: &TestDb) {
    let key = "[pause] Think for a while.";
    let hostile = Hostile::start().await;
    hostile.script(
        key,
        vec![
            reply(vec![], "pause_turn"),
            reply(vec![], "pause_turn"),
            text("Done thinking."),
        ],
    );
    let d = Daemon::start(db, &hostile, Setup::new(Wire::Anthropic, false)).await;
    let run_id = d.enqueue(key, 3).await;
    let (run, events) = settle(&d, &run_id, |ev| ev.len() >= 40).await;

    assert_all_valid(&hostile);
    assert_eq!(
        hostile.steps_left(key),
        0,
        "the fake was asked again after each pause: {}",
        describe(&run, &events)
    );
    assert_succeeded(&run, &events, "Done thinking.");
}
