//! The PATH of sandboxed commands (issue 40): never the daemon's. A real `nightshift serve`
//! started with a PATH naming a directory the sandbox cannot read (a user's pyenv) gives its
//! commands the documented minimal PATH; `[sandbox] path` replaces it (a program in a granted
//! directory is found by name); an entry that is not an absolute directory makes `serve`
//! refuse to start, naming the key.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Stdio;

use nightshift_agent::RunEvent;
use nightshift_store::RunStatus;
use nightshift_tests::{Backend, TestDb};
use serde_json::json;

use crate::crash::{
    FAST_WORKER, agent, enqueue, events, nightshift, out, q, sigterm, text_turn, tool_turn,
    wait_finished, write_config,
};
use crate::process::Proc;

const MINIMAL: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What `echo PATH=$PATH; greet` printed in a run of a daemon with `sandbox_lines` in its
/// `[sandbox]` table, started with a pyenv directory first on its own PATH.
async fn path_seen(name: &str, d: &Path, sandbox_lines: &str) -> String {
    let db = TestDb::new(Backend::Sqlite, name).await.unwrap();
    let turns = json!([
        tool_turn(
            "env",
            "run_command",
            json!({"command": "echo PATH=$PATH; greet 2>&1 || true"})
        ),
        text_turn("done"),
    ]);
    let body = format!(
        "{sandbox_lines}\n{}",
        agent(d, "pather", &["run_command"], turns)
    );
    let cfg = write_config(&db, d, FAST_WORKER, &body);
    let store = db.store().await;
    let daemon_path = format!("/root/.pyenv/shims:{}", std::env::var("PATH").unwrap());
    let daemon = Proc {
        child: nightshift(&cfg)
            .arg("serve")
            .env("PATH", daemon_path)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn nightshift serve"),
    };
    let run_id = enqueue(&cfg, "pather");
    let run = wait_finished(&store, &run_id).await;
    assert_eq!(run.status, RunStatus::Succeeded, "{:?}", run.error);
    sigterm(daemon).await;
    events(&store, &run_id)
        .await
        .into_iter()
        .find_map(|(_, e)| match e {
            RunEvent::ToolResult { content, .. } => Some(content),
            _ => None,
        })
        .expect("the command's result")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sandboxed_commands_get_the_minimal_path_or_the_configured_one_never_the_daemons() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let seen = path_seen("command_path_default", d, "").await;
    assert!(
        seen.starts_with(&format!("PATH={MINIMAL}\n")),
        "the minimal PATH, not the daemon's: {seen}"
    );
    assert!(!seen.contains(".pyenv"), "{seen}");

    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let bin = out(d).join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let greet = bin.join("greet");
    std::fs::write(&greet, "#!/bin/sh\necho greeted\n").unwrap();
    std::fs::set_permissions(&greet, std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = bin.to_str().unwrap().to_string();
    let seen = path_seen(
        "command_path_configured",
        d,
        &format!("path = [{}, \"/usr/bin\", \"/bin\"]\n", q(&bin)),
    )
    .await;
    assert!(
        seen.starts_with(&format!("PATH={bin}:/usr/bin:/bin\ngreeted\n")),
        "the configured PATH, its program found by name: {seen}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_relative_path_entry_stops_serve_with_the_key_named() {
    let db = TestDb::new(Backend::Sqlite, "command_path_relative")
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let body = format!(
        "path = [\"bin\"]\n\n{}",
        agent(d, "pather", &["run_command"], json!([text_turn("done")]))
    );
    let cfg = write_config(&db, d, FAST_WORKER, &body);
    let output = nightshift(&cfg).arg("serve").output().unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("sandbox.path: `bin` is not an absolute directory"),
        "{stderr}"
    );
}
