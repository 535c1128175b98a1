//! The OpenAI-compatible provider against a fake chat-completions server: the converted
//! request on the wire, JSON and streamed replies with tool calls, finish-reason mapping,
//! usage with cached tokens, rate-limit headers and errors.

mod common;

use common::wire::*;
use common::{Canned, FakeServer};
use nightshift_llm::{
    ApiKey, CancellationToken, ContentBlock, HttpTimeouts, ModelRequest, ModelResponse,
    OpenAiOptions, OpenAiProvider, Provider, ProviderError, StopReason,
};
use serde_json::json;

const MODEL: &str = "gpt-4o";
const KEY: &str = "sk-proj-test-abcdef";

fn provider(server: &FakeServer, stream: bool, key: bool) -> OpenAiProvider {
    OpenAiProvider::new(OpenAiOptions {
        base_url: format!("{}/v1", server.base_url),
        api_key: key.then(|| ApiKey::new(KEY)),
        stream,
        timeouts: HttpTimeouts::default(),
    })
    .unwrap()
}

async fn send(p: &OpenAiProvider, req: &ModelRequest) -> Result<ModelResponse, ProviderError> {
    p.send(req, &CancellationToken::new()).await
}

#[tokio::test]
async fn json_reply_with_tool_calls_and_the_converted_request() {
    let server = FakeServer::start().await;
    let message = json!({
        "role": "assistant", "content": null, "refusal": null,
        "tool_calls": [{"id": "call_abc123", "type": "function",
                        "function": {"name": "get_time", "arguments": "{\"tz\":\"Europe/Paris\"}"}}]
    });
    server.push([
        Canned::json(200, &o_completion(MODEL, message, "tool_calls"))
            .header("x-ratelimit-limit-requests", "10000")
            .header("x-ratelimit-remaining-requests", "9999")
            .header("x-ratelimit-reset-requests", "6ms")
            .header("x-ratelimit-limit-tokens", "30000000")
            .header("x-ratelimit-remaining-tokens", "29998000")
            .header("x-ratelimit-reset-tokens", "4ms"),
    ]);
    let mut req = request(MODEL);
    req.stop_sequences = vec!["END".into()];
    let resp = send(&provider(&server, false, true), &req).await.unwrap();

    assert_eq!(resp.stop_reason, StopReason::ToolUse);
    assert_eq!(
        resp.content,
        vec![ContentBlock::ToolUse {
            id: "call_abc123".into(),
            name: "get_time".into(),
            input: json!({"tz": "Europe/Paris"}),
            unparsed: None,
        }]
    );
    assert_eq!(resp.usage.input_tokens, 1117 - 1024);
    assert_eq!(resp.usage.cache_read_input_tokens, 1024);
    assert_eq!(resp.usage.output_tokens, 46);
    assert_eq!(resp.rate_limits.requests_limit, Some(10000));
    assert_eq!(resp.rate_limits.requests_remaining, Some(9999));
    assert_eq!(resp.rate_limits.requests_reset.as_deref(), Some("6ms"));
    assert_eq!(resp.rate_limits.tokens_limit, Some(30000000));
    assert_eq!(resp.rate_limits.tokens_remaining, Some(29998000));
    assert_eq!(resp.rate_limits.tokens_reset.as_deref(), Some("4ms"));

    let sent = &server.requests()[0];
    assert_eq!(sent.path, "/v1/chat/completions");
    assert_eq!(sent.header("authorization"), Some(format!("Bearer {KEY}")));
    assert_eq!(sent.body, OpenAiProvider::request_body(&req, false));
    let body = sent.json();
    assert_eq!(body["stream"], false);
    assert!(body.get("stream_options").is_none());
    assert_eq!(body["stop"], json!(["END"]));
    assert_eq!(
        body["messages"],
        json!([
            {"role": "system", "content": "You are a careful reviewer."},
            {"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": "Let me check.", "tool_calls": [
                {"id": "toolu_01", "type": "function", "function": {
                    "name": "get_weather",
                    "arguments": "{\"location\":\"Paris\",\"unit\":\"celsius\"}"}}]},
            {"role": "tool", "tool_call_id": "toolu_01", "content": "18°C, cloudy"}
        ])
    );
    assert_eq!(
        body["tools"][0],
        json!({"type": "function", "function": {
            "name": "get_weather", "description": "Current weather for a city.",
            "parameters": {"type": "object", "properties": {"location": {"type": "string"}, "unit": {"type": "string"}}, "required": ["location"]}}})
    );
}

#[tokio::test]
async fn streamed_reply_assembles_interleaved_tool_call_fragments_and_usage() {
    let server = FakeServer::start().await;
    server.push([Canned::sse(vec![
        o_chunk(MODEL, json!({"role": "assistant", "content": ""}), None),
        o_chunk(MODEL, json!({"content": "Checking "}), None),
        o_chunk(MODEL, json!({"content": "both."}), None),
        o_tool_delta(MODEL, 0, Some(("call_a", "get_weather")), ""),
        o_tool_delta(MODEL, 0, None, "{\"location\":"),
        o_tool_delta(MODEL, 1, Some(("call_b", "get_time")), "{\"tz\":"),
        o_tool_delta(MODEL, 0, None, "\"Paris\"}"),
        o_tool_delta(MODEL, 1, None, "\"UTC\"}"),
        o_chunk(MODEL, json!({}), Some("tool_calls")),
        o_usage_chunk(MODEL),
        o_done(),
    ])]);
    let resp = send(&provider(&server, true, true), &request(MODEL))
        .await
        .unwrap();
    assert_eq!(resp.id, "chatcmpl-123");
    assert_eq!(resp.model, MODEL);
    assert_eq!(resp.stop_reason, StopReason::ToolUse);
    assert_eq!(
        resp.content,
        vec![
            ContentBlock::Text {
                text: "Checking both.".into()
            },
            ContentBlock::ToolUse {
                id: "call_a".into(),
                name: "get_weather".into(),
                input: json!({"location": "Paris"}),
                unparsed: None,
            },
            ContentBlock::ToolUse {
                id: "call_b".into(),
                name: "get_time".into(),
                input: json!({"tz": "UTC"}),
                unparsed: None,
            },
        ]
    );
    assert_eq!(
        (
            resp.usage.input_tokens,
            resp.usage.cache_read_input_tokens,
            resp.usage.output_tokens
        ),
        (18, 64, 17)
    );
    let body = server.requests()[0].json();
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
}

#[tokio::test]
async fn finish_reasons_map_and_a_length_cut_tool_call_is_dropped() {
    let server = FakeServer::start().await;
    let text = |t: &str| json!({"role": "assistant", "content": t});
    server.push([
        Canned::json(200, &o_completion(MODEL, text("Hello."), "stop")),
        Canned::json(200, &o_completion(MODEL, text(""), "content_filter")),
        Canned::sse(vec![
            o_chunk(MODEL, json!({"content": "Let me "}), None),
            o_tool_delta(MODEL, 0, Some(("call_x", "get_weather")), "{\"locat"),
            o_chunk(MODEL, json!({}), Some("length")),
            o_usage_chunk(MODEL),
            o_done(),
        ]),
        // Ollama says "stop" even when it calls a tool.
        Canned::json(200, &o_completion(MODEL, json!({"role": "assistant", "content": "",
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]}), "stop")),
    ]);
    let p = provider(&server, false, true);
    let stop = send(&p, &request(MODEL)).await.unwrap();
    assert_eq!(
        (stop.stop_reason.clone(), stop.message().text()),
        (StopReason::EndTurn, "Hello.".to_string())
    );
    assert_eq!(
        send(&p, &request(MODEL)).await.unwrap().stop_reason,
        StopReason::Refusal
    );
    let length = send(&provider(&server, true, true), &request(MODEL))
        .await
        .unwrap();
    assert_eq!(length.stop_reason, StopReason::MaxTokens);
    assert_eq!(
        length.content,
        vec![ContentBlock::Text {
            text: "Let me ".into()
        }]
    );
    let ollama = send(&p, &request(MODEL)).await.unwrap();
    assert_eq!(ollama.stop_reason, StopReason::ToolUse);
    assert_eq!(ollama.message().tool_uses().count(), 1);
}

#[tokio::test]
async fn a_stream_without_done_is_broken_and_malformed_chunks_are_clear() {
    let server = FakeServer::start().await;
    server.push([
        Canned::sse(vec![o_tool_delta(
            MODEL,
            0,
            Some(("call_a", "get_weather")),
            "{\"location\":\"Pa",
        )]),
        Canned::sse_abort(vec![o_chunk(MODEL, json!({"content": "Hi"}), None)]),
        Canned::sse(vec!["data: {\"choices\": [tru\n\n".into()]),
    ]);
    let p = provider(&server, true, true);
    for _ in 0..2 {
        let err = send(&p, &request(MODEL)).await.unwrap_err();
        assert!(matches!(err, ProviderError::StreamBroken(_)), "{err:?}");
        assert!(err.is_retryable());
    }
    let err = send(&p, &request(MODEL)).await.unwrap_err();
    assert!(
        matches!(&err, ProviderError::Malformed(m) if m.contains("stream chunk")),
        "{err:?}"
    );
    assert!(
        err.is_retryable(),
        "a garbled stream is as transient as a broken one"
    );
}

#[tokio::test]
async fn context_length_exceeded_and_auth_errors() {
    let server = FakeServer::start().await;
    server.push([
        Canned::json(400, &json!({"error": {"message": "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.", "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}})),
        Canned::json(401, &json!({"error": {"message": "Incorrect API key provided: sk-proj-****cdef.", "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}})),
        Canned::json(429, &json!({"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}))
            .header("retry-after-ms", "1500"),
    ]);
    let p = provider(&server, false, true);
    let err = send(&p, &request(MODEL)).await.unwrap_err();
    assert!(
        matches!(&err, ProviderError::ContextTooLong { status: 400, message } if message.contains("maximum context length")),
        "{err:?}"
    );
    let err = send(&p, &request(MODEL)).await.unwrap_err();
    assert!(
        matches!(&err, ProviderError::Http { status: 401, message, .. } if message.starts_with("Incorrect API key")),
        "{err:?}"
    );
    assert_eq!(err.error_type(), Some("invalid_request_error"));
    let err = send(&p, &request(MODEL)).await.unwrap_err();
    assert_eq!(
        err.retry_after(),
        Some(std::time::Duration::from_millis(1500))
    );
    assert!(err.is_retryable());
}

#[tokio::test]
async fn without_a_key_no_authorization_header_is_sent() {
    let server = FakeServer::start().await;
    server.push([Canned::json(
        200,
        &o_completion(
            "llama3.2",
            json!({"role": "assistant", "content": "hi"}),
            "stop",
        ),
    )]);
    let resp = send(&provider(&server, false, false), &request("llama3.2"))
        .await
        .unwrap();
    assert_eq!(resp.message().text(), "hi");
    assert_eq!(server.requests()[0].header("authorization"), None);
}

#[test]
fn request_body_is_byte_stable_and_error_results_are_marked() {
    let mut a = request(MODEL);
    if let ContentBlock::ToolResult { is_error, .. } = &mut a.messages[2].content[0] {
        *is_error = true;
    }
    let b = a.clone();
    let bytes = OpenAiProvider::request_body(&a, true);
    assert_eq!(bytes, OpenAiProvider::request_body(&b, true));
    let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(body["messages"][3]["content"], "Error: 18°C, cloudy");
}

/// A base URL without `/v1` on an OpenAI-compatible server: the 404 names the URL asked and
/// what to check.
#[tokio::test]
async fn a_404_names_the_url_and_the_base_url_to_check() {
    let server = FakeServer::start().await;
    server.push([Canned::raw(404, "404 page not found")]);
    let p = OpenAiProvider::new(OpenAiOptions {
        base_url: server.base_url.clone(),
        api_key: None,
        stream: false,
        timeouts: HttpTimeouts::default(),
    })
    .unwrap();
    let err = send(&p, &request(MODEL)).await.unwrap_err().to_string();
    assert!(
        err.starts_with("HTTP 404")
            && err.contains(&format!(
                "POST {}/chat/completions was not found",
                server.base_url
            ))
            && err.contains("base_url")
            && err.contains("/v1"),
        "{err}"
    );
}
