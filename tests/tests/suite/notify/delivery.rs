//! The notifier against real receivers on loopback, on both backends: signed notices to every
//! URL of the agent, once each; a receiver that fails twice gets the notice on the third try;
//! one that never succeeds ends `dead` with its last error; the API shows all of it.

use std::sync::Arc;
use std::time::Duration;

use nightshift_agent::AgentConfig;
use nightshift_notify::{Notifier, SecretSource};
use nightshift_runner::api::{ApiState, router};
use nightshift_store::{
    DeliveryStatus, Error as StoreError, NewRun, Notification, RunProgress, Store,
};
use nightshift_tests::http::get_json;
use nightshift_tests::{TestDb, eventually, on_both_backends};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::receiver::{Answer, Receiver, verify};

on_both_backends! {
    signed_notices_reach_every_url_of_the_agent_once => signed_notices_reach_every_url_once;
    a_receiver_failing_twice_gets_the_notice_on_the_third_try => fails_twice_then_succeeds;
    a_receiver_that_never_succeeds_ends_dead_with_its_last_error => never_succeeds_ends_dead;
}

const SECRET: &str = "whsec_test_0123456789";
const OK: Answer = Answer::Status(200);

/// An agent whose notices go to `urls`, retrying fast, at most `max_attempts` times.
fn agent(name: &str, urls: &[&str], max_attempts: u32) -> AgentConfig {
    let notify: Vec<Value> = urls
        .iter()
        .map(|u| {
            json!({"url": u, "secret_env": "NOTIFY_TEST_SECRET", "max_attempts": max_attempts,
                   "retry_base_ms": 50, "retry_cap_ms": 200, "timeout_ms": 2000})
        })
        .collect();
    serde_json::from_value(json!({"name": name, "provider": "p", "model": "m", "notify": notify}))
        .unwrap()
}

fn secrets() -> SecretSource {
    Arc::new(|name| (name == "NOTIFY_TEST_SECRET").then(|| SECRET.to_string()))
}

/// Starts the notifier for `agents` and marks the runs of those with URLs for notification,
/// as the daemon does; cancel the token to stop it.
fn start(store: &Store, agents: &[AgentConfig]) -> CancellationToken {
    store.set_notifying_agents(nightshift_runner::notifying_agents(agents));
    let notifier = Notifier::with_secrets(store.clone(), agents, secrets()).unwrap();
    let stop = CancellationToken::new();
    tokio::spawn(notifier.run(stop.clone()));
    stop
}

/// A run of `agent` that succeeded with a result and some usage.
async fn succeeded_run(store: &Store, agent: &str) -> String {
    let e = store
        .enqueue(&NewRun::new(agent, "summarise the night"))
        .await
        .unwrap();
    let lease = store
        .claim("w", None, 1, Duration::from_secs(30))
        .await
        .unwrap()
        .remove(0);
    let progress = RunProgress {
        turns: 2,
        input_tokens: 120,
        output_tokens: 30,
        cost_usd: 0.25,
        ..Default::default()
    };
    lease.record_progress(&progress).await.unwrap();
    lease.ack(Some("all quiet".into())).await.unwrap();
    e.run_id
}

async fn deliveries(store: &Store, run_id: &str) -> Vec<Notification> {
    store.notifications(Some(run_id), None, 100).await.unwrap()
}

async fn signed_notices_reach_every_url_once(db: &TestDb) {
    let store = db.store().await;
    let first = Receiver::start(SECRET, vec![], OK).await;
    let second = Receiver::start(SECRET, vec![], Answer::Status(204)).await;
    let agents = [
        agent("digest", &[&first.url, &second.url], 5),
        agent("quiet", &[], 5),
    ];
    let stop = start(&store, &agents);
    let run_id = succeeded_run(&store, "digest").await;
    let quiet_run = succeeded_run(&store, "quiet").await;
    // A run enqueued while "quiet" still had a URL (removed from the config since): it
    // notifies, and the notifier expands its outbox row into nothing.
    store.set_notifying_agents(["digest", "quiet"]);
    let was_loud = succeeded_run(&store, "quiet").await;
    store.set_notifying_agents(nightshift_runner::notifying_agents(&agents));
    eventually(Duration::from_secs(20), "both notices", || async {
        (first.accepted().len() == 1 && second.accepted().len() == 1).then_some(())
    })
    .await;
    let (a, b) = (first.got().remove(0), second.got().remove(0));
    assert_ne!(a.delivery_id, b.delivery_id, "one delivery per URL");
    let run = store.run(&run_id).await.unwrap().unwrap();
    for got in [&a, &b] {
        assert!(got.signature_ok, "signed with the secret: {:?}", got.body);
        assert_eq!(got.event, "run.finished");
        assert_eq!(got.body["delivery_id"], got.delivery_id.as_str());
        assert_eq!(got.body["sent_at"].to_string(), got.timestamp);
        assert_eq!(got.body["attempt"], 1);
        let r = &got.body["run"];
        assert_eq!(r["id"], run_id.as_str());
        assert_eq!(r["agent"], "digest");
        assert_eq!(r["status"], "succeeded");
        assert_eq!(r["result"], "all quiet");
        assert_eq!(r["trigger"], "api");
        assert_eq!(r["usage"]["turns"], 2);
        assert_eq!(r["usage"]["input_tokens"], 120);
        assert_eq!(r["cost_usd"], 0.25);
        assert_eq!(r["finished_at"], json!(run.finished_at));
    }
    // The check is real: the same body does not verify under another secret.
    let body = serde_json::to_vec(&a.body).unwrap();
    assert!(!verify(b"another secret", &body, "sha256=00"));
    // The outcome is recorded just after the receiver answered.
    eventually(
        Duration::from_secs(10),
        "both recorded as delivered",
        || async {
            let stored = deliveries(&store, &run_id).await;
            (stored.len() == 2
                && stored
                    .iter()
                    .all(|d| d.status == DeliveryStatus::Delivered && d.attempts == 1))
            .then_some(())
        },
    )
    .await;
    eventually(
        Duration::from_secs(10),
        "the outbox row of the run that was to notify expanded",
        || async {
            let row = store.run_outbox(&was_loud).await.unwrap().pop()?;
            row.expanded_at.map(|_| ())
        },
    )
    .await;
    assert!(
        deliveries(&store, &was_loud).await.is_empty(),
        "no URLs now, no notices"
    );
    let quiet = store.run(&quiet_run).await.unwrap().unwrap();
    assert!(
        !quiet.notify,
        "an agent without URLs: its runs do not notify"
    );
    assert!(store.run_outbox(&quiet_run).await.unwrap().is_empty());
    assert!(deliveries(&store, &quiet_run).await.is_empty());

    // The API shows the deliveries, without the URLs' paths.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let state = ApiState {
        store: store.clone(),
        intake: nightshift_scheduler::Intake::new(store.clone(), ["digest"]),
        tokens: nightshift_runner::api_tokens::ApiTokens::single("t"),
        hooks: nightshift_runner::hooks::none(),
    };
    let server = tokio::spawn(async move {
        axum::serve(listener, router(state)).await.unwrap();
    });
    let http = nightshift_llm::http::build_client(Default::default()).unwrap();
    let (_, listed) = get_json(&http, &format!("{base}/v1/notifications?run={run_id}"), "t").await;
    let items = listed["notifications"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{listed}");
    for item in items {
        assert_eq!(item["status"], "delivered");
        assert_eq!(item["next_attempt_at"], Value::Null);
        let url = item["url"].as_str().unwrap();
        assert!(
            url.starts_with("http://127.0.0.1:") && url.ends_with("/…"),
            "{url}"
        );
    }
    let anonymous = http
        .get(format!("{base}/v1/notifications"))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status().as_u16(), 401, "behind the API token");
    let bad = http
        .get(format!("{base}/v1/notifications?status=lost"))
        .bearer_auth("t")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status().as_u16(), 400);
    let delivered = items[0]["delivery_id"].as_str().unwrap();
    let refused = http
        .post(format!("{base}/v1/notifications/{delivered}/redeliver"))
        .bearer_auth("t")
        .send()
        .await
        .unwrap();
    assert_eq!(
        refused.status().as_u16(),
        409,
        "only dead deliveries are sent again"
    );
    server.abort();

    // Exactly once: nothing more arrives.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!((first.got().len(), second.got().len()), (1, 1));
    stop.cancel();
}

async fn fails_twice_then_succeeds(db: &TestDb) {
    let store = db.store().await;
    let flaky = Receiver::start(SECRET, vec![Answer::Status(500), Answer::Status(502)], OK).await;
    let stop = start(&store, &[agent("digest", &[&flaky.url], 5)]);
    let run_id = succeeded_run(&store, "digest").await;
    eventually(
        Duration::from_secs(20),
        "the notice on the third try",
        || async { (flaky.accepted().len() == 1).then_some(()) },
    )
    .await;
    let got = flaky.got();
    assert_eq!(got.len(), 3, "two failures, then the success");
    let ids: Vec<&str> = got.iter().map(|g| g.delivery_id.as_str()).collect();
    assert!(
        ids.iter().all(|id| *id == ids[0]),
        "one delivery id: {ids:?}"
    );
    let attempts: Vec<&Value> = got.iter().map(|g| &g.body["attempt"]).collect();
    assert_eq!(attempts, [&json!(1), &json!(2), &json!(3)]);
    assert!(got.iter().all(|g| g.signature_ok));
    let d = eventually(Duration::from_secs(10), "recorded as delivered", || async {
        let d = deliveries(&store, &run_id).await.pop()?;
        (d.status == DeliveryStatus::Delivered).then_some(d)
    })
    .await;
    assert_eq!(d.attempts, 3);
    assert_eq!(d.last_status_code, Some(200));
    assert_eq!(d.last_error.as_deref(), Some("HTTP 502"));
    stop.cancel();
}

async fn never_succeeds_ends_dead(db: &TestDb) {
    let store = db.store().await;
    let down = Receiver::start(SECRET, vec![], Answer::Status(503)).await;
    let stop = start(&store, &[agent("digest", &[&down.url], 3)]);
    let run_id = succeeded_run(&store, "digest").await;
    let d = eventually(Duration::from_secs(20), "the delivery to die", || async {
        let d = deliveries(&store, &run_id).await.pop()?;
        (d.status == DeliveryStatus::Dead).then_some(d)
    })
    .await;
    assert_eq!(d.attempts, 3);
    assert_eq!(d.last_error.as_deref(), Some("HTTP 503"));
    assert_eq!(d.last_status_code, Some(503));
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(down.got().len(), 3, "no attempt after the last");

    // The receiver is back; an operator sends the dead delivery again, under the same id.
    down.answer_from_now(OK);
    let err = store.redeliver("no-such-delivery").await.unwrap_err();
    assert!(matches!(err, StoreError::NotFound { .. }), "{err}");
    // Through the CLI, as an operator would: listed as dead, then sent again.
    let dir = tempfile::tempdir().unwrap();
    let cfg = crate::crash::write_config(db, dir.path(), crate::crash::FAST_WORKER, "");
    let listed = crate::crash::cli(
        &cfg,
        &["notifications", "list", "--status", "dead", "--json"],
    );
    let row: serde_json::Value = serde_json::from_str(listed.trim()).expect("one JSON line");
    assert_eq!(row["delivery_id"], d.delivery_id.as_str(), "{listed}");
    assert_eq!(row["run_id"], run_id.as_str());
    assert_eq!(row["status"], "dead");
    assert_eq!(
        (row["attempts"].as_i64(), row["max_attempts"].as_i64()),
        (Some(3), Some(3))
    );
    assert!(
        row["last_error"].as_str().unwrap().starts_with("HTTP 503"),
        "{row}"
    );
    let table = crate::crash::cli(&cfg, &["notifications", "list", "--status", "dead"]);
    assert!(
        table.starts_with("DELIVERY") && table.contains(&d.delivery_id) && table.contains("3/3"),
        "{table}"
    );
    assert!(
        !listed.contains("/hooks/"),
        "URLs are shown without their path: {listed}"
    );
    let sent = crate::crash::cli(&cfg, &["notifications", "redeliver", &d.delivery_id]);
    assert!(sent.contains("queued again"), "{sent}");
    let again = eventually(Duration::from_secs(20), "the redelivery", || async {
        let d = deliveries(&store, &run_id).await.pop()?;
        (d.status == DeliveryStatus::Delivered).then_some(d)
    })
    .await;
    assert_eq!(again.attempts, 1, "a fresh set of attempts");
    let got = down.accepted();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].delivery_id, d.delivery_id);
    assert!(got[0].signature_ok);
    let err = store.redeliver(&d.delivery_id).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("is delivered; only a dead delivery"),
        "{err}"
    );

    // A secret that is not set is refused up front, naming the agent and the variable.
    let none: SecretSource = Arc::new(|_| None);
    let err = Notifier::with_secrets(store.clone(), &[agent("digest", &[&down.url], 3)], none)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("agents.digest.notify[0].secret_env") && err.contains("NOTIFY_TEST_SECRET"),
        "{err}"
    );
    assert!(
        !err.contains("/hooks/"),
        "the URL's path is not shown: {err}"
    );
    stop.cancel();
}
