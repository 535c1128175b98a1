//! The providers' rules for reasoning, as pure functions over a parsed request body, and the
//! signatures the hostile provider puts on the reasoning it hands out.
//!
//! Guarantees: [`anthropic`] and [`deepseek`] return `Err` with the message the real API sends
//! exactly when a body breaks one of the rules below, and `Ok` otherwise; they do no I/O.
//! What the fake hands out is self-verifying ([`sign`]): a thinking block's `signature`, a
//! redacted block's `data` and a DeepSeek `reasoning_content` each carry a digest of their
//! text, so a block that comes back altered by a single byte is refused as the real API
//! refuses a forged one.
//!
//! Anthropic Messages with `thinking` (from the extended-thinking docs): `budget_tokens` is at
//! least 1024 and below `max_tokens`; `temperature` is 1 or absent and `top_k` absent; every
//! `thinking` block's signature matches its text, every `redacted_thinking` block's data is
//! intact; a thinking block takes no `cache_control`; a `tool_use` block has only `type`,
//! `id`, `name`, `input` (and `cache_control`); and while a tool loop is open (the last message
//! carries `tool_result` blocks) the assistant message before it starts with a `thinking` or
//! `redacted_thinking` block.
//!
//! DeepSeek chat completions in thinking mode (`thinking.type` other than `disabled`): every
//! assistant message with `tool_calls` carries the `reasoning_content` it was given, unaltered.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// DeepSeek's answer when reasoning of a tool loop is missing.
pub const DEEPSEEK_MISSING: &str =
    "The reasoning_content in the thinking mode must be passed back to the API.";

/// A digest of `text` only the fake makes (hex, 16 bytes).
pub fn sign(text: &str) -> String {
    let digest = Sha256::digest(format!("hostile-fake-key:{text}").as_bytes());
    digest.iter().take(16).map(|b| format!("{b:02x}")).collect()
}

/// The `signature` of a thinking block with `thinking`.
pub fn signature(thinking: &str) -> String {
    format!("EqSig{}", sign(thinking))
}

/// The opaque `data` of a redacted thinking block standing for `secret`.
pub fn redacted_data(secret: &str) -> String {
    format!("EnC.{secret}.{}", sign(secret))
}

/// A DeepSeek `reasoning_content` with its thought and the fake's mark.
pub fn deepseek_reasoning(thought: &str) -> String {
    format!("{thought} [{}]", sign(thought))
}

fn deepseek_reasoning_intact(text: &str) -> bool {
    text.rsplit_once(" [")
        .and_then(|(thought, mark)| Some((thought, mark.strip_suffix(']')?)))
        .is_some_and(|(thought, mark)| mark == sign(thought))
}

fn redacted_intact(data: &str) -> bool {
    data.strip_prefix("EnC.")
        .and_then(|rest| rest.rsplit_once('.'))
        .is_some_and(|(secret, mark)| mark == sign(secret))
}

fn blocks(message: &Value) -> Vec<Value> {
    match &message["content"] {
        Value::Array(a) => a.clone(),
        Value::String(s) => vec![serde_json::json!({"type": "text", "text": s})],
        _ => Vec::new(),
    }
}

/// Checks the thinking rules of an Anthropic Messages request body.
pub fn anthropic(body: &Value) -> Result<(), String> {
    let thinking = &body["thinking"];
    let enabled = thinking["type"] == "enabled" || thinking["type"] == "adaptive";
    if thinking["type"] == "enabled" {
        let budget = thinking["budget_tokens"]
            .as_u64()
            .ok_or("thinking.enabled.budget_tokens: Field required")?;
        if budget < 1024 {
            return Err(
                "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
                    .into(),
            );
        }
        if body["max_tokens"].as_u64().is_none_or(|max| max <= budget) {
            return Err("`max_tokens` must be greater than `thinking.budget_tokens`. Please \
                        consult our documentation at \
                        https://docs.claude.com/en/docs/build-with-claude/extended-thinking#max-tokens-and-context-window-size"
                .into());
        }
    }
    if enabled {
        if body
            .get("temperature")
            .is_some_and(|t| t.as_f64() != Some(1.0))
        {
            return Err("`temperature` may only be set to 1 when thinking is enabled. Please \
                        consult our documentation at \
                        https://docs.claude.com/en/docs/build-with-claude/extended-thinking#feature-compatibility"
                .into());
        }
        if body.get("top_k").is_some() {
            return Err("`top_k` must be unset when thinking is enabled.".into());
        }
    }
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    for (i, m) in messages.iter().enumerate() {
        for (j, b) in blocks(m).iter().enumerate() {
            let at = format!("messages.{i}.content.{j}");
            match b["type"].as_str().unwrap_or_default() {
                "thinking" => {
                    let text = b["thinking"].as_str().unwrap_or_default();
                    if b["signature"].as_str() != Some(signature(text).as_str()) {
                        return Err(format!("{at}: Invalid `signature` in `thinking` block"));
                    }
                    if b.get("cache_control").is_some() {
                        return Err(format!(
                            "{at}.thinking.cache_control: Extra inputs are not permitted"
                        ));
                    }
                }
                "redacted_thinking" if !redacted_intact(b["data"].as_str().unwrap_or_default()) => {
                    return Err(format!("{at}: Invalid `data` in `redacted_thinking` block"));
                }
                "tool_use" => {
                    let known = ["type", "id", "name", "input", "cache_control"];
                    if let Some(extra) = b
                        .as_object()
                        .and_then(|o| o.keys().find(|k| !known.contains(&k.as_str())))
                    {
                        return Err(format!(
                            "{at}.tool_use.{extra}: Extra inputs are not permitted"
                        ));
                    }
                    if !b["input"].is_object() {
                        return Err(format!(
                            "{at}.tool_use.input: Input should be a valid dictionary"
                        ));
                    }
                }
                _ => {}
            }
        }
    }
    let Some(last) = messages.last() else {
        return Ok(());
    };
    let loop_open =
        last["role"] == "user" && blocks(last).iter().any(|b| b["type"] == "tool_result");
    if enabled && loop_open && messages.len() >= 2 {
        let i = messages.len() - 2;
        let first = blocks(&messages[i]).first().cloned().unwrap_or(Value::Null);
        let ty = first["type"].as_str().unwrap_or("nothing");
        if ty != "thinking" && ty != "redacted_thinking" {
            return Err(format!(
                "messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but \
                 found `{ty}`. When `thinking` is enabled, a final `assistant` message must \
                 start with a thinking block (preceeding the lastmost set of `tool_use` and \
                 `tool_result` blocks). We recommend you include thinking blocks from previous \
                 turns. To avoid this requirement, disable `thinking`. Please consult our \
                 documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
            ));
        }
    }
    Ok(())
}

/// Checks DeepSeek's thinking-mode rule of a chat completions request body.
pub fn deepseek(body: &Value) -> Result<(), String> {
    if body["thinking"]["type"] == "disabled" || body.get("thinking").is_none() {
        return Ok(());
    }
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    for m in &messages {
        let has_calls = m["tool_calls"].as_array().is_some_and(|c| !c.is_empty());
        if m["role"] != "assistant" || !has_calls {
            continue;
        }
        match m["reasoning_content"].as_str() {
            Some(text) if deepseek_reasoning_intact(text) => {}
            _ => return Err(DEEPSEEK_MISSING.into()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn body(messages: Vec<Value>) -> Value {
        json!({"model": "m", "max_tokens": 4096,
               "thinking": {"type": "enabled", "budget_tokens": 2048}, "messages": messages})
    }

    fn loop_with(first: Value) -> Value {
        body(vec![
            json!({"role": "user", "content": "go"}),
            json!({"role": "assistant", "content": [first,
                {"type": "tool_use", "id": "toolu_1", "name": "t", "input": {}}]}),
            json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]}),
        ])
    }

    #[test]
    fn anthropic_takes_intact_thinking_and_refuses_it_missing_or_altered() {
        let good = json!({"type": "thinking", "thinking": "plan", "signature": signature("plan")});
        anthropic(&loop_with(good.clone())).unwrap();
        let redacted = json!({"type": "redacted_thinking", "data": redacted_data("x")});
        anthropic(&loop_with(redacted)).unwrap();
        let err = anthropic(&loop_with(json!({"type": "text", "text": "hi"}))).unwrap_err();
        assert!(
            err.contains("Expected `thinking` or `redacted_thinking`"),
            "{err}"
        );
        let mut altered = good.clone();
        altered["thinking"] = json!("plan!");
        let err = anthropic(&loop_with(altered)).unwrap_err();
        assert!(err.contains("Invalid `signature`"), "{err}");
        let tampered = json!({"type": "redacted_thinking", "data": redacted_data("x") + "A"});
        assert!(
            anthropic(&loop_with(tampered))
                .unwrap_err()
                .contains("Invalid `data`")
        );
        let mut cached = good;
        cached["cache_control"] = json!({"type": "ephemeral"});
        assert!(
            anthropic(&loop_with(cached))
                .unwrap_err()
                .contains("cache_control")
        );
    }

    #[test]
    fn anthropic_refuses_bad_budgets_temperature_and_extra_tool_use_fields() {
        let mut b = body(vec![json!({"role": "user", "content": "go"})]);
        b["thinking"]["budget_tokens"] = json!(4096);
        assert!(anthropic(&b).unwrap_err().contains("must be greater than"));
        b["thinking"]["budget_tokens"] = json!(100);
        assert!(
            anthropic(&b)
                .unwrap_err()
                .contains("greater than or equal to 1024")
        );
        let mut b = body(vec![json!({"role": "user", "content": "go"})]);
        b["temperature"] = json!(0.2);
        assert!(anthropic(&b).unwrap_err().contains("`temperature`"));
        let extra = body(vec![
            json!({"role": "user", "content": "go"}),
            json!({"role": "assistant", "content": [
                {"type": "tool_use", "id": "t", "name": "n", "input": {}, "unparsed": "{"}]}),
        ]);
        assert!(anthropic(&extra).unwrap_err().contains("tool_use.unparsed"));
    }

    #[test]
    fn deepseek_wants_its_reasoning_back_in_every_tool_call_message() {
        let msgs = |reasoning: Option<String>| {
            let mut a = json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{}"}}]});
            if let Some(r) = reasoning {
                a["reasoning_content"] = json!(r);
            }
            json!({"model": "deepseek", "thinking": {"type": "enabled"}, "messages": [
                {"role": "user", "content": "go"}, a,
                {"role": "tool", "tool_call_id": "c1", "content": "ok"}]})
        };
        deepseek(&msgs(Some(deepseek_reasoning("use t")))).unwrap();
        assert_eq!(deepseek(&msgs(None)).unwrap_err(), DEEPSEEK_MISSING);
        let altered = deepseek_reasoning("use t").replace("use", "used");
        assert_eq!(
            deepseek(&msgs(Some(altered))).unwrap_err(),
            DEEPSEEK_MISSING
        );
        let mut off = msgs(None);
        off["thinking"]["type"] = json!("disabled");
        deepseek(&off).unwrap();
    }
}
