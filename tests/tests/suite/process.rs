//! Real processes killed with real signals: the test worker (the real pool and signal
//! handling) and the `nightshift` binary itself.

use std::process::{Command, Stdio};
use std::time::Duration;

use nightshift_store::{JobState, NewRun, RunStatus, Store};
use nightshift_tests::http::{post_json, try_get_json};
use nightshift_tests::process::Serve;
use nightshift_tests::{TestDb, eventually, on_both_backends};

on_both_backends! {
    sigkilled_worker_job_is_reclaimed_after_lease_expiry => sigkilled_worker_job_is_reclaimed;
    sigterm_lets_the_running_job_finish => sigterm_lets_the_running_job_finish;
    sigterm_past_the_grace_period_releases_the_lease => sigterm_past_grace_releases;
    nightshift_serve_runs_a_job_and_drains_on_sigterm => nightshift_serve_end_to_end;
    serve_keeps_the_database_and_data_directory_private => serve_keeps_what_it_writes_private;
}

/// The process helpers the suites share, from the tests' library.
pub(crate) use nightshift_tests::process::{Proc, free_port, nightshift_bin, wait_for_api};

fn test_worker(db: &TestDb, lease_ms: u64, grace_ms: u64) -> Proc {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_nightshift-test-worker"));
    cmd.env("NS_DB_URL", &db.config.url)
        .env("NS_LEASE_MS", lease_ms.to_string())
        .env("NS_HEARTBEAT_MS", (lease_ms / 4).to_string())
        .env("NS_GRACE_MS", grace_ms.to_string())
        .env("RUST_LOG", "info,sqlx=warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    if let Some(schema) = &db.config.schema {
        cmd.env("NS_DB_SCHEMA", schema);
    }
    Proc {
        child: cmd.spawn().expect("spawn test worker"),
    }
}

/// Waits until the run has an event of `event_type` written by `pid`.
async fn event_by(store: &Store, run_id: &str, event_type: &str, pid: u32) {
    eventually(
        Duration::from_secs(30),
        &format!("{event_type} event by {pid}"),
        || async {
            let events = store.events(run_id, 0).await.unwrap();
            events
                .iter()
                .any(|e| {
                    e.event_type == event_type
                        && serde_json::from_str::<serde_json::Value>(&e.payload).unwrap()["pid"]
                            == pid
                })
                .then_some(())
        },
    )
    .await;
}

async fn sigkilled_worker_job_is_reclaimed(db: &TestDb) {
    let store = db.store().await;
    let e = store
        .enqueue(&NewRun::new("a", r#"{"sleep_ms": 1500}"#))
        .await
        .unwrap();
    let mut a = test_worker(db, 1000, 5000);
    event_by(&store, &e.run_id, "started", a.pid()).await;
    a.signal("KILL");
    let status = a.wait_exit(Duration::from_secs(10)).await;
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9)
    );
    let job = store.job(e.job_id).await.unwrap().unwrap();
    assert_eq!(
        job.status,
        JobState::Running,
        "the dead worker's lease is still on the job"
    );

    let mut b = test_worker(db, 1000, 5000);
    let run = eventually(
        Duration::from_secs(30),
        "the run to succeed on worker B",
        || async {
            let run = store.run(&e.run_id).await.unwrap().unwrap();
            (run.status == RunStatus::Succeeded).then_some(run)
        },
    )
    .await;
    assert_eq!(
        run.result,
        Some(b.pid().to_string()),
        "completed by the second worker"
    );
    let job = store.job(e.job_id).await.unwrap().unwrap();
    assert_eq!((job.status, job.attempts), (JobState::Succeeded, 2));
    let events = store.events(&e.run_id, 0).await.unwrap();
    let kinds: Vec<&str> = events.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(kinds, vec!["started", "started", "finished"]);
    assert!(
        events[1].lease_token > events[0].lease_token,
        "B wrote under a newer token"
    );
    b.signal("TERM");
    assert!(b.wait_exit(Duration::from_secs(15)).await.success());
}

async fn sigterm_lets_the_running_job_finish(db: &TestDb) {
    let store = db.store().await;
    let e = store
        .enqueue(&NewRun::new("a", r#"{"sleep_ms": 1000}"#))
        .await
        .unwrap();
    let mut w = test_worker(db, 2000, 20_000);
    event_by(&store, &e.run_id, "started", w.pid()).await;
    w.signal("TERM");
    let status = w.wait_exit(Duration::from_secs(20)).await;
    assert!(status.success(), "clean exit: {status:?}");
    let run = store.run(&e.run_id).await.unwrap().unwrap();
    assert_eq!(
        (run.status, run.result),
        (RunStatus::Succeeded, Some(w.pid().to_string()))
    );
    assert!(
        store.workers().await.unwrap().is_empty(),
        "deregistered on the way out"
    );
}

async fn sigterm_past_grace_releases(db: &TestDb) {
    let store = db.store().await;
    let e = store
        .enqueue(&NewRun::new("a", r#"{"sleep_ms": 600000}"#))
        .await
        .unwrap();
    let mut w = test_worker(db, 60_000, 300);
    event_by(&store, &e.run_id, "started", w.pid()).await;
    w.signal("TERM");
    assert!(w.wait_exit(Duration::from_secs(15)).await.success());
    let job = store.job(e.job_id).await.unwrap().unwrap();
    assert_eq!(
        (job.status, job.attempts, job.lease_owner),
        (JobState::Queued, 0, None)
    );
    assert_eq!(
        store.run(&e.run_id).await.unwrap().unwrap().status,
        RunStatus::Queued
    );
    // The lease was 60 s; released, the job is claimable now, not in a minute.
    let taken = store
        .claim("next", None, 1, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(taken.len(), 1);
}

/// The token test daemons run with (`NIGHTSHIFT_API_TOKEN`).
pub const API_TOKEN: &str = "process-test-token";

/// A config for `nightshift serve` on `db` with one scripted agent `echo`; returns its path
/// and the API's base URL.
pub(crate) fn config_file(db: &TestDb, dir: &std::path::Path) -> (std::path::PathBuf, String) {
    let script = r#"[{"content": [{"type": "text", "text": "hello from the script"}], "stop_reason": "end_turn"}]"#;
    std::fs::write(dir.join("script.json"), script).unwrap();
    let port = free_port();
    let text = format!(
        "[database]\nurl = \"{}\"\n{}\n\
         [server]\naddress = \"127.0.0.1:{port}\"\n\
         [worker]\nslots = 2\nheartbeat_ms = 200\nlease_ms = 2000\npoll_interval_ms = 100\n\
         [runtime]\ndata_dir = \"data\"\n\
         [providers.scripted]\nkind = \"scripted\"\nscript = \"script.json\"\n\
         [[agents]]\nname = \"echo\"\nprovider = \"scripted\"\nmodel = \"scripted-1\"\n",
        db.config.url,
        db.config
            .schema
            .as_ref()
            .map(|s| format!("schema = \"{s}\""))
            .unwrap_or_default()
    );
    let path = dir.join("nightshift.toml");
    std::fs::write(&path, text).unwrap();
    (path, format!("http://127.0.0.1:{port}"))
}

/// The group's and others' permission bits of `path`.
fn shared_bits(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o077
}

async fn serve_keeps_what_it_writes_private(db: &TestDb) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let (cfg, api) = config_file(db, dir.path());
    // What an older version (or a wide umask) left behind.
    let data = dir.path().join("data");
    std::fs::create_dir_all(data.join("artifacts")).unwrap();
    std::fs::write(data.join("old-task.log"), "x").unwrap();
    for (p, m) in [
        (&data, 0o755),
        (&data.join("artifacts"), 0o755),
        (&data.join("old-task.log"), 0o644),
    ] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    }
    let mut serve = Serve::new(&cfg)
        .env("NIGHTSHIFT_API_TOKEN", API_TOKEN)
        .spawn();
    let http = nightshift_llm::http::build_client(nightshift_llm::HttpTimeouts::default()).unwrap();
    wait_for_api(&http, &api).await;
    for p in [&data, &data.join("artifacts"), &data.join("old-task.log")] {
        assert_eq!(shared_bits(p), 0, "{} is private", p.display());
    }
    for entry in std::fs::read_dir(&data).unwrap() {
        let p = entry.unwrap().path();
        assert_eq!(shared_bits(&p), 0, "{} is private", p.display());
    }
    if let Some(file) = nightshift_runner::private::sqlite_file(&db.config.url) {
        for suffix in ["", "-wal", "-shm"] {
            let p = std::path::PathBuf::from(format!("{}{suffix}", file.display()));
            if p.exists() {
                assert_eq!(shared_bits(&p), 0, "{} is private", p.display());
            }
        }
    }
    serve.signal("TERM");
    serve.wait_exit(Duration::from_secs(20)).await;
}

async fn nightshift_serve_end_to_end(db: &TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, api) = config_file(db, dir.path());
    let bin = nightshift_bin();
    let mut serve = Serve::new(&cfg)
        .env("NIGHTSHIFT_API_TOKEN", API_TOKEN)
        .spawn();
    let store = db.store().await;
    let http = nightshift_llm::http::build_client(nightshift_llm::HttpTimeouts::default()).unwrap();
    wait_for_api(&http, &api).await;
    let (_, created) = post_json(
        &http,
        &format!("{api}/v1/runs"),
        API_TOKEN,
        &serde_json::json!({"agent": "echo", "prompt": "hello over HTTP", "idempotency_key": "once"}),
    )
    .await;
    let run_id = created["run_id"].as_str().expect("a run id").to_string();
    let again = Command::new(&bin)
        .arg("--config")
        .arg(&cfg)
        .args(["run", "echo", "hello again", "--idempotency-key", "once"])
        .output()
        .unwrap();
    let (said, note) = (
        String::from_utf8(again.stdout).unwrap(),
        String::from_utf8(again.stderr).unwrap(),
    );
    assert!(
        said == format!("{run_id}\n") && note.contains("already enqueued"),
        "the CLI sees the API's run: {said} {note}"
    );
    let run = eventually(Duration::from_secs(30), "the run to succeed", || async {
        let run = try_get_json(&http, &format!("{api}/v1/runs/{run_id}"), API_TOKEN).await?;
        (run["status"] == "succeeded").then_some(run)
    })
    .await;
    assert_eq!(run["result"], "hello from the script");
    assert_eq!(run["turns"], 1);
    let kinds: Vec<String> = store
        .events(&run_id, 0)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.event_type)
        .collect();
    assert_eq!(
        kinds,
        [
            "run_started",
            "user_message",
            "assistant_message",
            "finished"
        ]
    );
    let waited = Command::new(&bin)
        .arg("--config")
        .arg(&cfg)
        .args(["run", "echo", "and from the CLI", "--wait"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&waited.stdout);
    assert!(
        waited.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&waited.stderr)
    );
    assert!(out.contains("user> and from the CLI"), "{out}");
    assert!(
        out.contains("assistant (scripted-1)> hello from the script"),
        "{out}"
    );
    assert!(out.contains("status: succeeded"), "{out}");
    let listed = Command::new(&bin)
        .arg("--config")
        .arg(&cfg)
        .args(["runs", "list", "--status", "succeeded"])
        .output()
        .unwrap();
    // A header and the two runs.
    assert_eq!(String::from_utf8_lossy(&listed.stdout).lines().count(), 3);
    serve.signal("TERM");
    let status = serve.wait_exit(Duration::from_secs(20)).await;
    assert!(
        status.success(),
        "serve exits cleanly on SIGTERM: {status:?}"
    );
}

/// What a test command writes so the test can find it: its pid and its pid namespace (a
/// sandboxed command runs in a pid namespace of its own, where `$$` is not the host's pid).
pub(crate) const SHELL_PID: &str = "$$ $(readlink /proc/self/ns/pid)";

/// The host pid of the process a command described with [`SHELL_PID`] (or `$! <ns>`) while
/// it runs: the process in that pid namespace whose pid there is the one written.
pub(crate) fn host_pid(written: &str) -> Option<u32> {
    let mut fields = written.split_whitespace();
    let inner: u32 = fields.next()?.parse().ok()?;
    let Some(ns) = fields.next() else {
        return Some(inner);
    };
    let own = std::fs::read_link("/proc/self/ns/pid").ok()?;
    if own.to_str()? == ns {
        return Some(inner); // not sandboxed: the pid is the host's
    }
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let link = std::fs::read_link(entry.path().join("ns/pid")).ok()?;
            if link.to_str()? != ns {
                return None;
            }
            let status = std::fs::read_to_string(entry.path().join("status")).ok()?;
            let nspid = status.lines().find(|l| l.starts_with("NSpid:"))?;
            (nspid.split_whitespace().last()?.parse::<u32>().ok()? == inner).then_some(pid)
        })
}
