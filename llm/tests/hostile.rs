//! Both providers against a fake server that answers the way real providers and proxies
//! sometimes do (issue 13): 200s that cannot be read, error objects where a reply should be,
//! tool calls without ids or with duplicate ids, `end_turn` replies that carry tool calls, and
//! replies cut off by a full context window. One attempt per call; retries are in `client.rs`.

mod common;

use common::wire::*;
use common::{Canned, FakeServer};
use nightshift_llm::{
    AnthropicOptions, AnthropicProvider, ApiKey, CancellationToken, ContentBlock, HttpTimeouts,
    ModelResponse, OpenAiOptions, OpenAiProvider, Provider, ProviderError, StopReason,
};
use serde_json::json;

const CLAUDE: &str = "claude-sonnet-4-5";
const GPT: &str = "gpt-4o";

fn anthropic(server: &FakeServer) -> AnthropicProvider {
    AnthropicProvider::new(AnthropicOptions {
        base_url: server.base_url.clone(),
        api_key: ApiKey::new("sk-ant-test"),
        stream: true,
        timeouts: HttpTimeouts::default(),
    })
    .unwrap()
}

fn openai(server: &FakeServer) -> OpenAiProvider {
    OpenAiProvider::new(OpenAiOptions {
        base_url: format!("{}/v1", server.base_url),
        api_key: None,
        stream: true,
        timeouts: HttpTimeouts::default(),
    })
    .unwrap()
}

async fn send(p: &dyn Provider, model: &str) -> Result<ModelResponse, ProviderError> {
    p.send(&request(model), &CancellationToken::new()).await
}

fn ids(resp: &ModelResponse) -> Vec<&str> {
    resp.content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolUse { id, .. } => Some(id.as_str()),
            _ => None,
        })
        .collect()
}

/// Serves each answer in turn and checks that the provider turns it into a retryable error
/// whose message contains the expected words.
async fn each_is_retryable(
    p: &dyn Provider,
    server: &FakeServer,
    cases: Vec<(&str, Canned, &str)>,
) {
    let model = if p.name() == "anthropic" { CLAUDE } else { GPT };
    for (what, answer, says) in cases {
        server.push([answer]);
        let err = send(p, model)
            .await
            .expect_err(&format!("{what}: must not parse"));
        assert!(err.is_retryable(), "{what}: {err:?} should be retryable");
        assert!(
            err.is_provider_failure(),
            "{what}: {err:?} counts for the breaker"
        );
        let text = err.to_string();
        assert!(text.contains(says), "{what}: {text:?} should say {says:?}");
    }
}

#[tokio::test]
async fn every_unreadable_anthropic_200_is_a_retryable_error_saying_what_was_wrong() {
    let server = FakeServer::start().await;
    let sse = Canned::sse;
    let bad_input_tool = vec![
        a_message_start(CLAUDE),
        a_tool_start(0, "toolu_1", "get_weather"),
        a_json_delta(0, "{\"location\": "),
        a_block_stop(0),
        a_message_delta("end_turn", 10),
        a_message_stop(),
    ];
    let mut no_stop = a_message(CLAUDE, json!([]), "end_turn");
    no_stop["stop_reason"] = json!(null);
    let cases = vec![
        (
            "truncated JSON",
            Canned::raw(200, "{\"id\": \"msg_1\", \"content\": [tru"),
            "not a valid message",
        ),
        (
            "not JSON",
            Canned::raw(200, "<html>502 Bad Gateway</html>"),
            "<html>502 Bad Gateway",
        ),
        ("empty body", Canned::raw(200, ""), "not a valid message"),
        (
            "wrong shape",
            Canned::raw(200, r#"{"content": "hi", "stop_reason": "end_turn"}"#),
            "not a valid message",
        ),
        (
            "no stop_reason",
            Canned::json(200, &no_stop),
            "has no stop_reason",
        ),
        (
            "an error object in a 200",
            Canned::json(200, &a_error("overloaded_error", "Overloaded")),
            "HTTP 529 overloaded_error: Overloaded",
        ),
        (
            "garbage data",
            sse(vec![
                a_message_start(CLAUDE),
                "event: content_block_delta\ndata: garbage\n\n".into(),
            ]),
            "not JSON",
        ),
        (
            "delta for no block",
            sse(vec![a_message_start(CLAUDE), a_text_delta(3, "hi")]),
            "unknown content block 3",
        ),
        (
            "no message_stop",
            sse(vec![
                a_message_start(CLAUDE),
                a_text_start(0),
                a_text_delta(0, "hi"),
            ]),
            "before message_stop",
        ),
        (
            "no stop_reason in the stream",
            sse(vec![a_message_start(CLAUDE), a_message_stop()]),
            "without a stop_reason",
        ),
    ];
    each_is_retryable(&anthropic(&server), &server, cases).await;
    // Arguments the model wrote that are not JSON are no reason to ask again: they come back
    // as written, for the loop to answer with an error the model can correct.
    server.push([sse(bad_input_tool)]);
    let resp = send(&anthropic(&server), CLAUDE).await.unwrap();
    assert_eq!(resp.stop_reason, StopReason::ToolUse);
    assert_eq!(
        resp.content,
        vec![ContentBlock::ToolUse {
            id: "toolu_1".into(),
            name: "get_weather".into(),
            input: json!({}),
            unparsed: Some("{\"location\": ".into()),
        }]
    );
}

#[tokio::test]
async fn every_unreadable_openai_200_is_a_retryable_error_saying_what_was_wrong() {
    let server = FakeServer::start().await;
    let sse = Canned::sse;
    let bad_args = json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": "{\"tz\": "}}]});
    let no_reason = {
        let mut c = o_completion(GPT, json!({"role": "assistant", "content": "hi"}), "stop");
        c["choices"][0]["finish_reason"] = json!(null);
        c
    };
    let cases = vec![
        ("truncated JSON", Canned::raw(200, "{\"id\": \"chatcmpl-1\", \"choices\": [{\"mess"), "chat completion is not valid"),
        ("not JSON", Canned::raw(200, "<html>upstream timed out</html>"), "<html>upstream timed out"),
        ("wrong shape", Canned::raw(200, r#"{"choices": {"message": "hi"}}"#), "chat completion is not valid"),
        ("no choices", Canned::raw(200, r#"{"choices": []}"#), "has no choices"),
        ("no finish_reason", Canned::json(200, &no_reason), "has no finish_reason"),
        ("an error object in a 200", Canned::raw(200, r#"{"error": {"message": "upstream overloaded", "type": "server_error", "code": 503}}"#), "HTTP 503 server_error: upstream overloaded"),
        ("garbage data", sse(vec![o_chunk(GPT, json!({"content": "Hi"}), None), "data: {garbage\n\n".into()]), "stream chunk is not valid"),
        ("no [DONE]", sse(vec![o_chunk(GPT, json!({"content": "Hi"}), Some("stop"))]), "before data: [DONE]"),
        ("no finish_reason in the stream", sse(vec![o_chunk(GPT, json!({"content": "Hi"}), None), o_done()]), "without a finish_reason"),
        ("an error in the stream", sse(vec![r#"data: {"error": {"message": "Overloaded", "type": "overloaded_error", "code": 529}}"#.to_string() + "\n\n"]), "HTTP 529 overloaded_error: Overloaded"),
    ];
    each_is_retryable(&openai(&server), &server, cases).await;
    server.push([
        Canned::json(200, &o_completion(GPT, bad_args, "tool_calls")),
        sse(vec![
            o_tool_delta(GPT, 0, Some(("call_2", "get_time")), "{\"tz\""),
            o_chunk(GPT, json!({}), Some("tool_calls")),
            o_done(),
        ]),
    ]);
    for (id, raw) in [("call_1", "{\"tz\": "), ("call_2", "{\"tz\"")] {
        let resp = send(&openai(&server), GPT).await.unwrap();
        assert_eq!(resp.stop_reason, StopReason::ToolUse);
        assert_eq!(
            resp.content,
            vec![ContentBlock::ToolUse {
                id: id.into(),
                name: "get_time".into(),
                input: json!({}),
                unparsed: Some(raw.into()),
            }]
        );
    }
}

#[tokio::test]
async fn http_error_types_are_parsed_for_both_formats() {
    let server = FakeServer::start().await;
    server.push([
        Canned::json(529, &a_error("overloaded_error", "Overloaded")),
        Canned::raw(500, r#"{"error": {"message": "The server had an error while processing your request.", "type": "server_error", "param": null, "code": null}}"#),
        Canned::raw(429, r#"{"error": {"message": "Rate limit reached", "code": "rate_limit_exceeded"}}"#),
    ]);
    let err = send(&anthropic(&server), CLAUDE).await.unwrap_err();
    assert_eq!(err.error_type(), Some("overloaded_error"));
    assert_eq!(err.to_string(), "HTTP 529 overloaded_error: Overloaded");
    let p = openai(&server);
    let err = send(&p, GPT).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "HTTP 500 server_error: The server had an error while processing your request."
    );
    let err = send(&p, GPT).await.unwrap_err();
    assert_eq!(
        err.error_type(),
        Some("rate_limit_exceeded"),
        "no type: the code"
    );
}

#[tokio::test]
async fn missing_tool_call_ids_stay_empty_and_duplicates_are_kept_as_sent() {
    let server = FakeServer::start().await;
    let call = |id: Option<&str>, name: &str| {
        let mut c = json!({"type": "function", "function": {"name": name, "arguments": "{}"}});
        if let Some(id) = id {
            c["id"] = json!(id);
        }
        c
    };
    let no_id_start = |index: u64| {
        a_event(json!({"type": "content_block_start", "index": index,
            "content_block": {"type": "tool_use", "name": "get_time", "input": {}}}))
    };
    server.push([
        // OpenAI JSON: two calls without ids, then a duplicate pair.
        Canned::json(200, &o_completion(GPT, json!({"role": "assistant", "content": null,
            "tool_calls": [call(None, "get_time"), call(None, "get_weather"),
                           call(Some("call_0"), "get_time"), call(Some("call_0"), "get_time")]}), "tool_calls")),
        // OpenAI SSE: fragments keyed by index only.
        Canned::sse(vec![
            o_chunk(GPT, json!({"tool_calls": [{"index": 0, "function": {"name": "get_time", "arguments": "{}"}}]}), None),
            o_chunk(GPT, json!({"tool_calls": [{"index": 1, "function": {"name": "get_weather", "arguments": "{}"}}]}), None),
            o_chunk(GPT, json!({}), Some("tool_calls")),
            o_done(),
        ]),
        // Anthropic JSON: no id, then the same id twice.
        Canned::json(200, &a_message(CLAUDE, json!([
            {"type": "tool_use", "name": "get_time", "input": {}},
            {"type": "tool_use", "id": "toolu_1", "name": "get_time", "input": {}},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}},
        ]), "tool_use")),
        // Anthropic SSE: a tool_use block start without an id.
        Canned::sse(vec![
            a_message_start(CLAUDE),
            no_id_start(0),
            a_json_delta(0, "{}"),
            a_block_stop(0),
            a_message_delta("tool_use", 5),
            a_message_stop(),
        ]),
    ]);
    let o = openai(&server);
    assert_eq!(
        ids(&send(&o, GPT).await.unwrap()),
        ["", "", "call_0", "call_0"]
    );
    assert_eq!(ids(&send(&o, GPT).await.unwrap()), ["", ""]);
    let a = anthropic(&server);
    assert_eq!(
        ids(&send(&a, CLAUDE).await.unwrap()),
        ["", "toolu_1", "toolu_1"]
    );
    let streamed = send(&a, CLAUDE).await.unwrap();
    assert_eq!(ids(&streamed), [""]);
    assert_eq!(streamed.stop_reason, StopReason::ToolUse);
}

#[tokio::test]
async fn anthropic_end_turn_or_stop_sequence_with_complete_tool_use_is_tool_use() {
    let server = FakeServer::start().await;
    let content = json!([
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_time", "input": {"tz": "UTC"}},
    ]);
    let mut stream = a_stream_with_tool(CLAUDE);
    let at = stream.len() - 2;
    stream[at] = a_message_delta("stop_sequence", 89);
    server.push([
        Canned::json(200, &a_message(CLAUDE, content, "end_turn")),
        Canned::sse(stream),
        Canned::json(
            200,
            &a_message(
                CLAUDE,
                json!([{"type": "text", "text": "Done."}]),
                "end_turn",
            ),
        ),
    ]);
    let p = anthropic(&server);
    let json_reply = send(&p, CLAUDE).await.unwrap();
    assert_eq!(json_reply.stop_reason, StopReason::ToolUse);
    assert_eq!(json_reply.message().tool_uses().count(), 1);
    let streamed = send(&p, CLAUDE).await.unwrap();
    assert_eq!(streamed.stop_reason, StopReason::ToolUse);
    assert_eq!(streamed.message().tool_uses().count(), 1);
    let text_only = send(&p, CLAUDE).await.unwrap();
    assert_eq!(text_only.stop_reason, StopReason::EndTurn);
}

#[tokio::test]
async fn a_reply_cut_off_by_the_context_window_drops_the_call_being_written() {
    let server = FakeServer::start().await;
    let mut cut = a_stream_head_with_tool(CLAUDE);
    cut.extend([
        a_message_delta("model_context_window_exceeded", 300),
        a_message_stop(),
    ]);
    server.push([
        Canned::sse(cut),
        // An OpenAI-compatible proxy in front of Anthropic passing the reason through.
        Canned::sse(vec![
            o_chunk(GPT, json!({"content": "Let me "}), None),
            o_tool_delta(GPT, 0, Some(("call_x", "get_weather")), "{\"locat"),
            o_chunk(GPT, json!({}), Some("model_context_window_exceeded")),
            o_done(),
        ]),
    ]);
    let a = send(&anthropic(&server), CLAUDE).await.unwrap();
    assert_eq!(a.stop_reason, StopReason::ModelContextWindowExceeded);
    assert!(a.stop_reason.means_context_full());
    assert_eq!(
        a.content,
        vec![ContentBlock::Text {
            text: "Okay, let me check the weather.".into()
        }]
    );
    let o = send(&openai(&server), GPT).await.unwrap();
    assert_eq!(o.stop_reason, StopReason::ModelContextWindowExceeded);
    assert_eq!(o.message().tool_uses().count(), 0);
    assert_eq!(o.message().text(), "Let me ");
}

#[tokio::test]
async fn openai_end_turn_from_a_proxy_with_complete_tool_calls_is_tool_use() {
    let server = FakeServer::start().await;
    let message = json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]});
    server.push([
        Canned::json(200, &o_completion(GPT, message, "end_turn")),
        Canned::json(
            200,
            &o_completion(
                GPT,
                json!({"role": "assistant", "content": "ok"}),
                "end_turn",
            ),
        ),
    ]);
    let p = openai(&server);
    let with_call = send(&p, GPT).await.unwrap();
    assert_eq!(with_call.stop_reason, StopReason::ToolUse);
    let text_only = send(&p, GPT).await.unwrap();
    assert_eq!(text_only.stop_reason, StopReason::EndTurn);
}
