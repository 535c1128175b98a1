//! Schedules over HTTP and in the real daemon: the `/v1/schedules` API on both backends, and
//! a `nightshift serve` process whose config schedule fires a run that completes with the
//! scripted model.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use nightshift_runner::api::{ApiState, router};
use nightshift_scheduler::cron::{self, Schedule, ScheduleSpec};
use nightshift_store::{RunStatus, Store, Trigger};
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
        agents: Arc::new(agents),
        token: Arc::new(API_TOKEN.to_string()),
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
    assert_eq!(status, StatusCode::BAD_REQUEST);
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

async fn serve_fires_a_schedule(db: &TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let script =
        r#"[{"content": [{"type": "text", "text": "digest done"}], "stop_reason": "end_turn"}]"#;
    std::fs::write(dir.path().join("script.json"), script).unwrap();
    let port = free_port();
    let schema = db
        .config
        .schema
        .as_ref()
        .map(|s| format!("schema = \"{s}\""))
        .unwrap_or_default();
    let cfg = dir.path().join("nightshift.toml");
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
    let bin = nightshift_bin();
    let mut serve = Proc {
        child: Command::new(&bin)
            .arg("--config")
            .arg(&cfg)
            .arg("serve")
            .env("NIGHTSHIFT_API_TOKEN", API_TOKEN)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn nightshift serve"),
    };
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
    let line = out
        .lines()
        .find(|l| l.starts_with("every-second\tconfig\t* * * * * *\tEurope/Berlin\t"))
        .unwrap_or_else(|| panic!("the schedule is listed: {out}"));
    assert!(line.contains('Z'), "the next fire in UTC: {line}");
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
