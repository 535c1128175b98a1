//! Runs of the real `nightshift serve` whose agent uses an MCP server written with the
//! official Rust SDK (`nightshift-test-mcp-server`, a notebook): over stdio under the run's
//! sandbox, and over streamable HTTP with a secret header. Its tools are listed into the
//! run's log once, classed by their annotations, checked against their schemas, and called
//! through the tool-call WAL — so a SIGKILL of the daemon mid-call repeats a read-only or
//! idempotent call and never a side effect, a server that dies mid-call is started again and
//! the run goes on, a destructive tool waits for its approval, and a server that hangs is a
//! timeout the model is told about.

use std::path::Path;
use std::time::Duration;

use nightshift_agent::runtime::INTERRUPTED_NOTICE;
use nightshift_agent::{RunEvent, ToolClass};
use nightshift_store::{Event, RunStatus};
use nightshift_tests::config_text::{agent_with, q};
use nightshift_tests::process::{Serve, serve};
use nightshift_tests::{TestDb, eventually, on_both_backends};
use serde_json::{Value, json};

use crate::crash::{
    call_result, cli, enqueue, events, out, sigkill, sigterm, text_turn, tool_turn, wait_finished,
    write_config,
};

const SERVER: &str = env!("CARGO_BIN_EXE_nightshift-test-mcp-server");

on_both_backends! {
    an_agent_uses_an_mcp_servers_tools_of_each_class => tools_of_each_class;
    sigkill_mid_mcp_call_repeats_no_side_effect => sigkill_mid_mcp_call;
    an_mcp_server_that_dies_mid_call_is_started_again => server_dies_mid_call;
    a_destructive_mcp_tool_waits_for_its_approval => destructive_tool_waits_for_approval;
    an_http_mcp_server_gets_its_secret_header => http_server_with_secret_header;
}

/// Fast leases and retries: a killed daemon's jobs come back quickly, an unresolved call is
/// tried again soon.
const WORKER: &str = "slots = 3\nlease_ms = 1500\nheartbeat_ms = 300\npoll_interval_ms = 100\n\
                      retry_base_ms = 200\nretry_cap_ms = 1000\n";

/// `write_config` with the test server's directory readable in the sandbox.
fn config(db: &TestDb, dir: &Path, body: &str) -> std::path::PathBuf {
    let cfg = write_config(db, dir, WORKER, body);
    let bin_dir = Path::new(SERVER).parent().unwrap().to_str().unwrap();
    let text = std::fs::read_to_string(&cfg).unwrap().replacen(
        "[sandbox]\n",
        &format!("[sandbox]\nread = [{}]\n", q(bin_dir)),
        1,
    );
    std::fs::write(&cfg, text).unwrap();
    cfg
}

/// An `[[agents.mcp]]` entry for the notebook over stdio, logging its calls to
/// `out/<calls>` (and waiting for `out/gate` when `gated`), with `extra` keys.
fn notebook(dir: &Path, calls: &str, gated: bool, extra: &str) -> String {
    let mut env = format!(
        "NOTES_CALLS = {}",
        q(out(dir).join(calls).to_str().unwrap())
    );
    if gated {
        env += &format!(
            ", NOTES_GATE = {}",
            q(out(dir).join("gate").to_str().unwrap())
        );
    }
    format!(
        "[[agents.mcp]]\nname = \"notes\"\ncommand = {}\nenv = {{ {env} }}\n{extra}\n",
        q(SERVER)
    )
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .map(|t| t.lines().map(str::to_string).collect())
        .unwrap_or_default()
}

/// The tools the run's log lists for `server`: (name, class), in order.
fn listed(log: &[(Event, RunEvent)], server: &str) -> Vec<(String, ToolClass)> {
    let listings: Vec<_> = log
        .iter()
        .filter_map(|(_, e)| match e {
            RunEvent::McpToolsListed {
                server: s, tools, ..
            } if s == server => Some(tools),
            _ => None,
        })
        .collect();
    assert_eq!(listings.len(), 1, "{server} is listed once");
    listings[0]
        .iter()
        .map(|t| (t.name.clone(), t.class))
        .collect()
}

/// The class `tool_started` logged for call `call_id`.
fn started_class(log: &[(Event, RunEvent)], call_id: &str) -> ToolClass {
    log.iter()
        .find_map(|(_, e)| match e {
            RunEvent::ToolStarted {
                call_id: id,
                durability,
                ..
            } if id == call_id => Some(*durability),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{call_id} started"))
}

fn turn_of(calls: &[(&str, &str, Value)]) -> Value {
    let content: Vec<Value> = calls
        .iter()
        .map(
            |(id, name, input)| json!({"type": "tool_use", "id": id, "name": name, "input": input}),
        )
        .collect();
    json!({"content": content, "stop_reason": "tool_use"})
}

async fn tools_of_each_class(db: &TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let turns = json!([
        tool_turn("c_add", "mcp__notes__add_note", json!({"text": "buy milk"})),
        tool_turn("c_bad", "mcp__notes__add_note", json!({"words": 3})),
        turn_of(&[
            (
                "c_title",
                "mcp__notes__set_title",
                json!({"title": "Errands"})
            ),
            ("c_read", "mcp__notes__read_notes", json!({})),
        ]),
        tool_turn("c_big", "mcp__notes__big", json!({"bytes": 200_000})),
        tool_turn("c_hang", "mcp__notes__wait", json!({"seconds": 60})),
        tool_turn("c_none", "mcp__notes__shred", json!({})),
        tool_turn("c_after", "mcp__notes__read_notes", json!({})),
        text_turn("notes kept"),
    ]);
    let body = agent_with(
        d,
        "scribe",
        &[],
        turns,
        &notebook(d, "calls.log", false, "timeout_seconds = 2"),
    );
    let cfg = config(db, d, &body);
    let store = db.store().await;
    let daemon = serve(&cfg);
    let run_id = enqueue(&cfg, "scribe");
    let run = wait_finished(&store, &run_id).await;
    assert_eq!(run.status, RunStatus::Succeeded, "{:?}", run.error);
    assert_eq!(run.result.as_deref(), Some("notes kept"));
    let log = events(&store, &run_id).await;

    // Listed once, before the first model call, each tool classed by its annotations.
    let kinds: Vec<&str> = log.iter().map(|(e, _)| e.event_type.as_str()).collect();
    assert_eq!(
        &kinds[..4],
        [
            "run_started",
            "user_message",
            "mcp_tools_listed",
            "assistant_message"
        ]
    );
    let tools = listed(&log, "notes");
    let names: Vec<&str> = tools.iter().map(|(n, _)| n.as_str()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "sorted by name");
    for (name, class) in [
        ("mcp__notes__add_note", ToolClass::SideEffect),
        ("mcp__notes__set_title", ToolClass::Idempotent),
        ("mcp__notes__read_notes", ToolClass::ReadOnly),
    ] {
        assert!(
            tools.contains(&(name.to_string(), class)),
            "{name}: {tools:?}"
        );
    }
    for (call, class) in [
        ("c_add", ToolClass::SideEffect),
        ("c_title", ToolClass::Idempotent),
        ("c_read", ToolClass::ReadOnly),
    ] {
        assert_eq!(started_class(&log, call), class, "{call}");
    }

    assert_eq!(
        call_result(&log, "c_add"),
        ("added: buy milk".into(), false)
    );
    let (bad, failed) = call_result(&log, "c_bad");
    assert!(failed && bad.contains("text"), "the schema's error: {bad}");
    assert_eq!(
        call_result(&log, "c_title"),
        ("title set to Errands".into(), false)
    );
    assert_eq!(call_result(&log, "c_read"), ("buy milk\n".into(), false));
    let (big, failed) = call_result(&log, "c_big");
    assert!(
        !failed && big.len() < 64 * 1024 && big.starts_with("0123456789abcdef"),
        "a huge result is cut like any output: {} bytes",
        big.len()
    );
    let (hang, failed) = call_result(&log, "c_hang");
    assert!(
        failed && hang.contains("did not answer tools/call wait within 2 s"),
        "{hang}"
    );
    let (none, failed) = call_result(&log, "c_none");
    assert!(failed && none.contains("not a tool of this run"), "{none}");
    // After the hung server was given up, the next call starts it again.
    assert_eq!(call_result(&log, "c_after"), ("buy milk\n".into(), false));

    let calls = lines(&out(d).join("calls.log"));
    assert_eq!(
        calls,
        [
            "start",
            "add_note buy milk",
            "set_title Errands",
            "read_notes",
            "start",
            "read_notes"
        ],
        "the bad input and the unknown tool never reached the server; the side effect ran once"
    );
    sigterm(daemon).await;
}

/// The daemon is SIGKILLed while an MCP call of each class is running; the next daemon runs
/// the read-only and idempotent calls again and reports the side effect's outcome unknown.
async fn sigkill_mid_mcp_call(db: &TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cases = [
        ("reader", "mcp__notes__read_notes", json!({}), "read_notes"),
        (
            "titler",
            "mcp__notes__set_title",
            json!({"title": "T"}),
            "set_title T",
        ),
        (
            "writer",
            "mcp__notes__add_note",
            json!({"text": "once"}),
            "add_note once",
        ),
    ];
    let mut body = String::new();
    for (name, tool, input, _) in &cases {
        let turns = json!([tool_turn("c1", tool, input.clone()), text_turn("ok")]);
        body += &agent_with(
            d,
            name,
            &[],
            turns,
            &notebook(d, &format!("{name}.log"), true, ""),
        );
    }
    let cfg = config(db, d, &body);
    let store = db.store().await;
    let mut first = serve(&cfg);
    let runs: Vec<String> = cases.iter().map(|(n, ..)| enqueue(&cfg, n)).collect();
    eventually(
        Duration::from_secs(60),
        "every MCP call to begin",
        || async {
            cases
                .iter()
                .all(|(n, _, _, line)| {
                    lines(&out(d).join(format!("{n}.log"))).contains(&line.to_string())
                })
                .then_some(())
        },
    )
    .await;
    sigkill(&mut first).await;
    for run_id in &runs {
        let log = events(&store, run_id).await;
        assert_eq!(
            log.last().map(|(e, _)| e.event_type.as_str()),
            Some("tool_started")
        );
    }
    let second = serve(&cfg);
    std::fs::write(out(d).join("gate"), "").unwrap();
    for ((name, _, _, line), run_id) in cases.iter().zip(&runs) {
        let run = wait_finished(&store, run_id).await;
        assert_eq!(run.status, RunStatus::Succeeded, "{name}: {:?}", run.error);
        let log = events(&store, run_id).await;
        let (result, failed) = call_result(&log, "c1");
        let ran = lines(&out(d).join(format!("{name}.log")))
            .iter()
            .filter(|l| l == line)
            .count();
        if *name == "writer" {
            assert_eq!(ran, 1, "the side effect ran once");
            assert_eq!((result.as_str(), failed), (INTERRUPTED_NOTICE, true));
        } else {
            assert_eq!(ran, 2, "{name}: run again after the crash");
            assert!(!failed, "{name}: {result}");
        }
        assert_eq!(
            log.iter()
                .filter(|(e, _)| e.event_type == "mcp_tools_listed")
                .count(),
            1,
            "{name}: the listing is read from the log after the crash"
        );
    }
    sigterm(second).await;
}

/// The server exits in the middle of a read-only call: the call's outcome is not known, the
/// job is tried again, the server is started again and the run goes on.
async fn server_dies_mid_call(db: &TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let turns = json!([
        tool_turn("c1", "mcp__notes__add_note", json!({"text": "before"})),
        tool_turn("c2", "mcp__notes__crash_once", json!({})),
        tool_turn("c3", "mcp__notes__read_notes", json!({})),
        text_turn("recovered"),
    ]);
    let body = agent_with(
        d,
        "fragile",
        &[],
        turns,
        &notebook(d, "calls.log", false, ""),
    );
    let cfg = config(db, d, &body);
    let store = db.store().await;
    let daemon = serve(&cfg);
    let run_id = enqueue(&cfg, "fragile");
    let run = wait_finished(&store, &run_id).await;
    assert_eq!(run.status, RunStatus::Succeeded, "{:?}", run.error);
    let log = events(&store, &run_id).await;
    assert_eq!(call_result(&log, "c2"), ("survived".into(), false));
    assert_eq!(call_result(&log, "c3"), ("before\n".into(), false));
    let starts = lines(&out(d).join("calls.log"))
        .iter()
        .filter(|l| *l == "start")
        .count();
    assert_eq!(starts, 2, "started again after it died");

    // Exported and replayed offline: the listing comes from the recording, no server starts.
    let file = d.join("run.json");
    cli(
        &cfg,
        &[
            "runs",
            "export",
            &run_id,
            "--output",
            file.to_str().unwrap(),
        ],
    );
    let replayed = cli(&cfg, &["replay", file.to_str().unwrap()]);
    assert_eq!(
        replayed.trim(),
        "replayed 4 model calls and 3 tool calls: no divergence"
    );
    assert_eq!(
        lines(&out(d).join("calls.log"))
            .iter()
            .filter(|l| *l == "start")
            .count(),
        2,
        "replay started no server"
    );
    sigterm(daemon).await;
}

/// `add_note` (no annotations: a side effect) under an approval rule waits for a decision;
/// approved, it runs once.
async fn destructive_tool_waits_for_approval(db: &TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let turns = json!([
        tool_turn("c1", "mcp__notes__add_note", json!({"text": "approved"})),
        text_turn("added"),
    ]);
    let extra = format!(
        "[[agents.approvals.rules]]\ntool = \"mcp__notes__add_note\"\n\n{}",
        notebook(d, "calls.log", false, "")
    );
    let body = agent_with(d, "careful", &[], turns, &extra);
    let cfg = config(db, d, &body);
    let store = db.store().await;
    let daemon = serve(&cfg);
    let run_id = enqueue(&cfg, "careful");
    eventually(
        Duration::from_secs(30),
        "the call to await approval",
        || async {
            let run = store.run(&run_id).await.unwrap()?;
            (run.status == RunStatus::AwaitingApproval).then_some(())
        },
    )
    .await;
    assert!(
        !lines(&out(d).join("calls.log")).contains(&"add_note approved".to_string()),
        "nothing ran before the decision"
    );
    cli(&cfg, &["approve", &run_id, "c1"]);
    let run = wait_finished(&store, &run_id).await;
    assert_eq!(run.status, RunStatus::Succeeded, "{:?}", run.error);
    let calls = lines(&out(d).join("calls.log"));
    assert_eq!(
        calls.iter().filter(|l| *l == "add_note approved").count(),
        1
    );
    sigterm(daemon).await;
}

/// A streamable HTTP server (the same notebook, started by the test): reached because its
/// URL is on the allowlist, with its `Authorization` header's secret filled in — and never
/// logged.
async fn http_server_with_secret_header(db: &TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(out(d)).unwrap();
    let calls = out(d).join("http.log");
    let mut server = tokio::process::Command::new(SERVER)
        .arg("--http")
        .current_dir(d)
        .env("NOTES_CALLS", &calls)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = tokio::io::BufReader::new(server.stdout.take().unwrap());
    let mut first = String::new();
    tokio::io::AsyncBufReadExt::read_line(&mut stdout, &mut first)
        .await
        .unwrap();
    let addr = first
        .trim()
        .strip_prefix("listening on ")
        .unwrap()
        .to_string();

    let turns = json!([
        tool_turn("c1", "mcp__remote__add_note", json!({"text": "over http"})),
        tool_turn("c2", "mcp__remote__read_notes", json!({})),
        text_turn("remote done"),
    ]);
    let extra = format!(
        "[[agents.mcp]]\nname = \"remote\"\ntype = \"http\"\nurl = {}\n\
         headers = {{ Authorization = \"Bearer {{{{secret:NOTES_KEY}}}}\" }}\n",
        q(&format!("http://{addr}/mcp"))
    );
    let body = agent_with(d, "remote", &[], turns, &extra);
    let cfg = config(db, d, &body);
    let text = std::fs::read_to_string(&cfg).unwrap().replacen(
        "[runtime]\n",
        &format!(
            "[runtime]\nhttp_allowlist = [{}]\nsecrets = [\"NOTES_KEY\"]\n",
            q(&addr)
        ),
        1,
    );
    std::fs::write(&cfg, text).unwrap();
    let store = db.store().await;
    let daemon = Serve::new(&cfg).env("NOTES_KEY", "nk-s3cret-4242").spawn();
    let run_id = enqueue(&cfg, "remote");
    let run = wait_finished(&store, &run_id).await;
    assert_eq!(run.status, RunStatus::Succeeded, "{:?}", run.error);
    let log = events(&store, &run_id).await;
    assert_eq!(call_result(&log, "c1"), ("added: over http".into(), false));
    assert_eq!(call_result(&log, "c2"), ("over http\n".into(), false));
    let seen = lines(&calls);
    let auth: Vec<&String> = seen.iter().filter(|l| l.starts_with("auth ")).collect();
    assert!(
        !auth.is_empty() && auth.iter().all(|l| *l == "auth Bearer nk-s3cret-4242"),
        "every request carried the secret: {seen:?}"
    );
    for (e, _) in &log {
        assert!(!e.payload.contains("nk-s3cret-4242"), "{}", e.payload);
    }
    sigterm(daemon).await;
    let _ = server.kill().await;
}
