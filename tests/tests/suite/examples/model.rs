//! The fake model the examples run against: a fake of the Anthropic Messages API on
//! loopback that checks the key and decides each reply from the conversation it is sent (a
//! `Brain`), and what the tests read of the requests it was sent.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::post;
use serde_json::Value;

use super::MODEL_KEY;
use crate::hostile::script::{Step, Wire, error, render};
use crate::hostile::server::Recorded;

// ---- a fake Anthropic Messages API that answers from the conversation ----------------------

type Brain = dyn Fn(&Recorded) -> Step + Send + Sync;

#[derive(Clone)]
struct ModelState {
    brain: Arc<Brain>,
    requests: Arc<Mutex<Vec<Recorded>>>,
}

/// A model on loopback: `POST /v1/messages` (JSON or SSE, as asked) answered with what
/// `brain` makes of the request; a request without [`MODEL_KEY`] gets the API's 401.
pub(super) struct FakeModel {
    pub(super) base_url: String,
    requests: Arc<Mutex<Vec<Recorded>>>,
    task: tokio::task::AbortHandle,
}

impl Drop for FakeModel {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeModel {
    pub(super) async fn start(
        brain: impl Fn(&Recorded) -> Step + Send + Sync + 'static,
    ) -> FakeModel {
        let state = ModelState {
            brain: Arc::new(brain),
            requests: Arc::default(),
        };
        let requests = state.requests.clone();
        let app = Router::new()
            .route("/v1/messages", post(messages))
            .with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        FakeModel {
            base_url,
            requests,
            task: task.abort_handle(),
        }
    }

    pub(super) fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

async fn messages(State(state): State<ModelState>, headers: HeaderMap, body: String) -> Response {
    let body: Value = serde_json::from_str(&body).expect("the request is JSON");
    let key = headers.get("x-api-key").and_then(|v| v.to_str().ok());
    if key != Some(MODEL_KEY) {
        return error(
            Wire::Anthropic,
            401,
            "authentication_error",
            "invalid x-api-key",
            None,
        );
    }
    let request = Recorded {
        wire: Wire::Anthropic,
        headers,
        body,
        conversation: None,
        invalid: None,
    };
    let step = (state.brain)(&request);
    let stream = request.body["stream"] == true;
    let model = request.body["model"]
        .as_str()
        .unwrap_or("model")
        .to_string();
    let n = {
        let mut requests = state.requests.lock().unwrap();
        requests.push(request);
        requests.len()
    };
    render(Wire::Anthropic, &step, &model, stream, n)
}

/// How many replies the model has given in this conversation (its turn number).
pub(super) fn turn(req: &Recorded) -> usize {
    req.body["messages"]
        .as_array()
        .map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count())
}

/// The text of the conversation's first user message (the run's prompt).
pub(super) fn prompt(req: &Recorded) -> String {
    let first = &req.body["messages"][0]["content"];
    match first {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks.iter().filter_map(|b| b["text"].as_str()).collect(),
        _ => String::new(),
    }
}

/// The result of the tool call `id` in the conversation.
pub(super) fn result_of(req: &Recorded, id: &str) -> (String, bool) {
    req.tool_results()
        .into_iter()
        .find(|(call, _, _)| call == id)
        .map(|(_, content, is_error)| (content, is_error))
        .unwrap_or_else(|| panic!("no result for {id} in the conversation"))
}

/// The tool names the request offers, sorted.
pub(super) fn offered_tools(req: &Recorded) -> Vec<String> {
    let mut names: Vec<String> = req.body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str().map(str::to_string))
        .collect();
    names.sort();
    names
}

pub(super) fn sorted(names: &[String]) -> Vec<String> {
    let mut names = names.to_vec();
    names.sort();
    names
}
