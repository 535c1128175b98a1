//! A real `nightshift serve` pointed at the hostile provider, and the ledger its command tools
//! write.
//!
//! Guarantees: [`Daemon::start`] returns only once the API answers; the daemon is SIGKILLed
//! when the handle drops. Command tools made by [`ledger_tool`] append one line per execution
//! (O_APPEND, one `printf`) with the call id, the idempotency key and the input, so a test can
//! count executions exactly. Every wait is on a condition ([`eventually`]), never a sleep.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use nightshift_store::{Event, Store};
use nightshift_tests::http::get_json;
use nightshift_tests::{TestDb, eventually};
use serde_json::{Value, json};

use super::script::Wire;
use super::server::Hostile;
use crate::process::{API_TOKEN, Proc, free_port, nightshift_bin};

/// How the daemon and its one agent (`hostile`) are set up.
pub struct Setup {
    pub wire: Wire,
    pub stream: bool,
    /// The agent's `tools`.
    pub tools: Vec<String>,
    /// Extra TOML after the agent (e.g. `[[command_tools]]` entries from [`ledger_tool`]).
    pub command_tools: String,
    /// Extra top-level keys of the `[[agents]]` entry (one `key = value` per line).
    pub agent_keys: String,
    /// The provider's `retry` and `breaker` inline tables.
    pub retry: String,
    pub breaker: String,
    /// `runtime.http_allowlist`.
    pub allow: Vec<String>,
    /// `sandbox.write`: where the command tools may write (e.g. a ledger's directory).
    pub sandbox_write: Vec<PathBuf>,
}

impl Setup {
    pub fn new(wire: Wire, stream: bool) -> Self {
        Self {
            wire,
            stream,
            tools: Vec::new(),
            command_tools: String::new(),
            agent_keys: String::new(),
            retry: "{ max_attempts = 2, base_delay_ms = 10, max_delay_ms = 20 }".into(),
            breaker: "{ failure_threshold = 5, cooldown_ms = 300 }".into(),
            sandbox_write: Vec::new(),
            allow: Vec::new(),
        }
    }
}

/// A TOML value for a JSON value (inline tables; `null` is not representable).
pub fn toml(v: &Value) -> String {
    match v {
        Value::Null => panic!("TOML has no null"),
        Value::Bool(_) | Value::Number(_) | Value::String(_) => v.to_string(),
        Value::Array(a) => format!("[{}]", a.iter().map(toml).collect::<Vec<_>>().join(", ")),
        Value::Object(o) => format!(
            "{{ {} }}",
            o.iter()
                .map(|(k, v)| format!("{} = {}", Value::from(k.as_str()), toml(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// A `side_effect` `[[command_tools]]` entry `name` that appends
/// `call_id \t idempotency_key \t input` to `ledger` and prints `done`.
pub fn ledger_tool(name: &str, ledger: &Path, schema: Option<Value>) -> String {
    let path = ledger.to_str().expect("a UTF-8 path");
    assert!(!path.contains('\''), "no quotes in temp paths: {path}");
    let program = format!(
        "input=$(cat); printf '%s\\t%s\\t%s\\n' \"$NIGHTSHIFT_TOOL_CALL_ID\" \
         \"$NIGHTSHIFT_IDEMPOTENCY_KEY\" \"$input\" >> '{path}'; echo done"
    );
    let mut t = format!(
        "[[command_tools]]\nname = {}\ndescription = \"Records a payment in the ledger.\"\n\
         command = {}\nclass = \"side_effect\"\n",
        json!(name),
        toml(&json!(["sh", "-c", program])),
    );
    if let Some(s) = schema {
        t.push_str(&format!("input_schema = {}\n", toml(&s)));
    }
    t.push('\n');
    t
}

/// One execution recorded by a [`ledger_tool`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerLine {
    pub call_id: String,
    pub idempotency_key: String,
    pub input: String,
}

pub fn ledger(path: &Path) -> Vec<LedgerLine> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(|l| {
            let mut parts = l.splitn(3, '\t');
            let mut next = || parts.next().unwrap_or_default().to_string();
            LedgerLine {
                call_id: next(),
                idempotency_key: next(),
                input: next(),
            }
        })
        .collect()
}

/// A running daemon and what the test reads it through.
pub struct Daemon {
    pub api: String,
    pub http: reqwest::Client,
    pub store: Store,
    pub dir: tempfile::TempDir,
    _serve: Proc,
}

impl Daemon {
    /// Writes the config and starts `nightshift serve` against `hostile`.
    pub async fn start(db: &TestDb, hostile: &Hostile, setup: Setup) -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let kind = match setup.wire {
            Wire::Anthropic => "anthropic",
            Wire::OpenAi => "openai",
        };
        let schema = db
            .config
            .schema
            .as_ref()
            .map(|s| format!("schema = {}\n", json!(s)))
            .unwrap_or_default();
        let config = format!(
            "[database]\nurl = {url}\n{schema}\n\
             [server]\naddress = \"127.0.0.1:{port}\"\n\n\
             [worker]\nslots = 2\nheartbeat_ms = 200\nlease_ms = 2000\npoll_interval_ms = 50\n\
             retry_base_ms = 50\nretry_cap_ms = 200\n\n\
             [runtime]\ndata_dir = \"data\"\nhttp_allowlist = {allow}\ncommand_timeout_seconds = 20\n\n\
             [sandbox]\nwrite = {write}\n\n\
             [providers.fake]\nkind = \"{kind}\"\nbase_url = {base}\napi_key_env = \"FAKE_PROVIDER_KEY\"\n\
             stream = {stream}\nretry = {retry}\nbreaker = {breaker}\n\
             timeouts = {{ connect_ms = 2000, read_idle_ms = 5000, total_ms = 10000 }}\n\n\
             [[agents]]\nname = \"hostile\"\nprovider = \"fake\"\nmodel = \"fake-model-1\"\n\
             system = \"You are tested by a hostile provider.\"\ntools = {tools}\n{agent_keys}\n\n\
             {command_tools}",
            url = json!(db.config.url),
            allow = json!(setup.allow),
            write = json!(setup.sandbox_write),
            base = json!(hostile.base_url(setup.wire)),
            stream = setup.stream,
            retry = setup.retry,
            breaker = setup.breaker,
            tools = json!(setup.tools),
            agent_keys = setup.agent_keys,
            command_tools = setup.command_tools,
        );
        let cfg = dir.path().join("nightshift.toml");
        std::fs::write(&cfg, &config).unwrap();
        let mut serve = Proc {
            child: Command::new(nightshift_bin())
                .arg("--config")
                .arg(&cfg)
                .arg("serve")
                .env_remove("NIGHTSHIFT_DATABASE_URL")
                .env("NIGHTSHIFT_API_TOKEN", API_TOKEN)
                .env("FAKE_PROVIDER_KEY", "sk-hostile-test")
                .env("RUST_LOG", "warn,sqlx=warn")
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("spawn nightshift serve"),
        };
        let http =
            nightshift_llm::http::build_client(nightshift_llm::HttpTimeouts::default()).unwrap();
        let api = format!("http://127.0.0.1:{port}");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = serve.child.try_wait().unwrap() {
                panic!("nightshift serve exited ({status}) with this config:\n{config}");
            }
            let up = http.get(format!("{api}/healthz")).send().await;
            if up.is_ok_and(|r| r.status().is_success()) {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the API did not answer within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Daemon {
            api,
            http,
            store: db.store().await,
            dir,
            _serve: serve,
        }
    }

    /// SIGKILLs the daemon (nothing it holds is released: its leases run out) and waits for it
    /// to be gone.
    pub async fn sigkill(&mut self) {
        self._serve.signal("KILL");
        self._serve.wait_exit(Duration::from_secs(10)).await;
    }

    /// A path in the daemon's temp dir.
    #[allow(dead_code)]
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `POST /v1/runs` with `body`; the status and the JSON answer.
    pub async fn post_run(&self, body: Value) -> (u16, Value) {
        let resp = self
            .http
            .post(format!("{}/v1/runs", self.api))
            .bearer_auth(API_TOKEN)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, v)
    }

    /// Enqueues a run of the agent with `prompt` and at most `max_attempts` job attempts;
    /// returns its id.
    pub async fn enqueue(&self, prompt: &str, max_attempts: i64) -> String {
        let (status, v) = self
            .post_run(json!({"agent": "hostile", "prompt": prompt, "max_attempts": max_attempts}))
            .await;
        assert!((200..300).contains(&status), "enqueue: {status} {v}");
        v["run_id"].as_str().expect("a run id").to_string()
    }

    /// `GET /v1/runs/{id}`.
    pub async fn run(&self, id: &str) -> Value {
        let (_, run) = get_json(&self.http, &format!("{}/v1/runs/{id}", self.api), API_TOKEN).await;
        run
    }

    /// Waits until the run is terminal; returns it.
    pub async fn finished(&self, id: &str) -> Value {
        const TERMINAL: [&str; 6] = [
            "succeeded",
            "failed",
            "cancelled",
            "budget_exhausted",
            "superseded",
            "max_rounds",
        ];
        eventually(
            Duration::from_secs(20),
            &format!("run {id} to end"),
            || async {
                let run = self.run(id).await;
                TERMINAL
                    .contains(&run["status"].as_str().unwrap_or_default())
                    .then_some(run)
            },
        )
        .await
    }

    /// The run's events, straight from the store (raw: no parsing, so new event types read).
    pub async fn events(&self, id: &str) -> Vec<Event> {
        self.store.events(id, 0).await.unwrap()
    }
}

/// A summary of a run for assertion messages: status, error, and event types.
pub fn describe(run: &Value, events: &[Event]) -> String {
    let kinds: Vec<&str> = events.iter().map(|e| e.event_type.as_str()).collect();
    format!(
        "status {} error {} result {}; {} events: {kinds:?}",
        run["status"],
        run["error"],
        run["result"],
        events.len()
    )
}
