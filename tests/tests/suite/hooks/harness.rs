//! What the webhook tests share: the test config (a GitHub PR review bot, Stripe, Slack and a
//! generic-HMAC hook), the GitHub fixtures, signing, and the API router on a loopback port
//! over a store with a manual clock.

use std::sync::Arc;

use nightshift_runner::api::{ApiState, router};
use nightshift_runner::config::Config;
use nightshift_scheduler::hooks::HookSet;
use nightshift_scheduler::hooks::config::HmacAlgorithm;
use nightshift_scheduler::hooks::signature::hmac;
use nightshift_store::{ManualClock, Run, Store, WebhookDelivery};
use nightshift_tests::TestDb;
use nightshift_tests::http::get_json;
use reqwest::StatusCode;
use serde_json::Value;

pub(super) const SECRET: &str = "test-webhook-secret-7d1c";
const TOKEN: &str = "hooks-test-token";

/// The hooks of these tests: a GitHub PR review bot, a Stripe and a Slack hook, and a small
/// generic-HMAC hook for the size limit.
pub(super) const HOOKS: &str = r#"
[providers.p]
kind = "scripted"
script = "script.json"

[[agents]]
name = "reviewer"
provider = "p"
model = "scripted-1"

[[hooks]]
name = "github"
signature = "github"
secret_env = "NS_TEST_GITHUB_SECRET"

[[hooks.routes]]
name = "review"
event = "pull_request"
match = { action = ["opened", "synchronize", "reopened"], pull_request.draft = false }
agent = "reviewer"
lane = "reviews"
priority = 5
prompt = """Review pull request #{{ pull_request.number }} in {{ repository.full_name }}: {{ pull_request.title }}
Head: {{ pull_request.head.sha }} ({{ action }})"""
concurrency_key = "pr-{{ repository.full_name }}-{{ pull_request.number }}"

[[hooks.routes]]
name = "comment"
event = "issue_comment"
match = { action = "created" }
kind = "resume"
run_key = "pr-{{ repository.full_name }}-{{ issue.number }}"
prompt = "{{ comment.user.login }} commented: {{ comment.body }}"

[[hooks.routes]]
name = "push"
event = "push"
match = { ref = "refs/heads/main" }
agent = "reviewer"
idempotency_key = "push-{{ repository.full_name }}-{{ after }}"
prompt = 'Summarise what landed on main: {% for c in commits %}{{ c.id[:7] }} {{ c.message | split("\n") | first }}; {% endfor %}'

[[hooks.routes]]
name = "labels"
event = "label"
agent = "reviewer"
prompt = "Label {{ label.name }} changed in {{ repository.nmae }}"

[[hooks]]
name = "stripe"
signature = "stripe"
secret_env = "NS_TEST_STRIPE_SECRET"

[[hooks.routes]]
name = "paid"
event = "invoice.paid"
agent = "reviewer"
prompt = "Invoice {{ data.object.id }} was paid"

[[hooks]]
name = "slack"
signature = "slack"
secret_env = "NS_TEST_SLACK_SECRET"
tolerance_seconds = 60
event = { pointer = "/event/type" }

[[hooks.routes]]
name = "mention"
event = "app_mention"
agent = "reviewer"
prompt = "{{ event.user }} said: {{ event.text }}"

[[hooks]]
name = "small"
signature = "hmac"
secret_env = "NS_TEST_GITHUB_SECRET"
max_body_bytes = 1024
delivery_id = { header = "X-Request-Id" }
hmac = { header = "X-Signature", algorithm = "sha512", prefix = "", encoding = "base64" }

[[hooks.routes]]
name = "any"
agent = "reviewer"
prompt = "{{ payload | tojson }}"
"#;

fn secrets(var: &str) -> Option<String> {
    match var {
        "NS_TEST_GITHUB_SECRET" => Some(SECRET.into()),
        "NS_TEST_STRIPE_SECRET" => Some("whsec_test_stripe".into()),
        "NS_TEST_SLACK_SECRET" => Some("slack-signing-secret".into()),
        _ => None,
    }
}

pub(crate) fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/fixtures/github/{name}.json", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

pub(crate) fn github_signature(body: &[u8], secret: &str) -> String {
    format!(
        "sha256={}",
        hex_encode(&hmac(HmacAlgorithm::Sha256, secret.as_bytes(), &[body]))
    )
}

pub(super) fn hex_encode(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(super) struct Intake {
    pub(super) base: String,
    pub(super) http: reqwest::Client,
    pub(super) store: Store,
    pub(super) clock: ManualClock,
    hooks: Arc<HookSet>,
    _server: tokio::task::JoinHandle<()>,
}

impl Intake {
    pub(super) async fn start(db: &TestDb) -> Intake {
        let (store, clock) = db.manual().await;
        let config = Config::parse(HOOKS, "hooks test config").unwrap();
        config.validate().unwrap();
        let hooks = Arc::new(HookSet::build(&config.hooks, &["reviewer"], secrets).unwrap());
        let state = ApiState {
            store: store.clone(),
            intake: nightshift_scheduler::Intake::new(store.clone(), vec!["reviewer".to_string()]),
            tokens: nightshift_runner::api_tokens::ApiTokens::single(TOKEN.to_string()),
            hooks: hooks.clone(),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            axum::serve(listener, router(state)).await.unwrap();
        });
        Intake {
            base,
            http: nightshift_llm::http::build_client(nightshift_llm::HttpTimeouts::default())
                .unwrap(),
            store,
            clock,
            hooks,
            _server: server,
        }
    }

    /// From now on, the hooks of `config` (a reloaded config, as `nightshift serve` swaps it
    /// in on SIGHUP).
    pub(super) fn reload(&self, config: &str) {
        let config = Config::parse(config, "reloaded hooks test config").unwrap();
        config.validate().unwrap();
        let hooks = HookSet::build(&config.hooks, &["reviewer"], secrets).unwrap();
        self.hooks.replace(hooks);
    }

    pub(super) async fn post(
        &self,
        hook: &str,
        headers: &[(&str, String)],
        body: Vec<u8>,
    ) -> (StatusCode, Value) {
        let mut req = self
            .http
            .post(format!("{}/hooks/{hook}", self.base))
            .header("content-type", "application/json")
            .body(body);
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    /// Posts a GitHub delivery of `event` signed with the test secret.
    pub(super) async fn github(
        &self,
        event: &str,
        delivery: &str,
        body: Vec<u8>,
    ) -> (StatusCode, Value) {
        let sig = github_signature(&body, SECRET);
        self.post(
            "github",
            &[
                ("X-GitHub-Event", event.into()),
                ("X-GitHub-Delivery", delivery.into()),
                ("X-Hub-Signature-256", sig),
                ("User-Agent", "GitHub-Hookshot/a1b2c3d".into()),
            ],
            body,
        )
        .await
    }

    /// Sends GitHub delivery `delivery` of `event` again: answered 200 as a redelivery with
    /// `run`, the run it made first, marked a duplicate. The answer.
    pub(super) async fn github_redelivered(
        &self,
        event: &str,
        delivery: &str,
        body: Vec<u8>,
        run: &str,
    ) -> Value {
        let (status, again) = self.github(event, delivery, body).await;
        assert_eq!(status, StatusCode::OK, "{again}");
        assert_eq!(again["redelivery"], true, "{again}");
        assert_eq!(run_id(&again), run, "the original run id: {again}");
        assert_eq!(again["runs"][0]["duplicate"], true, "{again}");
        again
    }

    pub(super) async fn counts(&self) -> Value {
        let (status, body) = get_json(&self.http, &format!("{}/v1/hooks", self.base), TOKEN).await;
        assert_eq!(status, StatusCode::OK);
        let mut counts = serde_json::Map::new();
        for h in body["hooks"].as_array().unwrap() {
            counts.insert(h["name"].as_str().unwrap().into(), h["counts"].clone());
        }
        counts.insert("unknown".into(), body["unknown_hook_requests"].clone());
        Value::Object(counts)
    }

    /// Posts `body` in chunks of 512 bytes without a Content-Length (raw HTTP/1.1); returns
    /// the whole response as text.
    pub(super) async fn post_chunked(
        &self,
        hook: &str,
        headers: &[(&str, String)],
        body: &[u8],
    ) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let addr = self.base.trim_start_matches("http://");
        let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut head = format!(
            "POST /hooks/{hook} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
             Transfer-Encoding: chunked\r\nConnection: close\r\n"
        );
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        conn.write_all(head.as_bytes()).await.unwrap();
        for chunk in body.chunks(512) {
            let sent = async {
                conn.write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
                    .await?;
                conn.write_all(chunk).await?;
                conn.write_all(b"\r\n").await
            };
            // The server may answer and close before the whole body is sent.
            if sent.await.is_err() {
                break;
            }
        }
        let _ = conn.write_all(b"0\r\n\r\n").await;
        let mut answer = Vec::new();
        let _ = conn.read_to_end(&mut answer).await;
        String::from_utf8_lossy(&answer).into_owned()
    }

    pub(super) async fn runs(&self) -> Vec<Run> {
        self.store.list_runs(None, 1000).await.unwrap()
    }

    /// The `github` hook's record of delivery `id`, if any.
    pub(super) async fn delivery(&self, id: &str) -> Option<WebhookDelivery> {
        self.store.webhook_delivery("github", id).await.unwrap()
    }
}

pub(super) fn run_id(answer: &Value) -> String {
    answer["runs"][0]["run_id"]
        .as_str()
        .expect("a run id")
        .to_string()
}

pub(super) fn base64_encode(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}
