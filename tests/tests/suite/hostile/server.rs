//! The hostile model provider: a loopback axum server speaking the Anthropic Messages API
//! (`POST /v1/messages`) and OpenAI chat completions (`POST /v1/chat/completions`), driven by
//! a script of [`Step`]s per conversation.
//!
//! Guarantees:
//! - Every request is recorded (headers, parsed body, which conversation, and whether it was
//!   valid) before it is answered.
//! - Every request is checked with [`super::validate`] and the reasoning rules of
//!   [`super::thinking_rules`]; an invalid one is answered 400
//!   `invalid_request_error` with the rule it broke, as the real API would, and takes no step.
//! - A conversation is keyed by a string the test registers (put it in the run's prompt): a
//!   request belongs to the conversation whose key occurs in its first user message. After a
//!   compaction that message is the summary, so a scripted summary must repeat the key.
//! - Each valid request takes the next step of its conversation; a [`Step::Down`] answers 529
//!   until its gate opens. A request with no step left, or no conversation, is answered 400
//!   and counted as invalid, so a runaway loop fails its test instead of passing silently.
//! - The server stops when the [`Hostile`] handle is dropped.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::post;
use serde_json::Value;

use super::script::{Step, Wire, error, render};
use super::{thinking_rules, validate};

/// One request as the fake received it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub wire: Wire,
    pub headers: HeaderMap,
    pub body: Value,
    /// The key of the conversation it belonged to.
    pub conversation: Option<String>,
    /// Why it was refused with a 400, if it was.
    pub invalid: Option<String>,
}

impl Recorded {
    /// The text of the newest user message (Anthropic) or of the last message (OpenAI).
    pub fn last_user_text(&self) -> String {
        let messages = self.body["messages"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let last = messages.last().cloned().unwrap_or(Value::Null);
        text_of(&last)
    }

    /// Every tool call id in the request's history, in order.
    pub fn tool_use_ids(&self) -> Vec<String> {
        let messages = self.body["messages"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let mut ids = Vec::new();
        for m in &messages {
            match self.wire {
                Wire::Anthropic => {
                    for b in m["content"].as_array().into_iter().flatten() {
                        if b["type"] == "tool_use" {
                            ids.push(b["id"].as_str().unwrap_or_default().to_string());
                        }
                    }
                }
                Wire::OpenAi => {
                    for c in m["tool_calls"].as_array().into_iter().flatten() {
                        ids.push(c["id"].as_str().unwrap_or_default().to_string());
                    }
                }
            }
        }
        ids
    }

    /// The tool results in the request's history: (call id, content, is_error).
    pub fn tool_results(&self) -> Vec<(String, String, bool)> {
        let messages = self.body["messages"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let mut out = Vec::new();
        for m in &messages {
            match self.wire {
                Wire::Anthropic => {
                    for b in m["content"].as_array().into_iter().flatten() {
                        if b["type"] == "tool_result" {
                            out.push((
                                b["tool_use_id"].as_str().unwrap_or_default().to_string(),
                                text_of(&serde_json::json!({"content": b["content"]})),
                                b["is_error"].as_bool().unwrap_or(false),
                            ));
                        }
                    }
                }
                Wire::OpenAi => {
                    if m["role"] == "tool" {
                        let content = m["content"].as_str().unwrap_or_default().to_string();
                        out.push((
                            m["tool_call_id"].as_str().unwrap_or_default().to_string(),
                            content.clone(),
                            content.starts_with("Error: "),
                        ));
                    }
                }
            }
        }
        out
    }
}

/// The text of a message's content (a string, or its text blocks joined).
fn text_of(message: &Value) -> String {
    match &message["content"] {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

#[derive(Default)]
struct Inner {
    scripts: Vec<(String, VecDeque<Step>)>,
    requests: Vec<Recorded>,
}

#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Inner>>);

/// A running hostile provider. Dropping it stops the server.
pub struct Hostile {
    shared: Shared,
    addr: std::net::SocketAddr,
    task: tokio::task::AbortHandle,
}

impl Drop for Hostile {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Hostile {
    /// Starts a server on a free loopback port.
    pub async fn start() -> Hostile {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Shared::default();
        let app = Router::new()
            .route("/v1/messages", post(anthropic))
            .route("/v1/chat/completions", post(openai))
            .with_state(shared.clone());
        let task = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Hostile {
            shared,
            addr,
            task: task.abort_handle(),
        }
    }

    /// The `base_url` for a provider of `wire`.
    pub fn base_url(&self, wire: Wire) -> String {
        match wire {
            Wire::Anthropic => format!("http://{}", self.addr),
            Wire::OpenAi => format!("http://{}/v1", self.addr),
        }
    }

    /// Registers the script of the conversation whose first user message contains `key`.
    pub fn script(&self, key: &str, steps: Vec<Step>) {
        let mut inner = self.shared.0.lock().unwrap();
        assert!(
            inner.scripts.iter().all(|(k, _)| k != key),
            "conversation {key} scripted twice"
        );
        inner.scripts.push((key.to_string(), steps.into()));
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.0.lock().unwrap().requests.clone()
    }

    pub fn request_count(&self) -> usize {
        self.shared.0.lock().unwrap().requests.len()
    }

    /// Why each refused request was refused.
    pub fn invalid(&self) -> Vec<String> {
        self.requests()
            .into_iter()
            .filter_map(|r| r.invalid)
            .collect()
    }

    /// How many steps of `key`'s script are left.
    pub fn steps_left(&self, key: &str) -> usize {
        let inner = self.shared.0.lock().unwrap();
        inner
            .scripts
            .iter()
            .find(|(k, _)| k == key)
            .map_or(0, |(_, s)| s.len())
    }
}

async fn anthropic(State(shared): State<Shared>, headers: HeaderMap, body: String) -> Response {
    answer(Wire::Anthropic, shared, headers, body)
}

async fn openai(State(shared): State<Shared>, headers: HeaderMap, body: String) -> Response {
    answer(Wire::OpenAi, shared, headers, body)
}

/// The conversation key of a request: the registered key found in its first user message.
fn conversation(wire: Wire, body: &Value, keys: &[&str]) -> Option<String> {
    let messages = body["messages"].as_array()?;
    let first = match wire {
        Wire::Anthropic => messages.first()?,
        Wire::OpenAi => messages.iter().find(|m| m["role"] == "user")?,
    };
    let text = text_of(first);
    keys.iter()
        .filter(|k| text.contains(**k))
        .max_by_key(|k| k.len())
        .map(|k| k.to_string())
}

fn answer(wire: Wire, shared: Shared, headers: HeaderMap, raw: String) -> Response {
    let refuse = |msg: &str| error(wire, 400, "invalid_request_error", msg, None);
    let mut inner = shared.0.lock().unwrap();
    let body: Value = match serde_json::from_str(&raw) {
        Ok(v) => v,
        Err(e) => {
            let msg = format!("the request body is not valid JSON: {e}");
            inner.requests.push(Recorded {
                wire,
                headers,
                body: Value::String(raw),
                conversation: None,
                invalid: Some(msg.clone()),
            });
            return refuse(&msg);
        }
    };
    let checked = match wire {
        Wire::Anthropic => {
            validate::anthropic(&body).and_then(|()| thinking_rules::anthropic(&body))
        }
        Wire::OpenAi => validate::openai(&body).and_then(|()| thinking_rules::deepseek(&body)),
    };
    let keys: Vec<&str> = inner.scripts.iter().map(|(k, _)| k.as_str()).collect();
    let key = conversation(wire, &body, &keys);
    let stream = body["stream"] == true;
    let model = body["model"].as_str().unwrap_or_default().to_string();
    let n = inner.requests.len() + 1;
    let mut record = Recorded {
        wire,
        headers,
        body,
        conversation: key.clone(),
        invalid: checked.err(),
    };
    if let Some(msg) = record.invalid.clone() {
        inner.requests.push(record);
        return refuse(&msg);
    }
    let Some(key) = key else {
        let msg = "hostile fake: no scripted conversation's key is in the first user message";
        record.invalid = Some(msg.into());
        inner.requests.push(record);
        return refuse(msg);
    };
    inner.requests.push(record);
    let steps = &mut inner
        .scripts
        .iter_mut()
        .find(|(k, _)| *k == key)
        .expect("the key came from the scripts")
        .1;
    if let Some(Step::Down(gate)) = steps.front() {
        if !gate.is_open() {
            return render(wire, &Step::Down(gate.clone()), &model, stream, n);
        }
        steps.pop_front();
    }
    match steps.pop_front() {
        Some(step) => render(wire, &step, &model, stream, n),
        None => {
            let msg = format!("hostile fake: the script of {key} has no step left for request {n}");
            inner.requests.last_mut().unwrap().invalid = Some(msg.clone());
            refuse(&msg)
        }
    }
}
