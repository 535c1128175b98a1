//! The processes of a command tool: `runs cancel` kills a running command and its children
//! within seconds, and a restarted daemon kills the tool processes its SIGKILLed predecessor
//! left, reporting the side effect interrupted rather than running it again.

use std::path::Path;
use std::time::{Duration, Instant};

use nightshift_agent::{EndStatus, RunEvent};
use nightshift_store::RunStatus;
use nightshift_tests::config_text::{agent, command_tool};
use nightshift_tests::process::serve;
use nightshift_tests::{TestDb, eventually};
use serde_json::json;

use super::{
    FAST_WORKER, assert_log_well_formed, cli, enqueue, events, kinds, out, sh_path, sigkill,
    sigterm, text_turn, tool_turn, wait_finished, write_config,
};

/// Whether `pid` is a live process (a zombie is not).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            !(state.starts_with('Z') || state.starts_with('X'))
        }
        Err(_) => false,
    }
}

fn read_pid(path: &Path) -> Option<u32> {
    crate::process::host_pid(&std::fs::read_to_string(path).ok()?)
}

pub(super) async fn cancel_stops_a_running_command(db: &TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (sh_pid, sleep_pid) = (out(d).join("sh.pid"), out(d).join("sleep.pid"));
    let command = format!(
        "echo {} > {}; sleep 30 & echo $! $(readlink /proc/self/ns/pid) > {}; wait; echo late",
        crate::process::SHELL_PID,
        sh_path(&sh_pid),
        sh_path(&sleep_pid)
    );
    let turns = json!([
        tool_turn("call_1", "run_command", json!({"command": command})),
        text_turn("not reached")
    ]);
    let body = agent(d, "sleeper", &["run_command"], turns);
    let worker = "slots = 1\nlease_ms = 5000\nheartbeat_ms = 300\npoll_interval_ms = 100\n";
    let cfg = write_config(db, d, worker, &body);
    let store = db.store().await;
    let serve = serve(&cfg);
    let run_id = enqueue(&cfg, "sleeper");
    let (shell, sleeper) = eventually(Duration::from_secs(30), "the command to start", || async {
        Some((read_pid(&sh_pid)?, read_pid(&sleep_pid)?))
    })
    .await;
    assert!(alive(shell) && alive(sleeper), "the command is running");

    let asked = Instant::now();
    let out = cli(&cfg, &["runs", "cancel", &run_id]);
    assert!(out.contains("cancellation requested"), "{out}");
    let run = wait_finished(&store, &run_id).await;
    let took = asked.elapsed();
    assert_eq!(run.status, RunStatus::Cancelled, "{:?}", run.error);
    assert!(
        took < Duration::from_secs(3),
        "cancelled {took:?} after the request"
    );
    assert!(!alive(shell), "the shell {shell} was killed");
    assert!(!alive(sleeper), "its child {sleeper} was killed");

    let log = events(&store, &run_id).await;
    assert_eq!(
        kinds(&log),
        [
            "run_started",
            "user_message",
            "assistant_message",
            "tool_started",
            "tool_result",
            "finished"
        ],
        "no model call after the cancel"
    );
    assert_log_well_formed(&log);
    match &log[4].1 {
        RunEvent::ToolResult {
            content, is_error, ..
        } => {
            assert!(*is_error, "{content}");
            assert!(content.contains("cancelled"), "{content}");
            assert!(!content.contains("late"), "{content}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        log[5].1,
        RunEvent::Finished {
            status: EndStatus::Cancelled,
            detail: None
        }
    );
    sigterm(serve).await;
}

pub(super) async fn restart_reaps_orphans(db: &TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let pid_file = out(d).join("tool.pid");
    let program = format!(
        "echo {} > {}; exec sleep 60",
        crate::process::SHELL_PID,
        sh_path(&pid_file)
    );
    let body = agent(
        d,
        "orphan",
        &["slow"],
        json!([tool_turn("call_1", "slow", json!({})), text_turn("done")]),
    ) + &command_tool("slow", "side_effect", &program);
    let cfg = write_config(db, d, FAST_WORKER, &body);
    let mut first = serve(&cfg);
    let run_id = enqueue(&cfg, "orphan");
    let pid = eventually(Duration::from_secs(30), "the tool to start", || async {
        read_pid(&pid_file)
    })
    .await;
    sigkill(&mut first).await;
    assert!(
        alive(pid),
        "SIGKILL of the daemon leaves its tool running (the case handled here)"
    );
    let second = serve(&cfg);
    eventually(
        Duration::from_secs(15),
        "the orphaned tool to be killed",
        || async { (!alive(pid)).then_some(()) },
    )
    .await;
    let store = db.store().await;
    let run = wait_finished(&store, &run_id).await;
    assert_eq!(run.status, RunStatus::Succeeded);
    let results: Vec<bool> = events(&store, &run_id)
        .await
        .into_iter()
        .filter_map(|(_, e)| match e {
            RunEvent::ToolResult { interrupted, .. } => Some(interrupted),
            _ => None,
        })
        .collect();
    assert_eq!(
        results,
        vec![true],
        "the side effect is reported as interrupted, not re-run"
    );
    sigterm(second).await;
}
