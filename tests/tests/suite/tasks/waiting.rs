//! A run waiting for its background task: it ends its turn while the task runs, parks holding
//! no worker, is woken when the task ends and hears how it ended in the same conversation; a
//! task whose daemon stopped refreshing it is reported lost, never succeeded.

use std::sync::Arc;
use std::time::Duration;

use nightshift_agent::RunEvent;
use nightshift_agent::task_keeper::{BackgroundConfig, TaskKeeper};
use nightshift_llm::StopReason;
use nightshift_store::{JobKind, JobState, ResumeReason, RunStatus, TaskStatus};
use nightshift_tests::{TestDb, eventually};
use nightshift_tools::TaskSupervisor;
use nightshift_worker::JobOutcome;

use super::daemon::alive;
use super::stopping::{NoLedger, task_pid};
use super::{background, setup, task_of};
use crate::fakes::*;

pub(super) async fn run_waits_for_task(db: &TestDb) {
    let model = ScriptModel::new(vec![
        reply(
            vec![
                text("Starting the build."),
                background("while [ ! -f go ]; do sleep 0.05; done; echo build-ok"),
            ],
            StopReason::ToolUse,
        ),
        reply(vec![text("Waiting for the build.")], StopReason::EndTurn),
        reply(vec![text("The build passed.")], StopReason::EndTurn),
    ]);
    let s = setup(db, model.clone(), "daemon-1").await;
    let h = &s.h;
    let run_id = h.enqueue("builder", "Build it.").await;
    let outcome = h.run_once().await;
    let JobOutcome::Park { until, payload } = outcome else {
        panic!("the run should wait for its task, got {outcome:?}");
    };
    let task = task_of(&h.store, &run_id).await;
    assert_eq!(task.status, TaskStatus::Running);
    assert_eq!(until, task.deadline_at + 60_000, "armed past the deadline");
    assert_eq!(
        ResumeReason::from_payload(&payload),
        Some(ResumeReason::Task {
            task_id: task.id.clone()
        })
    );
    assert_eq!(h.status(&run_id).await.0, RunStatus::Waiting);
    let listed = h.store.pending_wakeups(10).await.unwrap();
    assert_eq!(
        listed[0].reason(),
        Some(format!("waiting for background task {}", task.id))
    );
    let started = model.request(1);
    let answer = tool_results(started.messages.last().unwrap()).remove(0).1;
    assert!(
        answer.starts_with(&format!("started background task {}", task.id)),
        "{answer}"
    );

    // The task ends: the run is woken at once, not at the armed time.
    let workspace = s.dir.path().join("data/workspaces").join(&run_id);
    std::fs::write(workspace.join("go"), "").unwrap();
    let woken = eventually(Duration::from_secs(15), "the run to be woken", || async {
        let jobs = h.store.jobs_of_run(&run_id).await.unwrap();
        let last = jobs.last().cloned()?;
        (last.status == JobState::Queued && last.run_at < until).then_some(last)
    })
    .await;
    assert_eq!(woken.kind, JobKind::Resume);
    assert_eq!(woken.dedupe_key, Some(format!("task:{}", task.id)));
    let done = h.run_once().await;
    assert!(matches!(done, JobOutcome::Done(_)), "{done:?}");
    assert_eq!(
        h.status(&run_id).await,
        (RunStatus::Succeeded, Some("The build passed.".into()), None)
    );
    let reported: Vec<_> = h
        .events(&run_id)
        .await
        .into_iter()
        .filter_map(|e| match e {
            RunEvent::TaskEnded {
                task_id,
                status,
                reminder,
            } => Some((task_id, status, reminder)),
            _ => None,
        })
        .collect();
    assert_eq!(reported.len(), 1, "reported once");
    assert_eq!(
        (reported[0].0.as_str(), reported[0].1.as_str()),
        (task.id.as_str(), "succeeded")
    );
    // The model read it at the bottom of the same conversation.
    let last = model.request(2);
    assert_eq!(
        last.messages.len(),
        5,
        "prompt, call, result, wait, reminder"
    );
    let reminder = last.messages.last().unwrap().text();
    assert!(
        reminder.starts_with(&format!("[Background task {} (`while", task.id))
            && reminder.contains("finished")
            && reminder.contains("build-ok"),
        "{reminder}"
    );
    assert!(
        task_of(&h.store, &run_id).await.reported_at.is_some(),
        "marked reported"
    );
}

pub(super) async fn task_reported_lost(db: &TestDb) {
    let model = ScriptModel::new(vec![
        reply(
            vec![background(&format!(
                "echo {} > task.pid; exec sleep 300",
                crate::process::SHELL_PID
            ))],
            StopReason::ToolUse,
        ),
        reply(vec![text("Waiting.")], StopReason::EndTurn),
        reply(
            vec![text("It was lost; starting over.")],
            StopReason::EndTurn,
        ),
    ]);
    // Daemon A runs the task and then goes silent (never heartbeats); daemon B's keeper
    // notices.
    let s = setup(db, model.clone(), "daemon-a").await;
    let h = &s.h;
    let run_id = h.enqueue("builder", "Build it.").await;
    assert!(matches!(h.run_once().await, JobOutcome::Park { .. }));
    // Its pid once it runs (a sandboxed start takes a moment).
    let pid = task_pid(s.dir.path(), &run_id).await;
    let other = TaskKeeper::new(
        h.store.clone(),
        "daemon-b",
        TaskSupervisor::new(s.dir.path().join("b"), Arc::new(NoLedger)),
        &BackgroundConfig::default(),
    );
    other.tick().await.unwrap();
    assert_eq!(
        task_of(&h.store, &run_id).await.status,
        TaskStatus::Running,
        "fresh heartbeat: not lost"
    );
    h.clock.advance(Duration::from_secs(31));
    other.tick().await.unwrap();
    let task = task_of(&h.store, &run_id).await;
    assert_eq!(task.status, TaskStatus::Lost);
    h.run_once().await;
    assert_eq!(
        h.status(&run_id).await,
        (
            RunStatus::Succeeded,
            Some("It was lost; starting over.".into()),
            None
        )
    );
    let reminder = model.request(2).messages.last().unwrap().text();
    assert!(
        reminder.contains("was LOST") && reminder.contains("do not assume it succeeded"),
        "{reminder}"
    );
    // Daemon A comes back: its next refresh learns the task was marked lost and kills it
    // (the model may start it again); the lost row stays lost.
    s.keeper.tick().await.unwrap();
    eventually(
        Duration::from_secs(10),
        "daemon A to kill the task",
        || async { s.supervisor.running_ids().is_empty().then_some(()) },
    )
    .await;
    assert!(!alive(pid), "the task no longer runs");
    assert_eq!(
        task_of(&h.store, &run_id).await.status,
        TaskStatus::Lost,
        "first ending wins"
    );
}
