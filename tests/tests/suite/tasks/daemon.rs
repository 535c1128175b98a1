//! Background tasks through the real `nightshift serve`: a task wakes its run, and a daemon
//! SIGKILLed (or stopped with SIGTERM) with a task running reports it lost after a restart.

use std::path::Path;
use std::time::Duration;

use nightshift_agent::RunEvent;
use nightshift_store::{RunStatus, Store, TaskStatus};
use nightshift_tests::{TestDb, eventually};
use serde_json::json;

use super::task_of;

fn builder(dir: &Path, command: &str, last: &str) -> String {
    use crate::crash::{agent, text_turn, tool_turn};
    "[runtime.background]\nlost_after_seconds = 3\n\n".to_string()
        + &agent(
            dir,
            "builder",
            &["run_command", "task_output"],
            json!([
                tool_turn(
                    "bg1",
                    "run_command",
                    json!({"command": command, "background": true})
                ),
                text_turn("waiting for the build"),
                text_turn(last),
            ]),
        )
}

/// The `task_ended` events of a run: (status, reminder).
async fn endings(store: &Store, run_id: &str) -> Vec<(String, String)> {
    crate::crash::events(store, run_id)
        .await
        .into_iter()
        .filter_map(|(_, e)| match e {
            RunEvent::TaskEnded {
                status, reminder, ..
            } => Some((status, reminder)),
            _ => None,
        })
        .collect()
}

pub(super) async fn task_wakes_run_in_daemon(db: &TestDb) {
    use crate::crash::*;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let body = builder(d, "sleep 1; echo built-ok", "the build passed");
    let cfg = write_config(db, d, FAST_WORKER, &body);
    let store = db.store().await;
    let daemon = serve(&cfg);
    let run_id = enqueue(&cfg, "builder");
    let run = wait_finished(&store, &run_id).await;
    assert_eq!(run.status, RunStatus::Succeeded, "{:?}", run.error);
    assert_eq!(run.result.as_deref(), Some("the build passed"));
    let endings = endings(&store, &run_id).await;
    assert_eq!(endings.len(), 1, "{endings:?}");
    assert_eq!(endings[0].0, "succeeded");
    assert!(endings[0].1.contains("built-ok"), "{}", endings[0].1);
    let log = d
        .join("data/tasks")
        .join(format!("{}.log", task_of(&store, &run_id).await.id));
    assert_eq!(std::fs::read_to_string(log).unwrap(), "built-ok\n");
    let listed = cli(&cfg, &["runs", "tasks", "--run", &run_id]);
    assert!(
        listed.starts_with("TASK") && listed.contains(&run_id) && listed.contains("succeeded"),
        "{listed}"
    );
    let listed = cli(&cfg, &["runs", "tasks", "--run", &run_id, "--json"]);
    let task: serde_json::Value = serde_json::from_str(listed.trim()).expect("one JSON line");
    assert_eq!(task["run_id"], run_id.as_str());
    assert_eq!(task["status"], "succeeded");
    assert_eq!(task["detail"], "exit code 0");
    assert_eq!(task["command"], "sleep 1; echo built-ok");
    let refused = nightshift(&cfg)
        .args(["runs", "tasks", "--status", "done"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("--status") && stderr.contains("timed_out"),
        "{stderr}"
    );
    sigterm(daemon).await;
}

pub(super) async fn daemon_killed_task_lost(db: &TestDb) {
    use crate::crash::*;
    let dir = tempfile::tempdir().unwrap();
    let (cfg, store, mut daemon, run_id, pid) =
        daemon_with_waiting_task(db, dir.path(), "the build was lost; starting over").await;
    sigkill(&mut daemon).await;
    assert!(
        alive(pid),
        "the task outlived its daemon (it is what the restart must clean up)"
    );

    let daemon = serve(&cfg);
    let run = wait_finished(&store, &run_id).await;
    assert_eq!(run.status, RunStatus::Succeeded, "{:?}", run.error);
    assert_eq!(
        run.result.as_deref(),
        Some("the build was lost; starting over")
    );
    assert!(!alive(pid), "the restarted daemon killed the orphaned task");
    let task = task_of(&store, &run_id).await;
    assert_eq!(task.status, TaskStatus::Lost, "{:?}", task.detail);
    let endings = endings(&store, &run_id).await;
    assert_eq!(endings.len(), 1, "{endings:?}");
    assert_eq!(endings[0].0, "lost");
    assert!(endings[0].1.contains("was LOST"), "{}", endings[0].1);
    sigterm(daemon).await;
}

pub(super) async fn daemon_sigterm_task_lost(db: &TestDb) {
    use crate::crash::*;
    let dir = tempfile::tempdir().unwrap();
    let (cfg, store, daemon, run_id, pid) =
        daemon_with_waiting_task(db, dir.path(), "it was stopped; I will run it again later").await;
    sigterm(daemon).await;
    assert!(!alive(pid), "shutdown stops the task");
    let task = task_of(&store, &run_id).await;
    assert_eq!(task.status, TaskStatus::Lost, "{:?}", task.detail);
    assert!(task.detail.as_deref().unwrap_or("").contains("shut down"));
    // The run was woken for it before the daemon exited; the next daemon tells the model.
    let daemon = serve(&cfg);
    let run = wait_finished(&store, &run_id).await;
    assert_eq!(
        run.result.as_deref(),
        Some("it was stopped; I will run it again later")
    );
    let endings = endings(&store, &run_id).await;
    assert_eq!(endings.len(), 1, "{endings:?}");
    assert!(
        endings[0].1.contains("was LOST") && endings[0].1.contains("shut down"),
        "{}",
        endings[0].1
    );
    sigterm(daemon).await;
}

/// Starts `nightshift serve` in `d` with an agent that runs `exec sleep 300` in the
/// background, ends its turn, and answers `last` once it hears how the task ended. Returns
/// when the run waits for its task: the config, the store, the daemon, the run and the
/// task's pid.
async fn daemon_with_waiting_task(
    db: &TestDb,
    d: &Path,
    last: &str,
) -> (std::path::PathBuf, Store, crate::process::Proc, String, u32) {
    use crate::crash::*;
    let pid_file = out(d).join("task.pid");
    let command = format!(
        "echo {} > '{}'; exec sleep 300",
        crate::process::SHELL_PID,
        pid_file.to_str().unwrap()
    );
    let cfg = write_config(db, d, FAST_WORKER, &builder(d, &command, last));
    let store = db.store().await;
    let daemon = serve(&cfg);
    let run_id = enqueue(&cfg, "builder");
    eventually(
        Duration::from_secs(30),
        "the run to wait for its task",
        || async {
            let run = store.run(&run_id).await.unwrap()?;
            (run.status == RunStatus::Waiting).then_some(())
        },
    )
    .await;
    let pid: u32 = eventually(Duration::from_secs(10), "the task's pid", || async {
        crate::process::host_pid(&std::fs::read_to_string(&pid_file).ok()?)
    })
    .await;
    (cfg, store, daemon, run_id, pid)
}

/// Whether process `pid` runs (exists and is not a zombie).
pub(super) fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}
