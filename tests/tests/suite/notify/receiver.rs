//! A webhook receiver for the notification tests: a real HTTP server on loopback that checks
//! every signature itself (its own HMAC, not the product's), records what arrived, and
//! answers as its script says.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::Value;
use sha2::Sha256;

/// How the receiver answers one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    Status(u16),
    /// Never answers (the sender times out or dies waiting).
    Hang,
}

/// One request that arrived.
#[derive(Debug, Clone)]
pub(crate) struct Got {
    pub delivery_id: String,
    pub timestamp: String,
    pub event: String,
    pub signature_ok: bool,
    pub body: Value,
    pub answer: Answer,
}

struct Inner {
    secret: Vec<u8>,
    script: VecDeque<Answer>,
    then: Answer,
    got: Vec<Got>,
}

pub(crate) struct Receiver {
    pub url: String,
    inner: Arc<Mutex<Inner>>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// Whether `header` is `sha256=<hex>` of HMAC-SHA256(secret, body), checked in constant time.
pub(crate) fn verify(secret: &[u8], body: &[u8], header: &str) -> bool {
    let Some(hex_sig) = header.strip_prefix("sha256=") else {
        return false;
    };
    let Ok(sig) = hex::decode(hex_sig) else {
        return false;
    };
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(secret).unwrap();
    mac.update(body);
    mac.verify_slice(&sig).is_ok()
}

async fn handle(
    State(inner): State<Arc<Mutex<Inner>>>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let answer = {
        let mut inner = inner.lock().unwrap();
        let answer = inner.script.pop_front().unwrap_or(inner.then);
        let got = Got {
            delivery_id: header("x-nightshift-delivery"),
            timestamp: header("x-nightshift-timestamp"),
            event: header("x-nightshift-event"),
            signature_ok: verify(&inner.secret, &body, &header("x-nightshift-signature-256")),
            body: serde_json::from_slice(&body).unwrap_or(Value::Null),
            answer,
        };
        inner.got.push(got);
        answer
    };
    match answer {
        Answer::Status(code) => StatusCode::from_u16(code).unwrap(),
        Answer::Hang => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            StatusCode::OK
        }
    }
}

impl Receiver {
    /// A receiver on a fresh loopback port answering `script` in order, then `then`.
    pub(crate) async fn start(secret: &str, script: Vec<Answer>, then: Answer) -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::on(listener, secret, script, then)
    }

    /// A receiver on `listener`.
    pub(crate) fn on(
        listener: tokio::net::TcpListener,
        secret: &str,
        script: Vec<Answer>,
        then: Answer,
    ) -> Receiver {
        let url = format!("http://{}/hooks/nightshift", listener.local_addr().unwrap());
        let inner = Arc::new(Mutex::new(Inner {
            secret: secret.as_bytes().to_vec(),
            script: script.into(),
            then,
            got: Vec::new(),
        }));
        let app = axum::Router::new()
            .route("/hooks/nightshift", post(handle))
            .with_state(inner.clone());
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Receiver { url, inner, server }
    }

    /// From now on, answer `then` (after what is left of the script).
    pub(crate) fn answer_from_now(&self, then: Answer) {
        self.inner.lock().unwrap().then = then;
    }

    /// Everything that arrived, in order.
    pub(crate) fn got(&self) -> Vec<Got> {
        self.inner.lock().unwrap().got.clone()
    }

    /// What arrived and was answered 2xx.
    pub(crate) fn accepted(&self) -> Vec<Got> {
        self.got()
            .into_iter()
            .filter(|g| matches!(g.answer, Answer::Status(c) if (200..300).contains(&c)))
            .collect()
    }
}
