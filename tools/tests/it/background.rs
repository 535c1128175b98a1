//! Background commands with real processes: `run_command {background: true}` returns a task
//! id at once (recorded in the ledger first), the ending reaches the ledger (success only for
//! exit code 0; failures, timeouts, stops and shutdowns each say so), `task_output` and
//! `task_stop` see only the run's own tasks, stopping kills the whole process group, secrets
//! never reach the log, and a ledger refusal runs nothing.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use nightshift_tools::{
    EndedTask, Limits, RunCommand, SecretResolver, StartedTask, TaskEnding, TaskLedger, TaskOutput,
    TaskSnapshot, TaskStop, TaskSupervisor, ToolContext,
};
use serde_json::json;

use crate::common::{Fixture, call, gone_by, wait_for_pid};

/// A ledger in memory; `refuse` makes `started` fail with that message.
#[derive(Default)]
struct MemoryLedger {
    started: Mutex<Vec<StartedTask>>,
    ended: Mutex<Vec<EndedTask>>,
    stop_requests: Mutex<Vec<String>>,
    refuse: Option<String>,
}

impl TaskLedger for MemoryLedger {
    fn started<'a>(&'a self, task: &'a StartedTask) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            if let Some(why) = &self.refuse {
                return Err(why.clone());
            }
            self.started.lock().unwrap().push(task.clone());
            Ok(())
        })
    }

    fn ended<'a>(&'a self, task: &'a EndedTask) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            self.ended.lock().unwrap().push(task.clone());
            Ok(())
        })
    }

    fn request_stop<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<bool, String>> {
        Box::pin(async move {
            self.stop_requests.lock().unwrap().push(id.to_string());
            Ok(true)
        })
    }

    fn lookup<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Option<TaskSnapshot>> {
        Box::pin(async move {
            let started = self.started.lock().unwrap();
            let s = started.iter().find(|s| s.id == id)?;
            let ended = self.ended.lock().unwrap();
            let e = ended.iter().find(|e| e.id == id);
            Some(TaskSnapshot {
                run_id: s.run_id.clone(),
                command: s.command.clone(),
                ending: e.map(|e| e.ending),
                detail: e.map(|e| e.detail.clone()),
                output_tail: e.map(|e| e.output_tail.clone()),
                output_bytes: e.map_or(0, |e| e.output_bytes),
            })
        })
    }
}

impl MemoryLedger {
    async fn wait_ended(&self, id: &str) -> EndedTask {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(e) = self.ended.lock().unwrap().iter().find(|e| e.id == id) {
                return e.clone();
            }
            assert!(Instant::now() < deadline, "task {id} never ended");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A workspace, an in-memory ledger, a supervisor over it and a context that can use it.
fn fixture() -> (Fixture, Arc<MemoryLedger>, TaskSupervisor, ToolContext) {
    let fx = Fixture::new();
    let ledger = Arc::new(MemoryLedger::default());
    let (supervisor, ctx) = setup(&fx, ledger.clone());
    (fx, ledger, supervisor, ctx)
}

fn setup(fx: &Fixture, ledger: Arc<MemoryLedger>) -> (TaskSupervisor, ToolContext) {
    let supervisor = TaskSupervisor::new(fx.root.join("tasks"), ledger);
    let ctx = fx.ctx().with_tasks(supervisor.clone());
    (supervisor, ctx)
}

/// Starts `command` in the background for `ctx`; its task id.
async fn start(ctx: &ToolContext, command: &str) -> String {
    let out = call(
        &RunCommand,
        ctx,
        json!({"command": command, "background": true}),
    )
    .await;
    assert!(!out.is_error, "{}", out.content);
    task_id(&out.content)
}

/// Asks for `command` in the background and checks that it was refused saying `why`.
async fn refused(ctx: &ToolContext, command: &str, why: &str) {
    let out = call(
        &RunCommand,
        ctx,
        json!({"command": command, "background": true}),
    )
    .await;
    assert!(out.is_error && out.content.contains(why), "{}", out.content);
}

/// The task id in run_command's answer.
fn task_id(content: &str) -> String {
    let start = content.find("task_").expect("a task id");
    content[start..start + 17].to_string()
}

#[tokio::test]
async fn a_background_command_returns_at_once_and_its_success_is_reported() {
    let (fx, ledger, supervisor, ctx) = fixture();
    let out = call(
        &RunCommand,
        &ctx,
        json!({"command": "echo begun; sleep 1; echo finished-marker; pwd", "background": true}),
    )
    .await;
    assert!(!out.is_error, "{}", out.content);
    assert!(
        ledger.ended.lock().unwrap().is_empty(),
        "the call returned before the command ended"
    );
    let id = task_id(&out.content);
    let recorded = ledger.started.lock().unwrap().clone();
    assert_eq!(recorded.len(), 1, "recorded before the id was returned");
    assert_eq!(
        (
            recorded[0].id.as_str(),
            recorded[0].run_id.as_str(),
            recorded[0].call_id.as_str()
        ),
        (id.as_str(), "run-1", "call-7")
    );

    let running = call(&TaskOutput, &ctx, json!({"task_id": id})).await;
    assert!(!running.is_error, "{}", running.content);
    assert!(running.content.contains(": running"), "{}", running.content);

    let ended = ledger.wait_ended(&id).await;
    assert_eq!(ended.ending, TaskEnding::Succeeded);
    assert_eq!(ended.exit_code, Some(0));
    assert!(
        ended.output_tail.contains("begun\nfinished-marker\n"),
        "{}",
        ended.output_tail
    );
    assert!(
        ended
            .output_tail
            .contains(&fx.workspace.display().to_string()),
        "runs in the workspace: {}",
        ended.output_tail
    );
    let log = std::fs::read_to_string(supervisor.log_path(&id)).unwrap();
    assert!(log.starts_with("begun\nfinished-marker\n"), "{log}");

    let after = call(&TaskOutput, &ctx, json!({"task_id": id})).await;
    assert!(after.content.contains(": succeeded"), "{}", after.content);
    assert!(
        after.content.contains("finished-marker"),
        "{}",
        after.content
    );
}

#[tokio::test]
async fn failures_and_timeouts_are_reported_as_such_and_a_timeout_kills_the_group() {
    let (fx, ledger, _supervisor, ctx) = fixture();
    let failed = ledger
        .wait_ended(&start(&ctx, "echo broken >&2; exit 3").await)
        .await;
    assert_eq!(
        (failed.ending, failed.exit_code),
        (TaskEnding::Failed, Some(3))
    );
    assert!(failed.output_tail.contains("broken"), "stderr is kept too");

    let pid_file = fx.ws("child.pid");
    let slow = call(
        &RunCommand,
        &ctx,
        json!({
            "command": "sh -c 'trap \"\" TERM; echo $$ > child.pid; while true; do sleep 0.1; done'",
            "background": true,
            "timeout_seconds": 1
        }),
    )
    .await;
    assert!(!slow.is_error, "{}", slow.content);
    let child = wait_for_pid(&pid_file).await;
    let timed_out = ledger.wait_ended(&task_id(&slow.content)).await;
    assert_eq!(timed_out.ending, TaskEnding::TimedOut);
    assert!(
        gone_by(child, Instant::now() + Duration::from_secs(5)).await,
        "a child ignoring SIGTERM is killed too"
    );
}

#[tokio::test]
async fn task_stop_kills_the_process_group_and_tasks_are_private_to_their_run() {
    let (fx, ledger, supervisor, ctx) = fixture();
    let id = start(&ctx, "sh -c 'echo $$ > worker.pid; sleep 60' & wait").await;
    let child = wait_for_pid(&fx.ws("worker.pid")).await;

    let other_run = ToolContext::new("run-2", "call-1", &fx.workspace, &fx.artifacts)
        .unwrap()
        .with_tasks(supervisor.clone());
    for tool in [&TaskOutput as &dyn nightshift_tools::Tool, &TaskStop] {
        let refused = call(tool, &other_run, json!({"task_id": id})).await;
        assert!(refused.is_error, "{}", refused.content);
        assert!(
            refused.content.contains("no background task"),
            "{}",
            refused.content
        );
    }
    assert!(
        !crate::common::process_gone(child),
        "another run cannot stop it"
    );

    let stopped = call(&TaskStop, &ctx, json!({"task_id": id})).await;
    assert!(!stopped.is_error, "{}", stopped.content);
    assert!(stopped.content.contains(": stopped"), "{}", stopped.content);
    assert!(
        gone_by(child, Instant::now() + Duration::from_secs(5)).await,
        "the grandchild is killed with the group"
    );
    assert_eq!(ledger.wait_ended(&id).await.ending, TaskEnding::Stopped);
    let again = call(&TaskStop, &ctx, json!({"task_id": id})).await;
    assert!(again.content.contains(": stopped"), "{}", again.content);
    assert_eq!(ledger.ended.lock().unwrap().len(), 1, "ended once");

    for tool in [&TaskOutput as &dyn nightshift_tools::Tool, &TaskStop] {
        let bad = call(tool, &ctx, json!({"id": "task_000000000000"})).await;
        assert!(
            bad.is_error && bad.content.contains("invalid input") && bad.content.contains("id"),
            "{}",
            bad.content
        );
    }
    let unknown = call(&TaskOutput, &ctx, json!({"task_id": "task_000000000000"})).await;
    assert!(unknown.is_error && unknown.content.contains("no background task"));
}

#[tokio::test]
async fn secrets_never_reach_the_log_the_record_or_the_ending() {
    let (_fx, ledger, supervisor, ctx) = fixture();
    let ctx = ctx.with_secrets(SecretResolver::from_map([("TOKEN", "abc123xyz")]));
    let id = start(&ctx, "echo token=abc123xyz; printf 'no newline abc123xyz'").await;
    let ended = ledger.wait_ended(&id).await;
    let log = std::fs::read_to_string(supervisor.log_path(&id)).unwrap();
    let record = ledger.started.lock().unwrap()[0].command.clone();
    for text in [&log, &ended.output_tail, &record] {
        assert!(!text.contains("abc123xyz"), "leaked: {text}");
        assert!(text.contains("[REDACTED:TOKEN]"), "{text}");
    }
}

/// A quiet task's newest line is in its log soon, although the redactor (here with secrets
/// whose encoded forms are hundreds of bytes long) holds back the end of the output in case a
/// secret straddles the next write; the secret is still redacted.
#[tokio::test]
async fn a_quiet_tasks_newest_line_reaches_its_log() {
    let (_fx, _ledger, supervisor, ctx) = fixture();
    let long = "k".repeat(300);
    let ctx = ctx.with_secrets(SecretResolver::from_map([
        ("LONG", long.as_str()),
        ("TOKEN", "abc123xyz"),
    ]));
    let id = start(&ctx, "echo 'progress 1: abc123xyz'; sleep 30").await;
    let log = supervisor.log_path(&id);
    let deadline = Instant::now() + Duration::from_secs(10);
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("progress 1") {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "the quiet task's line never reached its log: {text:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(text, "progress 1: [REDACTED:TOKEN]\n");
    let out = call(&TaskStop, &ctx, json!({"task_id": id})).await;
    assert!(!out.is_error, "{}", out.content);
}

#[tokio::test]
async fn secrets_spanning_lines_or_reads_are_redacted_whole() {
    let (_fx, ledger, supervisor, ctx) = fixture();
    let ctx = ctx.with_secrets(SecretResolver::from_map([
        ("PEM", "-----BEGIN KEY-----\nMIIEsecret\n-----END KEY-----"),
        ("TOKEN", "abc123xyz"),
    ]));
    // A three-line secret, and a token placed across the 64 KiB mark (pipe reads come in
    // pieces of at most 16 KiB, so it straddles a read boundary).
    let command = "printf -- '-----BEGIN KEY-----\\nMIIEsecret\\n-----END KEY-----\\n'; \
                   head -c 65532 /dev/zero | tr '\\0' x; printf abc123xyz; echo";
    let id = start(&ctx, command).await;
    let ended = ledger.wait_ended(&id).await;
    assert_eq!(ended.ending, TaskEnding::Succeeded, "{}", ended.detail);
    let log = std::fs::read_to_string(supervisor.log_path(&id)).unwrap();
    for text in [&log, &ended.output_tail] {
        assert!(!text.contains("MIIEsecret"), "the PEM leaked");
        assert!(!text.contains("abc123xyz"), "the token leaked");
    }
    // The newline after the PEM goes too: `EY-----\n` is also 8 bytes of the PEM (its first
    // line's end), and no 8-byte run of a secret passes.
    assert!(log.starts_with("[REDACTED:PEM]x"), "{}", &log[..80]);
    assert!(
        log.ends_with("x[REDACTED:TOKEN]\n"),
        "{}",
        &log[log.len() - 80..]
    );
    assert_eq!(
        log.len(),
        "[REDACTED:PEM]".len() + 65532 + "[REDACTED:TOKEN]\n".len()
    );
}

#[tokio::test]
async fn from_the_stop_signal_on_nothing_starts_and_a_killed_task_is_lost() {
    let (fx, ledger, supervisor, ctx) = fixture();
    let id = start(&ctx, "echo $$ > main.pid; exec sleep 60").await;
    let pid = wait_for_pid(&fx.ws("main.pid")).await;
    supervisor.begin_shutdown();
    refused(&ctx, "true", "shutting down").await;
    // A service manager signals the task's group too; it never got to finish its work.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let ended = ledger.wait_ended(&id).await;
    assert_eq!(ended.ending, TaskEnding::Lost, "{}", ended.detail);
    assert!(ended.detail.contains("shutting down"), "{}", ended.detail);
}

#[tokio::test]
async fn the_log_is_capped_but_every_byte_is_counted() {
    let (_fx, ledger, supervisor, ctx) = fixture();
    let ctx = ctx.with_limits(Limits {
        max_artifact_bytes: 1000,
        ..Limits::default()
    });
    let id = start(
        &ctx,
        "i=0; while [ $i -lt 500 ]; do echo line-$i; i=$((i+1)); done",
    )
    .await;
    let ended = ledger.wait_ended(&id).await;
    let expected: usize = (0..500).map(|i| format!("line-{i}\n").len()).sum();
    assert_eq!(ended.output_bytes, expected as u64);
    assert!(
        ended.output_tail.ends_with("line-499\n"),
        "the tail is the newest output"
    );
    let log = std::fs::read_to_string(supervisor.log_path(&id)).unwrap();
    assert!(log.len() < 1100, "capped: {} bytes", log.len());
    assert!(
        log.contains("[output beyond 1000 bytes is not kept]"),
        "{log}"
    );
}

#[tokio::test]
async fn a_refused_start_runs_nothing_and_no_supervisor_means_no_background() {
    let fx = Fixture::new();
    let ledger = Arc::new(MemoryLedger {
        refuse: Some("this run already has 4 background tasks running".into()),
        ..MemoryLedger::default()
    });
    let (_supervisor, ctx) = setup(&fx, ledger.clone());
    refused(&ctx, "touch ran.txt", "already has 4").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!fx.ws("ran.txt").exists(), "nothing ran");

    let bare = fx.ctx();
    refused(&bare, "touch ran.txt", "not available").await;
    let out = call(&TaskOutput, &bare, json!({"task_id": "task_000000000000"})).await;
    assert!(
        out.is_error && out.content.contains("not available"),
        "{}",
        out.content
    );
}

#[tokio::test]
async fn shutdown_stops_running_tasks_and_reports_them_lost() {
    let (fx, ledger, supervisor, ctx) = fixture();
    let id = start(&ctx, "echo $$ > main.pid; exec sleep 60").await;
    let pid = wait_for_pid(&fx.ws("main.pid")).await;
    supervisor.shutdown(Duration::from_secs(5)).await;
    let ended = ledger.wait_ended(&id).await;
    assert_eq!(ended.ending, TaskEnding::Lost, "{}", ended.detail);
    assert!(ended.detail.contains("shut down"), "{}", ended.detail);
    assert!(crate::common::process_gone(pid));
    refused(&ctx, "true", "shutting down").await;
}
