//! `ModelClient` over the Anthropic provider and a fake server: retries, the shared 429
//! pause, the circuit breaker, fallback, cancellation and the registry. Timing knobs are in
//! milliseconds; waits are on the server's request count wherever a condition exists.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::wire::*;
use common::{Canned, FakeServer, eventually};
use nightshift_llm::{
    AnthropicOptions, AnthropicProvider, ApiKey, BreakerState, CancellationToken, ClientConfig,
    ClientRegistry, ContentBlock, HttpTimeouts, ModelClient, ProviderConfig, ProviderError,
    ProviderKind, send_with_fallback,
};
use serde_json::json;

fn cfg() -> ClientConfig {
    ClientConfig {
        max_attempts: 3,
        base_delay: Duration::from_millis(5),
        max_delay: Duration::from_millis(20),
        max_retry_after: Duration::from_secs(5),
        jitter: false,
        failure_threshold: 100,
        cooldown: Duration::from_millis(200),
    }
}

fn client(server: &FakeServer, model: &str, cfg: ClientConfig) -> Arc<ModelClient> {
    let provider = AnthropicProvider::new(AnthropicOptions {
        base_url: server.base_url.clone(),
        api_key: ApiKey::new("sk-ant-test"),
        stream: true,
        timeouts: HttpTimeouts::default(),
    })
    .unwrap();
    Arc::new(ModelClient::new(Arc::new(provider), model, cfg))
}

fn ok(model: &str) -> Canned {
    Canned::json(
        200,
        &a_message(model, json!([{"type": "text", "text": "done"}]), "end_turn"),
    )
}

fn status(code: u16, kind: &str, message: &str) -> Canned {
    Canned::json(code, &a_error(kind, message))
}

async fn call(c: &ModelClient) -> Result<nightshift_llm::ModelResponse, ProviderError> {
    c.send(&request(c.model()), &CancellationToken::new()).await
}

#[tokio::test]
async fn a_429_pauses_every_caller_until_retry_after() {
    let server = FakeServer::start().await;
    server.push([
        status(429, "rate_limit_error", "slow down").header("retry-after", "1"),
        ok("m"),
        ok("m"),
    ]);
    let c = client(&server, "m", cfg());
    let first = tokio::spawn({
        let c = c.clone();
        async move { call(&c).await }
    });
    eventually("the client is paused", || c.paused_for().is_some()).await;
    // A caller that arrives during the pause waits for it too.
    let second = tokio::spawn({
        let c = c.clone();
        async move { call(&c).await }
    });
    assert_eq!(first.await.unwrap().unwrap().message().text(), "done");
    assert_eq!(second.await.unwrap().unwrap().message().text(), "done");

    let reqs = server.requests();
    assert_eq!(reqs.len(), 3);
    for later in &reqs[1..] {
        let waited = later.at.duration_since(reqs[0].at);
        assert!(
            waited >= Duration::from_millis(990),
            "a request went out after {waited:?}"
        );
    }
}

#[tokio::test]
async fn overloaded_529_is_retried_honouring_retry_after_ms() {
    let server = FakeServer::start().await;
    server.push([
        status(529, "overloaded_error", "Overloaded").header("retry-after-ms", "300"),
        ok("m"),
    ]);
    let resp = call(&client(&server, "m", cfg())).await.unwrap();
    assert_eq!(resp.message().text(), "done");
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    assert!(reqs[1].at.duration_since(reqs[0].at) >= Duration::from_millis(300));
}

#[tokio::test]
async fn a_stream_broken_mid_tool_input_is_retried_and_only_the_whole_call_returned() {
    let server = FakeServer::start().await;
    server.push([
        Canned::sse_abort(a_stream_head_with_tool("m")),
        Canned::sse(a_stream_with_tool("m")),
    ]);
    let resp = call(&client(&server, "m", cfg())).await.unwrap();
    assert_eq!(server.request_count(), 2);
    let calls: Vec<_> = resp
        .content
        .iter()
        .filter(|b| matches!(b, ContentBlock::ToolUse { .. }))
        .collect();
    assert_eq!(calls.len(), 1);
    assert!(matches!(calls[0], ContentBlock::ToolUse { input, .. }
        if *input == json!({"location": "San Francisco, CA", "unit": "fahrenheit"})));
}

#[tokio::test]
async fn giving_up_returns_the_last_real_error() {
    let server = FakeServer::start().await;
    server.push([
        status(503, "api_error", "first"),
        status(500, "api_error", "second"),
        status(502, "api_error", "third"),
    ]);
    let err = call(&client(&server, "m", cfg())).await.unwrap_err();
    assert!(
        matches!(&err, ProviderError::Http { status: 502, message, .. } if message == "third"),
        "{err:?}"
    );
    assert_eq!(server.request_count(), 3);
}

#[tokio::test]
async fn every_failed_attempt_is_told_to_the_observer_with_its_kind() {
    let server = FakeServer::start().await;
    server.push([
        status(429, "rate_limit_error", "slow down").header("retry-after-ms", "10"),
        status(529, "overloaded_error", "Overloaded"),
        ok("m"),
    ]);
    let c = client(&server, "m", cfg());
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    assert!(c.on_failed_attempt({
        let seen = seen.clone();
        move |e| seen.lock().unwrap().push(e.kind())
    }));
    assert!(
        !c.on_failed_attempt(|_| panic!("a second observer is not installed")),
        "the first observer stays"
    );
    assert_eq!(call(&c).await.unwrap().message().text(), "done");
    assert_eq!(
        *seen.lock().unwrap(),
        [Some("rate_limited"), Some("overloaded")],
        "one per failed attempt, none for the success"
    );
}

#[tokio::test]
async fn a_retry_after_longer_than_the_cap_is_returned_not_waited() {
    let server = FakeServer::start().await;
    server.push([
        status(429, "rate_limit_error", "come back tomorrow").header("retry-after", "86400")
    ]);
    let started = Instant::now();
    let err = call(&client(&server, "m", cfg())).await.unwrap_err();
    assert_eq!(err.status(), Some(429));
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn a_401_fails_at_once_with_the_providers_message_and_no_fallback() {
    let first = FakeServer::start().await;
    let second = FakeServer::start().await;
    first.push([status(401, "authentication_error", "invalid x-api-key")]);
    second.push([ok("b")]);
    let chain = [client(&first, "a", cfg()), client(&second, "b", cfg())];
    let err = send_with_fallback(&chain, &request("a"), &CancellationToken::new())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ProviderError::Http { status: 401, message, .. } if message == "invalid x-api-key"),
        "{err:?}"
    );
    assert_eq!(first.request_count(), 1, "no retry");
    assert_eq!(second.request_count(), 0, "no fallback");
}

#[tokio::test]
async fn breaker_opens_after_k_failures_fails_fast_and_lets_exactly_one_probe_through() {
    let server = FakeServer::start().await;
    let config = ClientConfig {
        max_attempts: 1,
        failure_threshold: 3,
        ..cfg()
    };
    let c = client(&server, "m", config);
    server.push((0..3).map(|_| status(500, "api_error", "boom")));
    for _ in 0..3 {
        let err = call(&c).await.unwrap_err();
        assert_eq!(err.root_cause().status(), Some(500), "{err:?}");
    }
    let BreakerState::Open { retry_in } = c.breaker_state() else {
        panic!("breaker should be open: {:?}", c.breaker_state())
    };
    let err = call(&c).await.unwrap_err();
    assert!(matches!(err, ProviderError::CircuitOpen { .. }), "{err:?}");
    assert_eq!(
        server.request_count(),
        3,
        "an open circuit does not touch the network"
    );

    // The cooldown is a span of time; nothing else to wait on.
    tokio::time::sleep(retry_in + Duration::from_millis(10)).await;
    let gate = Arc::new(tokio::sync::Notify::new());
    server.push([ok("m").gated(&gate), ok("m")]);
    let probe = tokio::spawn({
        let c = c.clone();
        async move { call(&c).await }
    });
    server.wait_for_requests(4).await;
    assert_eq!(
        c.breaker_state(),
        BreakerState::HalfOpen {
            probe_in_flight: true
        }
    );
    let others = futures::future::join_all((0..3).map(|_| call(&c))).await;
    for r in others {
        assert!(matches!(r, Err(ProviderError::CircuitOpen { .. })), "{r:?}");
    }
    assert_eq!(server.request_count(), 4, "only the probe went out");
    gate.notify_one();
    probe.await.unwrap().unwrap();
    assert_eq!(
        c.breaker_state(),
        BreakerState::Closed {
            consecutive_failures: 0
        }
    );
    call(&c).await.unwrap();
    assert_eq!(server.request_count(), 5);
}

#[tokio::test]
async fn a_failed_probe_reopens_the_circuit_and_4xx_or_429_never_open_it() {
    let server = FakeServer::start().await;
    let config = ClientConfig {
        max_attempts: 1,
        failure_threshold: 2,
        ..cfg()
    };
    let c = client(&server, "m", config);
    server.push([
        status(400, "invalid_request_error", "bad"),
        status(429, "rate_limit_error", "slow").header("retry-after-ms", "1"),
        status(403, "permission_error", "no"),
        status(500, "api_error", "boom"),
        status(529, "overloaded_error", "Overloaded"),
        status(503, "api_error", "still down"),
    ]);
    for _ in 0..3 {
        call(&c).await.unwrap_err();
    }
    assert_eq!(
        c.breaker_state(),
        BreakerState::Closed {
            consecutive_failures: 0
        }
    );
    call(&c).await.unwrap_err();
    assert_eq!(
        c.breaker_state(),
        BreakerState::Closed {
            consecutive_failures: 1
        }
    );
    call(&c).await.unwrap_err();
    let BreakerState::Open { retry_in } = c.breaker_state() else {
        panic!("should be open")
    };
    tokio::time::sleep(retry_in + Duration::from_millis(10)).await;
    let err = call(&c).await.unwrap_err();
    assert!(matches!(err, ProviderError::CircuitOpen { .. }), "{err:?}");
    assert_eq!(err.root_cause().status(), Some(503), "the probe went out");
    let reopened = c.breaker_state();
    assert!(
        matches!(reopened, BreakerState::Open { .. }),
        "{reopened:?}"
    );
    assert!(matches!(
        call(&c).await,
        Err(ProviderError::CircuitOpen { .. })
    ));
    assert_eq!(server.request_count(), 6);
}

#[tokio::test]
async fn fallback_moves_on_after_retryable_failures_or_an_open_circuit_and_records_the_model() {
    let first = FakeServer::start().await;
    let second = FakeServer::start().await;
    first.push([
        status(529, "overloaded_error", "Overloaded"),
        status(529, "overloaded_error", "Overloaded"),
    ]);
    second.push([ok("model-b"), ok("model-b")]);
    let a = client(
        &first,
        "model-a",
        ClientConfig {
            max_attempts: 2,
            failure_threshold: 2,
            ..cfg()
        },
    );
    let chain = [a.clone(), client(&second, "model-b", cfg())];
    let resp = send_with_fallback(&chain, &request("model-a"), &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(resp.model, "model-b");
    assert_eq!(first.request_count(), 2);
    assert_eq!(second.requests()[0].json()["model"], "model-b");

    // Now model-a's circuit is open: the chain skips it without a request.
    assert!(matches!(a.breaker_state(), BreakerState::Open { .. }));
    let resp = send_with_fallback(&chain, &request("model-a"), &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(resp.model, "model-b");
    assert_eq!(first.request_count(), 2);
    assert_eq!(second.request_count(), 2);
}

/// Joins `task`, failing (rather than hanging) if it does not finish within 5 s.
async fn within_5s<T>(task: tokio::task::JoinHandle<T>) -> T {
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("cancelling did not stop the call")
        .unwrap()
}

#[tokio::test]
async fn cancellation_stops_a_slow_call_and_a_pause_within_a_second() {
    let server = FakeServer::start().await;
    server.push([Canned::Hang]);
    let c = client(&server, "m", cfg());
    let cancel = CancellationToken::new();
    let slow = tokio::spawn({
        let (c, cancel) = (c.clone(), cancel.clone());
        async move { c.send(&request("m"), &cancel).await }
    });
    server.wait_for_requests(1).await;
    let at = Instant::now();
    cancel.cancel();
    assert!(matches!(
        within_5s(slow).await,
        Err(ProviderError::Cancelled)
    ));
    assert!(at.elapsed() < Duration::from_secs(1));

    // A caller waiting out a 429 pause is cancelled as promptly.
    server.push([status(429, "rate_limit_error", "slow").header("retry-after", "4")]);
    let cancel = CancellationToken::new();
    let paused = tokio::spawn({
        let (c, cancel) = (c.clone(), cancel.clone());
        async move { c.send(&request("m"), &cancel).await }
    });
    eventually("the client is paused", || c.paused_for().is_some()).await;
    let at = Instant::now();
    cancel.cancel();
    assert!(matches!(
        within_5s(paused).await,
        Err(ProviderError::Cancelled)
    ));
    assert!(at.elapsed() < Duration::from_secs(1));
    assert_eq!(server.request_count(), 2);
}

#[tokio::test]
async fn the_registry_shares_one_client_per_key_and_exposes_rate_limits() {
    let server = FakeServer::start().await;
    server.push([ok("m").header("anthropic-ratelimit-requests-remaining", "41")]);
    let mut config = ProviderConfig::new(ProviderKind::Anthropic);
    config.base_url = Some(server.base_url.clone());
    config.api_key_env = Some("PATH".into()); // any variable that is set; tests cannot set one
    config.stream = false;
    let registry = ClientRegistry::new();
    let a = registry.client(&config, "m").unwrap();
    let again = registry.client(&config, "m").unwrap();
    let other = registry.client(&config, "other-model").unwrap();
    assert!(Arc::ptr_eq(&a, &again));
    assert!(!Arc::ptr_eq(&a, &other));
    assert_eq!(registry.len(), 2);

    assert_eq!(a.rate_limits(), None);
    call(&a).await.unwrap();
    assert_eq!(again.rate_limits().unwrap().requests_remaining, Some(41));
    let sent = &server.requests()[0];
    assert_eq!(sent.header("x-api-key"), std::env::var("PATH").ok());
    assert_eq!(sent.json()["stream"], false);
}

#[tokio::test]
async fn malformed_200s_are_retried_within_the_budget_then_succeed() {
    let server = FakeServer::start().await;
    server.push([
        Canned::raw(200, "{\"id\": \"msg_1\", \"content\": [tru"),
        Canned::sse(vec![
            a_message_start("m"),
            "event: content_block_delta\ndata: garbage from a proxy\n\n".into(),
        ]),
        Canned::sse(a_stream_with_tool("m")),
    ]);
    let resp = call(&client(&server, "m", cfg())).await.unwrap();
    assert_eq!(server.request_count(), 3);
    assert_eq!(resp.message().tool_uses().count(), 1);
}

#[tokio::test]
async fn malformed_200s_past_the_budget_give_up_with_what_was_wrong() {
    let server = FakeServer::start().await;
    server.push((0..3).map(|_| Canned::raw(200, "<html>proxy error</html>")));
    let err = call(&client(&server, "m", cfg())).await.unwrap_err();
    assert_eq!(server.request_count(), 3, "max_attempts is 3");
    assert!(
        matches!(&err, ProviderError::Malformed(m) if m.contains("not a valid message") && m.contains("<html>proxy error")),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_529_outage_opens_the_breaker_and_later_calls_name_http_529_and_its_message() {
    let server = FakeServer::start().await;
    let cooldown = Duration::from_secs(25);
    let config = ClientConfig {
        max_attempts: 5,
        failure_threshold: 5,
        cooldown,
        ..cfg()
    };
    let c = client(&server, "claude-x", config);
    server.push((0..5).map(|_| status(529, "overloaded_error", "Overloaded")));

    // The fifth failure opens the circuit: the call says so, with the real cause.
    let first = call(&c).await.unwrap_err();
    assert_eq!(server.request_count(), 5);
    assert!(
        matches!(first, ProviderError::CircuitOpen { .. }),
        "{first:?}"
    );
    assert_eq!(first.root_cause().status(), Some(529));

    // Later calls fail fast, without a request, and still lead with HTTP 529.
    let later = call(&c).await.unwrap_err();
    assert_eq!(
        server.request_count(),
        5,
        "an open circuit makes no request"
    );
    let text = later.to_string();
    assert!(
        text.starts_with(
            "model claude-x is unavailable: HTTP 529 overloaded_error: Overloaded \
             (circuit open; next probe in "
        ),
        "{text}"
    );
    let ProviderError::CircuitOpen {
        model,
        retry_in,
        last_error: Some(cause),
    } = &later
    else {
        panic!("expected an open circuit with its cause: {later:?}")
    };
    assert_eq!(model, "claude-x");
    assert!(
        *retry_in > Duration::ZERO && *retry_in <= cooldown,
        "{retry_in:?}"
    );
    assert_eq!(later.retry_hint(), Some(*retry_in));
    assert!(
        matches!(&**cause, ProviderError::Http { status: 529, error_type: Some(t), message, .. }
            if t == "overloaded_error" && message == "Overloaded"),
        "{cause:?}"
    );
    assert!(later.is_transient() && !later.is_retryable());
    assert_eq!(c.opened_by().and_then(|e| e.status()), Some(529));
    assert_eq!(c.last_failure().and_then(|e| e.status()), Some(529));
}

#[tokio::test]
async fn an_open_circuit_waits_out_a_longer_retry_after_before_probing() {
    let server = FakeServer::start().await;
    let config = ClientConfig {
        max_attempts: 1,
        failure_threshold: 1,
        ..cfg() // cooldown 200 ms, max_retry_after 5 s
    };
    let c = client(&server, "m", config);
    server.push([status(529, "overloaded_error", "Overloaded").header("retry-after", "4")]);
    let err = call(&c).await.unwrap_err();
    let hint = err
        .retry_hint()
        .expect("an open circuit says when to come back");
    assert!(
        hint > Duration::from_secs(1) && hint <= Duration::from_secs(4),
        "the probe waits for the provider's retry-after, not the 200 ms cooldown: {hint:?}"
    );
    assert_eq!(err.root_cause().retry_after(), Some(Duration::from_secs(4)));
}

#[tokio::test]
async fn a_success_clears_the_remembered_failure() {
    let server = FakeServer::start().await;
    server.push([status(503, "api_error", "down"), ok("m")]);
    let c = client(&server, "m", cfg());
    call(&c).await.unwrap();
    assert_eq!(server.request_count(), 2);
    assert!(c.last_failure().is_none());
    assert!(c.opened_by().is_none());
}
