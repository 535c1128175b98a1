//! A run's page while it is open: the live stream updates the timeline's items and the header
//! (status, turns, tokens, cost, actions) without a reload, and never takes away what the
//! operator is using — a deny reason being typed stays, with the focus, while the rest of its
//! item is updated, and the item catches up once it is no longer in use.

use nightshift_store::RunStatus;
use nightshift_tests::{Backend, eventually};
use serde_json::json;

use crate::flows::{open_run, setup, sign_in, teardown, waits_for_status};

const REASON: &str = "li[data-kind=approval] form[data-action=deny] input[name=reason]";

#[tokio::test]
async fn a_deny_reason_being_typed_survives_a_live_update_of_its_item() {
    let Some((db, serve, b)) = setup(Backend::Sqlite, "browser_reason_kept").await else {
        return;
    };
    sign_in(&b, &serve).await;
    let id = serve.enqueue("deployer", "Deploy v2.", json!({})).await;
    serve.wait_for(&id, RunStatus::AwaitingApproval).await;
    open_run(&b, &serve, &id).await;
    b.find(REASON).await.send_keys("half typed").await.unwrap();
    // Marks on this page and on the item's parts as they are now: a reload, or a fresh
    // part, has none.
    b.js("window.__same_page = 3; document.querySelector('li[data-kind=approval] .head').__old = true; return true")
        .await;

    // The run is cancelled elsewhere: the stream sends the item again (it no longer offers a
    // decision) and the header.
    serve.store.cancel_run(&id).await.unwrap();
    serve.wait_for(&id, RunStatus::Cancelled).await;
    waits_for_status(&b, "cancelled").await;
    b.until(
        "the approval item's update to arrive",
        "var h = document.querySelector('li[data-kind=approval] .head'); return !!h && !h.__old",
    )
    .await;
    assert_eq!(
        b.js(&format!(
            "var f = document.querySelector(\"{REASON}\"); return f ? f.value : null"
        ))
        .await,
        json!("half typed"),
        "the typed reason is kept"
    );
    assert_eq!(
        b.js(&format!(
            "var f = document.querySelector(\"{REASON}\"); return !!f && document.activeElement === f"
        ))
        .await,
        json!(true),
        "and keeps the focus"
    );
    assert_eq!(
        b.js("return window.__same_page").await,
        json!(3),
        "no reload"
    );

    // Once the operator lets go of it (the text cleared, the focus gone), the item is the
    // one the server sent: a cancelled run's call offers no decision.
    b.js(&format!(
        "var f = document.querySelector(\"{REASON}\"); f.value = ''; \
         f.dispatchEvent(new Event('input', {{bubbles: true}})); f.blur(); return true"
    ))
    .await;
    b.until(
        "the item to catch up once it is no longer in use",
        "var li = document.querySelector('li[data-kind=approval]'); return !!li && !li.querySelector('form')",
    )
    .await;
    teardown(db, serve, b).await;
}

#[tokio::test]
async fn the_header_follows_the_run_without_a_reload() {
    let Some((db, serve, b)) = setup(Backend::Sqlite, "browser_live_header").await else {
        return;
    };
    sign_in(&b, &serve).await;
    let id = serve
        .enqueue("slow", "Go through the gate.", json!({}))
        .await;
    let started = serve.gate("started");
    eventually(
        std::time::Duration::from_secs(60),
        "the gate to start",
        || async { started.exists().then_some(()) },
    )
    .await;
    open_run(&b, &serve, &id).await;
    waits_for_status(&b, "running").await;
    let before = serve.store.run(&id).await.unwrap().unwrap();
    b.find("#run-header form[data-action=cancel]").await;
    b.js("window.__same_page = 4; return true").await;

    std::fs::write(serve.gate("go"), "").unwrap();
    serve.wait_for(&id, RunStatus::Succeeded).await;
    let after = serve.store.run(&id).await.unwrap().unwrap();
    assert_ne!(before.turns, after.turns, "the run took turns meanwhile");
    let turns = format!("{} turns", after.turns);
    b.until(
        &format!("the header to say succeeded with {turns} and no cancel"),
        &format!(
            "var h = document.getElementById('run-header'); return !!h \
             && h.querySelector('#run-status').dataset.status === 'succeeded' \
             && h.querySelector('.usage').textContent.includes('{turns}') \
             && !h.querySelector('form[data-action=cancel]')"
        ),
    )
    .await;
    assert_eq!(
        b.js("return window.__same_page").await,
        json!(4),
        "no reload"
    );
    teardown(db, serve, b).await;
}
