//! Background commands over a real store on both backends, through the agent runtime with the
//! real tool box and supervisor: a run that ends its turn while its task runs parks holding no
//! worker, is woken when the task ends and hears how it ended in the same conversation; a task
//! whose daemon stopped refreshing it is reported lost, never succeeded; a cancelled run's task
//! is stopped. The task rows themselves (first ending wins, lost after a stale heartbeat, woken
//! runs) are in the store's conformance suite (`store-conformance/src/tasks.rs`).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use nightshift_agent::task_keeper::{BackgroundConfig, TaskKeeper, supervisor};
use nightshift_agent::{AgentRuntime, RunEvent};
use nightshift_llm::{ContentBlock, StopReason};
use nightshift_runner::config::Config;
use nightshift_runner::toolbox::Tools;
use nightshift_store::{JobKind, JobState, NewTask, ResumeReason, RunStatus, Store, TaskStatus};
use nightshift_tests::{TestDb, eventually, on_both_backends};
use nightshift_tools::TaskSupervisor;
use nightshift_worker::JobOutcome;
use serde_json::json;

use super::fakes::*;

on_both_backends! {
    a_run_waits_for_its_background_task_and_hears_how_it_ended => run_waits_for_task;
    a_task_whose_daemon_stopped_is_reported_lost_never_succeeded => task_reported_lost;
    a_cancelled_runs_task_is_stopped => cancelled_run_stops_task;
    task_stop_on_another_daemon_reaches_the_owner => task_stop_from_another_daemon;
    an_interrupted_background_start_names_its_task => interrupted_start_names_task;
}

fn new_task<'a>(id: &'a str, run_id: &'a str, owner: &'a str) -> NewTask<'a> {
    NewTask {
        id,
        run_id,
        call_id: id,
        command: "make",
        owner,
        deadline_at: 10_000_000,
    }
}

/// A runtime with the real tool box (run_command, task_output) under `supervisor`, and the
/// scripted `model`.
fn runtime(dir: &Path, model: Arc<ScriptModel>, tasks: TaskSupervisor) -> Arc<AgentRuntime> {
    // Sandboxed like the daemon's; this test binary is no launcher, the nightshift binary is.
    let text = format!(
        "[runtime]\ndata_dir = {}\n\n[sandbox]\nlauncher = {}\n\n\
         [[agents]]\nname = \"builder\"\nprovider = \"scripted\"\n\
         model = \"scripted-1\"\ntools = [\"run_command\", \"task_output\"]\n",
        json!(dir.join("data").to_str().unwrap()),
        json!(super::process::nightshift_bin().to_str().unwrap())
    );
    let mut config = Config::parse(&text, "test config").unwrap();
    config.base_dir = dir.to_path_buf();
    let agent = config.agents[0].resolve(dir).unwrap();
    let tools = Tools::build(&config).unwrap().with_tasks(tasks);
    Arc::new(AgentRuntime::new([agent], model, Arc::new(tools)))
}

fn background(command: &str) -> ContentBlock {
    ContentBlock::ToolUse {
        id: "bg1".into(),
        name: "run_command".into(),
        input: json!({"command": command, "background": true}),
        unparsed: None,
    }
}

struct Setup {
    h: Harness,
    dir: tempfile::TempDir,
    supervisor: TaskSupervisor,
    keeper: TaskKeeper,
}

async fn setup(db: &TestDb, model: Arc<ScriptModel>, owner: &str) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let (store, clock) = db.manual().await;
    let config = BackgroundConfig::default();
    let supervisor = supervisor(&store, owner, dir.path().join("tasks"), &config);
    let runtime = runtime(dir.path(), model, supervisor.clone());
    let keeper = TaskKeeper::new(store.clone(), owner, supervisor.clone(), &config);
    Setup {
        h: Harness {
            store,
            clock,
            runtime,
        },
        dir,
        supervisor,
        keeper,
    }
}

async fn task_of(store: &Store, run_id: &str) -> nightshift_store::Task {
    store.tasks_of_run(run_id).await.unwrap().remove(0)
}

async fn run_waits_for_task(db: &TestDb) {
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

async fn task_reported_lost(db: &TestDb) {
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

/// The pid a test task wrote to `task.pid` in its run's workspace.
async fn task_pid(dir: &Path, run_id: &str) -> u32 {
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

async fn cancelled_run_stops_task(db: &TestDb) {
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

async fn task_stop_from_another_daemon(db: &TestDb) {
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

async fn interrupted_start_names_task(db: &TestDb) {
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
struct NoLedger;

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

// ---- through the real daemon ---------------------------------------------------------------

on_both_backends! {
    a_background_task_wakes_its_run_in_the_daemon => task_wakes_run_in_daemon;
    a_daemon_killed_with_a_task_running_reports_it_lost_after_restart => daemon_killed_task_lost;
    a_daemon_stopped_with_sigterm_stops_its_task_and_reports_it_lost => daemon_sigterm_task_lost;
}

fn builder(dir: &Path, command: &str, last: &str) -> String {
    use super::crash::{agent, text_turn, tool_turn};
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
    super::crash::events(store, run_id)
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

async fn task_wakes_run_in_daemon(db: &TestDb) {
    use super::crash::*;
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

async fn daemon_killed_task_lost(db: &TestDb) {
    use super::crash::*;
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

async fn daemon_sigterm_task_lost(db: &TestDb) {
    use super::crash::*;
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
) -> (std::path::PathBuf, Store, super::process::Proc, String, u32) {
    use super::crash::*;
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
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}
