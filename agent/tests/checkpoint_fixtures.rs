//! Checkpoint format fixtures: blobs written by earlier versions of this binary must load
//! forever after. Each `fixtures/checkpoint-vN.json.gz` was written by format version N and is
//! never regenerated (it was made by encoding a state folded from a hand-written event list);
//! when the format changes, add a new fixture beside the old ones and a migration step in
//! `checkpoint::migrate`, and keep every assertion below passing.

use nightshift_agent::ToolClass;
use nightshift_agent::checkpoint;
use nightshift_llm::{ContentBlock, Role, StopReason};

#[test]
fn version_1_fixture_loads() {
    // Stored by a version before v22 as this gzip; the store reads such a row back as the
    // document (`encoding` 0), which is what the loader is given.
    let body: &[u8] = include_bytes!("fixtures/checkpoint-v1.json.gz");
    let mut document = String::new();
    std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(body), &mut document)
        .expect("the fixture is gzip");
    let state = checkpoint::decode(&document).expect("a v1 checkpoint loads");
    assert_eq!(state.through_seq, 9);
    assert_eq!(state.agent_hash.as_deref(), Some("4f2c0d5e"));
    assert_eq!(state.messages.len(), 4);
    assert_eq!(
        state.messages[0].text(),
        "Fix the failing test in parser.rs"
    );
    assert_eq!(state.messages[1].role, Role::Assistant);
    assert_eq!(
        state.messages[2].content.len(),
        2,
        "both results in one message"
    );
    assert!(matches!(
        &state.messages[2].content[0],
        ContentBlock::ToolResult { tool_use_id, is_error: false, .. } if tool_use_id == "toolu_00"
    ));
    assert_eq!(
        (
            state.turns,
            state.usage.input_tokens,
            state.usage.output_tokens
        ),
        (2, 1200, 80)
    );
    assert_eq!(state.usage.cache_read_input_tokens, 1024);
    assert!((state.cost_usd - 0.0048).abs() < 1e-12);
    assert_eq!(state.todos.len(), 2);
    assert_eq!(state.todos[1].status, "pending");
    assert_eq!(state.last_stop, Some(StopReason::ToolUse));
    let pending = &state.pending[0];
    assert_eq!(pending.call_id, "toolu_02");
    let started = pending.started.as_ref().unwrap();
    assert_eq!(started.durability, ToolClass::SideEffect);
    assert_eq!(started.idempotency_key, "run-1:toolu_02");
    assert!(pending.result.is_none());
}
