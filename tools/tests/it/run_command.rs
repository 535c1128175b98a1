//! run_command with real processes: exit codes, working directory, timeouts that kill
//! processes ignoring SIGTERM, cancellation that kills a running child, truncation with an
//! artifact holding the full output, and refusal of long foreground sleeps.

use std::time::{Duration, Instant};

use nightshift_tools::{Limits, RunCommand, ToolOutput};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::common::{Fixture, call, gone_by, process_gone, small_cap, wait_for_pid};

#[tokio::test]
async fn reports_output_and_exit_code() {
    let fx = Fixture::new();
    let ctx = fx.ctx();
    let ok = call(
        &RunCommand,
        &ctx,
        json!({"command": "echo out; echo err >&2; pwd"}),
    )
    .await;
    assert!(!ok.is_error, "{}", ok.content);
    let expected_start = format!("out\nerr\n{}\n[exit code 0;", fx.workspace.display());
    assert!(ok.content.starts_with(&expected_start), "{}", ok.content);

    let failed = call(
        &RunCommand,
        &ctx,
        json!({"command": "echo partial; exit 3"}),
    )
    .await;
    assert!(failed.is_error);
    assert!(
        failed.content.starts_with("partial\n[exit code 3;"),
        "{}",
        failed.content
    );

    let silent = call(&RunCommand, &ctx, json!({"command": "true"})).await;
    assert!(
        silent.content.starts_with("(no output)\n[exit code 0;"),
        "{}",
        silent.content
    );

    let bad = call(&RunCommand, &ctx, json!({"cmd": "ls"})).await;
    assert!(
        bad.is_error && bad.content.contains("unknown field `cmd`"),
        "{}",
        bad.content
    );
}

#[tokio::test]
async fn timeout_kills_a_group_that_ignores_sigterm() {
    let fx = Fixture::new();
    let ctx = fx.ctx();
    // The shell and its background child both ignore SIGTERM (the disposition is inherited).
    let command = "trap '' TERM; sleep 30 & echo $! > child.pid; echo started; wait; echo never";
    let started = Instant::now();
    let out = tokio::time::timeout(
        Duration::from_secs(10),
        call(
            &RunCommand,
            &ctx,
            json!({"command": command, "timeout_seconds": 1}),
        ),
    )
    .await
    .expect("the call must end although the command ignores SIGTERM");
    let elapsed = started.elapsed();
    assert!(out.is_error, "{}", out.content);
    assert!(out.content.contains("started\n"), "{}", out.content);
    assert!(!out.content.contains("never"), "{}", out.content);
    assert!(
        out.content.contains("timed out after 1 s"),
        "{}",
        out.content
    );
    assert!(
        elapsed >= Duration::from_secs(1),
        "returned before the timeout: {elapsed:?}"
    );
    assert!(elapsed < Duration::from_secs(3), "took {elapsed:?}");
    let pid = wait_for_pid(&fx.ws("child.pid")).await;
    assert!(
        gone_by(pid, Instant::now() + Duration::from_millis(200)).await,
        "the SIGTERM-ignoring child {pid} survived the timeout"
    );
}

#[tokio::test]
async fn cancellation_kills_a_running_child_within_a_second() {
    let fx = Fixture::new();
    let cancel = CancellationToken::new();
    let ctx = fx.ctx().with_cancel(cancel.clone());
    let task = tokio::spawn(async move {
        call(
            &RunCommand,
            &ctx,
            json!({"command": "sleep 30 & echo $! > child.pid; wait"}),
        )
        .await
    });
    let pid = wait_for_pid(&fx.ws("child.pid")).await;
    assert!(
        !process_gone(pid),
        "the child should be running before the cancel"
    );
    let cancelled_at = Instant::now();
    cancel.cancel();
    let out: ToolOutput = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the call returns after cancellation")
        .expect("task");
    let took = cancelled_at.elapsed();
    assert!(
        took < Duration::from_millis(1200),
        "cancellation took {took:?}"
    );
    assert!(
        out.is_error && out.content.contains("cancelled"),
        "{}",
        out.content
    );
    assert!(
        gone_by(pid, cancelled_at + Duration::from_millis(1200)).await,
        "sleep child {pid} still alive 1.2 s after cancellation"
    );
}

#[tokio::test]
async fn background_processes_do_not_outlive_the_command() {
    let fx = Fixture::new();
    let ctx = fx.ctx();
    // The background sleep inherits stdout: unless it is killed with the group, the call would
    // wait for the pipe to close and then report it as left open.
    let started = Instant::now();
    let out = call(
        &RunCommand,
        &ctx,
        json!({"command": "sleep 30 & echo $! > child.pid; echo done"}),
    )
    .await;
    assert!(!out.is_error, "{}", out.content);
    assert!(
        out.content.starts_with("done\n[exit code 0;"),
        "{}",
        out.content
    );
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );
    let pid = wait_for_pid(&fx.ws("child.pid")).await;
    assert!(
        gone_by(pid, Instant::now() + Duration::from_millis(200)).await,
        "background child {pid} outlived the command"
    );
}

#[tokio::test]
async fn long_output_is_cut_and_saved_whole_as_an_artifact() {
    let fx = Fixture::new();
    let ctx = fx.ctx().with_limits(small_cap(1000));
    let out = call(&RunCommand, &ctx, json!({"command": "seq 1 20000"})).await;
    assert!(!out.is_error, "{}", out.content);
    let full: String = (1..=20000).map(|i| format!("{i}\n")).collect();

    let artifact = out
        .artifact
        .clone()
        .expect("an artifact for the cut output");
    let saved = std::fs::read_to_string(&artifact.path).expect("artifact file");
    assert_eq!(saved, full, "artifact must hold the full output");
    assert_eq!(artifact.size, full.len() as u64);
    assert!(artifact.path.starts_with(&fx.artifacts));
    assert_eq!(
        artifact.path.file_name().unwrap().to_str().unwrap(),
        artifact.name
    );

    // head + marker + tail, and the marker's numbers add up.
    let (head, rest) = out.content.split_once("[… ").expect("a cut marker");
    let (marker, tail_and_status) = rest.split_once(" …]\n").expect("marker end");
    let tail = tail_and_status.split("[exit code").next().unwrap();
    assert!(head.starts_with("1\n2\n3\n"), "{head}");
    assert!(tail.ends_with("19999\n20000\n"), "{tail}");
    assert!(head.len() <= 500 && tail.len() <= 500);
    let expected_marker = format!(
        "{} bytes ({} lines) cut; full output saved as artifact {}",
        full.len() - head.len() - tail.len(),
        20000 - head.lines().count() - tail.lines().count(),
        artifact.name
    );
    assert_eq!(marker, expected_marker);
    assert!(full.starts_with(head) && full.ends_with(tail));
}

#[tokio::test]
async fn short_output_has_no_artifact() {
    let fx = Fixture::new();
    let ctx = fx.ctx().with_limits(small_cap(1000));
    let out = call(&RunCommand, &ctx, json!({"command": "seq 1 10"})).await;
    assert!(out.artifact.is_none());
    assert!(
        out.content
            .starts_with("1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n[exit code 0"),
        "{}",
        out.content
    );
    assert!(
        !fx.artifacts.exists(),
        "no artifact directory for a short output"
    );
}

#[tokio::test]
async fn long_foreground_sleep_is_refused_before_running() {
    let fx = Fixture::new();
    let ctx = fx.ctx().with_limits(Limits {
        max_foreground_sleep: Duration::from_secs(60),
        ..Limits::default()
    });
    let out = call(
        &RunCommand,
        &ctx,
        json!({"command": "touch ran; sleep 600"}),
    )
    .await;
    assert!(out.is_error);
    assert!(out.content.contains("wakeup"), "{}", out.content);
    assert!(
        !fx.ws("ran").exists(),
        "nothing may run when the command is refused"
    );

    // A background sleep and a short one are fine.
    let ok = call(
        &RunCommand,
        &ctx,
        json!({"command": "sleep 600 & kill $!; sleep 0.1; echo ok"}),
    )
    .await;
    assert!(!ok.is_error, "{}", ok.content);
    assert!(ok.content.starts_with("ok\n"), "{}", ok.content);
}
