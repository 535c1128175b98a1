//! The HTTP API over a real listener on loopback and a real store on both backends: the
//! token, enqueue with dedupe, validation errors that change nothing, listing, events,
//! cancellation, concurrency policies and sleeping runs.
//!
//! The cases are in [`runs`], [`bad_requests`], [`concurrency`] and [`tasks`]; the API on
//! loopback they share, and the token check, are here.

mod bad_requests;
mod concurrency;
mod runs;
mod tasks;

use nightshift_runner::api::{ApiState, router};
use nightshift_store::Store;
use nightshift_tests::{TestDb, on_both_backends};
use reqwest::StatusCode;
use serde_json::{Value, json};

use bad_requests::bad_requests_change_nothing;
use concurrency::concurrency_and_wakeups_over_http;
use runs::{batch_over_http, runs_lifecycle_over_http};
use tasks::tasks_over_http;

on_both_backends! {
    the_api_needs_the_token => the_api_needs_the_token;
    runs_are_enqueued_deduped_listed_and_cancelled => runs_lifecycle_over_http;
    bad_requests_are_explained_and_change_nothing => bad_requests_change_nothing;
    concurrency_policies_and_wakeups_over_http => concurrency_and_wakeups_over_http;
    background_tasks_are_listed_over_http => tasks_over_http;
    a_batch_over_http_answers_per_run => batch_over_http;
}

const TOKEN: &str = "test-token-123";

struct Api {
    base: String,
    http: reqwest::Client,
    store: Store,
    _server: tokio::task::JoinHandle<()>,
}

impl Api {
    async fn start(db: &TestDb) -> Api {
        let store = db.store().await;
        let state = ApiState {
            store: store.clone(),
            intake: nightshift_scheduler::Intake::new(
                store.clone(),
                vec!["helper".to_string(), "reviewer".to_string()],
            ),
            tokens: nightshift_runner::api_tokens::ApiTokens::single(TOKEN.to_string()),
            hooks: nightshift_runner::hooks::none(),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            axum::serve(listener, router(state)).await.unwrap();
        });
        Api {
            base,
            // The workspace builds reqwest with rustls and no default crypto provider; the
            // product's own client builder installs one.
            http: nightshift_llm::http::build_client(nightshift_llm::HttpTimeouts::default())
                .unwrap(),
            store,
            _server: server,
        }
    }

    async fn send(&self, method: &str, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let url = format!("{}{path}", self.base);
        let mut req = self
            .http
            .request(method.parse().unwrap(), url)
            .bearer_auth(TOKEN);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status();
        (status, resp.json().await.unwrap_or(Value::Null))
    }
}

async fn the_api_needs_the_token(db: &TestDb) {
    let api = Api::start(db).await;
    let url = format!("{}/v1/runs", api.base);
    let none = api.http.get(&url).send().await.unwrap();
    assert_eq!(none.status(), StatusCode::UNAUTHORIZED);
    let body: Value = none.json().await.unwrap();
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("Authorization: Bearer")
    );
    let wrong = api
        .http
        .get(&url)
        .bearer_auth("test-token-124")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    let post = api
        .http
        .post(&url)
        .bearer_auth("nope")
        .json(&json!({"agent": "helper", "prompt": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(post.status(), StatusCode::UNAUTHORIZED);
    assert!(
        api.store.list_runs(None, 10).await.unwrap().is_empty(),
        "nothing enqueued"
    );
    let health = api
        .http
        .get(format!("{}/healthz", api.base))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), StatusCode::OK, "health needs no token");
    let (status, _) = api.send("GET", "/v1/runs", None).await;
    assert_eq!(status, StatusCode::OK);
}
