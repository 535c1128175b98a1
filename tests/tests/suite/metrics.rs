//! `GET /metrics` of a whole daemon in process, on both backends: a scripted agent calls a
//! read-only command tool, a side-effect command tool and a tool it invented, then a scrape
//! (with the token; 401 without it; and without it on `telemetry.metrics_address`) shows the
//! run's outcome under its agent and status, model calls whose tokens equal the stored run's
//! usage, the tool calls by tool, class and outcome (the invented one as `unknown`), the
//! start delay of the run's job in its lane, the live jobs per state and lane, a webhook's
//! deliveries by outcome, a manual schedule fire, a notice attempt, and a wakeup armed, then
//! woken.
//!
//! The recorder is global to this test binary, so every name here carries a suffix of its
//! own and only those series are asserted on, never totals.

use std::path::Path;
use std::time::Duration;

use nightshift_runner::config::Config;
use nightshift_runner::daemon;
use nightshift_store::RunStatus;
use nightshift_tests::config_text::{agent_with, command_tool, q};
use nightshift_tests::{TestDb, eventually, on_both_backends};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::crash::{text_turn, tool_turn};

on_both_backends! {
    a_scrape_counts_a_run_its_model_and_tool_calls_hooks_schedules_notices_and_wakeups => scrape_counts_everything;
    the_schedule_timer_counts_its_fires_and_missed_fires => timer_fires_and_misses;
    a_run_end_is_counted_once_a_pool_wrote_it_not_when_a_handler_returned_it =>
        end_counted_once_written;
    a_job_that_finds_its_run_ended_counts_nothing => leftover_counts_nothing;
}

/// Never set: the daemon keeps its own token.
const UNSET_ENV: &str = "NIGHTSHIFT_METRICS_SUITE_NEVER_SET";

/// Set in every process (a notify secret must be set for the daemon to start; this test sets
/// no variable of its own, as a test cannot change its process's environment safely). The
/// notice goes to a closed port, so its one attempt fails and the delivery is dead.
const SET_ENV: &str = "PATH";

use nightshift_telemetry::exposition::{Sample, parse};

/// The value of the series `name` with exactly `labels` (in any order), if any.
fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|s| {
            s.name == name
                && s.labels.len() == labels.len()
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.iter().any(|(sk, sv)| sk == k && sv == v))
        })
        .map(|s| s.value)
}

/// The daemon's config: port 0 for the API and the metrics address, a lane reserved for this
/// test, the sandbox off, and the agents, tools, hook and schedule, each name suffixed `p`.
fn config(db: &TestDb, dir: &Path, p: &str) -> Config {
    let work = agent_with(
        dir,
        &format!("{p}-work"),
        &[&format!("{p}-look"), &format!("{p}-act")],
        json!([
            {"content": [{"type": "tool_use", "id": "call_1", "name": format!("{p}-look"), "input": {}}],
             "stop_reason": "tool_use", "usage": {"input_tokens": 100, "output_tokens": 10,
             "cache_read_input_tokens": 7, "cache_creation_input_tokens": 3}},
            {"content": [{"type": "tool_use", "id": "call_2", "name": format!("{p}-act"), "input": {}}],
             "stop_reason": "tool_use", "usage": {"input_tokens": 200, "output_tokens": 20}},
            tool_turn("call_3", &format!("invented-{p}"), json!({})),
            {"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn",
             "usage": {"input_tokens": 300, "output_tokens": 30}},
        ]),
        &format!(
            "[agents.pricing]\ninput = 3.0\noutput = 15.0\ncache_read = 0.3\ncache_write = 3.75\n\n\
             [[agents.notify]]\nurl = \"http://127.0.0.1:9/notices\"\nsecret_env = {}\n\
             max_attempts = 1\nretry_base_ms = 100\nretry_cap_ms = 100\n\n",
            q(SET_ENV)
        ),
    );
    let sleep = agent_with(
        dir,
        &format!("{p}-sleep"),
        &["schedule_wakeup"],
        json!([
            tool_turn(
                "call_1",
                "schedule_wakeup",
                json!({"delay_seconds": 3600, "reason": "later"})
            ),
            text_turn("woke"),
        ]),
        "",
    );
    let text = format!(
        "[worker]\nslots = 3\nheartbeat_ms = 200\nlease_ms = 5000\npoll_interval_ms = 100\n\
         shutdown_grace_ms = 60000\n\n[worker.lanes]\n{lane} = 1\n\n\
         [server]\naddress = \"127.0.0.1:0\"\ntoken_env = {token}\n\n\
         [telemetry]\nmetrics_address = \"127.0.0.1:0\"\n\n\
         [runtime]\ndata_dir = \"data\"\n\n[sandbox]\nmode = \"off\"\n\n\
         {work}{sleep}{look}{act}\
         [[hooks]]\nname = {hook}\nsignature = \"none\"\ndelivery_id = {{ pointer = \"/id\" }}\n\n\
         [[hooks.routes]]\nname = \"all\"\nagent = {sleep_agent}\nprompt = \"hook {{{{ id }}}}\"\n\n\
         [[schedules]]\nname = {schedule}\ncron = \"0 0 1 1 *\"\nagent = {sleep_agent}\n\
         prompt = \"scheduled\"\n\n",
        lane = q(&format!("{p}-lane")),
        token = q(UNSET_ENV),
        look = command_tool(&format!("{p}-look"), "read_only", "echo looked"),
        act = command_tool(&format!("{p}-act"), "side_effect", "echo acted"),
        hook = q(&format!("{p}-hook")),
        schedule = q(&format!("{p}-sched")),
        sleep_agent = q(&format!("{p}-sleep")),
    );
    let mut config = Config::parse(&text, "metrics test config").unwrap();
    config.base_dir = dir.to_path_buf();
    config.database = db.config.clone();
    config.validate().unwrap();
    config
}

struct Api {
    base: String,
    token: String,
    http: reqwest::Client,
}

impl Api {
    async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        let resp = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = resp.status();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    async fn enqueue(&self, body: Value) -> String {
        let (status, body) = self.post("/v1/runs", body).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        body["run_id"].as_str().unwrap().to_string()
    }

    /// `GET /metrics` with the token, parsed.
    async fn scrape(&self) -> Vec<Sample> {
        let resp = self
            .http
            .get(format!("{}/metrics", self.base))
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let kind = resp.headers()["content-type"].to_str().unwrap().to_string();
        assert!(kind.starts_with("text/plain; version=0.0.4"), "{kind}");
        parse(&resp.text().await.unwrap())
    }

    /// Scrapes until `check` holds for a scrape (gauges are sampled per scrape, counters
    /// are counted as the daemon goes).
    async fn until(&self, what: &str, check: impl Fn(&[Sample]) -> bool) -> Vec<Sample> {
        eventually(Duration::from_secs(60), what, || async {
            let samples = self.scrape().await;
            check(&samples).then_some(samples)
        })
        .await
    }
}

async fn scrape_counts_everything(db: &TestDb) {
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

/// The timer after a three-hour outage, on a manual clock: a `skip` schedule misses all three
/// fires; a `run_once` one misses two and fires the latest; both then fire on time.
async fn timer_fires_and_misses(db: &TestDb) {
    use crate::schedules::{at, create, manual_store, spec, timer};
    use nightshift_scheduler::cron::{Missed, ScheduleSpec};

    nightshift_telemetry::install();
    let p = &uuid::Uuid::new_v4().simple().to_string()[..8];
    let (skipper, catcher) = (format!("skip-{p}"), format!("catch-{p}"));
    let (store, clock) = manual_store(db, "2026-06-01T00:30:00Z").await;
    create(&store, spec(&skipper, "0 * * * *", "UTC")).await;
    let catching = ScheduleSpec {
        missed: Missed::RunOnce,
        ..spec(&catcher, "0 * * * *", "UTC")
    };
    create(&store, catching).await;
    let mut t = timer(&store, "solo", Duration::from_secs(60));
    clock.set(at("2026-06-01T03:40:00Z"));
    t.tick().await.unwrap();
    clock.set(at("2026-06-01T04:00:00Z"));
    t.tick().await.unwrap();

    let samples = parse(&nightshift_telemetry::render());
    let missed = |name: &str| {
        value(
            &samples,
            "nightshift_schedule_missed_fires_total",
            &[("schedule", name)],
        )
    };
    let fired = |name: &str| {
        value(
            &samples,
            "nightshift_schedule_fires_total",
            &[
                ("schedule", name),
                ("trigger", "timer"),
                ("outcome", "enqueued"),
            ],
        )
    };
    assert_eq!(missed(&skipper), Some(3.0));
    assert_eq!(missed(&catcher), Some(2.0));
    assert_eq!(fired(&skipper), Some(1.0), "the on-time fire at 04:00");
    assert_eq!(
        fired(&catcher),
        Some(2.0),
        "the latest missed fire, then 04:00"
    );
    store.close().await;
}

/// A run's end is counted once a pool wrote it, not when the runtime returned it: a job run
/// by the runtime with no pool to write its outcome — which is how a worker frozen past its
/// lease, whose job another worker took and ends, sees its own stale end — counts nothing,
/// while the same agent's run in a pool is counted once.
async fn end_counted_once_written(db: &TestDb) {
    use super::fakes::{FakeTools, Harness, ScriptModel, agent, reply, text};
    use nightshift_agent::AgentRuntime;
    use nightshift_llm::StopReason;
    use nightshift_worker::{Handler, JobContext, JobOutcome, Pool, PoolConfig};
    use std::sync::Arc;

    nightshift_telemetry::install();
    let name = format!("frozen-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let done = || reply(vec![text("Done.")], StopReason::EndTurn);
    let def = || agent(json!({ "name": name }));
    let tools = Arc::new(FakeTools::default());
    let h = Harness::new(db, def(), ScriptModel::new(vec![done()]), tools.clone()).await;
    let labels = [("agent", name.as_str()), ("status", "succeeded")];
    let counted = || {
        value(
            &parse(&nightshift_telemetry::render()),
            "nightshift_runs_ended_total",
            &labels,
        )
    };

    // In a pool the end is written, then counted.
    let runtime = AgentRuntime::new([def()], ScriptModel::new(vec![done()]), tools);
    let stop = CancellationToken::new();
    let pool = Pool::new(h.store.clone(), runtime, PoolConfig::default());
    let pool = tokio::spawn(pool.run(stop.clone()));
    let run_id = h.enqueue(&name, "Work in a pool.").await;
    eventually(
        Duration::from_secs(60),
        "the pool's run to be counted",
        || async { (counted() == Some(1.0)).then_some(()) },
    )
    .await;
    let run = h.store.run(&run_id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Succeeded);
    stop.cancel();
    pool.await.unwrap().unwrap();

    // No pool: nobody writes the end the runtime returns, so nobody counts it.
    h.enqueue(&name, "Work alone.").await;
    let ctx = JobContext::new(h.claim().await);
    let (tell, written) = tokio::sync::oneshot::channel();
    ctx.when_outcome_written(move |written| {
        let _ = tell.send(written);
    });
    let outcome = h.runtime.handle(ctx).await;
    assert!(matches!(outcome, JobOutcome::Done(_)), "{outcome:?}");
    // Every clone of the context is gone untold, so the end was told unwritten, for good:
    // the count can never move for it.
    let written = tokio::time::timeout(Duration::from_secs(30), written).await;
    assert_eq!(written.expect("told in time").ok(), Some(false));
    assert_eq!(counted(), Some(1.0), "only the end a pool wrote is counted");
}

/// A message accepted while its run was failing: its job runs in the pool after the run's end,
/// ends cancelled saying why, and the run is started once and ended once in the metrics.
async fn leftover_counts_nothing(db: &TestDb) {
    use super::fakes::{FakeTools, Harness, ScriptModel, agent, reply, text};
    use nightshift_agent::AgentRuntime;
    use nightshift_llm::StopReason;
    use nightshift_store::{ConcurrencyPolicy, JobState, NewRun};
    use nightshift_worker::{Pool, PoolConfig};
    use std::sync::{Arc, Mutex};

    nightshift_telemetry::install();
    let name = format!(
        "leftover-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let model = ScriptModel::new(vec![reply(vec![text("no")], StopReason::Refusal)]);
    let def = || agent(json!({ "name": name }));
    let tools = Arc::new(FakeTools::default());
    let h = Harness::new(db, def(), model.clone(), tools.clone()).await;
    let intake = nightshift_scheduler::Intake::new(h.store.clone(), [name.clone()]);
    let sent = Arc::new(Mutex::new(None));
    let slot = sent.clone();
    model.during(0, async move {
        let accepted = intake
            .resume(nightshift_scheduler::ResumeRequest {
                concurrency_key: "pr-9".into(),
                message: "still there?".into(),
                idempotency_key: None,
            })
            .await
            .unwrap();
        *slot.lock().unwrap() = Some(accepted.job_id);
    });
    let run_id = h
        .store
        .enqueue(&NewRun::new(&name, "Review PR 9").concurrency("pr-9", ConcurrencyPolicy::Queue))
        .await
        .unwrap()
        .run_id;
    let runtime = AgentRuntime::new([def()], model.clone(), tools);
    let stop = CancellationToken::new();
    let pool = Pool::new(h.store.clone(), runtime, PoolConfig::default());
    let pool = tokio::spawn(pool.run(stop.clone()));
    let store = h.store.clone();
    let job = eventually(
        Duration::from_secs(60),
        "the message's job to end",
        || async {
            let id = (*sent.lock().unwrap())?;
            let job = store.job(id).await.unwrap()?;
            (job.status == JobState::Cancelled).then_some(job)
        },
    )
    .await;
    stop.cancel();
    pool.await.unwrap().unwrap();
    assert!(
        job.last_error
            .as_deref()
            .is_some_and(|e| e.contains("not delivered")),
        "{job:?}"
    );
    assert_eq!(
        h.store.run(&run_id).await.unwrap().unwrap().status,
        RunStatus::Failed
    );
    let samples = parse(&nightshift_telemetry::render());
    let agent = [("agent", name.as_str())];
    assert_eq!(
        value(&samples, "nightshift_runs_started_total", &agent),
        Some(1.0)
    );
    let ended: f64 = samples
        .iter()
        .filter(|s| {
            s.name == "nightshift_runs_ended_total"
                && s.labels.iter().any(|(k, v)| k == "agent" && *v == name)
        })
        .map(|s| s.value)
        .sum();
    assert_eq!(ended, 1.0, "the run ended once");
    assert_eq!(
        value(
            &samples,
            "nightshift_runs_ended_total",
            &[("agent", name.as_str()), ("status", "failed")]
        ),
        Some(1.0)
    );
}
