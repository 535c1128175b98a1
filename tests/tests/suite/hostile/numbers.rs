//! Numbers a model writes keep their exact text (issue 41, item 7): an integer wider than 64
//! bits and a decimal with more digits than an `f64` holds reach the command tool, the run's
//! log and the next request to the model as written, over both wires and both ways of
//! answering (an Anthropic stream's `input_json_delta`s, OpenAI's `arguments` string).

use nightshift_tests::{TestDb, on_both_backends};
use serde_json::{Value, json};

use super::daemon::{Daemon, Setup, describe, ledger, ledger_tool};
use super::script::{Wire, call, calls, text};
use super::server::Hostile;
use super::{assert_all_valid, assert_succeeded, settle};

on_both_backends! {
    big_numbers_in_a_tool_input_round_trip_exactly => big_numbers;
}

/// What the model writes: no `f64` or `u64` holds either number.
const INPUT: &str =
    r#"{"amount":123456789012345678901234567890,"rate":0.1000000000000000000001,"small":7}"#;

async fn big_numbers(db: &TestDb) {
    for (wire, stream) in [(Wire::Anthropic, true), (Wire::OpenAi, false)] {
        one_wire(db, wire, stream).await;
    }
}

async fn one_wire(db: &TestDb, wire: Wire, stream: bool) {
    let key = format!("[numbers {wire:?}] Pay the exact amount.");
    let input: Value = serde_json::from_str(INPUT).unwrap();
    assert_eq!(
        input.to_string(),
        INPUT,
        "the test's own JSON keeps the text"
    );
    let hostile = Hostile::start().await;
    hostile.script(
        &key,
        vec![
            calls(vec![call(Some("n_1"), "pay", input)]),
            text("Paid exactly."),
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let book = dir.path().join("ledger");
    let mut setup = Setup::new(wire, stream);
    setup.tools = vec!["pay".into()];
    setup.command_tools = ledger_tool(
        "pay",
        &book,
        Some(json!({"type": "object", "properties": {"amount": {"type": "integer"}}})),
    );
    setup.sandbox_write.push(dir.path().to_path_buf());
    let d = Daemon::start(db, &hostile, setup).await;
    let run_id = d.enqueue(&key, 3).await;
    let (run, events) = settle(&d, &run_id, |ev| ev.len() >= 30).await;
    assert_succeeded(&run, &events, "Paid exactly.");

    let lines = ledger(&book);
    assert_eq!(
        lines.iter().map(|l| l.input.as_str()).collect::<Vec<_>>(),
        [INPUT],
        "the tool read the input as the model wrote it ({wire:?}): {}",
        describe(&run, &events)
    );
    let started = events
        .iter()
        .find(|e| e.event_type == "tool_started")
        .expect("a tool_started event");
    assert!(
        started.payload.contains(r#""input":{"amount":123456789012345678901234567890,"rate":0.1000000000000000000001,"small":7}"#),
        "the log holds the input exactly: {}",
        started.payload
    );

    let requests = hostile.requests();
    assert_eq!(requests.len(), 2, "{}", describe(&run, &events));
    let sent_back = match wire {
        Wire::Anthropic => requests[1].body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
            .find(|b| b["type"] == "tool_use")
            .map(|b| b["input"].to_string()),
        Wire::OpenAi => requests[1].body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|m| m["tool_calls"].as_array().cloned().unwrap_or_default())
            .find_map(|c| c["function"]["arguments"].as_str().map(str::to_string)),
    };
    assert_eq!(
        sent_back.as_deref(),
        Some(INPUT),
        "the call goes back to the model as it wrote it ({wire:?})"
    );
    assert_all_valid(&hostile);
}
