//! A prompt holding NUL bytes (and the PostgreSQL encoding's own escape character, U+E000)
//! sent over the HTTP API is accepted and read back identical. That the store keeps such text
//! through its whole API is in the store's conformance suite
//! (`store-conformance/src/nul_text.rs`).

use nightshift_tests::http::{get_json, post_json};
use nightshift_tests::{TestDb, on_both_backends};

/// The PostgreSQL encoding's escape character.
const ESC: char = '\u{E000}';

on_both_backends! {
    a_prompt_with_nul_is_accepted_over_http => prompt_over_http;
}

/// A text dense in what an escape could confuse: NULs, the escape character, and the
/// characters that follow it in the encoding.
fn nasty(tag: &str) -> String {
    format!("{tag}: a\0b \0\0 {ESC} {ESC}0 {ESC}{ESC} \0{ESC} 0\0 end\0")
}

/// The symptom of the issue, from outside: `POST /v1/runs` with a `\u0000` in the prompt
/// answered 500 with the raw PostgreSQL error. Now it is accepted and read back identical.
async fn prompt_over_http(db: &TestDb) {
    let store = db.store().await;
    let state = nightshift_runner::api::ApiState {
        store: store.clone(),
        intake: nightshift_scheduler::Intake::new(store.clone(), vec!["helper".to_string()]),
        tokens: nightshift_runner::api_tokens::ApiTokens::single("t0ken".to_string()),
        hooks: nightshift_runner::hooks::none(),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        axum::serve(listener, nightshift_runner::api::router(state))
            .await
            .unwrap();
    });
    let http = nightshift_llm::http::build_client(nightshift_llm::HttpTimeouts::default()).unwrap();
    let prompt = nasty("review");
    let body = serde_json::json!({"agent": "helper", "prompt": prompt, "idempotency_key": "k\0"});
    let (status, created) = post_json(&http, &format!("{base}/v1/runs"), "t0ken", &body).await;
    assert_eq!(status, reqwest::StatusCode::ACCEPTED, "{created}");
    let run_id = created["run_id"].as_str().unwrap();
    let (_, run) = get_json(&http, &format!("{base}/v1/runs/{run_id}"), "t0ken").await;
    assert_eq!(run["input"], prompt.as_str());
    assert_eq!(store.run(run_id).await.unwrap().unwrap().input, prompt);
    server.abort();
}
