//! `nightshift serve` SIGKILLed mid-run: while a tool of each durability class is between
//! `tool_started` and `tool_result` (read-only and idempotent calls run again with the same
//! key, a side-effect call is reported interrupted), and between model turns (no turn is
//! repeated, and the model is sent the same conversation).

use std::time::Duration;

use nightshift_agent::runtime::INTERRUPTED_NOTICE;
use nightshift_agent::{RunEvent, RunState, ToolClass};
use nightshift_llm::{ContentBlock, Role};
use nightshift_store::{Event, RunStatus};
use nightshift_tests::config_text::{agent, command_tool};
use nightshift_tests::process::serve;
use nightshift_tests::{TestDb, eventually};
use serde_json::json;

use super::{
    FAST_WORKER, assert_log_well_formed, enqueue, events, kinds, lines, out, sh_path, sigkill,
    sigterm, text_turn, tool_turn, wait_finished, write_config,
};

/// The messages the model was sent for the `n`th model call (0-based): the projection of
/// every event before the `n`th `assistant_message`, as the runtime builds its request.
fn request_messages(events: &[(Event, RunEvent)], n: usize) -> Vec<nightshift_llm::Message> {
    let mut state = RunState::default();
    let mut replies = 0;
    for (e, parsed) in events {
        if matches!(parsed, RunEvent::AssistantMessage { .. }) {
            if replies == n {
                return state.messages;
            }
            replies += 1;
        }
        state.apply(e.seq, parsed).unwrap();
    }
    panic!("the run has no model reply #{n}");
}

pub(super) const CLASSES: [(&str, ToolClass); 3] = [
    ("read_only", ToolClass::ReadOnly),
    ("idempotent", ToolClass::Idempotent),
    ("side_effect", ToolClass::SideEffect),
];

pub(super) async fn sigkill_mid_tool_call(db: &TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // The tools block until the test creates this file (for at most ~30 s), so the kill
    // surely lands between tool_started and tool_result however slow the machine is.
    let gate = out(d).join("gate");
    let mut body = String::new();
    for (class, _) in CLASSES {
        let tool = format!("tool_{class}");
        let program = format!(
            "echo \"$NIGHTSHIFT_IDEMPOTENCY_KEY\" >> {log}; i=0; \
             while [ ! -e {gate} ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; \
             echo \"done $NIGHTSHIFT_IDEMPOTENCY_KEY\"",
            log = sh_path(&out(d).join(format!("{class}.log"))),
            gate = sh_path(&gate),
        );
        body += &command_tool(&tool, class, &program);
        let turns = json!([
            tool_turn(&format!("call_{class}"), &tool, json!({})),
            text_turn(&format!("{class} finished"))
        ]);
        body += &agent(d, class, &[&tool], turns);
    }
    let cfg = write_config(db, d, FAST_WORKER, &body);
    let store = db.store().await;
    let mut first = serve(&cfg);
    let runs: Vec<String> = CLASSES.iter().map(|(c, _)| enqueue(&cfg, c)).collect();
    eventually(
        Duration::from_secs(30),
        "every tool call to start",
        || async {
            CLASSES
                .iter()
                .all(|(c, _)| !lines(&out(d).join(format!("{c}.log"))).is_empty())
                .then_some(())
        },
    )
    .await;
    sigkill(&mut first).await;

    for ((class, _), run_id) in CLASSES.iter().zip(&runs) {
        let log = events(&store, run_id).await;
        assert_eq!(
            kinds(&log).last(),
            Some(&"tool_started"),
            "{class}: killed between tool_started and tool_result"
        );
    }
    std::fs::write(&gate, "").unwrap();
    let second = serve(&cfg);

    for ((class, durability), run_id) in CLASSES.iter().zip(&runs) {
        let run = wait_finished(&store, run_id).await;
        assert_eq!(run.status, RunStatus::Succeeded, "{class}: {:?}", run.error);
        assert_eq!(run.result, Some(format!("{class} finished")));
        let call_id = format!("call_{class}");
        let key = format!("{run_id}:1:{call_id}");
        let ran = lines(&out(d).join(format!("{class}.log")));
        let times = if *durability == ToolClass::SideEffect {
            1
        } else {
            2
        };
        assert_eq!(
            ran,
            vec![key.clone(); times],
            "{class}: runs (and the key each run got)"
        );

        let log = events(&store, run_id).await;
        assert_eq!(
            kinds(&log),
            [
                "run_started",
                "user_message",
                "assistant_message",
                "tool_started",
                "tool_result",
                "assistant_message",
                "finished"
            ],
            "{class}"
        );
        assert_log_well_formed(&log);
        let (started, result) = (&log[3], &log[4]);
        match &started.1 {
            RunEvent::ToolStarted {
                call_id: id,
                durability: logged,
                idempotency_key,
                ..
            } => assert_eq!((id, logged, idempotency_key), (&call_id, durability, &key)),
            other => panic!("{class}: {other:?}"),
        }
        assert!(
            result.0.lease_token > started.0.lease_token,
            "{class}: the result was written by the second daemon's lease"
        );
        let RunEvent::ToolResult {
            call_id: id,
            content,
            is_error,
            interrupted,
        } = &result.1
        else {
            panic!("{class}: {:?}", result.1);
        };
        assert_eq!(id, &call_id);
        if *durability == ToolClass::SideEffect {
            assert_eq!(
                (content.as_str(), *is_error, *interrupted),
                (INTERRUPTED_NOTICE, true, true),
                "{class}: reported as interrupted, outcome unknown"
            );
        } else {
            assert_eq!(
                (content.trim(), *is_error, *interrupted),
                (format!("done {key}").as_str(), false, false),
                "{class}: the real result of the second run"
            );
        }
        // What the second model call was sent ends with exactly that result.
        let sent = request_messages(&log, 1);
        let last = sent.last().unwrap();
        assert_eq!(last.role, Role::User);
        assert_eq!(
            last.content,
            [ContentBlock::ToolResult {
                tool_use_id: call_id.clone(),
                content: content.clone(),
                is_error: *is_error,
            }],
            "{class}"
        );
        let jobs = store.jobs_of_run(run_id).await.unwrap();
        assert_eq!(jobs.len(), 1, "{class}: the crash made no new job");
        // The killed attempt had recorded progress (its model turn), so its lease expiry
        // gave the attempt back: only the second daemon's attempt counts.
        assert_eq!(
            jobs[0].attempts, 1,
            "{class}: the crash after progress is not counted"
        );
        let error = jobs[0].last_error.as_deref().unwrap_or_default();
        assert!(
            error.contains("the attempt is not counted"),
            "{class}: {error}"
        );
    }
    sigterm(second).await;
}

pub(super) async fn sigkill_between_model_turns(db: &TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let calls = out(d).join("calls.log");
    let program = format!(
        "echo \"$NIGHTSHIFT_TOOL_CALL_ID\" >> {log}; echo \"probed $NIGHTSHIFT_TOOL_CALL_ID\"",
        log = sh_path(&calls)
    );
    // The second model call is slow, so the kill lands while it is in flight: after the
    // first turn's tool result, before the second reply is logged.
    let mut slow = tool_turn("call_2", "probe", json!({}));
    slow["delay_ms"] = json!(2000);
    let turns = json!([
        tool_turn("call_1", "probe", json!({})),
        slow,
        text_turn("all probed")
    ]);
    let metrics_port = crate::process::free_port();
    let body = format!("[telemetry]\nmetrics_address = \"127.0.0.1:{metrics_port}\"\n\n")
        + &command_tool("probe", "read_only", &program)
        + &agent(d, "prober", &["probe"], turns);
    let cfg = write_config(db, d, FAST_WORKER, &body);
    let store = db.store().await;
    let mut first = serve(&cfg);
    let run_id = enqueue(&cfg, "prober");
    eventually(Duration::from_secs(30), "the first tool result", || async {
        let log = events(&store, &run_id).await;
        kinds(&log).contains(&"tool_result").then_some(())
    })
    .await;
    sigkill(&mut first).await;
    let before = events(&store, &run_id).await;
    assert_eq!(
        kinds(&before)
            .iter()
            .filter(|k| **k == "assistant_message")
            .count(),
        1,
        "killed before the second reply was logged: {:?}",
        kinds(&before)
    );

    let second = serve(&cfg);
    let run = wait_finished(&store, &run_id).await;
    assert_eq!(run.status, RunStatus::Succeeded, "{:?}", run.error);
    assert_eq!(run.result.as_deref(), Some("all probed"));
    assert_eq!(run.turns, 3, "three model calls counted");
    let log = events(&store, &run_id).await;
    assert_eq!(
        kinds(&log),
        [
            "run_started",
            "user_message",
            "assistant_message",
            "tool_started",
            "tool_result",
            "assistant_message",
            "tool_started",
            "tool_result",
            "assistant_message",
            "finished"
        ]
    );
    assert_log_well_formed(&log);
    assert!(
        log[5].0.lease_token > log[2].0.lease_token,
        "the second reply was logged after the restart"
    );
    assert_eq!(
        lines(&calls),
        ["call_1", "call_2"],
        "each call ran once; the finished one was not repeated"
    );
    // The second daemon found the first one's lease expired and put the job back: counted.
    let http = nightshift_llm::http::build_client(nightshift_llm::HttpTimeouts::default()).unwrap();
    let text = http
        .get(format!("http://127.0.0.1:{metrics_port}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let rescued: f64 = nightshift_telemetry::exposition::parse(&text)
        .iter()
        .filter(|s| {
            s.name == "nightshift_lease_expiries_total"
                && s.labels
                    .iter()
                    .any(|(k, v)| k == "outcome" && v == "requeued")
        })
        .map(|s| s.value)
        .sum();
    assert_eq!(rescued, 1.0, "{text}");
    sigterm(second).await;
}
