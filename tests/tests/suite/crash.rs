//! Crashes and cancellation of the real `nightshift serve`, driven through the CLI with a
//! scripted model and real command tools: SIGKILL while a tool of each durability class is
//! between `tool_started` and `tool_result`, SIGKILL between model turns, and `runs cancel`
//! stopping a running command.
//!
//! The kills are in `kills`, the command processes in `tool_processes`; the config, CLI and
//! run-log helpers here are shared with the other real-daemon suites.

mod kills;
mod tool_processes;

use std::path::{Path, PathBuf};
use std::time::Duration;

use nightshift_agent::RunEvent;
use nightshift_store::{Event, Run, Store};
use nightshift_tests::{TestDb, eventually, on_both_backends};
use serde_json::{Value, json};

use crate::process::Proc;
use kills::{sigkill_between_model_turns, sigkill_mid_tool_call};
use tool_processes::{cancel_stops_a_running_command, restart_reaps_orphans};

/// The config pieces every suite writes (shared with the browser tests).
pub(crate) use nightshift_tests::config_text::{agent, command_tool, q};
/// `nightshift --config cfg …` and `nightshift serve`, from the tests' library.
pub(crate) use nightshift_tests::process::{nightshift, serve};

on_both_backends! {
    sigkill_mid_tool_call_recovers_each_durability_class => sigkill_mid_tool_call;
    sigkill_between_model_turns_repeats_no_turn => sigkill_between_model_turns;
    runs_cancel_stops_a_running_command_within_seconds => cancel_stops_a_running_command;
    a_restarted_daemon_kills_the_tool_processes_its_predecessor_left => restart_reaps_orphans;
}

/// Short leases, so a SIGKILLed daemon's jobs are reclaimed quickly.
pub(crate) const FAST_WORKER: &str =
    "slots = 3\nlease_ms = 1500\nheartbeat_ms = 300\npoll_interval_ms = 100\n";

/// A path for a `sh -c` program, single-quoted.
fn sh_path(p: &Path) -> String {
    let s = p.to_str().expect("a UTF-8 path");
    assert!(!s.contains('\''), "no quotes in temp paths: {s}");
    format!("'{s}'")
}

/// The directory beside the data directory that the tests' commands may write (granted in
/// `[sandbox] write` by [`write_config`]): logs, pid files and gates shared with the test.
pub(crate) fn out(dir: &Path) -> PathBuf {
    dir.join("out")
}

/// Writes `nightshift.toml` in `dir`: the test's database, `worker`, data under `dir/data`,
/// commands sandboxed with [`out`] writable, and `body` (providers, agents, command tools).
/// `schema = "…"` for a `[database]` table, when the test's database has its own schema.
pub(crate) fn schema_setting(db: &TestDb) -> String {
    db.config
        .schema
        .as_deref()
        .map(|s| format!("schema = {}\n", q(s)))
        .unwrap_or_default()
}

pub(crate) fn write_config(db: &TestDb, dir: &Path, worker: &str, body: &str) -> PathBuf {
    std::fs::create_dir_all(out(dir)).unwrap();
    let text = format!(
        "[database]\nurl = {}\n{}\n[worker]\n{worker}\n\
         [server]\naddress = \"127.0.0.1:0\"\n\n[runtime]\ndata_dir = \"data\"\n\n\
         [sandbox]\nwrite = [{}]\n\n{body}",
        q(&db.config.url),
        schema_setting(db),
        q(out(dir).to_str().unwrap()),
    );
    let path = dir.join("nightshift.toml");
    std::fs::write(&path, text).unwrap();
    path
}

pub(crate) fn tool_turn(call_id: &str, tool: &str, input: Value) -> Value {
    json!({"content": [{"type": "tool_use", "id": call_id, "name": tool, "input": input}],
           "stop_reason": "tool_use"})
}

pub(crate) fn text_turn(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}], "stop_reason": "end_turn"})
}

/// Runs a one-shot CLI command that must succeed; returns its stdout.
pub(crate) fn cli(cfg: &Path, args: &[&str]) -> String {
    let out = nightshift(cfg).args(args).output().expect("run nightshift");
    assert!(
        out.status.success(),
        "nightshift {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `nightshift run AGENT PROMPT`; returns the run id.
pub(crate) fn enqueue(cfg: &Path, agent: &str) -> String {
    let out = cli(cfg, &["run", agent, "Call your tool."]);
    out.split('\t').next().unwrap().trim().to_string()
}

pub(crate) async fn sigkill(serve: &mut Proc) {
    serve.signal("KILL");
    let status = serve.wait_exit(Duration::from_secs(10)).await;
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9),
        "serve died of SIGKILL"
    );
}

pub(crate) async fn sigterm(mut serve: Proc) {
    serve.signal("TERM");
    let status = serve.wait_exit(Duration::from_secs(20)).await;
    assert!(
        status.success(),
        "serve exits cleanly on SIGTERM: {status:?}"
    );
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .map(|t| t.lines().map(str::to_string).collect())
        .unwrap_or_default()
}

/// The run's events, parsed.
/// The result of tool call `call_id` in a run's `log` (from [`events`]): its text and whether
/// it is an error. Panics when the call has no result.
pub(crate) fn call_result(log: &[(Event, RunEvent)], call_id: &str) -> (String, bool) {
    log.iter()
        .find_map(|(_, e)| match e {
            RunEvent::ToolResult {
                call_id: id,
                content,
                is_error,
                ..
            } if id == call_id => Some((content.clone(), *is_error)),
            _ => None,
        })
        .unwrap_or_else(|| panic!("a result for {call_id}"))
}

pub(crate) async fn events(store: &Store, run_id: &str) -> Vec<(Event, RunEvent)> {
    store
        .events(run_id, 0)
        .await
        .unwrap()
        .into_iter()
        .map(|e| {
            let parsed = RunEvent::parse(&e.event_type, &e.payload).unwrap();
            (e, parsed)
        })
        .collect()
}

pub(crate) fn kinds(events: &[(Event, RunEvent)]) -> Vec<&str> {
    events.iter().map(|(e, _)| e.event_type.as_str()).collect()
}

pub(crate) async fn wait_finished(store: &Store, run_id: &str) -> Run {
    eventually(
        Duration::from_secs(60),
        &format!("run {run_id} to finish"),
        || async {
            let run = store.run(run_id).await.unwrap()?;
            run.status.is_terminal().then_some(run)
        },
    )
    .await
}

/// Seqs are 1..=n with no gaps; every call id has exactly one `tool_started` followed by
/// exactly one `tool_result`, and no result lacks its start.
fn assert_log_well_formed(events: &[(Event, RunEvent)]) {
    let seqs: Vec<i64> = events.iter().map(|(e, _)| e.seq).collect();
    let expected: Vec<i64> = (1..=events.len() as i64).collect();
    assert_eq!(seqs, expected, "seqs are 1..=n, in order, with no gaps");
    let mut starts = Vec::new();
    let mut results = Vec::new();
    for (e, parsed) in events {
        match parsed {
            RunEvent::ToolStarted { call_id, .. } => starts.push((call_id.clone(), e.seq)),
            RunEvent::ToolResult { call_id, .. } => results.push((call_id.clone(), e.seq)),
            _ => {}
        }
    }
    for (id, start_seq) in &starts {
        let n = starts.iter().filter(|(c, _)| c == id).count();
        assert_eq!(n, 1, "exactly one tool_started for {id}: {starts:?}");
        let mine: Vec<i64> = results
            .iter()
            .filter(|(c, _)| c == id)
            .map(|(_, s)| *s)
            .collect();
        assert_eq!(
            mine.len(),
            1,
            "exactly one tool_result for {id}: {results:?}"
        );
        assert!(mine[0] > *start_seq, "{id}: the result follows its start");
    }
    assert_eq!(starts.len(), results.len(), "no result without a start");
}
