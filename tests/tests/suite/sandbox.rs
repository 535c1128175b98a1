//! The command sandbox through the real `nightshift serve` (issue 14): a scripted model drives
//! `run_command`, a command tool and a background task through the attacks on the daemon
//! (its environment and memory, its API token, its database, another run's workspace, writing
//! outside, signalling it); each gets a permission error, no secret reaches the run, and the
//! daemon stays up. `serve` refuses to start where the sandbox cannot be enforced (simulated
//! with the assume variables), and `[sandbox] mode = "off"` starts with a warning and runs
//! commands unsandboxed (the control: there the same token read succeeds).

use std::path::{Path, PathBuf};
use std::time::Duration;

use nightshift_agent::RunEvent;
use nightshift_store::RunStatus;
use nightshift_tests::process::Serve;
use nightshift_tests::{Backend, TestDb, eventually};
use serde_json::{Value, json};

use crate::crash::{
    agent, command_tool, enqueue, events, q, sigterm, text_turn, tool_turn, wait_finished,
};
use crate::process::Proc;

/// In the daemon's environment, as a provider key would be.
const DAEMON_SECRET: &str = "sk-sandbox-daemon-secret-5f0c2a9e";
/// In another run's workspace.
const SIBLING_SECRET: &str = "sibling-run-notes-81d3";

/// `nightshift.toml` in `d`: the test's database, data in `d/data`, `sandbox` as the
/// `[sandbox]` table's body, then `body`.
pub(crate) fn write_config(db: &TestDb, d: &Path, sandbox: &str, body: &str) -> PathBuf {
    let schema = crate::crash::schema_setting(db);
    let text = format!(
        "[database]\nurl = {}\n{schema}\n[worker]\n{}\n[server]\naddress = \"127.0.0.1:0\"\n\n\
         [runtime]\ndata_dir = \"data\"\n\n[sandbox]\n{sandbox}\n\n{body}",
        q(&db.config.url),
        crate::crash::FAST_WORKER,
    );
    let path = d.join("nightshift.toml");
    std::fs::write(&path, text).unwrap();
    path
}

async fn sqlite_db(name: &str) -> TestDb {
    TestDb::new(Backend::Sqlite, name)
        .await
        .expect("sqlite is always available")
}

/// `nightshift serve` with the secret in its environment, stderr collected by a thread.
pub(crate) fn serve(cfg: &Path, env: &[(&str, &str)]) -> (Proc, std::sync::mpsc::Receiver<String>) {
    Serve::new(cfg)
        .env("SANDBOX_TEST_SECRET", DAEMON_SECRET)
        .env_remove("NIGHTSHIFT_API_TOKEN")
        .envs(env.iter().copied())
        .spawn_logged()
}

/// Everything `serve` printed on stderr until it exited (it must exit within 30 s).
async fn refusal(cfg: &Path, env: &[(&str, &str)]) -> String {
    let (mut daemon, lines) = serve(cfg, env);
    let status = daemon.wait_exit(Duration::from_secs(30)).await;
    assert!(!status.success(), "serve must refuse to start");
    let mut text = String::new();
    while let Ok(line) = lines.recv_timeout(Duration::from_secs(5)) {
        text.push_str(&line);
        text.push('\n');
    }
    text
}

pub(crate) fn run_command(id: &str, command: &str) -> Value {
    tool_turn(id, "run_command", json!({ "command": command }))
}

/// The content of each tool result, by call id.
pub(crate) async fn results(
    store: &nightshift_store::Store,
    run_id: &str,
) -> Vec<(String, String)> {
    events(store, run_id)
        .await
        .into_iter()
        .filter_map(|(_, e)| match e {
            RunEvent::ToolResult {
                call_id, content, ..
            } => Some((call_id, content)),
            _ => None,
        })
        .collect()
}

/// Refused, or (in the command's root of its own) not there at all.
fn denied(text: &str) -> bool {
    text.contains("Permission denied")
        || text.contains("Operation not permitted")
        || text.contains("No such file or directory")
        || text.contains("Directory nonexistent")
        || text.contains("Read-only file system")
}

/// Denied, or (in the command's pid namespace) the process outside does not exist there.
fn unreachable(text: &str) -> bool {
    denied(text) || text.contains("No such file") || text.contains("No such process")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn commands_cannot_reach_the_daemon_its_token_its_database_or_other_runs() {
    let db = sqlite_db("sandbox_attacks").await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let db_file = nightshift_runner::private::sqlite_file(&db.config.url).unwrap();
    let sibling = d.join("data/workspaces/other-run");
    std::fs::create_dir_all(&sibling).unwrap();
    std::fs::write(sibling.join("notes.txt"), SIBLING_SECRET).unwrap();
    let planted = d.join("planted.txt");
    // The daemon's pid, written once it runs; readable by commands (`[sandbox] read`).
    let shared = d.join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    let pid_file = shared.join("daemon.pid");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();

    // Each attack is one call; its result must be a permission error.
    let attacks: Vec<(&str, String)> = vec![
        ("environ", "tr '\\0' '\\n' < /proc/$PPID/environ".into()),
        (
            "environ_by_pid",
            format!(
                "pid=$(cat '{}'); tr '\\0' '\\n' < /proc/$pid/environ",
                pid_file.display()
            ),
        ),
        // Its parent is the pid namespace's init, whose command line is the command's own;
        // the daemon's is what must stay closed.
        (
            "cmdline_by_pid",
            format!(
                "pid=$(cat '{}'); tr '\\0' ' ' < /proc/$pid/cmdline",
                pid_file.display()
            ),
        ),
        ("mem", "exec 3< /proc/$PPID/mem && head -c 64 <&3".into()),
        ("token", "cat ../../api-token".into()),
        ("database", format!("cat '{}'", db_file.display())),
        ("data_dir", "ls ../..".into()),
        ("sibling", "cat ../other-run/notes.txt".into()),
        (
            "write_outside",
            format!("echo planted > '{}'", planted.display()),
        ),
        (
            "write_sibling",
            "echo planted > ../other-run/notes.txt".into(),
        ),
        ("term_daemon", "kill -TERM $PPID".into()),
        ("kill_daemon", "kill -KILL $PPID".into()),
        (
            "kill_daemon_by_pid",
            format!("kill -KILL $(cat '{}')", pid_file.display()),
        ),
    ];
    let mut turns: Vec<Value> = attacks
        .iter()
        .map(|(id, command)| run_command(id, command))
        .collect();
    turns.push(run_command(
        "allowed",
        "echo inside > mine.txt && cat mine.txt && echo t > \"$TMPDIR/t\" && cat \"$TMPDIR/t\"",
    ));
    turns.push(run_command(
        "pids",
        &format!(
            "echo parent=$PPID; test -e /proc/$(cat '{}') && echo daemon-visible; ls /proc | grep -c '^[0-9]'",
            pid_file.display()
        ),
    ));
    turns.push(tool_turn("peek_tool", "peek", json!({})));
    turns.push(tool_turn(
        "background",
        "run_command",
        json!({"command": "sleep 1; tr '\\0' '\\n' < /proc/$PPID/environ; cat ../../api-token; \
                           kill -TERM $PPID; echo background-finished",
               "background": true}),
    ));
    turns.push(text_turn("waiting for the task"));
    turns.push(text_turn("done"));
    let mut body = command_tool(
        "peek",
        "read_only",
        "tr '\\0' '\\n' < /proc/$PPID/environ; cat ../../api-token",
    );
    body += &agent(
        d,
        "attacker",
        &["run_command", "peek", "task_output"],
        json!(turns),
    );
    body += &agent(
        d,
        "offline",
        &["run_command"],
        json!([
            tool_turn(
                "connect",
                "run_command",
                json!({"command": format!(
                    "echo local > f && cat f && bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected'"
                )})
            ),
            text_turn("offline done")
        ]),
    );
    body += "[agents.sandbox]\nnetwork = \"off\"\n\n";
    let grant = format!(
        "read = [{}]\n",
        q(shared.canonicalize().unwrap().to_str().unwrap())
    );
    let cfg = write_config(&db, d, &grant, &body);
    let store = db.store().await;
    let (mut daemon, lines) = serve(&cfg, &[]);
    std::fs::write(&pid_file, daemon.pid().to_string()).unwrap();
    let token_file = d.join("data/api-token");
    let token = eventually(Duration::from_secs(30), "the API token file", || async {
        std::fs::read_to_string(&token_file)
            .ok()
            .filter(|t| !t.trim().is_empty())
    })
    .await;
    let token = token.trim().to_string();
    let run_id = enqueue(&cfg, "attacker");
    let offline_id = enqueue(&cfg, "offline");

    let run = wait_finished(&store, &run_id).await;
    assert_eq!(run.status, RunStatus::Succeeded, "{:?}", run.error);
    assert_eq!(run.result.as_deref(), Some("done"));
    let results = results(&store, &run_id).await;
    let secrets = [DAEMON_SECRET, token.as_str(), SIBLING_SECRET];
    for (id, _) in &attacks {
        let (_, content) = results
            .iter()
            .find(|(call, _)| call == id)
            .unwrap_or_else(|| panic!("no result for {id}: {results:?}"));
        let by_pid = id.ends_with("_by_pid");
        assert!(
            if by_pid {
                unreachable(content)
            } else {
                denied(content)
            },
            "{id}: a permission error: {content}"
        );
        for secret in secrets {
            assert!(!content.contains(secret), "{id}: no secret: {content}");
        }
    }
    let database = &results.iter().find(|(c, _)| c == "database").unwrap().1;
    assert!(!database.contains("SQLite format"), "{database}");
    let (_, allowed) = results.iter().find(|(c, _)| c == "allowed").unwrap();
    assert!(
        allowed.contains("inside\nt\n") && allowed.contains("exit code 0"),
        "the workspace and the temp dir work: {allowed}"
    );
    let (_, pids) = results.iter().find(|(c, _)| c == "pids").unwrap();
    assert!(
        pids.starts_with("parent=1\n") && !pids.contains("daemon-visible"),
        "the command runs in a pid namespace of its own, without the daemon: {pids}"
    );
    let (_, peek) = results.iter().find(|(c, _)| c == "peek_tool").unwrap();
    assert!(denied(peek), "the command tool is sandboxed too: {peek}");
    assert!(
        !peek.contains(DAEMON_SECRET) && !peek.contains(&token),
        "{peek}"
    );
    assert!(!planted.exists(), "nothing was written outside");
    assert_eq!(
        std::fs::read_to_string(sibling.join("notes.txt")).unwrap(),
        SIBLING_SECRET,
        "the other run's workspace is untouched"
    );
    let ended: Vec<String> = events(&store, &run_id)
        .await
        .into_iter()
        .filter_map(|(_, e)| match e {
            RunEvent::TaskEnded { reminder, .. } => Some(reminder),
            _ => None,
        })
        .collect();
    assert_eq!(ended.len(), 1, "{ended:?}");
    assert!(
        ended[0].contains("background-finished") && denied(&ended[0]),
        "the background task is sandboxed: {}",
        ended[0]
    );
    for secret in secrets {
        assert!(!ended[0].contains(secret), "{}", ended[0]);
    }

    let offline = wait_finished(&store, &offline_id).await;
    assert_eq!(offline.status, RunStatus::Succeeded, "{:?}", offline.error);
    let (_, connect) = results_of(&store, &offline_id, "connect").await;
    assert!(
        connect.starts_with("local\n") && !connect.contains("connected\n"),
        "network off reaches nothing, files still work: {connect}"
    );
    assert!(
        connect.contains("Network is unreachable") || denied(&connect),
        "{connect}"
    );

    assert!(
        daemon.child.try_wait().unwrap().is_none(),
        "the daemon is still up after every attack"
    );
    sigterm(daemon).await;

    // Every byte the daemon wrote: neither the secret in its environment nor the token (but
    // in the token's own file) shows anywhere, in any covered form or 8-character piece.
    let mut sweep = crate::security::sweep::Sweep::default();
    sweep.add_database(&db).await;
    sweep.add_dir(&d.join("data"));
    let token_path = token_file.display().to_string();
    sweep.blobs.retain(|(place, _)| *place != token_path);
    let logged: Vec<String> = lines.try_iter().collect();
    sweep.add("the daemon's stderr", logged.join("\n"));
    sweep.assert_clean(&[
        ("SANDBOX_TEST_SECRET", DAEMON_SECRET),
        ("NIGHTSHIFT_API_TOKEN", token.as_str()),
    ]);
    db.cleanup().await;
}

async fn results_of(store: &nightshift_store::Store, run_id: &str, call: &str) -> (String, String) {
    results(store, run_id)
        .await
        .into_iter()
        .find(|(c, _)| c == call)
        .unwrap_or_else(|| panic!("no result for {call}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn serve_refuses_to_start_where_the_sandbox_cannot_be_enforced() {
    let db = sqlite_db("sandbox_refusal").await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let body = agent(d, "worker", &["run_command"], json!([text_turn("hi")]));
    let cfg = write_config(&db, d, "", &body);
    let text = refusal(&cfg, &[("NIGHTSHIFT_SANDBOX_ASSUME_ABI", "0")]).await;
    assert!(
        text.contains("the command sandbox cannot be enforced on this machine")
            && text.contains("Landlock ABI 6 or newer")
            && text
                .contains("this kernel has no Landlock (NIGHTSHIFT_SANDBOX_ASSUME_ABI=0 says so)")
            && text.contains("`[sandbox] mode = \"off\"`"),
        "{text}"
    );
    let text = refusal(&cfg, &[("NIGHTSHIFT_SANDBOX_ASSUME_ABI", "5")]).await;
    assert!(text.contains("this kernel has Landlock ABI 5"), "{text}");

    let offline = body + "[agents.sandbox]\nnetwork = \"off\"\n";
    let cfg = write_config(&db, d, "", &offline);
    let text = refusal(&cfg, &[("NIGHTSHIFT_SANDBOX_ASSUME_NO_NETNS", "1")]).await;
    assert!(
        text.contains("agent(s) worker set `[agents.sandbox] network = \"off\"`")
            && text.contains("network namespace")
            && text.contains("`[sandbox] mode = \"off\"`"),
        "{text}"
    );

    let real = d.canonicalize().unwrap();
    let cfg = write_config(
        &db,
        d,
        &format!("read = [{}]\n", q(real.to_str().unwrap())),
        "",
    );
    let text = refusal(&cfg, &[]).await;
    assert!(
        text.contains(&format!(
            "sandbox.read grants sandboxed commands `{}`, which contains the data directory",
            real.display()
        )),
        "a grant containing the data directory is refused: {text}"
    );
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mode_off_warns_and_runs_commands_unsandboxed() {
    let db = sqlite_db("sandbox_off").await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let body = agent(
        d,
        "worker",
        &["run_command"],
        json!([
            run_command("token", "cat ../../api-token"),
            text_turn("read it")
        ]),
    );
    let cfg = write_config(&db, d, "mode = \"off\"\n", &body);
    // The assume variable changes nothing when the sandbox is off.
    let (daemon, lines) = serve(&cfg, &[("NIGHTSHIFT_SANDBOX_ASSUME_ABI", "0")]);
    let warned = tokio::task::spawn_blocking(move || {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
            match lines.recv_timeout(left) {
                Ok(l) if l.contains("WARN") && l.contains("[sandbox] mode = \"off\"") => {
                    return Some(l);
                }
                Ok(_) => {}
                Err(_) => return None,
            }
        }
        None
    })
    .await
    .unwrap();
    let warned = warned.expect("serve warns that commands run unsandboxed");
    assert!(warned.contains("unsandboxed"), "{warned}");
    let store = db.store().await;
    let run_id = enqueue(&cfg, "worker");
    let run = wait_finished(&store, &run_id).await;
    assert_eq!(run.status, RunStatus::Succeeded, "{:?}", run.error);
    let token = std::fs::read_to_string(d.join("data/api-token")).unwrap();
    let (_, content) = results_of(&store, &run_id, "token").await;
    // Unsandboxed, the command reads the token file; only redaction keeps it out of the run.
    assert!(
        content.contains("[REDACTED:NIGHTSHIFT_API_TOKEN]")
            && content.contains("exit code 0")
            && !content.contains(token.trim()),
        "the control: without the sandbox the token file is readable: {content}"
    );
    sigterm(daemon).await;
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_pid_namespaces_serve_warns_once_or_refuses_when_required() {
    let db = sqlite_db("sandbox_no_pidns").await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let body = agent(
        d,
        "worker",
        &["run_command"],
        json!([
            run_command("pids", "echo parent=$PPID; ls /proc"),
            text_turn("done")
        ]),
    );
    let no_pidns = [("NIGHTSHIFT_SANDBOX_ASSUME_NO_PIDNS", "1")];
    let required = write_config(&db, d, "pid_namespace = \"required\"\n", &body);
    let text = refusal(&required, &no_pidns).await;
    assert!(
        text.contains("`[sandbox] pid_namespace = \"required\"` needs a user and pid namespace")
            && text.contains("NIGHTSHIFT_SANDBOX_ASSUME_NO_PIDNS=1 says so"),
        "{text}"
    );

    let cfg = write_config(&db, d, "", &body);
    let (daemon, lines) = serve(&cfg, &no_pidns);
    let store = db.store().await;
    let run_id = enqueue(&cfg, "worker");
    let run = wait_finished(&store, &run_id).await;
    assert_eq!(run.status, RunStatus::Succeeded, "{:?}", run.error);
    let (_, pids) = results_of(&store, &run_id, "pids").await;
    assert!(
        !pids.starts_with("parent=1\n") && denied(&pids),
        "the fallback: the daemon's pid namespace, /proc closed: {pids}"
    );
    sigterm(daemon).await;
    let logged: Vec<String> = lines.try_iter().collect();
    let warnings: Vec<&String> = logged
        .iter()
        .filter(|l| l.contains("WARN") && l.contains("share the daemon's pid, mount and IPC"))
        .collect();
    assert_eq!(warnings.len(), 1, "one WARN line: {logged:#?}");
    assert!(
        warnings[0].contains("pid_namespace = \"required\"")
            && warnings[0].contains("pathname UNIX sockets")
            && warnings[0].contains("SysV IPC"),
        "the warning names each gap: {}",
        warnings[0]
    );
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_runs_temp_dir_outlives_its_sleep_and_is_removed_when_it_ends() {
    let db = sqlite_db("sandbox_temp_dir").await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let body = agent(
        d,
        "sleeper",
        &["run_command", "schedule_wakeup"],
        json!([
            run_command("write", "echo kept > \"$HOME/scratch\" && echo written"),
            tool_turn(
                "nap",
                "schedule_wakeup",
                json!({"delay_seconds": 1, "reason": "later"})
            ),
            run_command("read", "cat \"$TMPDIR/scratch\""),
            text_turn("done"),
        ]),
    ) + "[agents.wakeups]\nmin_delay_seconds = 1\n\n";
    let cfg = write_config(&db, d, "", &body);
    let store = db.store().await;
    let (daemon, _lines) = serve(&cfg, &[]);
    let temp = |run: &str| d.join("data/tmp").join(run);

    let run_id = enqueue(&cfg, "sleeper");
    let wakeup = eventually(Duration::from_secs(30), "the run to sleep", || async {
        store.pending_wakeups(10).await.unwrap().into_iter().next()
    })
    .await;
    assert_eq!(wakeup.run_id, run_id);
    assert_eq!(
        std::fs::read_to_string(temp(&run_id).join("scratch")).unwrap(),
        "kept\n",
        "a sleeping run keeps its temp dir"
    );
    let run = wait_finished(&store, &run_id).await;
    assert_eq!(run.status, RunStatus::Succeeded, "{:?}", run.error);
    let (_, read) = results_of(&store, &run_id, "read").await;
    assert!(
        read.starts_with("kept\n"),
        "it is there after the wakeup: {read}"
    );
    assert!(!temp(&run_id).exists(), "removed when the run ended");

    sigterm(daemon).await;
    db.cleanup().await;
}
