//! Schedules over HTTP and in the real daemon: the `/v1/schedules` API on both backends, and
//! a `nightshift serve` process whose config schedule fires a run that completes with the
//! scripted model.

use std::process::Command;
use std::time::Duration;

use nightshift_runner::api::{ApiState, router};
use nightshift_scheduler::cron::{self, Schedule, ScheduleSpec};
use nightshift_store::{RunStatus, Store, Trigger};
use nightshift_tests::process::Serve;
use nightshift_tests::{TestDb, eventually, on_both_backends};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::process::{API_TOKEN, Proc, free_port, nightshift_bin};

on_both_backends! {
    schedules_api_creates_changes_triggers_and_deletes => schedules_api;
    nightshift_serve_fires_a_config_schedule_end_to_end => serve_fires_a_schedule;
}

async fn send(
    http: &reqwest::Client,
    base: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut req = http
        .request(method.parse().unwrap(), format!("{base}{path}"))
        .bearer_auth(API_TOKEN);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn schedules_api(db: &TestDb) {
    let store = db.store().await;
    let agents = vec!["reporter".to_string()];
    let from_config = ScheduleSpec {
        name: "from-config".into(),
        cron: "0 7 * * 1-5".into(),
        timezone: "Europe/Berlin".into(),
        agent: "reporter".into(),
        prompt: "digest {{ date }}".into(),
        overlap: Default::default(),
        missed: Default::default(),
        enabled: true,
    };
    cron::apply_config(
        &store,
        &[Schedule::compile(from_config, Some(&agents)).unwrap()],
    )
    .await
    .unwrap();
    let state = ApiState {
        store: store.clone(),
        intake: nightshift_scheduler::Intake::new(store.clone(), agents),
        tokens: nightshift_runner::api_tokens::ApiTokens::single(API_TOKEN.to_string()),
        hooks: nightshift_runner::hooks::none(),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move { axum::serve(listener, router(state)).await.unwrap() });
    let http = nightshift_llm::http::build_client(nightshift_llm::HttpTimeouts::default()).unwrap();

    let unauth = http
        .get(format!("{base}/v1/schedules"))
        .send()
        .await
        .unwrap();
    assert_eq!(unauth.status(), StatusCode::UNAUTHORIZED);

    let body = json!({"name": "nightly", "cron": "30 2 * * *", "timezone": "America/New_York",
                      "agent": "reporter", "prompt": "Nightly run at {{ fire_time }}",
                      "overlap": "queue", "missed": "run_once"});
    let (status, created) = send(&http, &base, "POST", "/v1/schedules", Some(body.clone())).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["source"], "api");
    assert_eq!(created["overlap"], "queue");
    let local = created["next_fire_local"].as_str().unwrap();
    assert!(
        local.contains("T02:30:00-0"),
        "next fire in New York time: {local}"
    );
    assert!(created["next_fire_utc"].as_str().unwrap().ends_with('Z'));
    let (status, again) = send(&http, &base, "POST", "/v1/schedules", Some(body)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{again}");

    // Refusals name the key and change nothing.
    let bad = json!({"name": "bad", "cron": "0 7 * *", "agent": "reporter", "prompt": "p"});
    let (status, err) = send(&http, &base, "POST", "/v1/schedules", Some(bad)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        err["error"]
            .as_str()
            .unwrap()
            .contains("schedules.bad.cron"),
        "{err}"
    );
    let unknown = json!({"name": "bad", "cron": "@daily", "agent": "reporter", "prompt": "p",
                         "when": "now"});
    let (status, err) = send(&http, &base, "POST", "/v1/schedules", Some(unknown)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(err["error"].as_str().unwrap().contains("when"), "{err}");
    let (_, list) = send(&http, &base, "GET", "/v1/schedules", None).await;
    let names: Vec<&str> = list["schedules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["from-config", "nightly"]);

    let patch = json!({"cron": "0 3 * * *", "prompt": "At {{ time }} ({{ schedule }})"});
    let (status, changed) = send(&http, &base, "PATCH", "/v1/schedules/nightly", Some(patch)).await;
    assert_eq!(status, StatusCode::OK, "{changed}");
    assert_eq!(changed["cron"], "0 3 * * *");
    assert!(
        changed["next_fire_local"]
            .as_str()
            .unwrap()
            .contains("T03:00:00-0")
    );
    let (status, err) = send(
        &http,
        &base,
        "PATCH",
        "/v1/schedules/from-config",
        Some(json!({"enabled": false})),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(
        err["error"].as_str().unwrap().contains("config file"),
        "{err}"
    );
    let (status, _) = send(&http, &base, "DELETE", "/v1/schedules/from-config", None).await;
    assert_eq!(status, StatusCode::CONFLICT);

    // Trigger fires now: one run with the rendered prompt, recorded as the last run.
    let (status, fired) = send(&http, &base, "POST", "/v1/schedules/nightly/trigger", None).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{fired}");
    assert_eq!(fired["outcome"], "enqueued");
    let run_id = fired["run_id"].as_str().unwrap().to_string();
    let run = store.run(&run_id).await.unwrap().unwrap();
    assert_eq!(run.trigger_kind, Trigger::Schedule);
    assert!(run.input.ends_with("(nightly)"), "{}", run.input);
    let (_, shown) = send(&http, &base, "GET", "/v1/schedules/nightly", None).await;
    assert_eq!(shown["last_run_id"], run_id.as_str());
    assert_eq!(shown["last_run_status"], "queued");
    assert_eq!(shown["fired_count"], 1);

    let (status, _) = send(&http, &base, "DELETE", "/v1/schedules/nightly", None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = send(&http, &base, "GET", "/v1/schedules/nightly", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = send(&http, &base, "POST", "/v1/schedules/nightly/trigger", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    server.abort();
}

/// A config for `nightshift serve` on `db` with a scripted agent `echo` and one schedule
/// `every-second` (Berlin time); returns its path.
fn schedule_config(db: &TestDb, dir: &std::path::Path) -> std::path::PathBuf {
    let script =
        r#"[{"content": [{"type": "text", "text": "digest done"}], "stop_reason": "end_turn"}]"#;
    std::fs::write(dir.join("script.json"), script).unwrap();
    let port = free_port();
    let schema = db
        .config
        .schema
        .as_ref()
        .map(|s| format!("schema = \"{s}\""))
        .unwrap_or_default();
    let cfg = dir.join("nightshift.toml");
    std::fs::write(
        &cfg,
        format!(
            "[database]\nurl = \"{}\"\n{schema}\n\
             [server]\naddress = \"127.0.0.1:{port}\"\n\
             [worker]\nslots = 2\nheartbeat_ms = 200\nlease_ms = 2000\npoll_interval_ms = 100\n\
             [runtime]\ndata_dir = \"data\"\n\
             [providers.scripted]\nkind = \"scripted\"\nscript = \"script.json\"\n\
             [[agents]]\nname = \"echo\"\nprovider = \"scripted\"\nmodel = \"scripted-1\"\n\
             [[schedules]]\nname = \"every-second\"\ncron = \"* * * * * *\"\n\
             timezone = \"Europe/Berlin\"\nagent = \"echo\"\n\
             prompt = \"Digest for {{{{ schedule }}}} at {{{{ fire_time }}}}\"\n",
            db.config.url
        ),
    )
    .unwrap();
    cfg
}

/// `nightshift serve` with the test's API token.
fn serve(cfg: &std::path::Path) -> Proc {
    Serve::new(cfg)
        .env("NIGHTSHIFT_API_TOKEN", API_TOKEN)
        .spawn()
}

async fn serve_fires_a_schedule(db: &TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = schedule_config(db, dir.path());
    let bin = nightshift_bin();
    let mut serve = serve(&cfg);
    let store: Store = db.store().await;
    let run = eventually(
        Duration::from_secs(30),
        "a scheduled run to succeed",
        || async {
            let runs = store.list_runs(Some(RunStatus::Succeeded), 10).await.ok()?;
            runs.into_iter()
                .find(|r| r.trigger_kind == Trigger::Schedule)
        },
    )
    .await;
    assert_eq!(run.result.as_deref(), Some("digest done"));
    assert!(
        run.input.starts_with("Digest for every-second at ")
            && (run.input.contains("+01:00") || run.input.contains("+02:00")),
        "the prompt is rendered in Berlin time: {}",
        run.input
    );
    let row = store.schedule("every-second").await.unwrap().unwrap();
    let key = run.idempotency_key.clone().unwrap();
    assert!(key.starts_with(&format!("schedule:{}:", row.id)), "{key}");
    assert_eq!(
        run.concurrency_key,
        Some(format!("schedule:{}", row.id)),
        "overlap = skip (the default) keys the runs"
    );
    let listed = Command::new(&bin)
        .arg("--config")
        .arg(&cfg)
        .args(["schedules", "list"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&listed.stdout);
    let header: Vec<&str> = out
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(header[..3], ["NAME", "SOURCE", "CRON"], "{out}");
    let line = out
        .lines()
        .find(|l| l.starts_with("every-second  config  * * * * * *  Europe/Berlin  "))
        .unwrap_or_else(|| panic!("the schedule is listed in the table: {out}"));
    let listed = Command::new(&bin)
        .arg("--config")
        .arg(&cfg)
        .args(["schedules", "list", "--json"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&listed.stdout);
    let row: serde_json::Value = out
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|r| r["name"] == "every-second")
        .unwrap_or_else(|| panic!("the schedule is listed as JSON: {out}"));
    assert_eq!(row["source"], "config");
    assert_eq!(row["timezone"], "Europe/Berlin");
    let next_local = row["next_fire_local"].as_str().unwrap();
    assert!(
        next_local.ends_with("+01:00") || next_local.ends_with("+02:00"),
        "next fire, Berlin: {row}"
    );
    assert!(line.contains(next_local), "the table shows it too: {line}");
    assert!(
        row["next_fire_utc"].as_str().unwrap().ends_with('Z'),
        "{row}"
    );
    assert!(
        row["last_fire_local"].as_str().unwrap().contains('T'),
        "{row}"
    );
    let last = store
        .run(row["last_run_id"].as_str().unwrap())
        .await
        .unwrap()
        .expect("the last run exists");
    assert_eq!(last.trigger_kind, Trigger::Schedule);
    assert!(
        row["last_run_status"]
            .as_str()
            .unwrap()
            .parse::<RunStatus>()
            .is_ok(),
        "last run status: {row}"
    );
    let lease = store.leader(cron::LEADER_LEASE).await.unwrap().unwrap();
    assert!(lease.expires_at > store.now(), "the daemon holds the lease");
    serve.signal("TERM");
    let status = serve.wait_exit(Duration::from_secs(30)).await;
    assert!(status.success(), "serve exits cleanly: {status:?}");
    let lease = store.leader(cron::LEADER_LEASE).await.unwrap().unwrap();
    assert!(
        lease.expires_at <= store.now(),
        "a clean shutdown releases the lease"
    );
}

/// Two real daemons on one PostgreSQL schema: one leads; when it is SIGKILLed the other takes
/// over once the lease runs out, and every fire is still one run.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standby_daemon_takes_over_the_timer_when_the_leader_is_killed() {
    let Some(db) = TestDb::new(nightshift_tests::Backend::Postgres, "standby_takeover").await
    else {
        return;
    };
    let dir_a = tempfile::tempdir().unwrap();
    let dir_b = tempfile::tempdir().unwrap();
    let mut daemons = [
        serve(&schedule_config(&db, dir_a.path())),
        serve(&schedule_config(&db, dir_b.path())),
    ];
    let store = db.store().await;
    let lease = eventually(Duration::from_secs(30), "a leader", || async {
        store.leader(cron::LEADER_LEASE).await.ok().flatten()
    })
    .await;
    let pid: u32 = lease.holder.split(':').nth(1).unwrap().parse().unwrap();
    let leader = daemons
        .iter()
        .position(|d| d.pid() == pid)
        .expect("a daemon leads");
    let standby = 1 - leader;
    eventually(Duration::from_secs(30), "scheduled runs", || async {
        let runs = store.list_runs(None, 1000).await.ok()?;
        (runs
            .iter()
            .filter(|r| r.trigger_kind == Trigger::Schedule)
            .count()
            >= 2)
            .then_some(())
    })
    .await;
    daemons[leader].signal("KILL");
    daemons[leader].wait_exit(Duration::from_secs(10)).await;
    let killed_at = store.now();
    let standby_pid = daemons[standby].pid();
    let lease = eventually(Duration::from_secs(40), "the standby to lead", || async {
        let l = store.leader(cron::LEADER_LEASE).await.ok().flatten()?;
        (l.holder.split(':').nth(1) == Some(standby_pid.to_string().as_str())).then_some(l)
    })
    .await;
    let took = lease.acquired_at - killed_at;
    assert!(
        (0..=25_000).contains(&took),
        "the standby led {took} ms after the kill (lease 15 s + one 5 s retry)"
    );
    eventually(
        Duration::from_secs(30),
        "a fire by the new leader",
        || async {
            let runs = store.list_runs(None, 1000).await.ok()?;
            runs.iter()
                .any(|r| r.trigger_kind == Trigger::Schedule && r.created_at >= lease.acquired_at)
                .then_some(())
        },
    )
    .await;
    daemons[standby].signal("TERM");
    daemons[standby].wait_exit(Duration::from_secs(30)).await;
    let runs: Vec<_> = store
        .list_runs(None, 1000)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.trigger_kind == Trigger::Schedule)
        .collect();
    let keys: std::collections::HashSet<_> = runs.iter().map(|r| &r.idempotency_key).collect();
    assert_eq!(keys.len(), runs.len(), "every fire is one run");
    let row = store.schedule("every-second").await.unwrap().unwrap();
    // A fire the killed leader enqueued just before dying is a run it never recorded.
    let fired = usize::try_from(row.fired_count).unwrap();
    assert!(
        fired == runs.len() || fired + 1 == runs.len(),
        "{fired} fires recorded, {} runs",
        runs.len()
    );
    // The seconds without a leader (about 20) are taken up late, within the minute: every
    // second from the first fire to the armed one was fired (or skipped, overlap = skip while
    // a run was active), none missed.
    assert_eq!(
        row.missed_count, 0,
        "a takeover within a minute misses nothing"
    );
    let first = runs
        .iter()
        .filter_map(|r| {
            r.idempotency_key
                .as_deref()?
                .rsplit(':')
                .next()?
                .parse::<i64>()
                .ok()
        })
        .min()
        .unwrap();
    let seconds = (row.next_fire_at.unwrap() - first) / 1000;
    assert_eq!(
        row.fired_count + row.skipped_count,
        seconds,
        "every second from the first fire ({first}) on was taken up"
    );
    drop(daemons);
    db.cleanup().await;
}
