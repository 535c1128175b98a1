//! Retention with real daemons: two `nightshift serve` on one database purge exactly what
//! `[retention]` says — by end state, age and agent, with or without summaries — and nothing
//! of a live run; one of them purges; each sweeps the files of its own data directory. And
//! `nightshift runs purge`, locally and through `--server`: a dry run changes nothing, a bad
//! `--before` is refused, a purge is audited; a reload (SIGHUP) applies new rules at once.
//! A run's workspace goes as the run ends (with sweeps an hour apart), unless its agent
//! keeps workspaces.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use nightshift_store::{ManualClock, NewRun, RunStatus, Store};
use nightshift_tests::process::{Proc, Serve, free_port, nightshift_bin, wait_for_api};
use nightshift_tests::{TestDb, eventually, on_both_backends};

on_both_backends! {
    two_daemons_purge_exactly_what_retention_says_and_one_of_them_purges =>
        two_daemons_purge_what_retention_says;
    runs_purge_by_hand_dry_runs_purges_refuses_bad_input_and_a_reload_applies_new_rules =>
        runs_purge_by_hand;
    a_runs_workspace_goes_as_the_run_ends_not_an_interval_later => workspace_goes_at_the_end;
}

const TOKEN: &str = "retention-test-token";
const DAY_MS: i64 = 86_400_000;
const LEASE: Duration = Duration::from_secs(30);

/// A config for a daemon on `db` with data under `dir/data`, scripted agents `echo`,
/// `keeper` and `quick`, and `retention` (TOML lines of the `[retention]` table and after).
fn config(db: &TestDb, dir: &Path, retention: &str) -> (std::path::PathBuf, String) {
    std::fs::create_dir_all(dir).unwrap();
    let script = r#"[{"content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn"}]"#;
    std::fs::write(dir.join("script.json"), script).unwrap();
    let port = free_port();
    let agent = |name: &str| {
        format!("[[agents]]\nname = \"{name}\"\nprovider = \"scripted\"\nmodel = \"scripted-1\"\n")
    };
    let text = format!(
        "[database]\nurl = \"{}\"\n{}\n\
         [server]\naddress = \"127.0.0.1:{port}\"\n\
         [runtime]\ndata_dir = \"data\"\n\
         [providers.scripted]\nkind = \"scripted\"\nscript = \"script.json\"\n\
         {}{}{}\n[retention]\n{retention}\n",
        db.config.url,
        db.config
            .schema
            .as_ref()
            .map(|s| format!("schema = \"{s}\""))
            .unwrap_or_default(),
        agent("echo"),
        agent("keeper"),
        agent("quick"),
    );
    let path = dir.join("nightshift.toml");
    std::fs::write(&path, text).unwrap();
    (path, format!("http://127.0.0.1:{port}"))
}

fn now_ms() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    i64::try_from(since.as_millis()).unwrap()
}

/// A store whose clock stands `days_ago` days back from now.
async fn past(db: &TestDb, days_ago: i64) -> Store {
    let now = now_ms();
    db.store_with(Arc::new(ManualClock::new(now - days_ago * DAY_MS)))
        .await
}

/// A run of `agent` that ended `days_ago` days ago as `status`, with events and a
/// checkpoint.
async fn ended(db: &TestDb, agent: &str, days_ago: i64, status: RunStatus) -> String {
    let store = past(db, days_ago).await;
    let run_id = store
        .enqueue(&NewRun::new(agent, "p"))
        .await
        .unwrap()
        .run_id;
    let lease = store.claim("seed", None, 1, LEASE).await.unwrap().remove(0);
    let long = "stored once ".repeat(40);
    lease
        .append_event("note", &format!("{{\"n\":\"{long}\"}}"))
        .await
        .unwrap();
    lease
        .write_checkpoint(1, 1, &format!("{{\"snapshot\":\"{long}\"}}"))
        .await
        .unwrap();
    match status {
        RunStatus::Succeeded => lease.ack(Some("done".into())).await.unwrap(),
        _ => lease.fail("broke").await.unwrap(),
    }
    store.close().await;
    run_id
}

/// A run of `echo` started 40 days ago that sleeps for a year: live, never claimed here.
async fn sleeping(db: &TestDb) -> String {
    let store = past(db, 40).await;
    let run_id = store
        .enqueue(&NewRun::new("echo", "p"))
        .await
        .unwrap()
        .run_id;
    let lease = store.claim("seed", None, 1, LEASE).await.unwrap().remove(0);
    lease.append_event("note", "{}").await.unwrap();
    let until = now_ms() + 365 * DAY_MS;
    lease.park_until(until, "{}").await.unwrap();
    store.close().await;
    run_id
}

fn spawn(cfg: &Path) -> (Proc, std::sync::mpsc::Receiver<String>) {
    Serve::new(cfg)
        .env("NIGHTSHIFT_API_TOKEN", TOKEN)
        .env("RUST_LOG", "info,sqlx=warn")
        .spawn_logged()
}

fn mkdirs(data: &Path, kind: &str, run: &str) -> std::path::PathBuf {
    let dir = data.join(kind).join(run);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("f"), "x").unwrap();
    dir
}

/// Runs purged on the daemon at `api`, by its metrics.
async fn purged_on(http: &reqwest::Client, api: &str) -> f64 {
    let text = http
        .get(format!("{api}/metrics"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|l| l.starts_with("nightshift_retention_runs_purged_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The purge batches a daemon logged so far.
fn batches(logs: &std::sync::mpsc::Receiver<String>) -> usize {
    logs.try_iter()
        .filter(|l| l.contains("purged a batch of finished runs"))
        .count()
}

async fn two_daemons_purge_what_retention_says(db: &TestDb) {
    let old_ok = ended(db, "echo", 40, RunStatus::Succeeded).await;
    let old_failed = ended(db, "echo", 40, RunStatus::Failed).await;
    let recent_ok = ended(db, "echo", 10, RunStatus::Succeeded).await;
    let kept_forever = ended(db, "keeper", 40, RunStatus::Succeeded).await;
    let of_a_removed_agent = ended(db, "gone", 40, RunStatus::Succeeded).await;
    let quick = ended(db, "quick", 5, RunStatus::Succeeded).await;
    let live = sleeping(db).await;
    let dir = tempfile::tempdir().unwrap();
    let retention = "keep_days = 30\nkeep_days_by_status = { failed = 60 }\ninterval_seconds = 1\n\
                     [retention.agents.keeper]\npurge = false\n\
                     [retention.agents.quick]\nkeep_days = 2\nkeep_summary = false\n";
    let (cfg_a, api_a) = config(db, &dir.path().join("a"), retention);
    let (cfg_b, api_b) = config(db, &dir.path().join("b"), retention);
    let (data_a, data_b) = (dir.path().join("a/data"), dir.path().join("b/data"));
    // Files on each daemon: the purged run's artifacts on B; an ended run's workspace and
    // artifacts, and the live run's workspace, on A.
    let purged_artifacts = mkdirs(&data_b, "artifacts", &old_ok);
    let ended_workspace = mkdirs(&data_a, "workspaces", &recent_ok);
    let kept_artifacts = mkdirs(&data_a, "artifacts", &recent_ok);
    let live_workspace = mkdirs(&data_a, "workspaces", &live);

    let (mut a, logs_a) = spawn(&cfg_a);
    let (mut b, logs_b) = spawn(&cfg_b);
    let http = nightshift_llm::http::build_client(nightshift_llm::HttpTimeouts::default()).unwrap();
    wait_for_api(&http, &api_a).await;
    wait_for_api(&http, &api_b).await;
    let store = db.store().await;
    eventually(
        Duration::from_secs(60),
        "the due runs to be purged",
        || async {
            let purged = |id: &str| {
                let store = store.clone();
                let id = id.to_string();
                async move { store.run(&id).await.unwrap().and_then(|r| r.purged_at) }
            };
            let done = purged(&old_ok).await.is_some()
                && purged(&of_a_removed_agent).await.is_some()
                && store.run(&quick).await.unwrap().is_none();
            done.then_some(())
        },
    )
    .await;
    // The purged: summaries kept (quick's removed), history gone.
    for id in [&old_ok, &of_a_removed_agent] {
        let run = store.run(id).await.unwrap().unwrap();
        assert_eq!(
            (run.status, run.result.as_deref()),
            (RunStatus::Succeeded, Some("done"))
        );
        assert!(store.events(id, 0).await.unwrap().is_empty());
        assert!(store.latest_checkpoint(id).await.unwrap().is_none());
        assert_eq!(
            store.run_storage(id).await.unwrap().blobs,
            0,
            "its content went too"
        );
        assert!(store.jobs_of_run(id).await.unwrap().is_empty());
    }
    // Everything else untouched.
    for id in [&old_failed, &recent_ok, &kept_forever, &live] {
        let run = store.run(id).await.unwrap().unwrap();
        assert_eq!(run.purged_at, None, "{id} is kept");
        assert!(
            !store.events(id, 0).await.unwrap().is_empty(),
            "{id} keeps its events"
        );
    }
    assert!(
        !store
            .run(&live)
            .await
            .unwrap()
            .unwrap()
            .status
            .is_terminal()
    );
    // Each daemon swept its own files: purged and ended runs' go, the rest stays.
    eventually(Duration::from_secs(30), "the sweeps", || async {
        (!purged_artifacts.exists() && !ended_workspace.exists()).then_some(())
    })
    .await;
    assert!(kept_artifacts.exists() && live_workspace.exists());
    // One purger: the lease names one daemon, and only its metrics count purged runs.
    let lease = store
        .leader("retention")
        .await
        .unwrap()
        .expect("a purger lease");
    let counts = (
        purged_on(&http, &api_a).await,
        purged_on(&http, &api_b).await,
    );
    assert!(
        counts == (3.0, 0.0) || counts == (0.0, 3.0),
        "one daemon purged the three runs: {counts:?} (lease held by {})",
        lease.holder
    );
    let (batches_a, batches_b) = (batches(&logs_a), batches(&logs_b));
    assert!(
        (batches_a > 0) ^ (batches_b > 0),
        "one daemon logged the batches: {batches_a} and {batches_b}"
    );
    for daemon in [&mut a, &mut b] {
        daemon.signal("TERM");
        assert!(daemon.wait_exit(Duration::from_secs(20)).await.success());
    }
}

fn cli(cfg: Option<&Path>, server: Option<&str>, args: &[&str]) -> (bool, String, String) {
    let mut cmd = Command::new(nightshift_bin());
    if let Some(cfg) = cfg {
        cmd.arg("--config").arg(cfg);
    }
    if let Some(server) = server {
        cmd.args(["--server", server])
            .env("NIGHTSHIFT_API_TOKEN", TOKEN);
    }
    let out = cmd.args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn runs_purge_by_hand(db: &TestDb) {
    let old = ended(db, "echo", 40, RunStatus::Succeeded).await;
    let failed = ended(db, "echo", 40, RunStatus::Failed).await;
    let recent = ended(db, "echo", 3, RunStatus::Succeeded).await;
    let other = ended(db, "keeper", 40, RunStatus::Succeeded).await;
    let dir = tempfile::tempdir().unwrap();
    // The daemon purges nothing on its own here.
    let (cfg, api) = config(db, dir.path(), "purge = false\n");
    let artifacts = mkdirs(&dir.path().join("data"), "artifacts", &old);
    let store = db.store().await;

    // Bad input: refused, naming the flag, nothing changed.
    for bad in [
        vec!["runs", "purge", "--before", "yesterday"],
        vec!["runs", "purge", "--before", "20d", "--status", "running"],
    ] {
        let (ok, _, err) = cli(Some(&cfg), None, &bad);
        assert!(
            !ok && (err.contains("before: ") || err.contains("status: ")),
            "{err}"
        );
    }
    // A dry run counts and changes nothing.
    let (ok, out, err) = cli(
        Some(&cfg),
        None,
        &[
            "runs",
            "purge",
            "--before",
            "20d",
            "--agent",
            "echo",
            "--dry-run",
            "--json",
        ],
    );
    assert!(ok, "{err}");
    let report: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        (report["runs"].as_u64(), report["dry_run"].as_bool()),
        (Some(2), Some(true))
    );
    assert_eq!(report["events"], 2, "one event each");
    for id in [&old, &failed] {
        assert!(store.run(id).await.unwrap().unwrap().purged_at.is_none());
    }
    // Local: only echo's succeeded runs before the cutoff; the files under data go at once.
    let (ok, out, err) = cli(
        Some(&cfg),
        None,
        &[
            "runs",
            "purge",
            "--before",
            "20d",
            "--agent",
            "echo",
            "--status",
            "succeeded",
        ],
    );
    assert!(ok, "{err}");
    assert!(out.starts_with("purged 1 run(s)"), "{out}");
    assert!(store.run(&old).await.unwrap().unwrap().purged_at.is_some());
    assert!(!artifacts.exists());
    for id in [&failed, &recent, &other] {
        assert!(
            store.run(id).await.unwrap().unwrap().purged_at.is_none(),
            "{id}"
        );
    }
    // Through the API: the operator's request, audited with the token's name.
    let mut serve = Serve::new(&cfg).env("NIGHTSHIFT_API_TOKEN", TOKEN).spawn();
    let http = nightshift_llm::http::build_client(nightshift_llm::HttpTimeouts::default()).unwrap();
    wait_for_api(&http, &api).await;
    let (ok, out, err) = cli(
        None,
        Some(&api),
        &["runs", "purge", "--before", "20d", "--no-summary", "--json"],
    );
    assert!(ok, "{err}");
    let report: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(report["runs"], 2, "{report}");
    for id in [&failed, &other] {
        assert_eq!(
            store.run(id).await.unwrap(),
            None,
            "{id} is gone, row and all"
        );
    }
    assert!(store.run(&recent).await.unwrap().is_some());
    let trail = store.audit_log(None, None, 10).await.unwrap();
    let purges: Vec<&str> = trail
        .iter()
        .filter(|e| e.action == "purge")
        .map(|e| e.actor.as_str())
        .collect();
    assert_eq!(purges.len(), 2, "{trail:?}");
    assert!(
        purges[0].starts_with("token:") && purges[1].starts_with("cli:"),
        "{purges:?}"
    );
    // A reload turns the daemon's purging on, at once: the recent run goes by the new rule.
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("purge = false\n", "keep_days = 1\n");
    std::fs::write(&cfg, text).unwrap();
    serve.signal("HUP");
    eventually(
        Duration::from_secs(30),
        "the reloaded rules to purge",
        || async { store.run(&recent).await.unwrap()?.purged_at.map(|_| ()) },
    )
    .await;
    serve.signal("TERM");
    serve.wait_exit(Duration::from_secs(20)).await;
}

async fn workspace_goes_at_the_end(db: &TestDb) {
    let dir = tempfile::tempdir().unwrap();
    // Sweeps an hour apart: the one at start, then none while this test runs.
    let retention = "interval_seconds = 3600\n[retention.agents.keeper]\nkeep_workspace = true\n";
    let (cfg, api) = config(db, dir.path(), retention);
    let (mut daemon, _logs) = spawn(&cfg);
    let http = nightshift_llm::http::build_client(nightshift_llm::HttpTimeouts::default()).unwrap();
    wait_for_api(&http, &api).await;
    // Two runs due in two seconds, each with a workspace made before it starts.
    let store = db.store().await;
    let mut runs = Vec::new();
    for agent in ["echo", "keeper"] {
        let mut run = NewRun::new(agent, "p");
        run.job.run_at = Some(now_ms() + 2_000);
        let run_id = store.enqueue(&run).await.unwrap().run_id;
        let workspace = mkdirs(&dir.path().join("data"), "workspaces", &run_id);
        runs.push((run_id, workspace));
    }
    let [(echo, echo_workspace), (keeper, keeper_workspace)] = &runs[..] else {
        unreachable!()
    };
    for run in [echo, keeper] {
        eventually(Duration::from_secs(60), "the run to end", || async {
            let run = store.run(run).await.unwrap().unwrap();
            (run.status == RunStatus::Succeeded).then_some(())
        })
        .await;
    }
    eventually(
        Duration::from_secs(30),
        "the ended run's workspace to go",
        || async { (!echo_workspace.exists()).then_some(()) },
    )
    .await;
    assert!(
        keeper_workspace.exists(),
        "an agent that keeps workspaces keeps its run's ({keeper})"
    );
    // Counted in the daemon's metrics as a workspace removed.
    let metrics = http
        .get(format!("{api}/metrics"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let removed: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("nightshift_retention_files_removed_total{kind=\"workspace\"}"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(removed, 1.0, "{metrics}");
    daemon.signal("TERM");
    assert!(daemon.wait_exit(Duration::from_secs(20)).await.success());
}
