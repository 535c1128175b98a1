//! A command tool's `input_schema` is enforced before anything runs (issue 13, item 3): each
//! violation is an `is_error` result naming it, the program never starts, and a valid call
//! then runs once.

use nightshift_tests::{TestDb, on_both_backends};
use serde_json::json;

use super::daemon::{Daemon, Setup, describe, ledger, ledger_tool};
use super::script::{Wire, call, calls, text};
use super::server::Hostile;
use super::{assert_all_valid, assert_succeeded, settle};

on_both_backends! {
    inputs_that_break_a_command_tools_schema_never_reach_the_program => schema_enforced;
}

async fn schema_enforced(db: &TestDb) {
    let key = "[schema] Pay, however you can.";
    let hostile = Hostile::start().await;
    let bad = [
        ("s_missing", json!({}), "amount"),
        ("s_type", json!({"amount": "5"}), "integer"),
        ("s_extra", json!({"amount": 5, "memo": "x"}), "memo"),
        ("s_array", json!([]), "object"),
    ];
    hostile.script(
        key,
        vec![
            calls(
                bad.iter()
                    .map(|(id, input, _)| call(Some(id), "pay", input.clone()))
                    .collect(),
            ),
            calls(vec![call(Some("s_good"), "pay", json!({"amount": 5}))]),
            text("Paid once, properly."),
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let book = dir.path().join("ledger");
    let schema = json!({
        "type": "object",
        "properties": {"amount": {"type": "integer"}},
        "required": ["amount"],
        "additionalProperties": false,
    });
    let mut setup = Setup::new(Wire::Anthropic, true);
    setup.tools = vec!["pay".into()];
    setup.command_tools = ledger_tool("pay", &book, Some(schema));
    setup.sandbox_write.push(dir.path().to_path_buf());
    let d = Daemon::start(db, &hostile, setup).await;
    let run_id = d.enqueue(key, 3).await;
    let (run, events) = settle(&d, &run_id, |ev| ev.len() >= 40).await;

    let requests = hostile.requests();
    assert!(requests.len() >= 2, "{}", describe(&run, &events));
    let results = requests[1].tool_results();
    assert_eq!(
        results.len(),
        bad.len(),
        "one result per bad call: {results:#?}"
    );
    for ((id, input, names), (_, content, is_error)) in bad.iter().zip(&results) {
        assert!(
            *is_error,
            "input {input} (call {id}) breaks the schema, so its result is an error; got: {content}"
        );
        let lower = content.to_lowercase();
        assert!(
            lower.contains("schema") && content.contains(names),
            "the result of {input} names the schema violation (`{names}`): {content}"
        );
    }
    let lines = ledger(&book);
    assert_eq!(
        lines.iter().map(|l| l.input.as_str()).collect::<Vec<_>>(),
        [r#"{"amount":5}"#],
        "only the valid call ran, once: {}",
        describe(&run, &events)
    );
    assert_all_valid(&hostile);
    assert_succeeded(&run, &events, "Paid once, properly.");
}
