//! One scrape of a whole daemon that ran everything once: a run with model and tool calls
//! (read-only, side-effect and invented), a webhook delivery, a manual schedule fire, a notice
//! attempt and a wakeup, each counted under its labels; the scrape refused without the token
//! except on `telemetry.metrics_address`.

use std::time::Duration;

use nightshift_runner::daemon;
use nightshift_store::RunStatus;
use nightshift_tests::{TestDb, eventually};
use reqwest::StatusCode;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::{Api, config, value};

pub(super) async fn scrape_counts_everything(db: &TestDb) {
    let p = format!(
        "m{}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8],
        match db.backend {
            nightshift_tests::Backend::Sqlite => "sqlite",
            nightshift_tests::Backend::Postgres => "pg",
        }
    );
    let dir = tempfile::tempdir().unwrap();
    let config = config(db, dir.path(), &p);
    let store = nightshift_runner::open_store(&config).await.unwrap();
    let shutdown = CancellationToken::new();
    let running = daemon::start(&config, store.clone(), shutdown.clone())
        .await
        .expect("the daemon starts");
    let base = format!("http://{}", running.address());
    let open_metrics = format!("http://{}/metrics", running.metrics_address().unwrap());
    let stopped = tokio::spawn(running.wait());
    let token = std::fs::read_to_string(dir.path().join("data").join("api-token")).unwrap();
    let api = Api {
        base,
        token: token.trim().to_string(),
        http: reqwest::Client::new(),
    };
    let (agent, sleeper, lane) = (
        format!("{p}-work"),
        format!("{p}-sleep"),
        format!("{p}-lane"),
    );

    // The token guards /metrics on the API's address, not on telemetry.metrics_address.
    let refused = api
        .http
        .get(format!("{}/metrics", api.base))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    let open = api.http.get(&open_metrics).send().await.unwrap();
    assert_eq!(open.status(), StatusCode::OK);
    assert!(
        open.text()
            .await
            .unwrap()
            .contains("# TYPE nightshift_model_breaker_state gauge")
    );

    // A run with tools, in the test's lane, to its end.
    let run_id = api
        .enqueue(json!({"agent": agent, "prompt": "Work.", "lane": lane}))
        .await;
    let samples = api
        .until("the run's end to be counted", |s| {
            value(
                s,
                "nightshift_runs_ended_total",
                &[("agent", &agent), ("status", "succeeded")],
            )
            .is_some()
        })
        .await;
    let run = eventually(
        Duration::from_secs(60),
        "the run's end to be written",
        || async {
            let run = store.run(&run_id).await.unwrap().unwrap();
            (run.status == RunStatus::Succeeded).then_some(run)
        },
    )
    .await;
    let get = |name: &str, labels: &[(&str, &str)]| value(&samples, name, labels);
    let a = agent.as_str();
    assert_eq!(
        get("nightshift_runs_started_total", &[("agent", a)]),
        Some(1.0)
    );
    assert_eq!(
        get(
            "nightshift_runs_ended_total",
            &[("agent", a), ("status", "succeeded")]
        ),
        Some(1.0)
    );
    assert_eq!(
        get(
            "nightshift_run_duration_seconds_count",
            &[("agent", a), ("status", "succeeded")]
        ),
        Some(1.0)
    );
    assert_eq!(
        get(
            "nightshift_job_outcomes_total",
            &[("agent", a), ("kind", "start"), ("outcome", "done")]
        ),
        Some(1.0)
    );
    assert_eq!(
        get(
            "nightshift_job_start_delay_seconds_count",
            &[("lane", &lane), ("kind", "start")]
        ),
        Some(1.0),
        "the run's job was claimed once in its lane"
    );

    // Model calls under the agent's provider and model; tokens and cost equal the run's.
    let model = [("provider", a), ("model", "scripted-1")];
    let with = |extra: (&'static str, &'static str)| {
        let mut l = model.to_vec();
        l.push(extra);
        l
    };
    assert_eq!(
        get("nightshift_model_calls_total", &with(("status", "ok"))),
        Some(run.turns as f64),
        "one call per turn: {}",
        run.turns
    );
    assert_eq!(run.turns, 4);
    for (kind, stored) in [
        ("input", run.input_tokens),
        ("output", run.output_tokens),
        ("cache_read", run.cache_read_tokens),
        ("cache_write", run.cache_write_tokens),
    ] {
        assert_eq!(
            get("nightshift_model_tokens_total", &with(("kind", kind))),
            Some(stored as f64),
            "{kind} tokens"
        );
    }
    assert_eq!(run.input_tokens, 600);
    let cost = get("nightshift_model_cost_usd", &model).expect("a cost");
    assert!(
        (cost - run.cost_usd).abs() < 1e-9,
        "{cost} vs {}",
        run.cost_usd
    );
    assert!(run.cost_usd > 0.0);
    assert_eq!(get("nightshift_model_breaker_state", &model), Some(0.0));

    // Tool calls by tool, class and outcome; the invented tool is `unknown`.
    let (look, act) = (format!("{p}-look"), format!("{p}-act"));
    let tool = |name: &str, class: &str, outcome: &str| {
        get(
            "nightshift_tool_calls_total",
            &[("tool", name), ("class", class), ("outcome", outcome)],
        )
    };
    assert_eq!(tool(&look, "read_only", "ok"), Some(1.0));
    assert_eq!(tool(&act, "side_effect", "ok"), Some(1.0));
    assert_eq!(
        get(
            "nightshift_tool_call_duration_seconds_count",
            &[("tool", &look), ("class", "read_only"), ("outcome", "ok")]
        ),
        Some(1.0)
    );
    assert!(tool("unknown", "side_effect", "error").unwrap_or(0.0) >= 1.0);
    assert!(
        samples.iter().all(|s| s
            .labels
            .iter()
            .all(|(_, v)| !v.contains("invented") && !v.contains(&run_id))),
        "no invented name or run id is a label"
    );

    // The run's notice: its only attempt fails (no secret), so the delivery is dead.
    api.until("the notice attempt to be counted", |s| {
        value(
            s,
            "nightshift_notification_deliveries_total",
            &[("agent", a), ("status", "dead")],
        ) == Some(1.0)
    })
    .await;

    // Live jobs per state and lane: a run due in an hour waits in the test's lane.
    let later = api
        .enqueue(json!({"agent": agent, "prompt": "Later.", "lane": lane, "delay_seconds": 3600}))
        .await;
    api.until("the delayed job in the lane", |s| {
        value(
            s,
            "nightshift_jobs",
            &[("state", "delayed"), ("lane", &lane)],
        ) == Some(1.0)
    })
    .await;
    let samples = api.scrape().await;
    assert_ne!(
        value(
            &samples,
            "nightshift_jobs",
            &[("state", "queued"), ("lane", &lane)]
        ),
        Some(1.0),
        "a job due in an hour is not counted as queued"
    );
    assert_eq!(
        value(
            &samples,
            "nightshift_queue_oldest_due_age_seconds",
            &[("lane", &lane)]
        )
        .unwrap_or(0.0),
        0.0,
        "no due job in the lane"
    );

    // A webhook delivery, then the same again: accepted, then duplicate.
    let hook = format!("{p}-hook");
    for _ in 0..2 {
        let resp = api
            .http
            .post(format!("{}/hooks/{hook}", api.base))
            .json(&json!({"id": "delivery-1"}))
            .send()
            .await
            .unwrap();
        assert!(resp.status().is_success(), "{:?}", resp.text().await);
    }
    let samples = api.scrape().await;
    for outcome in ["accepted", "duplicate"] {
        assert_eq!(
            value(
                &samples,
                "nightshift_webhook_deliveries_total",
                &[("hook", &hook), ("outcome", outcome)]
            ),
            Some(1.0),
            "{outcome}"
        );
    }

    // A manual schedule fire.
    let schedule = format!("{p}-sched");
    let (status, body) = api
        .post(&format!("/v1/schedules/{schedule}/trigger"), json!({}))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let samples = api.scrape().await;
    assert_eq!(
        value(
            &samples,
            "nightshift_schedule_fires_total",
            &[
                ("schedule", &schedule),
                ("trigger", "manual"),
                ("outcome", "enqueued")
            ]
        ),
        Some(1.0)
    );

    // Wakeups: the sleeper's runs (from the hook and the schedule, and one more) arm
    // wakeups; the gauge counts them, and goes back to 0 once they are woken.
    let sleepy = api
        .enqueue(json!({"agent": sleeper, "prompt": "Sleep."}))
        .await;
    api.until("three armed wakeups", |s| {
        value(s, "nightshift_wakeups_armed", &[("agent", &sleeper)]) == Some(3.0)
    })
    .await;
    for w in store.pending_wakeups(100).await.unwrap() {
        if w.agent == sleeper {
            let (status, body) = api
                .post(&format!("/v1/runs/{}/wake", w.run_id), json!({}))
                .await;
            assert!(status.is_success(), "{body}");
        }
    }
    let samples = api
        .until("the woken runs to end", |s| {
            value(
                s,
                "nightshift_runs_ended_total",
                &[("agent", &sleeper), ("status", "succeeded")],
            ) == Some(3.0)
        })
        .await;
    assert_eq!(
        value(&samples, "nightshift_wakeups_armed", &[("agent", &sleeper)]),
        Some(0.0)
    );
    assert!(value(&samples, "nightshift_wakeup_lateness_seconds_count", &[]).unwrap_or(0.0) >= 3.0);
    assert_eq!(
        value(
            &samples,
            "nightshift_job_outcomes_total",
            &[("agent", &sleeper), ("kind", "resume"), ("outcome", "done")]
        ),
        Some(3.0)
    );
    // A park is written by the job's own task, and counted once written, like an end.
    assert_eq!(
        value(
            &samples,
            "nightshift_job_outcomes_total",
            &[("agent", &sleeper), ("kind", "start"), ("outcome", "park")]
        ),
        Some(3.0)
    );
    // The metrics count a run's end once the pool wrote it; the run's status is read here
    // from the store all the same.
    eventually(
        Duration::from_secs(60),
        "the woken run's end to be written",
        || async {
            let woken = store.run(&sleepy).await.unwrap().unwrap();
            (woken.status == RunStatus::Succeeded).then_some(())
        },
    )
    .await;

    // Runs the store ends while no job of them runs are counted too, once: the queued run
    // cancelled, and a queued run superseded by a newer one of its key.
    let (status, body) = api
        .post(&format!("/v1/runs/{later}/cancel"), json!({}))
        .await;
    assert!(status.is_success(), "{body}");
    assert_eq!(body["status"], "cancelled", "{body}");
    let key = format!("{p}-key");
    let keyed = json!({"agent": agent, "prompt": "Later, keyed.", "lane": lane,
                       "delay_seconds": 3600, "concurrency_key": key,
                       "concurrency_policy": "supersede"});
    let old = api.enqueue(keyed.clone()).await;
    api.enqueue(keyed).await;
    assert_eq!(
        store.run(&old).await.unwrap().unwrap().status,
        RunStatus::Superseded
    );
    // Told before the API answered: no waiting.
    let samples = api.scrape().await;
    for status in ["cancelled", "superseded"] {
        let labels = [("agent", a), ("status", status)];
        assert_eq!(
            value(&samples, "nightshift_runs_ended_total", &labels),
            Some(1.0),
            "{status}"
        );
        assert_eq!(
            value(&samples, "nightshift_run_duration_seconds_count", &labels),
            Some(1.0),
            "{status}"
        );
    }

    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(60), stopped)
        .await
        .expect("the daemon stops")
        .unwrap()
        .expect("the daemon stops cleanly");
    store.close().await;
}
