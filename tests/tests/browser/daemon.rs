//! The `nightshift serve` the browser talks to: the real daemon (`nightshift_runner::daemon`,
//! what `serve` runs) on port 0 over a fresh database, with scripted models and real command
//! tools, and a small API client for setting up runs the way an operator's tools would.
//!
//! The agents:
//! - `reviewer`: lints (a `read_only` command), posts (a `side_effect` command that also
//!   appends a line to `out/posts`), then answers.
//! - `deployer`: says why, then its `deploy` call needs an approval, then it answers.
//! - `sleeper`: sleeps an hour with `schedule_wakeup`, then answers when woken.
//! - `slow`: its `gate` command waits for the file `out/go`, then it answers.
//! - a schedule `nightly-digest` (07:00 Europe/Berlin, `reviewer`) and an unsigned webhook
//!   `ci` whose deliveries start `reviewer` runs.
//! - `builder`: a command whose long output is cut (its whole text an artifact), then a
//!   background task that prints, waits for `out/task-go`, prints ten more short lines and
//!   ends; the run sleeps until the task's ending wakes it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use nightshift_runner::config::Config;
use nightshift_runner::daemon;
use nightshift_store::{RunStatus, Store};
use nightshift_tests::config_text::{agent_with, command_tool, q};
use nightshift_tests::{TestDb, eventually};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// Never set: the daemon makes its own token under its data directory.
const UNSET_TOKEN_ENV: &str = "NIGHTSHIFT_BROWSER_SUITE_TOKEN_NEVER_SET";

fn turn(content: Value, stop: &str) -> Value {
    json!({"content": content, "stop_reason": stop,
           "usage": {"input_tokens": 1200, "output_tokens": 80}})
}

fn call(id: &str, tool: &str, input: Value) -> Value {
    json!({"type": "tool_use", "id": id, "name": tool, "input": input})
}

fn text(t: &str) -> Value {
    json!({"type": "text", "text": t})
}

const SCHEDULE_AND_HOOK: &str = r#"
[[schedules]]
name = "nightly-digest"
cron = "0 7 * * *"
timezone = "Europe/Berlin"
agent = "reviewer"
prompt = "Write the digest for {{ date }}."

[[hooks]]
name = "ci"
signature = "none"
delivery_id = { pointer = "/id" }

[[hooks.routes]]
name = "build"
agent = "reviewer"
prompt = "CI finished on {{ branch }}: review what changed."
"#;

fn config(db: &TestDb, dir: &Path) -> Config {
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let out = out.to_str().unwrap().to_string();
    assert!(!out.contains('\''), "no quotes in temp paths: {out}");
    let gate = format!(
        "touch '{out}/started'; while [ ! -f '{out}/go' ]; do sleep 0.05; done; echo gate-open"
    );
    let task = format!(
        "echo compiling-step-one; while [ ! -f '{out}/task-go' ]; do sleep 0.05; done; echo linked-step-two; for i in 1 2 3 4 5 6 7 8 9; do echo unit-$i-ok; done"
    );
    let body = [
        command_tool(
            "lint",
            "read_only",
            "echo 'lint: 2 warnings in src/main.rs'",
        ),
        // Each post is also a line in `out/posts`: the receiver that counts side effects.
        command_tool(
            "post",
            "side_effect",
            &format!("echo posted >> '{out}/posts'; echo 'review posted'"),
        ),
        command_tool("deploy", "side_effect", "echo 'deployed v2'"),
        command_tool("gate", "side_effect", &gate),
        agent_with(
            dir,
            "reviewer",
            &["lint", "post"],
            json!([
                turn(
                    json!([
                        text("Let me lint it first."),
                        call("call_lint", "lint", json!({}))
                    ]),
                    "tool_use"
                ),
                turn(
                    json!([call("call_post", "post", json!({"body": "Two warnings."}))]),
                    "tool_use"
                ),
                turn(json!([text("Reviewed: two warnings, posted.")]), "end_turn"),
            ]),
            "",
        ),
        agent_with(
            dir,
            "deployer",
            &["deploy"],
            json!([
                turn(
                    json!([
                        text("Tests are green; deploying v2 to staging."),
                        call("call_deploy", "deploy", json!({"version": "v2"}))
                    ]),
                    "tool_use"
                ),
                turn(json!([text("Deployed v2.")]), "end_turn"),
            ]),
            "[agents.tool_overrides.deploy]\napproval = \"required\"\n",
        ),
        agent_with(
            dir,
            "sleeper",
            &["schedule_wakeup"],
            json!([
                turn(
                    json!([call(
                        "call_sleep",
                        "schedule_wakeup",
                        json!({"delay_seconds": 3600, "reason": "wait for CI"})
                    )]),
                    "tool_use"
                ),
                turn(json!([text("Woke up and finished.")]), "end_turn"),
            ]),
            "",
        ),
        agent_with(
            dir,
            "slow",
            &["gate"],
            json!([
                turn(
                    json!([
                        text("Waiting on the gate."),
                        call("call_gate", "gate", json!({}))
                    ]),
                    "tool_use"
                ),
                turn(json!([text("Through the gate.")]), "end_turn"),
            ]),
            "",
        ),
        agent_with(
            dir,
            "builder",
            &["run_command"],
            json!([
                turn(
                    json!([call(
                        "call_seq",
                        "run_command",
                        json!({"command": "seq 1 20000; echo big-output-end"})
                    )]),
                    "tool_use"
                ),
                turn(
                    json!([
                        text("Now the build, in the background."),
                        call(
                            "call_build",
                            "run_command",
                            json!({"command": task, "background": true})
                        )
                    ]),
                    "tool_use"
                ),
                turn(json!([text("Waiting for the build.")]), "end_turn"),
                turn(json!([text("The build finished.")]), "end_turn"),
            ]),
            "",
        ),
        SCHEDULE_AND_HOOK.to_string(),
    ]
    .concat();
    let text = format!(
        "[worker]\nslots = 2\nheartbeat_ms = 200\nlease_ms = 5000\npoll_interval_ms = 100\n\n\
         [server]\naddress = \"127.0.0.1:0\"\ntoken_env = {}\n\n\
         [runtime]\ndata_dir = \"data\"\n\n[sandbox]\nmode = \"off\"\n\n{body}",
        q(UNSET_TOKEN_ENV)
    );
    let mut config = Config::parse(&text, "browser test config").unwrap();
    config.base_dir = dir.to_path_buf();
    config.database = db.config.clone();
    config.validate().unwrap();
    config
}

/// A running daemon, its store, its API token and the test's directory.
pub struct Serve {
    pub base: String,
    pub token: String,
    pub store: Store,
    pub dir: tempfile::TempDir,
    http: reqwest::Client,
    shutdown: CancellationToken,
    stopped: Option<tokio::task::JoinHandle<anyhow::Result<daemon::Stopped>>>,
}

impl Serve {
    pub async fn start(db: &TestDb) -> Serve {
        let dir = tempfile::tempdir().unwrap();
        let config = config(db, dir.path());
        let store = nightshift_runner::open_store(&config).await.unwrap();
        let shutdown = CancellationToken::new();
        let running = daemon::start(&config, store.clone(), shutdown.clone())
            .await
            .expect("the daemon starts");
        let base = format!("http://{}", running.address());
        let stopped = tokio::spawn(running.wait());
        let token = std::fs::read_to_string(dir.path().join("data").join("api-token")).unwrap();
        Serve {
            base,
            token: token.trim().to_string(),
            store,
            dir,
            http: nightshift_llm::http::build_client(nightshift_llm::HttpTimeouts::default())
                .unwrap(),
            shutdown,
            stopped: Some(stopped),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Enqueues a run over the API with `extra` fields; returns its id.
    pub async fn enqueue(&self, agent: &str, prompt: &str, extra: Value) -> String {
        let mut body = json!({"agent": agent, "prompt": prompt});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().cloned().unwrap_or_default());
        let resp = self
            .http
            .post(self.url("/v1/runs"))
            .bearer_auth(&self.token)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert!(resp.status().is_success(), "enqueue: {}", resp.status());
        let body: Value = resp.json().await.unwrap();
        body["run_id"].as_str().unwrap().to_string()
    }

    /// Posts a delivery to the unsigned webhook `ci`; returns the HTTP status.
    pub async fn deliver(&self, id: &str, branch: &str) -> u16 {
        self.http
            .post(self.url("/hooks/ci"))
            .json(&json!({"id": id, "branch": branch}))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    }

    pub async fn status(&self, run_id: &str) -> RunStatus {
        self.store.run(run_id).await.unwrap().unwrap().status
    }

    /// Waits until the run's status is `want`.
    pub async fn wait_for(&self, run_id: &str, want: RunStatus) {
        eventually(
            Duration::from_secs(60),
            &format!("run {run_id} to be {want}"),
            || async { (self.status(run_id).await == want).then_some(()) },
        )
        .await;
    }

    /// The gate files of the `slow` agent's command.
    pub fn gate(&self, name: &str) -> PathBuf {
        self.dir.path().join("out").join(name)
    }

    /// Stops the daemon and waits for it (lets the slow gate through first).
    pub async fn stop(mut self) {
        std::fs::write(self.gate("go"), "").unwrap();
        self.shutdown.cancel();
        if let Some(stopped) = self.stopped.take() {
            let _ = tokio::time::timeout(Duration::from_secs(60), stopped).await;
        }
        self.store.close().await;
    }
}
