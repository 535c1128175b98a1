//! Tool-call identity belongs to the runtime (issue 13, items 1 and 2): duplicate ids in one
//! reply run each call once and the history sent back stays valid; missing or reused provider
//! ids never make two calls share an idempotency key — for command tools and for
//! `http_request`'s `Idempotency-Key` header.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use nightshift_tests::{TestDb, on_both_backends};
use serde_json::json;

use super::daemon::{Daemon, Setup, describe, ledger, ledger_tool};
use super::script::{Wire, call, calls, text};
use super::server::Hostile;
use super::{assert_all_valid, assert_succeeded, settle};

on_both_backends! {
    duplicate_tool_use_ids_in_one_anthropic_reply_run_each_call_once => duplicate_ids_anthropic;
    duplicate_tool_call_ids_in_one_openai_reply_run_each_call_once => duplicate_ids_openai;
    omitted_openai_tool_call_ids_get_distinct_idempotency_keys_across_turns => omitted_ids_openai;
    a_reused_anthropic_tool_use_id_gets_distinct_idempotency_keys_across_turns => reused_id_anthropic;
    http_request_posts_with_one_reused_provider_id_send_distinct_idempotency_keys => reused_id_http;
}

/// A reply with two calls of `pay` under one id, then text: each call executes exactly once,
/// the next request answers two distinct ids once each, and the log stays small.
async fn duplicate_ids(db: &TestDb, wire: Wire, stream: bool) {
    let key = "[dup-ids] Pay 5 and then 7.";
    let hostile = Hostile::start().await;
    hostile.script(
        key,
        vec![
            calls(vec![
                call(Some("toolu_dup"), "pay", json!({"amount": 5})),
                call(Some("toolu_dup"), "pay", json!({"amount": 7})),
            ]),
            text("Paid twice."),
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let book = dir.path().join("ledger");
    let mut setup = Setup::new(wire, stream);
    setup.tools = vec!["pay".into()];
    setup.command_tools = ledger_tool("pay", &book, None);
    setup.sandbox_write.push(dir.path().to_path_buf());
    let d = Daemon::start(db, &hostile, setup).await;
    let run_id = d.enqueue(key, 3).await;
    let (run, events) = settle(&d, &run_id, |ev| ev.len() >= 30 || ledger(&book).len() > 2).await;

    let lines = ledger(&book);
    assert_eq!(
        lines.len(),
        2,
        "each of the two calls executed exactly once: {lines:#?}; {}",
        describe(&run, &events)
    );
    let ids: BTreeSet<&str> = lines.iter().map(|l| l.call_id.as_str()).collect();
    assert_eq!(ids.len(), 2, "two distinct call ids: {lines:#?}");
    let inputs: BTreeSet<&str> = lines.iter().map(|l| l.input.as_str()).collect();
    assert_eq!(
        inputs,
        BTreeSet::from([r#"{"amount":5}"#, r#"{"amount":7}"#]),
        "both calls ran with their own input"
    );
    assert!(
        events.len() < 30,
        "the log is bounded: {}",
        describe(&run, &events)
    );
    assert_all_valid(&hostile);
    let requests = hostile.requests();
    assert!(requests.len() >= 2, "{}", describe(&run, &events));
    let next = &requests[1];
    let uses = next.tool_use_ids();
    let used: BTreeSet<&String> = uses.iter().collect();
    assert_eq!(
        (uses.len(), used.len()),
        (2, 2),
        "two distinct tool_use ids sent back: {uses:?}"
    );
    let answered: Vec<String> = next.tool_results().into_iter().map(|r| r.0).collect();
    let mut sorted_answers = answered.clone();
    sorted_answers.sort();
    let mut sorted_uses = uses.clone();
    sorted_uses.sort();
    assert_eq!(
        sorted_answers, sorted_uses,
        "each tool_use answered exactly once"
    );
    assert_succeeded(&run, &events, "Paid twice.");
}

async fn duplicate_ids_anthropic(db: &TestDb) {
    duplicate_ids(db, Wire::Anthropic, true).await;
}

async fn duplicate_ids_openai(db: &TestDb) {
    duplicate_ids(db, Wire::OpenAi, false).await;
}

/// Two turns, each one `pay` call with the provider's id `id` (None: omitted): the two
/// executions carry different idempotency keys and call ids.
async fn same_provider_id_in_two_turns(db: &TestDb, wire: Wire, stream: bool, id: Option<&str>) {
    let key = "[reused-ids] Pay 5, then pay 7.";
    let hostile = Hostile::start().await;
    hostile.script(
        key,
        vec![
            calls(vec![call(id, "pay", json!({"amount": 5}))]),
            calls(vec![call(id, "pay", json!({"amount": 7}))]),
            text("Paid 5 and 7."),
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let book = dir.path().join("ledger");
    let mut setup = Setup::new(wire, stream);
    setup.tools = vec!["pay".into()];
    setup.command_tools = ledger_tool("pay", &book, None);
    setup.sandbox_write.push(dir.path().to_path_buf());
    let d = Daemon::start(db, &hostile, setup).await;
    let run_id = d.enqueue(key, 3).await;
    let (run, events) = settle(&d, &run_id, |ev| ev.len() >= 40 || ledger(&book).len() > 2).await;

    let lines = ledger(&book);
    assert_eq!(
        lines.iter().map(|l| l.input.as_str()).collect::<Vec<_>>(),
        [r#"{"amount":5}"#, r#"{"amount":7}"#],
        "one execution per turn: {lines:#?}; {}",
        describe(&run, &events)
    );
    assert_ne!(
        lines[0].idempotency_key, lines[1].idempotency_key,
        "two different payments never share an idempotency key"
    );
    assert_ne!(lines[0].call_id, lines[1].call_id, "nor a call id");
    assert_all_valid(&hostile);
    assert_succeeded(&run, &events, "Paid 5 and 7.");
}

async fn omitted_ids_openai(db: &TestDb) {
    same_provider_id_in_two_turns(db, Wire::OpenAi, true, None).await;
}

async fn reused_id_anthropic(db: &TestDb) {
    same_provider_id_in_two_turns(db, Wire::Anthropic, false, Some("toolu_same")).await;
}

/// One POST the payment receiver saw: its Idempotency-Key and body.
type Post = (Option<String>, String);

/// What the payment receiver saw, in order.
#[derive(Clone, Default)]
struct Received(Arc<Mutex<Vec<Post>>>);

async fn receive(State(r): State<Received>, headers: HeaderMap, body: String) -> &'static str {
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    r.0.lock().unwrap().push((key, body));
    "accepted"
}

async fn reused_id_http(db: &TestDb) {
    let received = Received::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new()
        .route("/pay", post(receive))
        .with_state(received.clone());
    let receiver = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let key = "[reused-http] POST 5, then POST 7.";
    let url = format!("http://{addr}/pay");
    let post = |amount: &str| {
        call(
            Some("toolu_same"),
            "http_request",
            json!({"method": "POST", "url": url, "body": format!("amount={amount}")}),
        )
    };
    let hostile = Hostile::start().await;
    hostile.script(
        key,
        vec![
            calls(vec![post("5")]),
            calls(vec![post("7")]),
            text("Posted both."),
        ],
    );
    let mut setup = Setup::new(Wire::Anthropic, true);
    setup.tools = vec!["http_request".into()];
    setup.allow = vec![addr.to_string()];
    let d = Daemon::start(db, &hostile, setup).await;
    let run_id = d.enqueue(key, 3).await;
    let (run, events) = settle(&d, &run_id, |ev| ev.len() >= 40).await;

    let seen = received.0.lock().unwrap().clone();
    assert_eq!(
        seen.iter().map(|(_, b)| b.as_str()).collect::<Vec<_>>(),
        ["amount=5", "amount=7"],
        "the receiver got each POST once: {}",
        describe(&run, &events)
    );
    let keys: Vec<&str> = seen
        .iter()
        .map(|(k, _)| k.as_deref().expect("an Idempotency-Key on every POST"))
        .collect();
    assert_ne!(
        keys[0], keys[1],
        "two different POSTs carry two different Idempotency-Keys"
    );
    assert_all_valid(&hostile);
    assert_succeeded(&run, &events, "Posted both.");
    receiver.abort();
}
