//! A comment routed to a run (`kind = "resume"`), with the real `nightshift serve`, in each
//! state the run can be in when it arrives (issue 41, item 1): queued behind another run (its
//! start job has not run yet), in the middle of its last model call, and ended. Queued and
//! running, the comment reaches the model (a `message_received` event, taken before the next
//! call) and the run ends once; after the end, the comment is refused when it is sent and
//! nothing of the run changes.

use std::process::{Command, Stdio};
use std::time::Duration;

use nightshift_tests::http::{post_json, try_get_json};
use nightshift_tests::{TestDb, eventually};
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::harness::{SECRET, fixture, github_signature, run_id};
use crate::process::{API_TOKEN, Proc, free_port, nightshift_bin, wait_for_api};

/// The reviewer's turns. The scripted model answers a request with the turn numbered by the
/// assistant messages already in it, so each run starts at the first: a slow call (a comment
/// can arrive during it), then the call a comment taken meanwhile makes.
const REVIEWER: &str = r##"[
  {"content": [{"type": "text", "text": "first look"}], "stop_reason": "end_turn", "delay_ms": 3000},
  {"content": [{"type": "text", "text": "again, after the comment"}], "stop_reason": "end_turn"}
]"##;

/// A run that holds the one worker slot for a while, so the first review waits queued.
const BLOCKER: &str = r#"[
  {"content": [{"type": "text", "text": "done blocking"}], "stop_reason": "end_turn", "delay_ms": 4000}
]"#;

struct Daemon {
    api: String,
    http: reqwest::Client,
    _serve: Proc,
}

impl Daemon {
    async fn start(db: &TestDb, dir: &std::path::Path) -> Daemon {
        std::fs::write(dir.join("reviewer.json"), REVIEWER).unwrap();
        std::fs::write(dir.join("blocker.json"), BLOCKER).unwrap();
        let port = free_port();
        let text = format!(
            r##"[database]
url = "{url}"
{schema}
[server]
address = "127.0.0.1:{port}"
[worker]
slots = 1
heartbeat_ms = 200
lease_ms = 2000
poll_interval_ms = 100
[runtime]
data_dir = "data"

[providers.r]
kind = "scripted"
script = "reviewer.json"
[providers.b]
kind = "scripted"
script = "blocker.json"

[[agents]]
name = "reviewer"
provider = "r"
model = "scripted-1"
[[agents]]
name = "blocker"
provider = "b"
model = "scripted-1"

[[hooks]]
name = "github"
signature = "github"
secret_env = "NS_TEST_GITHUB_SECRET"

[[hooks.routes]]
name = "review"
event = "pull_request"
match = {{ action = "opened" }}
agent = "reviewer"
prompt = "Review #{{{{ pull_request.number }}}}"
concurrency_key = "pr-{{{{ repository.full_name }}}}-{{{{ pull_request.number }}}}"

[[hooks.routes]]
name = "comment"
event = "issue_comment"
match = {{ action = "created" }}
kind = "resume"
run_key = "pr-{{{{ repository.full_name }}}}-{{{{ issue.number }}}}"
prompt = "{{{{ comment.user.login }}}} commented: {{{{ comment.body }}}}"
"##,
            url = db.config.url,
            schema = db
                .config
                .schema
                .as_ref()
                .map(|s| format!("schema = \"{s}\""))
                .unwrap_or_default(),
        );
        let cfg = dir.join("nightshift.toml");
        std::fs::write(&cfg, text).unwrap();
        let child = Command::new(nightshift_bin())
            .arg("--config")
            .arg(&cfg)
            .arg("serve")
            .env("NIGHTSHIFT_API_TOKEN", API_TOKEN)
            .env("NS_TEST_GITHUB_SECRET", SECRET)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn nightshift serve");
        let api = format!("http://127.0.0.1:{port}");
        let http =
            nightshift_llm::http::build_client(nightshift_llm::HttpTimeouts::default()).unwrap();
        wait_for_api(&http, &api).await;
        Daemon {
            api,
            http,
            _serve: Proc { child },
        }
    }

    /// Sends a signed GitHub delivery; its status and answer.
    async fn deliver(&self, event: &str, id: &str, body: Value) -> (StatusCode, Value) {
        let body = serde_json::to_vec(&body).unwrap();
        let resp = self
            .http
            .post(format!("{}/hooks/github", self.api))
            .header("X-GitHub-Event", event)
            .header("X-GitHub-Delivery", id)
            .header("X-Hub-Signature-256", github_signature(&body, SECRET))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let status = resp.status();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    async fn opened(&self, number: u64) -> String {
        let mut body: Value = serde_json::from_slice(&fixture("pull_request.opened")).unwrap();
        body["number"] = number.into();
        body["pull_request"]["number"] = number.into();
        let (status, answer) = self
            .deliver("pull_request", &format!("open-{number}"), body)
            .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
        run_id(&answer)
    }

    async fn comment(&self, number: u64, id: &str, text: &str) -> (StatusCode, Value) {
        let mut body: Value = serde_json::from_slice(&fixture("issue_comment.created")).unwrap();
        body["issue"]["number"] = number.into();
        body["comment"]["body"] = text.into();
        self.deliver("issue_comment", id, body).await
    }

    async fn run(&self, id: &str) -> Value {
        try_get_json(&self.http, &format!("{}/v1/runs/{id}", self.api), API_TOKEN)
            .await
            .unwrap_or(Value::Null)
    }

    async fn until_status(&self, id: &str, want: &str) -> Value {
        eventually(
            Duration::from_secs(30),
            &format!("run {id} to be {want}"),
            || async {
                let run = self.run(id).await;
                (run["status"] == want).then_some(run)
            },
        )
        .await
    }

    /// The run's event types, and the texts of its `message_received` events.
    async fn events(&self, id: &str) -> (Vec<String>, Vec<String>) {
        let page = try_get_json(
            &self.http,
            &format!("{}/v1/runs/{id}/events", self.api),
            API_TOKEN,
        )
        .await
        .unwrap();
        let events = page["events"].as_array().cloned().unwrap_or_default();
        let kinds = events
            .iter()
            .map(|e| e["type"].as_str().unwrap_or_default().to_string())
            .collect();
        let texts = events
            .iter()
            .filter(|e| e["type"] == "message_received")
            .map(|e| {
                e["payload"]["text"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect();
        (kinds, texts)
    }
}

fn position(kinds: &[String], kind: &str) -> usize {
    kinds
        .iter()
        .position(|k| k == kind)
        .unwrap_or_else(|| panic!("no {kind} in {kinds:?}"))
}

pub(super) async fn a_comment_in_each_run_state(db: &TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(db, dir.path()).await;

    // Queued: the one slot is busy, so the review waits; the comment reaches its first call.
    let (status, blocker) = post_json(
        &d.http,
        &format!("{}/v1/runs", d.api),
        API_TOKEN,
        &json!({"agent": "blocker", "prompt": "hold the slot"}),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{blocker}");
    let blocker = blocker["run_id"].as_str().unwrap().to_string();
    d.until_status(&blocker, "running").await;
    let first = d.opened(1).await;
    assert_eq!(d.run(&first).await["status"], "queued");
    let (status, answer) = d.comment(1, "c-1", "mind the retry").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    assert_eq!(run_id(&answer), first, "the comment names the queued run");
    let done = d.until_status(&first, "succeeded").await;
    assert_eq!(
        done["result"], "first look",
        "one call, the comment already in it"
    );
    let (kinds, texts) = d.events(&first).await;
    assert!(
        position(&kinds, "message_received") < position(&kinds, "assistant_message"),
        "taken before the first call: {kinds:?}"
    );
    assert!(texts[0].contains("commented: mind the retry"), "{texts:?}");
    assert_eq!(
        kinds.iter().filter(|k| *k == "finished").count(),
        1,
        "{kinds:?}"
    );

    // Running its last call: the comment keeps the run going for one more call.
    let second = d.opened(2).await;
    eventually(
        Duration::from_secs(30),
        "the second review's slow call to start",
        || async {
            let (kinds, _) = d.events(&second).await;
            (kinds.iter().any(|k| k == "user_message")
                && !kinds.iter().any(|k| k == "assistant_message"))
            .then_some(())
        },
    )
    .await;
    let (status, answer) = d.comment(2, "c-2", "also check the timeout").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    assert_eq!(run_id(&answer), second);
    let done = d.until_status(&second, "succeeded").await;
    assert_eq!(done["result"], "again, after the comment");
    let (kinds, texts) = d.events(&second).await;
    let calls: Vec<usize> = kinds
        .iter()
        .enumerate()
        .filter(|(_, k)| *k == "assistant_message")
        .map(|(i, _)| i)
        .collect();
    assert_eq!(calls.len(), 2, "{kinds:?}");
    let taken = position(&kinds, "message_received");
    assert!(calls[0] < taken && taken < calls[1], "{kinds:?}");
    assert!(
        texts[0].contains("commented: also check the timeout"),
        "{texts:?}"
    );
    assert_eq!(kinds.iter().filter(|k| *k == "finished").count(), 1);

    // Ended: the comment is refused when it is sent, and the run is left as it was.
    let before = d.events(&first).await.0.len();
    let (status, answer) = d.comment(1, "c-3", "one more thing").await;
    assert!(
        status.is_client_error(),
        "a comment to an ended run is refused: {status} {answer}"
    );
    assert!(answer["error"].is_string(), "it says why: {answer}");
    assert_eq!(d.run(&first).await["status"], "succeeded");
    assert_eq!(d.events(&first).await.0.len(), before);
}
