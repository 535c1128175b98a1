//! The API while its store is down, for real, on both backends: every endpoint that needs the
//! store answers 503 with `Retry-After` (never 500), `/readyz` says not ready while `/healthz`
//! stays up, and once the outage ends everything answers again and nothing accepted before
//! it was lost.
//!
//! - PostgreSQL: the API reaches the server through a TCP proxy on loopback; the outage closes
//!   the proxy's listener and every connection through it (connections drop, new ones are
//!   refused), and ends by listening on the same port again.
//! - SQLite: another connection holds the file's write lock (`BEGIN EXCLUSIVE`), so every
//!   write gets SQLITE_BUSY after the busy timeout. Reads go on in WAL mode, so the reads
//!   answer 200 during that outage: what is asserted is that every write is a 503.

use std::sync::{Arc, Mutex};

use nightshift_runner::api::{ApiState, router};
use nightshift_scheduler::hooks::HookSet;
use nightshift_scheduler::hooks::config::HmacAlgorithm;
use nightshift_scheduler::hooks::signature::hmac;
use nightshift_store::{Store, SystemClock};
use nightshift_tests::{Backend, TestDb, eventually, on_both_backends};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::Connection;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

on_both_backends! {
    every_endpoint_answers_503_with_retry_after_while_the_store_is_down => store_down;
}

const TOKEN: &str = "store-down-token";
const HOOK_SECRET: &str = "store-down-hook-secret";
const WAIT: std::time::Duration = std::time::Duration::from_secs(30);

const CONFIG: &str = r#"
[providers.p]
kind = "scripted"
script = "script.json"

[[agents]]
name = "helper"
provider = "p"
model = "scripted-1"

[[hooks]]
name = "intake"
signature = "hmac"
secret_env = "STORE_DOWN_HOOK_SECRET"
delivery_id = { header = "X-Request-Id" }
hmac = { header = "X-Signature", algorithm = "sha256", prefix = "", encoding = "hex" }

[[hooks.routes]]
name = "any"
agent = "helper"
prompt = "{{ payload | tojson }}"
"#;

/// A TCP proxy on loopback in front of PostgreSQL that a test can cut and restore.
struct Proxy {
    port: u16,
    upstream: String,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Proxy {
    async fn start(upstream: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let proxy = Proxy {
            port,
            upstream,
            tasks: Arc::default(),
        };
        proxy.serve(listener);
        proxy
    }

    fn serve(&self, listener: TcpListener) {
        let upstream = self.upstream.clone();
        let tasks = self.tasks.clone();
        let accept = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let upstream = upstream.clone();
                let pipe = tokio::spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(&upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                tasks.lock().unwrap().push(pipe);
            }
        });
        self.tasks.lock().unwrap().push(accept);
    }

    /// The outage: no more listening on the port, every open connection dropped.
    fn cut(&self) {
        for task in self.tasks.lock().unwrap().drain(..) {
            task.abort();
        }
    }

    /// Listens on the same port again.
    async fn restore(&self) {
        let listener = TcpListener::bind(("127.0.0.1", self.port)).await.unwrap();
        self.serve(listener);
    }
}

/// How the test takes the store down and brings it back.
enum Outage {
    Proxy(Proxy),
    /// The connection holding the write lock, while it does.
    Lock {
        url: String,
        holder: Option<sqlx::SqliteConnection>,
    },
}

impl Outage {
    async fn begin(&mut self) {
        match self {
            Outage::Proxy(proxy) => proxy.cut(),
            Outage::Lock { url, holder } => {
                let mut conn = sqlx::SqliteConnection::connect(url).await.unwrap();
                sqlx::query("BEGIN EXCLUSIVE")
                    .execute(&mut conn)
                    .await
                    .unwrap();
                *holder = Some(conn);
            }
        }
    }

    async fn end(&mut self) {
        match self {
            Outage::Proxy(proxy) => proxy.restore().await,
            Outage::Lock { holder, .. } => {
                let mut conn = holder.take().unwrap();
                sqlx::query("ROLLBACK").execute(&mut conn).await.unwrap();
                conn.close().await.unwrap();
            }
        }
    }
}

/// `url` with its `host:port` replaced by the proxy's.
fn through(url: &str, port: u16) -> (String, String) {
    let after_scheme = url.find("://").unwrap() + 3;
    let host_start = url[after_scheme..]
        .find('@')
        .map_or(after_scheme, |at| after_scheme + at + 1);
    let host_end = url[host_start..]
        .find('/')
        .map_or(url.len(), |slash| host_start + slash);
    let upstream = url[host_start..host_end].to_string();
    let proxied = format!("{}127.0.0.1:{port}{}", &url[..host_start], &url[host_end..]);
    (proxied, upstream)
}

struct Api {
    base: String,
    http: reqwest::Client,
    store: Store,
    _server: JoinHandle<()>,
}

impl Api {
    async fn send(&self, method: &str, path: &str, body: Option<Value>) -> reqwest::Response {
        let mut req = self
            .http
            .request(method.parse().unwrap(), format!("{}{path}", self.base))
            .bearer_auth(TOKEN);
        if let Some(b) = body {
            req = req.json(&b);
        }
        req.send().await.unwrap()
    }

    async fn hook(&self, delivery: &str) -> reqwest::Response {
        let body = json!({"delivery": delivery}).to_string().into_bytes();
        let signature: String = hmac(HmacAlgorithm::Sha256, HOOK_SECRET.as_bytes(), &[&body])
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        self.http
            .post(format!("{}/hooks/intake", self.base))
            .header("content-type", "application/json")
            .header("X-Request-Id", delivery)
            .header("X-Signature", signature)
            .body(body)
            .send()
            .await
            .unwrap()
    }
}

async fn start(db: &TestDb) -> (Api, Outage) {
    let mut config = db.config.clone();
    // A down store must be noticed in well under a second per request.
    config.connect_timeout_ms = 500;
    config.busy_timeout_ms = 300;
    let outage = match db.backend {
        Backend::Postgres => {
            let (_, upstream) = through(&config.url, 0);
            let proxy = Proxy::start(upstream).await;
            config.url = through(&config.url, proxy.port).0;
            Outage::Proxy(proxy)
        }
        Backend::Sqlite => Outage::Lock {
            url: config.url.clone(),
            holder: None,
        },
    };
    let store = Store::connect(&config, Arc::new(SystemClock))
        .await
        .unwrap();
    store.migrate().await.unwrap();
    let parsed = nightshift_runner::config::Config::parse(CONFIG, "store-down test").unwrap();
    let hooks = HookSet::build(&parsed.hooks, &["helper"], |var| {
        (var == "STORE_DOWN_HOOK_SECRET").then(|| HOOK_SECRET.to_string())
    })
    .unwrap();
    let state = ApiState {
        store: store.clone(),
        intake: nightshift_scheduler::Intake::new(store.clone(), vec!["helper".to_string()]),
        tokens: nightshift_runner::api_tokens::ApiTokens::single(TOKEN.to_string()),
        hooks: Arc::new(hooks),
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        axum::serve(listener, router(state)).await.unwrap();
    });
    let http = nightshift_llm::http::build_client(nightshift_llm::HttpTimeouts::default()).unwrap();
    let api = Api {
        base,
        http,
        store,
        _server: server,
    };
    (api, outage)
}

/// Every endpoint that needs the store: (method, path, body, writes).
fn endpoints(run: &str) -> Vec<(&'static str, String, Option<Value>, bool)> {
    let new_run = json!({"agent": "helper", "prompt": "during the outage"});
    let schedule = json!({"name": "during", "cron": "@daily", "agent": "helper", "prompt": "p"});
    vec![
        ("GET", "/readyz".into(), None, true),
        ("POST", "/v1/runs".into(), Some(new_run), true),
        ("GET", "/v1/runs".into(), None, false),
        ("GET", format!("/v1/runs/{run}"), None, false),
        ("GET", format!("/v1/runs/{run}/events"), None, false),
        ("GET", format!("/v1/runs/{run}/tasks"), None, false),
        ("POST", format!("/v1/runs/{run}/cancel"), None, true),
        ("POST", format!("/v1/runs/{run}/wake"), None, true),
        (
            "POST",
            format!("/v1/runs/{run}/approvals/call-1"),
            Some(json!({"decision": "approve"})),
            true,
        ),
        ("GET", "/v1/wakeups".into(), None, false),
        ("GET", "/v1/approvals".into(), None, false),
        ("GET", "/v1/tasks".into(), None, false),
        ("GET", "/v1/notifications".into(), None, false),
        (
            "POST",
            "/v1/notifications/nd-1/redeliver".into(),
            None,
            true,
        ),
        ("GET", "/v1/schedules".into(), None, false),
        ("POST", "/v1/schedules".into(), Some(schedule), true),
        ("GET", "/v1/schedules/before".into(), None, false),
        (
            "PATCH",
            "/v1/schedules/before".into(),
            Some(json!({"prompt": "changed"})),
            true,
        ),
        ("POST", "/v1/schedules/before/trigger".into(), None, true),
        ("DELETE", "/v1/schedules/before".into(), None, true),
        ("GET", "/v1/hooks/intake/deliveries".into(), None, false),
    ]
}

async fn store_down(db: &TestDb) {
    let (api, mut outage) = start(db).await;
    let created = api
        .send(
            "POST",
            "/v1/runs",
            Some(json!({"agent": "helper", "prompt": "before the outage"})),
        )
        .await;
    assert_eq!(created.status(), StatusCode::ACCEPTED);
    let run = created.json::<Value>().await.unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    let schedule = json!({"name": "before", "cron": "@daily", "agent": "helper", "prompt": "p"});
    let made = api.send("POST", "/v1/schedules", Some(schedule)).await;
    assert_eq!(made.status(), StatusCode::CREATED);
    assert_eq!(
        api.hook("delivery-before").await.status(),
        StatusCode::ACCEPTED
    );

    outage.begin().await;
    let health = api.http.get(format!("{}/healthz", api.base)).send().await;
    assert_eq!(
        health.unwrap().status(),
        StatusCode::OK,
        "liveness stays up"
    );
    let only_writes = db.backend == Backend::Sqlite;
    for (method, path, body, writes) in endpoints(&run) {
        if only_writes && !writes {
            let read = api.send(method, &path, body).await;
            assert_eq!(
                read.status(),
                StatusCode::OK,
                "{method} {path}: reads go on"
            );
            continue;
        }
        let answer = api.send(method, &path, body).await;
        assert_unavailable(answer, &format!("{method} {path}")).await;
    }
    assert_unavailable(api.hook("delivery-during").await, "POST /hooks/intake").await;

    outage.end().await;
    eventually(WAIT, "/readyz to answer 200 again", || async {
        let ready = api.send("GET", "/readyz", None).await;
        (ready.status() == StatusCode::OK).then_some(())
    })
    .await;
    // Pooled connections the outage broke are replaced as they are found broken.
    let runs: Value = eventually(WAIT, "GET /v1/runs to answer again", || async {
        let listed = api.send("GET", "/v1/runs", None).await;
        match listed.status() {
            StatusCode::OK => Some(listed.json::<Value>().await.unwrap()),
            StatusCode::SERVICE_UNAVAILABLE => None,
            other => panic!("GET /v1/runs after the outage: {other}"),
        }
    })
    .await;
    let ids: Vec<&str> = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids.len(),
        2,
        "the run and the delivery's run, nothing from the outage"
    );
    assert!(
        ids.contains(&run.as_str()),
        "the accepted run is still there"
    );
    let schedules = api.store.schedules().await.unwrap();
    let names: Vec<&str> = schedules.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["before"], "the schedule made before, none during");
    let delivered = api
        .store
        .webhook_delivery("intake", "delivery-before")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        delivered.status,
        nightshift_store::WebhookDeliveryStatus::Done
    );
    assert!(
        api.store
            .webhook_delivery("intake", "delivery-during")
            .await
            .unwrap()
            .is_none(),
        "the refused delivery left nothing"
    );
    let again = eventually(WAIT, "POST /v1/runs to be accepted again", || async {
        let body = json!({"agent": "helper", "prompt": "after the outage"});
        let posted = api.send("POST", "/v1/runs", Some(body)).await;
        (posted.status() != StatusCode::SERVICE_UNAVAILABLE).then_some(posted.status())
    })
    .await;
    assert_eq!(again, StatusCode::ACCEPTED);
    assert_eq!(
        api.hook("delivery-during").await.status(),
        StatusCode::ACCEPTED
    );
}

async fn assert_unavailable(answer: reqwest::Response, what: &str) {
    let status = answer.status();
    let retry_after = answer
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    let body: Value = answer.json().await.unwrap_or(Value::Null);
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{what}: {body}");
    let seconds: u64 = retry_after
        .unwrap_or_else(|| panic!("{what}: no Retry-After"))
        .parse()
        .unwrap();
    assert!(seconds > 0, "{what}");
    let message = body["error"].as_str().unwrap_or_default();
    assert!(
        message.contains("the store is unavailable") && message.contains("retry"),
        "{what}: {body}"
    );
    assert!(
        !message.contains("postgres://"),
        "{what}: no connection URL in the answer: {message}"
    );
}
