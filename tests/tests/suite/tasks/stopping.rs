//! Stopping tasks: a cancelled run's task is stopped, a `task_stop` asked on another daemon
//! reaches the task's owner, and an interrupted background start names its task.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use nightshift_agent::task_keeper::{BackgroundConfig, supervisor};
use nightshift_llm::StopReason;
use nightshift_store::{NewTask, RunStatus, TaskStatus};
use nightshift_tests::{TestDb, eventually};
use nightshift_worker::JobOutcome;
use serde_json::json;

use super::daemon::alive;
use super::{background, new_task, setup, task_of};
use crate::fakes::*;

/// The pid a test task wrote to `task.pid` in its run's workspace.
pub(super) async fn task_pid(dir: &Path, run_id: &str) -> u32 {
    let pid_file = dir.join("data/workspaces").join(run_id).join("task.pid");
    let written = eventually(Duration::from_secs(10), "the task to start", || async {
        std::fs::read_to_string(&pid_file)
            .ok()
            .filter(|t| t.ends_with('\n'))
    })
    .await;
    eventually(Duration::from_secs(30), "the task's process", || async {
        crate::process::host_pid(&written)
    })
    .await
}

pub(super) async fn cancelled_run_stops_task(db: &TestDb) {
    let model = ScriptModel::new(vec![
        reply(
            vec![background(&format!(
                "echo {} > task.pid; exec sleep 300",
                crate::process::SHELL_PID
            ))],
            StopReason::ToolUse,
        ),
        reply(vec![text("Waiting.")], StopReason::EndTurn),
    ]);
    let s = setup(db, model, "daemon-1").await;
    let h = &s.h;
    let run_id = h.enqueue("builder", "Build it.").await;
    assert!(matches!(h.run_once().await, JobOutcome::Park { .. }));
    let pid = task_pid(s.dir.path(), &run_id).await;
    h.store.cancel_run(&run_id).await.unwrap();
    assert_eq!(h.status(&run_id).await.0, RunStatus::Cancelled);
    s.keeper.tick().await.unwrap();
    let task = eventually(Duration::from_secs(10), "the task to stop", || async {
        let t = task_of(&h.store, &run_id).await;
        (t.status != TaskStatus::Running).then_some(t)
    })
    .await;
    assert_eq!(task.status, TaskStatus::Stopped, "{:?}", task.detail);
    assert!(!alive(pid), "the process is gone");
}

pub(super) async fn task_stop_from_another_daemon(db: &TestDb) {
    let model = ScriptModel::new(vec![
        reply(
            vec![background(&format!(
                "echo {} > task.pid; exec sleep 300",
                crate::process::SHELL_PID
            ))],
            StopReason::ToolUse,
        ),
        reply(vec![text("Waiting.")], StopReason::EndTurn),
    ]);
    let s = setup(db, model, "daemon-a").await;
    let h = &s.h;
    let run_id = h.enqueue("builder", "Build it.").await;
    assert!(matches!(h.run_once().await, JobOutcome::Park { .. }));
    let pid = task_pid(s.dir.path(), &run_id).await;
    let task = task_of(&h.store, &run_id).await;
    // The run resumed on daemon B, whose model calls task_stop.
    let b = supervisor(
        &h.store,
        "daemon-b",
        s.dir.path().join("b"),
        &BackgroundConfig::default(),
    );
    let ctx = nightshift_tools::ToolContext::new(&run_id, "call-b", s.dir.path(), s.dir.path())
        .unwrap()
        .with_tasks(b);
    let out = nightshift_tools::Tool::call(
        &nightshift_tools::TaskStop,
        &ctx,
        json!({"task_id": task.id}),
    )
    .await;
    assert!(!out.is_error, "{}", out.content);
    assert!(out.content.contains("stop requested"), "{}", out.content);
    assert!(alive(pid), "only the owner can kill it");
    s.keeper.tick().await.unwrap();
    let ended = eventually(Duration::from_secs(10), "the owner to stop it", || async {
        let t = task_of(&h.store, &run_id).await;
        (t.status != TaskStatus::Running).then_some(t)
    })
    .await;
    assert_eq!(ended.status, TaskStatus::Stopped, "{:?}", ended.detail);
    assert!(!alive(pid));
}

pub(super) async fn interrupted_start_names_task(db: &TestDb) {
    let model = ScriptModel::new(vec![
        reply(vec![call("c1", "run_command")], StopReason::ToolUse),
        reply(vec![text("Waiting for it.")], StopReason::EndTurn),
    ]);
    let tools = Arc::new(FakeTools::default());
    *tools.stall.lock().unwrap() = Some("run_command".into());
    let h = Harness::new(
        db,
        agent(json!({"tools": ["run_command"]})),
        model.clone(),
        tools.clone(),
    )
    .await;
    let run_id = h.enqueue("helper", "Build it.").await;
    // The worker dies inside the call, after the call recorded its task.
    h.crash_when(&tools.stalled).await;
    h.store
        .start_task(&NewTask {
            call_id: "c1",
            deadline_at: h.store.now() + 3_600_000,
            ..new_task("task_0123456789ab", &run_id, "dead-daemon")
        })
        .await
        .unwrap();
    h.store.heartbeat_tasks("dead-daemon").await.unwrap();
    *tools.stall.lock().unwrap() = None;
    let outcome = h.run_once().await;
    assert!(matches!(outcome, JobOutcome::Park { .. }), "{outcome:?}");
    assert_eq!(
        tools.calls().len(),
        1,
        "a side-effect call never runs twice"
    );
    let result = tool_results(model.request(1).messages.last().unwrap()).remove(0);
    assert!(result.2, "still an error result");
    assert!(
        result
            .1
            .contains("already started background task task_0123456789ab")
            && result.1.contains("Do not start the command again"),
        "{}",
        result.1
    );
}

/// A ledger that knows nothing (the other daemon runs no task of its own here).
pub(super) struct NoLedger;

impl nightshift_tools::TaskLedger for NoLedger {
    fn started<'a>(
        &'a self,
        _task: &'a nightshift_tools::StartedTask,
    ) -> futures::future::BoxFuture<'a, Result<(), String>> {
        Box::pin(async { Err("not here".to_string()) })
    }

    fn ended<'a>(
        &'a self,
        _task: &'a nightshift_tools::EndedTask,
    ) -> futures::future::BoxFuture<'a, Result<(), String>> {
        Box::pin(async { Ok(()) })
    }

    fn lookup<'a>(
        &'a self,
        _id: &'a str,
    ) -> futures::future::BoxFuture<'a, Option<nightshift_tools::TaskSnapshot>> {
        Box::pin(async { None })
    }

    fn request_stop<'a>(
        &'a self,
        _id: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<bool, String>> {
        Box::pin(async { Ok(false) })
    }
}
