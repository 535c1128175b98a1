//! Listing runs over `GET /v1/runs`: the API's filters, pages, search and time range over
//! real HTTP, and its refusal of bad parameters. The store's listing (`Store::runs_page`) and
//! the queue overview are in the store's conformance suite
//! (`store-conformance/src/runs_list.rs`).

use std::time::Duration;

use nightshift_runner::api::{ApiState, router};
use nightshift_store::{Clock, NewRun, Store, Trigger};
use nightshift_tests::http::get_json;
use nightshift_tests::{TestDb, on_both_backends};
use reqwest::StatusCode;
use serde_json::Value;

on_both_backends! {
    the_api_lists_with_filters_and_refuses_bad_parameters => api;
}

async fn add(store: &Store, new: NewRun) -> String {
    store.enqueue(&new).await.unwrap().run_id
}

const TOKEN: &str = "list-token";

async fn api(db: &TestDb) {
    let (store, clock) = db.manual().await;
    let t0 = clock.now();
    let mut made = Vec::new();
    for i in 0..5 {
        let mut new = NewRun::new(if i % 2 == 0 { "helper" } else { "reviewer" }, "look");
        new.trigger = if i == 4 {
            Trigger::Webhook
        } else {
            Trigger::Api
        };
        made.push(add(&store, new).await);
        clock.advance(Duration::from_secs(60));
    }
    let state = ApiState {
        store: store.clone(),
        intake: nightshift_scheduler::Intake::new(store.clone(), ["helper", "reviewer"]),
        tokens: nightshift_runner::api_tokens::ApiTokens::single(TOKEN),
        hooks: nightshift_runner::hooks::none(),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        axum::serve(listener, router(state)).await.unwrap();
    });
    let http = nightshift_llm::http::build_client(nightshift_llm::HttpTimeouts::default()).unwrap();
    let get = |path: String| {
        let http = http.clone();
        let url = format!("{base}{path}");
        async move { get_json(&http, &url, TOKEN).await }
    };
    let ids_of = |v: &Value| -> Vec<String> {
        v["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_str().unwrap().to_string())
            .collect()
    };
    let (status, body) = get("/v1/runs?agent=helper&limit=2".into()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ids_of(&body), vec![made[4].clone(), made[2].clone()]);
    let cursor = body["next_cursor"].as_str().unwrap().to_string();
    let (_, next) = get(format!("/v1/runs?agent=helper&limit=2&cursor={cursor}")).await;
    assert_eq!(ids_of(&next), vec![made[0].clone()]);
    assert!(next["next_cursor"].is_null());
    let (_, hooks) = get("/v1/runs?trigger=webhook".into()).await;
    assert_eq!(ids_of(&hooks), vec![made[4].clone()]);
    // since as epoch ms, until as RFC 3339: [t0 + 60 s, t0 + 180 s).
    let until = chrono::DateTime::from_timestamp_millis(t0 + 180_000)
        .unwrap()
        .to_rfc3339();
    let (status, ranged) = get(format!(
        "/v1/runs?since={}&until={}",
        t0 + 60_000,
        until.replace('+', "%2B")
    ))
    .await;
    assert_eq!(status, StatusCode::OK, "{ranged}");
    assert_eq!(ids_of(&ranged), vec![made[2].clone(), made[1].clone()]);
    let (_, found) = get(format!("/v1/runs?q={}", made[3])).await;
    assert_eq!(ids_of(&found), vec![made[3].clone()]);
    let (_, queued) = get("/v1/runs?status=queued&key=none".into()).await;
    assert!(ids_of(&queued).is_empty());

    for (query, names) in [
        ("status=sleeping", ["status", "queued, running"]),
        ("trigger=email", ["trigger", "api, cli, webhook"]),
        ("since=yesterday", ["since", "RFC 3339"]),
        ("until=12:00", ["until", "epoch milliseconds"]),
        ("cursor=bogus", ["cursor", "next_cursor"]),
        ("limit=ten", ["limit", "limit"]),
        ("colour=red", ["colour", "unknown field"]),
        ("since=2000&until=1000", ["since", "until"]),
    ] {
        let (status, err) = get(format!("/v1/runs?{query}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {err}");
        let message = err["error"].as_str().unwrap();
        for name in names {
            assert!(message.contains(name), "{query}: {message}");
        }
    }
    server.abort();
    store.close().await;
}
