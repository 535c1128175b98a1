//! Reasoning through both wire formats against a fake server: Anthropic `thinking` (streamed
//! as `thinking_delta` and `signature_delta`) and `redacted_thinking` blocks, and an
//! OpenAI-compatible server's `reasoning_content` (JSON and streamed), read into the reply and
//! sent back on the next request byte for byte, with the thinking and effort parameters.

mod common;

use common::wire::*;
use common::{Canned, FakeServer};
use nightshift_llm::{
    AnthropicOptions, AnthropicProvider, ApiKey, CancellationToken, ContentBlock, Effort,
    HttpTimeouts, Message, ModelRequest, OpenAiOptions, OpenAiProvider, Provider, Role, StopReason,
    Thinking, ThinkingKind,
};
use serde_json::{Value, json};

const CLAUDE: &str = "claude-sonnet-4-5";
const DEEPSEEK: &str = "deepseek-reasoner";
/// A signature as long and as opaque as a real one, with the characters base64 has.
const SIG: &str = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds+/Y0N1fTqt/SJ8pdJQ==";

fn anthropic(server: &FakeServer, stream: bool) -> AnthropicProvider {
    AnthropicProvider::new(AnthropicOptions {
        base_url: server.base_url.clone(),
        api_key: ApiKey::new("sk-ant-test"),
        stream,
        timeouts: HttpTimeouts::default(),
    })
    .unwrap()
}

fn openai(server: &FakeServer, stream: bool) -> OpenAiProvider {
    OpenAiProvider::new(OpenAiOptions {
        base_url: format!("{}/v1", server.base_url),
        api_key: None,
        stream,
        timeouts: HttpTimeouts::default(),
    })
    .unwrap()
}

/// A first request with thinking on, and the second request of its tool loop: the reply
/// followed by the tool's result.
fn thinking_request(model: &str) -> ModelRequest {
    ModelRequest {
        messages: vec![Message::user_text("What is the weather in Paris?")],
        max_tokens: 4096,
        thinking: Some(Thinking {
            kind: ThinkingKind::Enabled,
            budget_tokens: Some(2048),
        }),
        effort: Some(Effort::Medium),
        ..request(model)
    }
}

fn second(first: &ModelRequest, reply: &[ContentBlock]) -> ModelRequest {
    let mut req = first.clone();
    req.messages.push(Message {
        role: Role::Assistant,
        content: reply.to_vec(),
    });
    req.messages.push(Message {
        role: Role::User,
        content: vec![ContentBlock::ToolResult {
            tool_use_id: "toolu_01".into(),
            content: "18°C".into(),
            is_error: false,
        }],
    });
    req
}

fn thinking_delta(index: u64, text: &str) -> String {
    a_event(json!({"type": "content_block_delta", "index": index,
                   "delta": {"type": "thinking_delta", "thinking": text}}))
}

#[tokio::test]
async fn anthropic_thinking_and_its_signature_come_back_byte_for_byte() {
    for stream in [true, false] {
        let server = FakeServer::start().await;
        let thought = "The user wants Paris. \"Quotes\", ünïcode and\nnewlines stay.";
        let answer = if stream {
            Canned::sse(vec![
                a_message_start(CLAUDE),
                a_event(json!({"type": "content_block_start", "index": 0,
                    "content_block": {"type": "thinking", "thinking": "", "signature": ""}})),
                thinking_delta(0, &thought[..21]),
                thinking_delta(0, &thought[21..]),
                a_event(json!({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "signature_delta", "signature": SIG}})),
                a_block_stop(0),
                a_event(json!({"type": "content_block_start", "index": 1,
                    "content_block": {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va=="}})),
                a_block_stop(1),
                a_tool_start(2, "toolu_01", "get_weather"),
                a_json_delta(2, "{\"location\": \"Paris\"}"),
                a_block_stop(2),
                a_message_delta("tool_use", 80),
                a_message_stop(),
            ])
        } else {
            let content = json!([
                {"type": "thinking", "thinking": thought, "signature": SIG},
                {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va=="},
                {"type": "tool_use", "id": "toolu_01", "name": "get_weather",
                 "input": {"location": "Paris"}}
            ]);
            Canned::json(200, &a_message(CLAUDE, content, "tool_use"))
        };
        server.push([
            answer,
            Canned::json(200, &a_message(CLAUDE, json!([]), "end_turn")),
        ]);
        let p = anthropic(&server, stream);
        let first = thinking_request(CLAUDE);
        let cancel = CancellationToken::new();
        let resp = p.send(&first, &cancel).await.unwrap();
        assert_eq!(resp.stop_reason, StopReason::ToolUse);
        assert_eq!(
            resp.content[..2],
            [
                ContentBlock::Thinking {
                    thinking: thought.into(),
                    signature: SIG.into()
                },
                ContentBlock::RedactedThinking {
                    data: "EmwKAhgBEgy3va==".into()
                },
            ],
            "stream: {stream}"
        );
        let next = second(&first, &resp.content);
        p.send(&next, &cancel).await.unwrap();
        let sent = server.requests()[1].json();
        assert_eq!(
            sent["thinking"],
            json!({"type": "enabled", "budget_tokens": 2048})
        );
        assert_eq!(sent["output_config"], json!({"effort": "medium"}));
        assert!(sent.get("temperature").is_none() && sent.get("top_k").is_none());
        let assistant = &sent["messages"][1]["content"];
        assert_eq!(
            assistant[0],
            json!({"type": "thinking", "thinking": thought, "signature": SIG}),
            "stream: {stream}"
        );
        assert_eq!(
            assistant[1],
            json!({"type": "redacted_thinking", "data": "EmwKAhgBEgy3va=="})
        );
        assert_eq!(
            assistant[2],
            json!({"type": "tool_use", "id": "toolu_01", "name": "get_weather",
                   "input": {"location": "Paris"}})
        );
        assert_eq!(
            server.requests()[1].body,
            AnthropicProvider::request_body(&next, stream),
            "the bytes on the wire are the canonical ones"
        );
    }
}

#[tokio::test]
async fn anthropic_cache_breakpoint_skips_a_trailing_thinking_block_and_drops_foreign_reasoning() {
    let mut req = request(CLAUDE);
    req.messages = vec![
        Message::user_text("go"),
        Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Reasoning {
                    text: "from another provider".into(),
                    field: "reasoning_content".into(),
                    details: None,
                },
                ContentBlock::Text {
                    text: "prefill".into(),
                },
                ContentBlock::Thinking {
                    thinking: "t".into(),
                    signature: SIG.into(),
                },
            ],
        },
    ];
    let body: Value = serde_json::from_slice(&AnthropicProvider::request_body(&req, true)).unwrap();
    let content = body["messages"][1]["content"].as_array().unwrap();
    assert_eq!(content.len(), 2, "no reasoning block of another provider");
    assert_eq!(content[0]["cache_control"], json!({"type": "ephemeral"}));
    assert!(content[1].get("cache_control").is_none());
}

#[tokio::test]
async fn deepseek_reasoning_content_goes_back_in_the_assistant_message() {
    for stream in [true, false] {
        let server = FakeServer::start().await;
        let reasoning = "I need the weather tool. \"Paris\"\n";
        let call = json!({"id": "call_01", "type": "function",
                          "function": {"name": "get_weather", "arguments": "{\"location\":\"Paris\"}"}});
        let answer = if stream {
            Canned::sse(vec![
                o_chunk(
                    DEEPSEEK,
                    json!({"role": "assistant", "content": null,
                                         "reasoning_content": &reasoning[..10]}),
                    None,
                ),
                o_chunk(
                    DEEPSEEK,
                    json!({"content": null, "reasoning_content": &reasoning[10..]}),
                    None,
                ),
                o_tool_delta(
                    DEEPSEEK,
                    0,
                    Some(("call_01", "get_weather")),
                    "{\"location\":",
                ),
                o_tool_delta(DEEPSEEK, 0, None, "\"Paris\"}"),
                o_chunk(DEEPSEEK, json!({}), Some("tool_calls")),
                o_done(),
            ])
        } else {
            let message = json!({"role": "assistant", "content": null,
                                 "reasoning_content": reasoning, "tool_calls": [call]});
            Canned::json(200, &o_completion(DEEPSEEK, message, "tool_calls"))
        };
        let done = o_completion(
            DEEPSEEK,
            json!({"role": "assistant", "content": "18°C"}),
            "stop",
        );
        server.push([answer, Canned::json(200, &done)]);
        let p = openai(&server, stream);
        let mut first = thinking_request(DEEPSEEK);
        first.effort = Some(Effort::High);
        let cancel = CancellationToken::new();
        let mut resp = p.send(&first, &cancel).await.unwrap();
        assert_eq!(
            resp.content[0],
            ContentBlock::Reasoning {
                text: reasoning.into(),
                field: "reasoning_content".into(),
                details: None,
            },
            "stream: {stream}"
        );
        // The id the runtime would keep (the provider's is well formed).
        if let ContentBlock::ToolUse { id, .. } = &mut resp.content[1] {
            *id = "toolu_01".into();
        }
        p.send(&second(&first, &resp.content), &cancel)
            .await
            .unwrap();
        let sent = server.requests()[1].json();
        assert_eq!(sent["thinking"], json!({"type": "enabled"}));
        assert_eq!(sent["reasoning_effort"], "high");
        let assistant = &sent["messages"][2];
        assert_eq!(
            assistant["reasoning_content"], reasoning,
            "stream: {stream}"
        );
        assert_eq!(assistant["tool_calls"][0]["id"], "toolu_01");
    }
}

#[tokio::test]
async fn openrouter_reasoning_and_its_details_keep_their_field_and_ids() {
    let server = FakeServer::start().await;
    let detail = |text: &str| {
        json!([{"type": "reasoning.text", "text": text, "format": "anthropic-claude-v1",
                "index": 0, "id": "rs_01"}])
    };
    server.push([Canned::sse(vec![
        o_chunk(
            DEEPSEEK,
            json!({"reasoning": "Think", "reasoning_details": detail("Think")}),
            None,
        ),
        o_chunk(
            DEEPSEEK,
            json!({"reasoning": "ing.", "reasoning_details":
            [{"type": "reasoning.text", "text": "ing.", "index": 0, "signature": "sig=="}]}),
            None,
        ),
        o_chunk(DEEPSEEK, json!({"content": "Done."}), Some("stop")),
        o_done(),
    ])]);
    let resp = openai(&server, true)
        .send(&request(DEEPSEEK), &CancellationToken::new())
        .await
        .unwrap();
    let mut merged = detail("Thinking.");
    merged[0]["signature"] = json!("sig==");
    assert_eq!(
        resp.content[0],
        ContentBlock::Reasoning {
            text: "Thinking.".into(),
            field: "reasoning".into(),
            details: Some(merged.clone()),
        }
    );
    let mut req = request(DEEPSEEK);
    req.messages.push(resp.message());
    req.messages.push(Message::user_text("and?"));
    let body: Value = serde_json::from_slice(&OpenAiProvider::request_body(&req, true)).unwrap();
    let assistant = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rfind(|m| m["role"] == "assistant")
        .unwrap();
    assert_eq!(assistant["reasoning"], "Thinking.");
    assert_eq!(assistant["reasoning_details"], merged);
    assert!(assistant.get("reasoning_content").is_none());
}
