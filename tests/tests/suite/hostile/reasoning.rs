//! Reasoning kept byte-exact by the real daemon (issue 41, item 6): an agent with extended
//! thinking runs a tool loop of three requests against a fake that, like the real APIs,
//! answers 400 when a thinking block (Anthropic, its signature or a redacted block's data) or
//! a `reasoning_content` (DeepSeek's thinking mode) of the loop is missing or altered — JSON
//! and SSE. Then the daemon is SIGKILLed while the loop's tool runs, a new one resumes the run
//! from the store, and the thinking block goes back intact.
//!
//! Also issue 41, item 7: tool-call arguments that are not JSON are answered with an error the
//! model corrects, on the wire the model sees.

use std::path::Path;
use std::time::Duration;

use nightshift_tests::{TestDb, eventually, on_both_backends};
use serde_json::{Value, json};

use super::daemon::{Daemon, Setup, ledger, ledger_tool};
use super::script::{Block, Step, Wire, call, reply, text};
use super::server::Hostile;
use super::thinking_rules::{deepseek_reasoning, signature};
use super::{assert_all_valid, assert_succeeded, settle};

on_both_backends! {
    anthropic_thinking_survives_a_tool_loop_streamed_and_not => anthropic_tool_loop;
    deepseek_reasoning_content_survives_a_tool_loop_streamed_and_not => deepseek_tool_loop;
    thinking_comes_back_intact_after_a_sigkill_mid_tool => sigkill_mid_tool;
    arguments_that_are_not_json_are_answered_so_the_model_corrects_them => unparsed_arguments;
}

const THINKING: &str =
    "max_tokens = 4096\nthinking = { type = \"enabled\", budget_tokens = 2048 }\n";

fn thinking(t: &str) -> Block {
    Block::Thinking(t.into())
}

/// The loop every case scripts: two tool calls, each after reasoning (the second also with a
/// redacted block), then the answer.
fn tool_loop() -> Vec<Step> {
    vec![
        reply(
            vec![
                thinking("The user wants 5 paid. I will \"pay\" it."),
                call(Some("toolu_pay5"), "pay", json!({"amount": 5})),
            ],
            "tool_use",
        ),
        reply(
            vec![
                thinking("Now 7, then done.\nü"),
                Block::RedactedThinking("flagged-thought".into()),
                call(Some("toolu_pay7"), "pay", json!({"amount": 7})),
            ],
            "tool_use",
        ),
        text("Paid 5 and 7."),
    ]
}

fn setup(wire: Wire, stream: bool, dir: &Path, agent_keys: &str) -> Setup {
    let mut s = Setup::new(wire, stream);
    s.tools = vec!["pay".into()];
    s.command_tools = ledger_tool("pay", &dir.join("ledger"), None);
    s.sandbox_write = vec![dir.to_path_buf()];
    s.agent_keys = agent_keys.into();
    s
}

async fn run_loop(db: &TestDb, wire: Wire, stream: bool, agent_keys: &str) -> Vec<Value> {
    let key = format!("[reasoning {wire:?} {stream}] Pay 5 then 7.");
    let hostile = Hostile::start().await;
    hostile.script(&key, tool_loop());
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(db, &hostile, setup(wire, stream, dir.path(), agent_keys)).await;
    let run_id = d.enqueue(&key, 1).await;
    let (run, events) = settle(&d, &run_id, |ev| ev.len() >= 60).await;
    assert_all_valid(&hostile);
    assert_succeeded(&run, &events, "Paid 5 and 7.");
    assert_eq!(
        ledger(&dir.path().join("ledger")).len(),
        2,
        "each call ran once"
    );
    let requests = hostile.requests();
    assert_eq!(requests.len(), 3, "one request per step of the loop");
    requests.into_iter().map(|r| r.body).collect()
}

async fn anthropic_tool_loop(db: &TestDb) {
    for stream in [true, false] {
        let bodies = run_loop(db, Wire::Anthropic, stream, THINKING).await;
        let last = &bodies[2];
        assert_eq!(
            last["thinking"],
            json!({"type": "enabled", "budget_tokens": 2048})
        );
        let first_reply = &last["messages"][1]["content"];
        let said = "The user wants 5 paid. I will \"pay\" it.";
        assert_eq!(
            first_reply[0],
            json!({"type": "thinking", "thinking": said, "signature": signature(said)}),
            "stream {stream}: the first turn's thinking is still sent, as it came"
        );
        let second_reply = &last["messages"][3]["content"];
        assert_eq!(second_reply[1]["type"], "redacted_thinking");
        assert_eq!(second_reply[2]["id"], "toolu_pay7");
    }
}

async fn deepseek_tool_loop(db: &TestDb) {
    let keys = "thinking = { type = \"enabled\" }\neffort = \"high\"\n";
    for stream in [true, false] {
        let bodies = run_loop(db, Wire::OpenAi, stream, keys).await;
        let last = &bodies[2];
        assert_eq!(last["reasoning_effort"], "high");
        let assistants: Vec<&Value> = last["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "assistant")
            .collect();
        assert_eq!(
            assistants[0]["reasoning_content"],
            deepseek_reasoning("The user wants 5 paid. I will \"pay\" it."),
            "stream {stream}"
        );
        assert_eq!(
            assistants[1]["reasoning_content"],
            deepseek_reasoning("Now 7, then done.\nü")
        );
    }
}

/// A command tool that records that it started and then waits for `gate` to exist.
fn gated_tool(dir: &Path) -> String {
    let p = |name: &str| dir.join(name).to_str().unwrap().to_string();
    let program = format!(
        "cat > /dev/null; echo started >> '{}'; while [ ! -e '{}' ]; do sleep 0.05; done; echo paid",
        p("started"),
        p("gate")
    );
    format!(
        "[[command_tools]]\nname = \"pay\"\ndescription = \"Pays.\"\ncommand = {}\n\
         class = \"side_effect\"\n\n",
        super::daemon::toml(&json!(["sh", "-c", program]))
    )
}

async fn sigkill_mid_tool(db: &TestDb) {
    for wire in [Wire::Anthropic, Wire::OpenAi] {
        let key = format!("[reasoning-kill {wire:?}] Pay 5.");
        let hostile = Hostile::start().await;
        let said = "Pay 5; the tool may take a while.";
        hostile.script(
            &key,
            vec![
                reply(
                    vec![
                        thinking(said),
                        call(Some("toolu_slow"), "pay", json!({"amount": 5})),
                    ],
                    "tool_use",
                ),
                text("Checked the payment."),
            ],
        );
        let dir = tempfile::tempdir().unwrap();
        let setup = || {
            let mut s = setup(wire, true, dir.path(), THINKING);
            if wire == Wire::OpenAi {
                s.agent_keys = "thinking = { type = \"enabled\" }\n".into();
            }
            s.command_tools = gated_tool(dir.path());
            s
        };
        let mut first = Daemon::start(db, &hostile, setup()).await;
        let run_id = first.enqueue(&key, 3).await;
        let started = dir.path().join("started");
        eventually(Duration::from_secs(20), "the tool to start", || async {
            started.exists().then_some(())
        })
        .await;
        first.sigkill().await;
        std::fs::write(dir.path().join("gate"), "").unwrap();
        let second = Daemon::start(db, &hostile, setup()).await;
        let (run, events) = settle(&second, &run_id, |ev| ev.len() >= 40).await;
        assert_all_valid(&hostile);
        assert_succeeded(&run, &events, "Checked the payment.");
        let requests = hostile.requests();
        assert_eq!(
            requests.len(),
            2,
            "{wire:?}: the reply, then the resumed request"
        );
        let resumed = &requests[1].body;
        match wire {
            Wire::Anthropic => assert_eq!(
                resumed["messages"][1]["content"][0],
                json!({"type": "thinking", "thinking": said, "signature": signature(said)})
            ),
            Wire::OpenAi => assert_eq!(
                resumed["messages"][2]["reasoning_content"],
                deepseek_reasoning(said)
            ),
        }
        let results = requests[1].tool_results();
        assert_eq!(results.len(), 1);
        assert!(
            results[0].2,
            "the interrupted side effect is reported, not run again"
        );
        drop(second);
    }
}

/// Arguments that are never valid JSON get a tool error naming the problem; the model's next
/// call, corrected, runs.
async fn unparsed_arguments(db: &TestDb) {
    for wire in [Wire::Anthropic, Wire::OpenAi] {
        let key = format!("[unparsed {wire:?}] Pay 5.");
        let hostile = Hostile::start().await;
        hostile.script(
            &key,
            vec![
                reply(
                    vec![Block::CutToolUse {
                        id: Some("toolu_bad".into()),
                        name: "pay".into(),
                        partial_json: "{\"amount\": 5,".into(),
                    }],
                    "tool_use",
                ),
                reply(
                    vec![call(Some("toolu_good"), "pay", json!({"amount": 5}))],
                    "tool_use",
                ),
                text("Paid."),
            ],
        );
        let dir = tempfile::tempdir().unwrap();
        let d = Daemon::start(db, &hostile, setup(wire, true, dir.path(), "")).await;
        let run_id = d.enqueue(&key, 1).await;
        let (run, events) = settle(&d, &run_id, |ev| ev.len() >= 40).await;
        assert_all_valid(&hostile);
        assert_succeeded(&run, &events, "Paid.");
        let requests = hostile.requests();
        let results = requests[1].tool_results();
        assert_eq!(results.len(), 1, "{wire:?}");
        let (id, content, is_error) = &results[0];
        assert!(*is_error && content.contains("not valid JSON"), "{content}");
        assert!(content.contains("{\"amount\": 5,"), "{content}");
        assert_ne!(id, "", "{wire:?}");
        let paid = ledger(&dir.path().join("ledger"));
        assert_eq!(paid.len(), 1, "only the corrected call ran");
        assert_eq!(paid[0].input, "{\"amount\":5}");
    }
}
