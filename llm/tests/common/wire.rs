//! Replies in the providers' exact wire formats (Anthropic Messages API and OpenAI chat
//! completions, JSON and server-sent events), and requests to send, for the tests.

use serde_json::{Value, json};

use nightshift_llm::{ContentBlock, Message, ModelRequest, Role, ToolSpec};

/// A request with a system prompt, two tools and a three-message conversation whose last
/// message carries a tool result.
pub fn request(model: &str) -> ModelRequest {
    ModelRequest {
        model: model.to_string(),
        system: "You are a careful reviewer.".into(),
        messages: vec![
            Message::user_text("What is the weather in Paris?"),
            Message {
                role: Role::Assistant,
                content: vec![
                    ContentBlock::Text {
                        text: "Let me check.".into(),
                    },
                    ContentBlock::ToolUse {
                        id: "toolu_01".into(),
                        name: "get_weather".into(),
                        input: json!({"unit": "celsius", "location": "Paris"}),
                        unparsed: None,
                    },
                ],
            },
            Message {
                role: Role::User,
                content: vec![ContentBlock::ToolResult {
                    tool_use_id: "toolu_01".into(),
                    content: "18°C, cloudy".into(),
                    is_error: false,
                }],
            },
        ],
        tools: vec![
            ToolSpec {
                name: "get_weather".into(),
                description: "Current weather for a city.".into(),
                input_schema: json!({"type": "object", "properties": {"location": {"type": "string"}, "unit": {"type": "string"}}, "required": ["location"]}),
            },
            ToolSpec {
                name: "get_time".into(),
                description: "Current time in a timezone.".into(),
                input_schema: json!({"type": "object", "properties": {"tz": {"type": "string"}}}),
            },
        ],
        max_tokens: 1024,
        stop_sequences: vec![],
        thinking: None,
        effort: None,
    }
}

// ---------------------------------------------------------------- Anthropic

/// A non-streamed Messages API reply.
pub fn a_message(model: &str, content: Value, stop_reason: &str) -> Value {
    json!({
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": null,
        "usage": {
            "input_tokens": 2095,
            "output_tokens": 503,
            "cache_creation_input_tokens": 1200,
            "cache_read_input_tokens": 800
        }
    })
}

/// An Anthropic error body.
pub fn a_error(kind: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

/// One SSE event as the Messages API frames it.
pub fn a_event(data: Value) -> String {
    format!(
        "event: {}\ndata: {}\n\n",
        data["type"].as_str().unwrap(),
        data
    )
}

pub fn a_message_start(model: &str) -> String {
    a_event(json!({"type": "message_start", "message": {
        "id": "msg_014p7gG3wDgGV9EUtLvnow3U", "type": "message", "role": "assistant",
        "model": model, "content": [], "stop_reason": null, "stop_sequence": null,
        "usage": {"input_tokens": 472, "output_tokens": 2,
                  "cache_creation_input_tokens": 0, "cache_read_input_tokens": 4000}}}))
}

pub fn a_text_start(index: u64) -> String {
    a_event(json!({"type": "content_block_start", "index": index,
                   "content_block": {"type": "text", "text": ""}}))
}

pub fn a_text_delta(index: u64, text: &str) -> String {
    a_event(json!({"type": "content_block_delta", "index": index,
                   "delta": {"type": "text_delta", "text": text}}))
}

pub fn a_tool_start(index: u64, id: &str, name: &str) -> String {
    a_event(json!({"type": "content_block_start", "index": index,
                   "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}))
}

pub fn a_json_delta(index: u64, partial: &str) -> String {
    a_event(json!({"type": "content_block_delta", "index": index,
                   "delta": {"type": "input_json_delta", "partial_json": partial}}))
}

pub fn a_block_stop(index: u64) -> String {
    a_event(json!({"type": "content_block_stop", "index": index}))
}

pub fn a_message_delta(stop_reason: &str, output_tokens: u64) -> String {
    a_event(json!({"type": "message_delta",
                   "delta": {"stop_reason": stop_reason, "stop_sequence": null},
                   "usage": {"output_tokens": output_tokens}}))
}

pub fn a_ping() -> String {
    "event: ping\ndata: {\"type\": \"ping\"}\n\n".to_string()
}

pub fn a_message_stop() -> String {
    a_event(json!({"type": "message_stop"}))
}

/// The opening of a streamed reply that says some text and starts calling `get_weather`,
/// its input JSON arriving in fragments; cut right after the first fragment.
pub fn a_stream_head_with_tool(model: &str) -> Vec<String> {
    vec![
        a_message_start(model),
        a_text_start(0),
        a_ping(),
        a_text_delta(0, "Okay, let me "),
        a_text_delta(0, "check the weather."),
        a_block_stop(0),
        a_tool_start(1, "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "get_weather"),
        a_json_delta(1, ""),
        a_json_delta(1, "{\"location\": \"San Fra"),
    ]
}

/// A complete streamed reply: text, then a `get_weather` call, stop_reason `tool_use`.
pub fn a_stream_with_tool(model: &str) -> Vec<String> {
    let mut events = a_stream_head_with_tool(model);
    events.extend([
        a_json_delta(1, "ncisco, CA\", \"unit\": \"fah"),
        a_json_delta(1, "renheit\"}"),
        a_block_stop(1),
        a_message_delta("tool_use", 89),
        a_message_stop(),
    ]);
    events
}

// ---------------------------------------------------------------- OpenAI

/// A non-streamed chat completion.
pub fn o_completion(model: &str, message: Value, finish_reason: &str) -> Value {
    json!({
        "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
        "object": "chat.completion",
        "created": 1741570283,
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": null,
                     "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 1117, "completion_tokens": 46, "total_tokens": 1163,
                  "prompt_tokens_details": {"cached_tokens": 1024, "audio_tokens": 0},
                  "completion_tokens_details": {"reasoning_tokens": 0}}
    })
}

/// One `data:` line of a chat-completion stream.
pub fn o_chunk(model: &str, delta: Value, finish_reason: Option<&str>) -> String {
    let chunk = json!({
        "id": "chatcmpl-123", "object": "chat.completion.chunk", "created": 1694268190,
        "model": model, "system_fingerprint": "fp_44709d6fcb",
        "choices": [{"index": 0, "delta": delta, "logprobs": null,
                     "finish_reason": finish_reason}]
    });
    format!("data: {chunk}\n\n")
}

/// The usage chunk sent last when `stream_options.include_usage` is set.
pub fn o_usage_chunk(model: &str) -> String {
    let chunk = json!({
        "id": "chatcmpl-123", "object": "chat.completion.chunk", "created": 1694268190,
        "model": model, "choices": [],
        "usage": {"prompt_tokens": 82, "completion_tokens": 17, "total_tokens": 99,
                  "prompt_tokens_details": {"cached_tokens": 64}}
    });
    format!("data: {chunk}\n\n")
}

pub fn o_done() -> String {
    "data: [DONE]\n\n".to_string()
}

/// A tool-call fragment for `tool_calls[index]`; the first one carries id and name.
pub fn o_tool_delta(model: &str, index: u64, head: Option<(&str, &str)>, args: &str) -> String {
    let mut call = json!({"index": index, "function": {"arguments": args}});
    if let Some((id, name)) = head {
        call["id"] = json!(id);
        call["type"] = json!("function");
        call["function"]["name"] = json!(name);
    }
    o_chunk(model, json!({"tool_calls": [call]}), None)
}
