//! A whole daemon in process (`nightshift_runner::daemon`), on both backends: started on
//! port 0, a run enqueued over its HTTP API and answered by a scripted model, then a second
//! run's tool call still in flight when the shutdown token fires. The daemon drains that run
//! (its end is recorded, its lease not released), claims nothing after the shutdown, stops
//! its HTTP server and deregisters its worker, and returns `Ok`.

use std::path::Path;
use std::time::Duration;

use nightshift_runner::config::Config;
use nightshift_runner::daemon;
use nightshift_scheduler::{Intake, RunRequest};
use nightshift_store::{RunStatus, Store, Trigger};
use nightshift_tests::http::{get_json, post_json};
use nightshift_tests::{TestDb, eventually, on_both_backends};
use reqwest::StatusCode;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::crash::{agent, command_tool, out, q, text_turn, tool_turn};

on_both_backends! {
    an_in_process_daemon_serves_a_run_then_drains_the_one_in_flight => serves_then_drains;
}

/// Never set: the daemon makes its own token and keeps it in `<data_dir>/api-token`.
const UNSET_TOKEN_ENV: &str = "NIGHTSHIFT_DAEMON_SUITE_TOKEN_NEVER_SET";

/// The config of the daemon under test: the test's database, port 0, one slot (so nothing
/// can be claimed while the gate runs), a drain long enough for any machine, the sandbox off
/// (this test binary is no launcher), an agent `echo` that answers in one turn and an agent
/// `gate` whose tool waits for `out/go`.
fn config(db: &TestDb, dir: &Path) -> Config {
    std::fs::create_dir_all(out(dir)).unwrap();
    let gate = out(dir).to_str().unwrap().to_string();
    assert!(!gate.contains('\''), "no quotes in temp paths: {gate}");
    let program = format!(
        "touch '{gate}/started'; while [ ! -f '{gate}/go' ]; do sleep 0.05; done; echo gate-open"
    );
    let body = agent(
        dir,
        "echo",
        &[],
        json!([text_turn("hello from the daemon")]),
    ) + &command_tool("gate", "side_effect", &program)
        + &agent(
            dir,
            "gate",
            &["gate"],
            json!([tool_turn("call_1", "gate", json!({})), text_turn("through")]),
        );
    let text = format!(
        "[worker]\nslots = 1\nheartbeat_ms = 200\nlease_ms = 5000\npoll_interval_ms = 100\n\
         shutdown_grace_ms = 600000\n\n\
         [server]\naddress = \"127.0.0.1:0\"\ntoken_env = {}\n\n\
         [runtime]\ndata_dir = \"data\"\n\n[sandbox]\nmode = \"off\"\n\n{body}",
        q(UNSET_TOKEN_ENV)
    );
    let mut config = Config::parse(&text, "daemon test config").unwrap();
    config.base_dir = dir.to_path_buf();
    config.database = db.config.clone();
    config.validate().unwrap();
    config
}

/// The daemon's API at `base` with the token it keeps under `dir`.
struct Api {
    base: String,
    token: String,
    http: reqwest::Client,
}

impl Api {
    fn new(base: String, dir: &Path) -> Api {
        let token = std::fs::read_to_string(dir.join("data").join("api-token")).unwrap();
        Api {
            base,
            token: token.trim().to_string(),
            http: nightshift_llm::http::build_client(nightshift_llm::HttpTimeouts::default())
                .unwrap(),
        }
    }

    /// Enqueues a run of `agent`; returns its id.
    async fn enqueue(&self, agent: &str) -> String {
        let (status, body) = post_json(
            &self.http,
            &format!("{}/v1/runs", self.base),
            &self.token,
            &json!({"agent": agent, "prompt": "Go."}),
        )
        .await;
        assert_eq!(status, StatusCode::ACCEPTED);
        body["run_id"].as_str().unwrap().to_string()
    }

    /// The run's status as the API reports it.
    async fn status(&self, run_id: &str) -> String {
        let (_, body) = get_json(
            &self.http,
            &format!("{}/v1/runs/{run_id}", self.base),
            &self.token,
        )
        .await;
        body["status"].as_str().unwrap().to_string()
    }
}

/// Every event payload of the run, as one text.
async fn event_text(store: &Store, run_id: &str) -> String {
    serde_json::to_string(&store.events(run_id, 0).await.unwrap()).unwrap()
}

async fn serves_then_drains(db: &TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let config = config(db, dir.path());
    let store = nightshift_runner::open_store(&config).await.unwrap();
    let shutdown = CancellationToken::new();
    let running = daemon::start(&config, store.clone(), shutdown.clone())
        .await
        .expect("the daemon starts");
    let address = running.address();
    assert_ne!(
        address.port(),
        0,
        "the bound port is the one the system chose"
    );
    let stopped = tokio::spawn(running.wait());
    let api = Api::new(format!("http://{address}"), dir.path());

    // A run through the whole daemon: HTTP intake, the pool, the runtime, the scripted model.
    let first = api.enqueue("echo").await;
    eventually(
        Duration::from_secs(60),
        "the echo run to succeed",
        || async { (api.status(&first).await == "succeeded").then_some(()) },
    )
    .await;
    assert!(
        event_text(&store, &first)
            .await
            .contains("hello from the daemon")
    );

    // A run whose tool call is in flight when the shutdown fires.
    let second = api.enqueue("gate").await;
    let started = out(dir.path()).join("started");
    eventually(
        Duration::from_secs(60),
        "the gate tool to start",
        || async { started.exists().then_some(()) },
    )
    .await;
    shutdown.cancel();
    // Enqueued after the shutdown: the draining pool must not claim it.
    let late = Intake::new(store.clone(), ["echo"])
        .submit(RunRequest::new("echo", "Too late.", Trigger::Cli))
        .await
        .unwrap();
    std::fs::write(out(dir.path()).join("go"), "").unwrap();
    let stopped = tokio::time::timeout(Duration::from_secs(120), stopped)
        .await
        .expect("the daemon stops once the run in flight ends")
        .unwrap()
        .expect("the daemon stops cleanly");

    // The pool drained: both runs' ends were recorded, nothing was released or lost.
    assert_eq!(stopped.pool.recorded, 2, "{:?}", stopped.pool);
    assert_eq!(stopped.pool.released, 0, "{:?}", stopped.pool);
    assert_eq!(stopped.pool.lease_lost, 0, "{:?}", stopped.pool);
    assert_eq!(stopped.pool.failed_writes, 0, "{:?}", stopped.pool);
    assert!(!stopped.notices_cut_short);
    let drained = store.run(&second).await.unwrap().unwrap();
    assert_eq!(drained.status, RunStatus::Succeeded, "{drained:?}");
    assert!(event_text(&store, &second).await.contains("gate-open"));
    let late = store.run(&late.run_id).await.unwrap().unwrap();
    assert_eq!(
        late.status,
        RunStatus::Queued,
        "nothing is claimed after the shutdown"
    );
    // Everything stopped: the worker deregistered, the HTTP server no longer answers.
    assert!(store.workers().await.unwrap().is_empty());
    let health = api.http.get(format!("{}/healthz", api.base)).send().await;
    assert!(health.is_err(), "the API still answers: {health:?}");
    store.close().await;
}
