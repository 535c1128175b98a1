//! A fake model-provider HTTP server on 127.0.0.1:0 for the integration tests.
//!
//! Each test queues the answers the server gives, in order ([`Canned`]): JSON bodies with any
//! status and headers, server-sent-event streams that end cleanly or break the connection
//! mid-way, answers held back until the test releases them, or no answer at all. Every
//! request is recorded (path, headers, body bytes, arrival time). A request that finds no
//! canned answer gets a 500 that names the problem, so a test that sends more requests than
//! it expects fails loudly.

#![allow(dead_code)]

pub mod wire;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use futures::StreamExt;
use serde_json::Value;
use tokio::sync::{Notify, watch};

/// One answer the server gives.
pub enum Canned {
    Json {
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
    },
    Sse {
        headers: Vec<(String, String)>,
        chunks: Vec<String>,
        /// Break the connection after the last chunk instead of ending the body.
        abort: bool,
    },
    /// Never answers.
    Hang,
    /// Answers with the inner response once the `Notify` is notified.
    Gated(Arc<Notify>, Box<Canned>),
}

impl Canned {
    pub fn json(status: u16, body: &Value) -> Self {
        Canned::Json {
            status,
            headers: Vec::new(),
            body: body.to_string(),
        }
    }

    pub fn raw(status: u16, body: &str) -> Self {
        Canned::Json {
            status,
            headers: Vec::new(),
            body: body.to_string(),
        }
    }

    pub fn sse(chunks: Vec<String>) -> Self {
        Canned::Sse {
            headers: Vec::new(),
            chunks,
            abort: false,
        }
    }

    /// A stream that sends `chunks` and then drops the connection.
    pub fn sse_abort(chunks: Vec<String>) -> Self {
        Canned::Sse {
            headers: Vec::new(),
            chunks,
            abort: true,
        }
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        match &mut self {
            Canned::Json { headers, .. } | Canned::Sse { headers, .. } => {
                headers.push((name.to_string(), value.to_string()))
            }
            _ => panic!("only JSON and SSE answers have headers"),
        }
        self
    }

    pub fn gated(self, gate: &Arc<Notify>) -> Self {
        Canned::Gated(gate.clone(), Box::new(self))
    }
}

/// A request as the server received it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub path: String,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
    pub at: Instant,
}

impl Recorded {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("request body is JSON")
    }

    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_string())
    }
}

struct Shared {
    answers: Mutex<VecDeque<Canned>>,
    requests: Mutex<Vec<Recorded>>,
    count: watch::Sender<usize>,
}

/// The running server; it stops when dropped.
pub struct FakeServer {
    pub base_url: String,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeServer {
    pub async fn start() -> Self {
        let shared = Arc::new(Shared {
            answers: Mutex::new(VecDeque::new()),
            requests: Mutex::new(Vec::new()),
            count: watch::channel(0).0,
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().fallback(handle).with_state(shared.clone());
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        FakeServer {
            base_url: format!("http://{addr}"),
            shared,
            task,
        }
    }

    /// Queues answers, served in order.
    pub fn push(&self, answers: impl IntoIterator<Item = Canned>) {
        self.shared.answers.lock().unwrap().extend(answers);
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.requests.lock().unwrap().clone()
    }

    pub fn request_count(&self) -> usize {
        self.shared.requests.lock().unwrap().len()
    }

    /// Waits (at most 10 s) until at least `n` requests have arrived.
    pub async fn wait_for_requests(&self, n: usize) {
        let mut rx = self.shared.count.subscribe();
        tokio::time::timeout(Duration::from_secs(10), rx.wait_for(|c| *c >= n))
            .await
            .unwrap_or_else(|_| panic!("timed out waiting for {n} requests"))
            .unwrap();
    }
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    shared.requests.lock().unwrap().push(Recorded {
        path: uri.path().to_string(),
        headers,
        body: body.to_vec(),
        at: Instant::now(),
    });
    shared.count.send_modify(|c| *c += 1);
    let answer = shared.answers.lock().unwrap().pop_front();
    match answer {
        Some(a) => serve(a).await,
        None => Response::builder()
            .status(StatusCode::INTERNAL_SERVER_ERROR)
            .body(Body::from(
                "fake server: no canned answer left for this request",
            ))
            .unwrap(),
    }
}

async fn serve(answer: Canned) -> Response {
    match answer {
        Canned::Json {
            status,
            headers,
            body,
        } => {
            let mut b = Response::builder()
                .status(status)
                .header("content-type", "application/json");
            for (k, v) in headers {
                b = b.header(k, v);
            }
            b.body(Body::from(body)).unwrap()
        }
        Canned::Sse {
            headers,
            chunks,
            abort,
        } => {
            let mut b = Response::builder()
                .status(200)
                .header("content-type", "text/event-stream")
                .header("cache-control", "no-cache");
            for (k, v) in headers {
                b = b.header(k, v);
            }
            // Chunks go out one by one (a short pause lets each one be flushed), so a broken
            // stream really breaks after the client has read part of the reply.
            let body = futures::stream::iter(chunks)
                .then(|c| async move {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    Ok::<_, std::io::Error>(Bytes::from(c))
                })
                .chain(futures::stream::iter(abort.then(|| {
                    Err(std::io::Error::other("fake server breaks the connection"))
                })));
            b.body(Body::from_stream(body)).unwrap()
        }
        Canned::Hang => futures::future::pending().await,
        Canned::Gated(gate, inner) => {
            gate.notified().await;
            Box::pin(serve(*inner)).await
        }
    }
}

/// Polls `cond` every millisecond until it holds (at most 10 s). For state that has no
/// notification of its own, such as a client's pause after a 429.
pub async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}
