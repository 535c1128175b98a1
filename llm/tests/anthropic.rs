//! The Anthropic provider against a fake Messages API server: the request on the wire
//! (headers, body, cache breakpoints, byte stability), JSON and streamed replies, tool calls,
//! stop reasons, errors and cancellation. One attempt per call: retries are tested in
//! `client.rs`.

mod common;

use std::time::{Duration, Instant};

use common::wire::*;
use common::{Canned, FakeServer};
use nightshift_llm::{
    AnthropicOptions, AnthropicProvider, ApiKey, CancellationToken, ContentBlock, HttpTimeouts,
    ModelRequest, Provider, ProviderError, StopReason,
};
use serde_json::{Value, json};

const MODEL: &str = "claude-sonnet-4-5";
const KEY: &str = "sk-ant-test-0123456789";

fn provider(server: &FakeServer, stream: bool) -> AnthropicProvider {
    AnthropicProvider::new(AnthropicOptions {
        base_url: server.base_url.clone(),
        api_key: ApiKey::new(KEY),
        stream,
        timeouts: HttpTimeouts::default(),
    })
    .unwrap()
}

async fn send(
    p: &AnthropicProvider,
    req: &ModelRequest,
) -> Result<nightshift_llm::ModelResponse, ProviderError> {
    p.send(req, &CancellationToken::new()).await
}

#[tokio::test]
async fn json_reply_with_a_tool_call_and_the_request_on_the_wire() {
    let server = FakeServer::start().await;
    let content = json!([
        {"type": "text", "text": "I'll check."},
        {"type": "tool_use", "id": "toolu_02", "name": "get_time", "input": {"tz": "Europe/Paris"}}
    ]);
    server.push([Canned::json(200, &a_message(MODEL, content, "tool_use"))
        .header("anthropic-ratelimit-requests-limit", "4000")
        .header("anthropic-ratelimit-requests-remaining", "3999")
        .header("anthropic-ratelimit-requests-reset", "2026-01-01T00:00:01Z")
        .header("anthropic-ratelimit-tokens-limit", "400000")
        .header("anthropic-ratelimit-tokens-remaining", "398000")
        .header("anthropic-ratelimit-tokens-reset", "2026-01-01T00:00:02Z")]);
    let p = provider(&server, false);
    let req = request(MODEL);
    let resp = send(&p, &req).await.unwrap();

    assert_eq!(resp.model, MODEL);
    assert_eq!(resp.stop_reason, StopReason::ToolUse);
    assert_eq!(
        resp.content,
        vec![
            ContentBlock::Text {
                text: "I'll check.".into()
            },
            ContentBlock::ToolUse {
                id: "toolu_02".into(),
                name: "get_time".into(),
                input: json!({"tz": "Europe/Paris"}),
                unparsed: None,
            },
        ]
    );
    assert_eq!(resp.usage.input_tokens, 2095);
    assert_eq!(resp.usage.output_tokens, 503);
    assert_eq!(resp.usage.cache_creation_input_tokens, 1200);
    assert_eq!(resp.usage.cache_read_input_tokens, 800);
    assert_eq!(resp.rate_limits.requests_limit, Some(4000));
    assert_eq!(resp.rate_limits.requests_remaining, Some(3999));
    assert_eq!(
        resp.rate_limits.requests_reset.as_deref(),
        Some("2026-01-01T00:00:01Z")
    );
    assert_eq!(resp.rate_limits.tokens_limit, Some(400000));
    assert_eq!(resp.rate_limits.tokens_remaining, Some(398000));
    assert_eq!(
        resp.rate_limits.tokens_reset.as_deref(),
        Some("2026-01-01T00:00:02Z")
    );

    let sent = &server.requests()[0];
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(sent.header("x-api-key").as_deref(), Some(KEY));
    assert_eq!(
        sent.header("anthropic-version").as_deref(),
        Some("2023-06-01")
    );
    assert_eq!(
        sent.header("content-type").as_deref(),
        Some("application/json")
    );
    assert_eq!(sent.body, AnthropicProvider::request_body(&req, false));
    let body = sent.json();
    assert_eq!(body["model"], MODEL);
    assert_eq!(body["max_tokens"], 1024);
    assert_eq!(body["stream"], false);
    assert_eq!(body["system"][0]["type"], "text");
    assert_eq!(body["system"][0]["text"], "You are a careful reviewer.");
    assert_eq!(body["messages"][1]["content"][1]["type"], "tool_use");
    assert_eq!(
        body["messages"][1]["content"][1]["input"]["location"],
        "Paris"
    );
    assert_eq!(body["messages"][2]["content"][0]["type"], "tool_result");
    assert_eq!(body["messages"][2]["content"][0]["tool_use_id"], "toolu_01");
    assert_eq!(
        body["tools"][0]["input_schema"]["required"],
        json!(["location"])
    );
    assert!(
        body.get("stop_sequences").is_none(),
        "empty stop_sequences are left out"
    );
}

/// Every path in `v` at which a `cache_control` key sits.
fn cache_control_paths(v: &Value, path: String, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                if k == "cache_control" {
                    assert_eq!(*child, json!({"type": "ephemeral"}));
                    out.push(path.clone());
                }
                cache_control_paths(child, format!("{path}/{k}"), out);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                cache_control_paths(child, format!("{path}/{i}"), out);
            }
        }
        _ => {}
    }
}

#[tokio::test]
async fn cache_breakpoints_sit_on_system_last_tool_and_last_block_of_newest_message() {
    let server = FakeServer::start().await;
    server.push([Canned::json(
        200,
        &a_message(MODEL, json!([{"type":"text","text":"ok"}]), "end_turn"),
    )]);
    let mut req = request(MODEL);
    req.messages[2].content.push(ContentBlock::Text {
        text: "Thanks; now summarise.".into(),
    });
    send(&provider(&server, false), &req).await.unwrap();

    let mut paths = Vec::new();
    cache_control_paths(&server.requests()[0].json(), String::new(), &mut paths);
    paths.sort();
    assert_eq!(
        paths,
        vec!["/messages/2/content/1", "/system/0", "/tools/1"]
    );

    // Without a system prompt or tools only the message breakpoint remains.
    let bare = ModelRequest {
        system: String::new(),
        tools: vec![],
        ..request(MODEL)
    };
    let body: Value =
        serde_json::from_slice(&AnthropicProvider::request_body(&bare, true)).unwrap();
    let mut paths = Vec::new();
    cache_control_paths(&body, String::new(), &mut paths);
    assert_eq!(paths, vec!["/messages/2/content/0"]);
    assert!(body.get("system").is_none() && body.get("tools").is_none());
}

#[test]
fn request_body_is_byte_stable() {
    let a = request(MODEL);
    let mut b = request(MODEL);
    // The same input and schema, their keys inserted in another order.
    let mut input = serde_json::Map::new();
    input.insert("location".into(), json!("Paris"));
    input.insert("unit".into(), json!("celsius"));
    if let ContentBlock::ToolUse { input: i, .. } = &mut b.messages[1].content[1] {
        *i = Value::Object(input);
    }
    b.tools[1].input_schema = json!({"properties": {"tz": {"type": "string"}}, "type": "object"});
    assert_eq!(a, b);
    let bytes = AnthropicProvider::request_body(&a, true);
    assert_eq!(bytes, AnthropicProvider::request_body(&b, true));
    assert_eq!(bytes, AnthropicProvider::request_body(&a.clone(), true));

    let tiny = ModelRequest {
        model: "m".into(),
        system: "s".into(),
        messages: vec![nightshift_llm::Message::user_text("hi")],
        tools: vec![],
        max_tokens: 8,
        stop_sequences: vec!["END".into()],
        thinking: None,
        effort: None,
    };
    assert_eq!(
        String::from_utf8(AnthropicProvider::request_body(&tiny, true)).unwrap(),
        r#"{"max_tokens":8,"messages":[{"content":[{"cache_control":{"type":"ephemeral"},"text":"hi","type":"text"}],"role":"user"}],"model":"m","stop_sequences":["END"],"stream":true,"system":[{"cache_control":{"type":"ephemeral"},"text":"s","type":"text"}]}"#
    );
}

#[tokio::test]
async fn streamed_reply_with_text_and_fragmented_tool_input() {
    let server = FakeServer::start().await;
    server.push([Canned::sse(a_stream_with_tool(MODEL))
        .header("anthropic-ratelimit-requests-remaining", "17")]);
    let resp = send(&provider(&server, true), &request(MODEL))
        .await
        .unwrap();
    assert_eq!(resp.id, "msg_014p7gG3wDgGV9EUtLvnow3U");
    assert_eq!(resp.stop_reason, StopReason::ToolUse);
    assert_eq!(
        resp.content,
        vec![
            ContentBlock::Text {
                text: "Okay, let me check the weather.".into()
            },
            ContentBlock::ToolUse {
                id: "toolu_01T1x1fJ34qAmk2tNTrN7Up6".into(),
                name: "get_weather".into(),
                input: json!({"location": "San Francisco, CA", "unit": "fahrenheit"}),
                unparsed: None,
            },
        ]
    );
    // input and cache counts from message_start, output from message_delta.
    assert_eq!(resp.usage.input_tokens, 472);
    assert_eq!(resp.usage.output_tokens, 89);
    assert_eq!(resp.usage.cache_read_input_tokens, 4000);
    assert_eq!(resp.rate_limits.requests_remaining, Some(17));
    assert_eq!(server.requests()[0].json()["stream"], true);
}

#[tokio::test]
async fn a_stream_that_breaks_mid_tool_input_is_a_retryable_error_not_a_partial_call() {
    let server = FakeServer::start().await;
    server.push([
        Canned::sse_abort(a_stream_head_with_tool(MODEL)),
        // Ends cleanly, but before message_stop.
        Canned::sse(a_stream_head_with_tool(MODEL)),
    ]);
    let p = provider(&server, true);
    for _ in 0..2 {
        let err = send(&p, &request(MODEL)).await.unwrap_err();
        assert!(matches!(err, ProviderError::StreamBroken(_)), "{err:?}");
        assert!(err.is_retryable());
    }
}

#[tokio::test]
async fn an_in_stream_overloaded_error_is_a_retryable_529() {
    let server = FakeServer::start().await;
    let mut events = a_stream_head_with_tool(MODEL);
    events.push(a_event(a_error("overloaded_error", "Overloaded")));
    server.push([Canned::sse(events)]);
    let err = send(&provider(&server, true), &request(MODEL))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ProviderError::Http { status: 529, message, .. } if message == "Overloaded"),
        "{err:?}"
    );
    assert_eq!(err.error_type(), Some("overloaded_error"));
    assert_eq!(err.to_string(), "HTTP 529 overloaded_error: Overloaded");
    assert!(err.is_retryable());
}

#[tokio::test]
async fn max_tokens_drops_the_partial_tool_call_streamed_and_json() {
    let server = FakeServer::start().await;
    let mut events = a_stream_head_with_tool(MODEL);
    events.extend([
        a_block_stop(1),
        a_message_delta("max_tokens", 1024),
        a_message_stop(),
    ]);
    let cut = json!([
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "toolu_9", "name": "get_weather", "input": {"location": "San"}}
    ]);
    server.push([
        Canned::sse(events),
        Canned::json(200, &a_message(MODEL, cut, "max_tokens")),
    ]);
    let streamed = send(&provider(&server, true), &request(MODEL))
        .await
        .unwrap();
    assert_eq!(streamed.stop_reason, StopReason::MaxTokens);
    assert_eq!(
        streamed.content,
        vec![ContentBlock::Text {
            text: "Okay, let me check the weather.".into()
        }]
    );
    assert_eq!(streamed.message().tool_uses().count(), 0);

    let json = send(&provider(&server, false), &request(MODEL))
        .await
        .unwrap();
    assert_eq!(json.stop_reason, StopReason::MaxTokens);
    assert_eq!(
        json.content,
        vec![ContentBlock::Text {
            text: "Checking.".into()
        }]
    );
}

#[tokio::test]
async fn pause_turn_context_window_and_unknown_stop_reasons_pass_through() {
    let server = FakeServer::start().await;
    let text = json!([{"type": "text", "text": "Still searching"}]);
    server.push([
        Canned::json(200, &a_message(MODEL, text.clone(), "pause_turn")),
        Canned::json(
            200,
            &a_message(MODEL, text.clone(), "model_context_window_exceeded"),
        ),
        Canned::json(200, &a_message(MODEL, text, "brand_new_reason")),
    ]);
    let p = provider(&server, false);
    let resp = send(&p, &request(MODEL)).await.unwrap();
    assert_eq!(resp.stop_reason, StopReason::PauseTurn);
    assert_eq!(resp.message().text(), "Still searching");
    let resp = send(&p, &request(MODEL)).await.unwrap();
    assert_eq!(resp.stop_reason, StopReason::ModelContextWindowExceeded);
    assert!(resp.stop_reason.means_context_full());
    let resp = send(&p, &request(MODEL)).await.unwrap();
    assert_eq!(
        resp.stop_reason,
        StopReason::Other("brand_new_reason".into())
    );
    assert!(!resp.stop_reason.means_context_full());
}

#[tokio::test]
async fn malformed_replies_are_clear_retryable_errors() {
    let server = FakeServer::start().await;
    server.push([
        Canned::raw(200, "{\"id\": \"msg_1\", \"content\": [tru"),
        Canned::sse(vec![
            a_message_start(MODEL),
            "event: content_block_start\ndata: {not json\n\n".into(),
        ]),
    ]);
    let err = send(&provider(&server, false), &request(MODEL))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ProviderError::Malformed(m) if m.contains("not a valid message") && m.contains("msg_1")),
        "{err}"
    );
    assert!(err.is_retryable());
    let err = send(&provider(&server, true), &request(MODEL))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ProviderError::Malformed(m) if m.contains("content_block_start") && m.contains("not JSON")),
        "{err}"
    );
    assert!(err.is_retryable());
}

#[tokio::test]
async fn http_errors_carry_the_providers_message_and_retry_after() {
    let server = FakeServer::start().await;
    server.push([
        Canned::json(401, &a_error("authentication_error", "invalid x-api-key")),
        Canned::json(
            400,
            &a_error(
                "invalid_request_error",
                "prompt is too long: 210000 tokens > 200000 maximum",
            ),
        ),
        Canned::json(
            429,
            &a_error(
                "rate_limit_error",
                "Number of request tokens has exceeded your per-minute rate limit",
            ),
        )
        .header("retry-after", "7")
        .header("anthropic-ratelimit-tokens-remaining", "0"),
    ]);
    let p = provider(&server, true);
    let err = send(&p, &request(MODEL)).await.unwrap_err();
    assert!(
        matches!(&err, ProviderError::Http { status: 401, message, .. } if message == "invalid x-api-key"),
        "{err:?}"
    );
    assert_eq!(err.error_type(), Some("authentication_error"));
    assert!(!err.is_retryable());
    let err = send(&p, &request(MODEL)).await.unwrap_err();
    assert!(
        matches!(&err, ProviderError::ContextTooLong { status: 400, message } if message.starts_with("prompt is too long")),
        "{err:?}"
    );
    let err = send(&p, &request(MODEL)).await.unwrap_err();
    assert_eq!(err.status(), Some(429));
    assert_eq!(err.retry_after(), Some(Duration::from_secs(7)));
    assert!(
        matches!(&err, ProviderError::Http { rate_limits: Some(l), .. } if l.tokens_remaining == Some(0))
    );
    assert!(err.to_string().contains("per-minute rate limit"));
}

#[tokio::test]
async fn the_key_never_shows_in_debug_output_or_errors() {
    let server = FakeServer::start().await;
    server.push([
        Canned::json(401, &a_error("authentication_error", "invalid x-api-key")),
        // A proxy that echoes the key back, in an error and in a 200 it cannot make sense of.
        Canned::json(
            401,
            &a_error("authentication_error", &format!("bad key {KEY}")),
        ),
        Canned::raw(200, &format!("{{\"echo\": \"{KEY}\"")),
    ]);
    let p = provider(&server, false);
    assert!(!format!("{p:?}").contains(KEY));
    let mut errors = Vec::new();
    for _ in 0..3 {
        let err = send(&p, &request(MODEL)).await.unwrap_err();
        assert!(!format!("{err:?} {err}").contains(KEY), "{err:?}");
        errors.push(err.to_string());
    }
    assert_eq!(
        errors[1],
        "HTTP 401 authentication_error: bad key <redacted>"
    );
    assert!(errors[2].contains("malformed reply") && errors[2].contains("<redacted>"));
}

#[tokio::test]
async fn cancellation_stops_a_call_that_gets_no_answer() {
    let server = FakeServer::start().await;
    server.push([Canned::Hang]);
    let p = std::sync::Arc::new(provider(&server, true));
    let cancel = CancellationToken::new();
    let call = tokio::spawn({
        let (p, cancel) = (p.clone(), cancel.clone());
        async move { p.send(&request(MODEL), &cancel).await }
    });
    server.wait_for_requests(1).await;
    let cancelled_at = Instant::now();
    cancel.cancel();
    let err = tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .expect("cancelling did not stop the call")
        .unwrap()
        .unwrap_err();
    assert!(matches!(err, ProviderError::Cancelled), "{err:?}");
    assert!(cancelled_at.elapsed() < Duration::from_secs(1));
}
