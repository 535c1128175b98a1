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
//!
//! The scrape of a whole daemon is in [`scrape`], the schedule timer's counts in
//! [`schedule_timer`], and counting a run's end once in [`run_ends`]; the daemon's config, its
//! API and reading a series are here.

mod run_ends;
mod schedule_timer;
mod scrape;

use std::path::Path;
use std::time::Duration;

use nightshift_runner::config::Config;
use nightshift_telemetry::exposition::{Sample, parse};
use nightshift_tests::config_text::{agent_with, command_tool, q};
use nightshift_tests::{TestDb, eventually, on_both_backends};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::crash::{text_turn, tool_turn};
use run_ends::{end_counted_once_written, fork_counted_as_started, leftover_counts_nothing};
use schedule_timer::timer_fires_and_misses;
use scrape::scrape_counts_everything;

on_both_backends! {
    a_scrape_counts_a_run_its_model_and_tool_calls_hooks_schedules_notices_and_wakeups => scrape_counts_everything;
    the_schedule_timer_counts_its_fires_and_missed_fires => timer_fires_and_misses;
    a_run_end_is_counted_once_a_pool_wrote_it_not_when_a_handler_returned_it =>
        end_counted_once_written;
    a_job_that_finds_its_run_ended_counts_nothing => leftover_counts_nothing;
    a_fork_is_counted_as_started_once => fork_counted_as_started;
}

/// Never set: the daemon keeps its own token.
const UNSET_ENV: &str = "NIGHTSHIFT_METRICS_SUITE_NEVER_SET";

/// Set in every process (a notify secret must be set for the daemon to start; this test sets
/// no variable of its own, as a test cannot change its process's environment safely). The
/// notice goes to a closed port, so its one attempt fails and the delivery is dead.
const SET_ENV: &str = "PATH";

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
