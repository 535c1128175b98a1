//! The daemon against a real HTTP model provider: `nightshift serve` configured with the
//! Anthropic provider pointed at a fake Messages API server on loopback (non-streaming and
//! SSE). Proves the wiring end to end: the key is read from the variable the config names and
//! sent as `x-api-key`, the agent's model and system prompt reach the wire, a tool call is
//! executed and its result sent back, and a 529 is retried.

use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use nightshift_store::RunStatus;
use nightshift_tests::http::post_json;
use nightshift_tests::{TestDb, eventually, on_both_backends};
use serde_json::{Value, json};

use crate::process::{API_TOKEN, Proc, free_port, nightshift_bin};

on_both_backends! {
    serve_runs_an_agent_against_the_anthropic_wire_format => anthropic_end_to_end;
}

#[derive(Clone, Default)]
struct Seen {
    requests: Arc<Mutex<Vec<(HeaderMap, Value)>>>,
}

/// Answers like the Messages API: first a 529 (overloaded), then a tool call, then text.
async fn messages(State(seen): State<Seen>, headers: HeaderMap, body: String) -> Response {
    let body: Value = serde_json::from_str(&body).unwrap();
    let n = {
        let mut r = seen.requests.lock().unwrap();
        r.push((headers, body.clone()));
        r.len()
    };
    if n == 1 {
        let err = json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
        return (
            StatusCode::from_u16(529).unwrap(),
            [("retry-after", "0")],
            err.to_string(),
        )
            .into_response();
    }
    let assistant_turns = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .count();
    let reply = if assistant_turns == 0 {
        json!({"id": "msg_1", "type": "message", "role": "assistant", "model": body["model"],
               "content": [{"type": "text", "text": "Listing."},
                           {"type": "tool_use", "id": "toolu_1", "name": "list_files", "input": {}}],
               "stop_reason": "tool_use", "stop_sequence": null,
               "usage": {"input_tokens": 50, "output_tokens": 10, "cache_creation_input_tokens": 40, "cache_read_input_tokens": 0}})
    } else {
        json!({"id": "msg_2", "type": "message", "role": "assistant", "model": body["model"],
               "content": [{"type": "text", "text": "The workspace is empty."}],
               "stop_reason": "end_turn", "stop_sequence": null,
               "usage": {"input_tokens": 70, "output_tokens": 8, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 40}})
    };
    (
        [
            ("content-type", "application/json"),
            ("anthropic-ratelimit-requests-remaining", "99"),
        ],
        reply.to_string(),
    )
        .into_response()
}

async fn anthropic_end_to_end(db: &TestDb) {
    let seen = Seen::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let provider_url = format!("http://{}", listener.local_addr().unwrap());
    let app = Router::new()
        .route("/v1/messages", post(messages))
        .with_state(seen.clone());
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = format!(
        "[database]\nurl = \"{url}\"\n{schema}\n\
         [server]\naddress = \"127.0.0.1:{port}\"\n\
         [worker]\nheartbeat_ms = 200\nlease_ms = 2000\npoll_interval_ms = 100\n\
         [runtime]\ndata_dir = \"data\"\n\
         [providers.claude]\nkind = \"anthropic\"\nbase_url = \"{provider_url}\"\napi_key_env = \"FAKE_ANTHROPIC_KEY\"\nstream = false\n\
         retry = {{ max_attempts = 3, base_delay_ms = 10, max_delay_ms = 50 }}\n\
         [[agents]]\nname = \"lister\"\nprovider = \"claude\"\nmodel = \"claude-test-1\"\n\
         system = \"You list files.\"\ntools = [\"list_files\"]\n",
        url = db.config.url,
        schema = db
            .config
            .schema
            .as_ref()
            .map(|s| format!("schema = \"{s}\""))
            .unwrap_or_default(),
    );
    let cfg = dir.path().join("nightshift.toml");
    std::fs::write(&cfg, config).unwrap();
    let _serve = Proc {
        child: Command::new(nightshift_bin())
            .arg("--config")
            .arg(&cfg)
            .arg("serve")
            .env("NIGHTSHIFT_API_TOKEN", API_TOKEN)
            .env("FAKE_ANTHROPIC_KEY", "sk-test-not-a-real-key")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    };
    let http = nightshift_llm::http::build_client(nightshift_llm::HttpTimeouts::default()).unwrap();
    let api = format!("http://127.0.0.1:{port}");
    eventually(Duration::from_secs(30), "the API to answer", || async {
        http.get(format!("{api}/healthz"))
            .send()
            .await
            .ok()?
            .status()
            .is_success()
            .then_some(())
    })
    .await;
    let (_, created) = post_json(
        &http,
        &format!("{api}/v1/runs"),
        API_TOKEN,
        &json!({"agent": "lister", "prompt": "What is in the workspace?"}),
    )
    .await;
    let run_id = created["run_id"].as_str().unwrap().to_string();
    let store = db.store().await;
    let run = eventually(Duration::from_secs(30), "the run to finish", || async {
        let run = store.run(&run_id).await.unwrap()?;
        run.status.is_terminal().then_some(run)
    })
    .await;
    assert_eq!(
        (run.status, run.result.as_deref()),
        (RunStatus::Succeeded, Some("The workspace is empty.")),
        "{:?}",
        run.error
    );
    assert_eq!(
        (run.turns, run.input_tokens, run.output_tokens),
        (2, 120, 18)
    );
    assert_eq!((run.cache_write_tokens, run.cache_read_tokens), (40, 40));

    let requests = seen.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 3, "one 529 retried, then two turns");
    let (headers, first) = &requests[1];
    assert_eq!(
        headers["x-api-key"], "sk-test-not-a-real-key",
        "the key from the named variable"
    );
    assert!(headers.contains_key("anthropic-version"));
    assert_eq!(first["model"], "claude-test-1");
    assert_eq!(first["system"][0]["text"], "You list files.");
    assert_eq!(first["tools"][0]["name"], "list_files");
    assert_eq!(
        requests[0].1, requests[1].1,
        "the retried request is the same request"
    );
    let (_, second) = &requests[2];
    let last = second["messages"].as_array().unwrap().last().unwrap();
    assert_eq!(last["content"][0]["type"], "tool_result");
    assert_eq!(last["content"][0]["tool_use_id"], "toolu_1");
    let events = store.events(&run_id, 0).await.unwrap();
    assert!(
        events
            .iter()
            .all(|e| !e.payload.contains("sk-test-not-a-real-key")),
        "the key is never logged"
    );
    // Each turn records how long it took and how many attempts failed before it: the 529
    // was retried once on the first turn, the second answered at once.
    let turns: Vec<(Option<u64>, u32)> = events
        .iter()
        .filter_map(|e| {
            match nightshift_agent::RunEvent::parse(&e.event_type, &e.payload).unwrap() {
                nightshift_agent::RunEvent::AssistantMessage {
                    latency_ms,
                    retries,
                    ..
                } => Some((latency_ms, retries)),
                _ => None,
            }
        })
        .collect();
    assert_eq!(
        turns.iter().map(|t| t.1).collect::<Vec<_>>(),
        vec![1, 0],
        "{turns:?}"
    );
    assert!(turns.iter().all(|t| t.0.is_some()), "{turns:?}");
    server.abort();
}
