//! Notices and the real `nightshift serve`, SIGKILLed at each step of a notice's way: after
//! the run finished while the receiver is unreachable (the notice waits in the store and
//! arrives after a restart), while the POST is in flight (sent again, with the same delivery
//! id, once the dead daemon's claim runs out), and a run cancelled while no daemon is up
//! (queued or mid-tool-call) still gets its final notice.

use std::path::Path;
use std::time::Duration;

use nightshift_store::{DeliveryStatus, Notification, RunStatus, Store};
use nightshift_tests::process::Serve;
use nightshift_tests::{TestDb, eventually, on_both_backends};
use serde_json::json;

use super::receiver::{Answer, Receiver};
use crate::crash::{
    FAST_WORKER, agent, cli, enqueue, events, kinds, q, sigkill, sigterm, text_turn, tool_turn,
    wait_finished, write_config,
};
use crate::process::{Proc, free_port};

on_both_backends! {
    a_notice_survives_a_sigkill_while_its_receiver_is_unreachable => receiver_unreachable;
    a_notice_in_flight_when_the_daemon_dies_is_sent_again_with_its_id => in_flight_post;
    runs_cancelled_while_no_daemon_is_up_get_their_notices => cancelled_while_down;
    a_run_ending_in_the_sigterm_drain_is_notified_before_exit => notified_in_the_drain;
}

const SECRET: &str = "whsec_process_test";

/// `nightshift serve` with the signing secret in its environment.
fn serve(cfg: &Path) -> Proc {
    Serve::new(cfg).env("NOTIFY_TEST_SECRET", SECRET).spawn()
}

/// A `[[agents.notify]]` entry for the agent just written, retrying fast.
fn notify(url: &str, timeout_ms: u64) -> String {
    format!(
        "[[agents.notify]]\nurl = {}\nsecret_env = \"NOTIFY_TEST_SECRET\"\nmax_attempts = 100\n\
         retry_base_ms = 100\nretry_cap_ms = 400\ntimeout_ms = {timeout_ms}\n\n",
        q(url)
    )
}

async fn deliveries(store: &Store, run_id: &str) -> Vec<Notification> {
    store.notifications(Some(run_id), None, 10).await.unwrap()
}

async fn receiver_unreachable(db: &TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/hooks/nightshift");
    let body =
        agent(d, "digest", &[], json!([text_turn("nightly digest done")])) + &notify(&url, 1000);
    let cfg = write_config(db, d, FAST_WORKER, &body);
    let store = db.store().await;
    let mut first = serve(&cfg);
    let run_id = enqueue(&cfg, "digest");
    let run = wait_finished(&store, &run_id).await;
    assert_eq!(run.status, RunStatus::Succeeded, "{:?}", run.error);
    // Nobody listens yet: attempts fail, and the daemon dies with the notice undelivered.
    let failing = eventually(Duration::from_secs(30), "a failed attempt", || async {
        let d = deliveries(&store, &run_id).await.pop()?;
        (d.attempts >= 1 && d.last_error.is_some()).then_some(d)
    })
    .await;
    sigkill(&mut first).await;
    assert_eq!(failing.status, DeliveryStatus::Pending);
    let error = failing.last_error.unwrap();
    assert!(error.contains("cannot connect"), "{error}");

    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    let receiver = Receiver::on(listener, SECRET, vec![], Answer::Status(200));
    let second = serve(&cfg);
    eventually(
        Duration::from_secs(30),
        "the notice after the restart",
        || async { (!receiver.accepted().is_empty()).then_some(()) },
    )
    .await;
    let got = receiver.accepted().remove(0);
    assert!(got.signature_ok);
    assert_eq!(got.body["run"]["id"], run_id.as_str());
    assert_eq!(got.body["run"]["status"], "succeeded");
    assert_eq!(got.body["run"]["result"], "nightly digest done");
    assert_eq!(got.delivery_id, failing.delivery_id, "the same delivery");
    let done = eventually(
        Duration::from_secs(10),
        "delivered in the store",
        || async {
            let d = deliveries(&store, &run_id).await.pop()?;
            (d.status == DeliveryStatus::Delivered).then_some(d)
        },
    )
    .await;
    assert!(done.attempts > failing.attempts);
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(receiver.got().len(), 1, "delivered once");
    assert_eq!(store.run_outbox(&run_id).await.unwrap().len(), 1);
    sigterm(second).await;
}

async fn in_flight_post(db: &TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // The first POST never gets an answer; the daemon is killed while it waits.
    let receiver = Receiver::start(SECRET, vec![Answer::Hang], Answer::Status(200)).await;
    let body = agent(d, "digest", &[], json!([text_turn("done")])) + &notify(&receiver.url, 2000);
    let cfg = write_config(db, d, FAST_WORKER, &body);
    let store = db.store().await;
    let mut first = serve(&cfg);
    let run_id = enqueue(&cfg, "digest");
    eventually(Duration::from_secs(30), "the first POST", || async {
        (!receiver.got().is_empty()).then_some(())
    })
    .await;
    sigkill(&mut first).await;
    let claimed = deliveries(&store, &run_id).await.remove(0);
    assert_eq!(
        (claimed.status, claimed.attempts),
        (DeliveryStatus::Pending, 1),
        "claimed, outcome never recorded"
    );

    let second = serve(&cfg);
    eventually(Duration::from_secs(30), "the notice sent again", || async {
        (!receiver.accepted().is_empty()).then_some(())
    })
    .await;
    let got = receiver.got();
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(
        got[0].delivery_id, got[1].delivery_id,
        "receivers can dedupe"
    );
    assert_eq!(
        (&got[0].body["attempt"], &got[1].body["attempt"]),
        (&json!(1), &json!(2))
    );
    assert!(got.iter().all(|g| g.signature_ok));
    let done = eventually(
        Duration::from_secs(10),
        "delivered in the store",
        || async {
            let d = deliveries(&store, &run_id).await.pop()?;
            (d.status == DeliveryStatus::Delivered).then_some(d)
        },
    )
    .await;
    assert_eq!(done.attempts, 2);
    sigterm(second).await;
}

async fn cancelled_while_down(db: &TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let receiver = Receiver::start(SECRET, vec![], Answer::Status(200)).await;
    let turns = json!([
        tool_turn("call_1", "run_command", json!({"command": "sleep 30"})),
        text_turn("not reached")
    ]);
    let body = agent(d, "sleeper", &["run_command"], turns) + &notify(&receiver.url, 1000);
    let cfg = write_config(db, d, FAST_WORKER, &body);
    let store = db.store().await;
    let mut first = serve(&cfg);
    let running = enqueue(&cfg, "sleeper");
    eventually(
        Duration::from_secs(30),
        "the tool call to start",
        || async {
            let log = events(&store, &running).await;
            kinds(&log).contains(&"tool_started").then_some(())
        },
    )
    .await;
    sigkill(&mut first).await;

    // No daemon is up: one run is mid-tool-call (its job still leased by the dead daemon),
    // another is enqueued and cancelled before any daemon saw it.
    let out = cli(&cfg, &["runs", "cancel", &running]);
    assert!(out.contains("cancellation requested"), "{out}");
    let queued = enqueue(&cfg, "sleeper");
    let out = cli(&cfg, &["runs", "cancel", &queued]);
    assert!(out.contains("cancelled"), "{out}");
    assert_eq!(
        store.run_outbox(&running).await.unwrap(),
        [],
        "not ended yet"
    );
    assert_eq!(store.run_outbox(&queued).await.unwrap().len(), 1);

    let second = serve(&cfg);
    for run_id in [&running, &queued] {
        let run = wait_finished(&store, run_id).await;
        assert_eq!(run.status, RunStatus::Cancelled);
    }
    eventually(Duration::from_secs(30), "both final notices", || async {
        (receiver.accepted().len() == 2).then_some(())
    })
    .await;
    let mut notified: Vec<(String, String)> = receiver
        .accepted()
        .iter()
        .map(|g| {
            assert!(g.signature_ok);
            (
                g.body["run"]["id"].as_str().unwrap().to_string(),
                g.body["run"]["status"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    notified.sort();
    let mut expected = vec![
        (running.clone(), "cancelled".to_string()),
        (queued.clone(), "cancelled".to_string()),
    ];
    expected.sort();
    assert_eq!(notified, expected);
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(receiver.got().len(), 2, "one notice each");
    let shown = cli(&cfg, &["runs", "show", &queued]);
    assert!(shown.contains("\"delivered\""), "{shown}");
    assert!(
        !shown.contains("/hooks/"),
        "URLs are shown without their path: {shown}"
    );
    sigterm(second).await;
}

async fn notified_in_the_drain(db: &TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let receiver = Receiver::start(SECRET, vec![], Answer::Status(200)).await;
    let turns = json!([
        tool_turn("call_1", "run_command", json!({"command": "sleep 1"})),
        text_turn("finished in the drain")
    ]);
    let body = agent(d, "napper", &["run_command"], turns) + &notify(&receiver.url, 1000);
    let cfg = write_config(db, d, FAST_WORKER, &body);
    let store = db.store().await;
    let daemon = serve(&cfg);
    let run_id = enqueue(&cfg, "napper");
    eventually(
        Duration::from_secs(30),
        "the tool call to start",
        || async {
            let log = events(&store, &run_id).await;
            kinds(&log).contains(&"tool_started").then_some(())
        },
    )
    .await;
    assert!(receiver.got().is_empty());
    sigterm(daemon).await;
    let run = store.run(&run_id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Succeeded, "{:?}", run.error);
    let got = receiver.accepted();
    assert_eq!(got.len(), 1, "notified before the daemon exited: {got:?}");
    assert_eq!(got[0].body["run"]["result"], "finished in the drain");
}
