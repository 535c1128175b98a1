//! Acting on a run: cancel asks first and then cancels, a sleeping run is woken, the keyboard
//! alone reaches cancel (and Escape keeps the run), and a cross-site form is refused and
//! changes nothing.

use std::time::Duration;

use fantoccini::key::Key;
use nightshift_store::RunStatus;
use nightshift_tests::{Backend, eventually};
use serde_json::json;

use super::{click, open_run, setup, sign_in, teardown, waits_for_status};

#[tokio::test]
async fn cancel_from_the_page_asks_first_and_then_cancels() {
    let Some((db, serve, b)) = setup(Backend::Sqlite, "browser_cancel").await else {
        return;
    };
    sign_in(&b, &serve).await;
    let id = serve.enqueue("slow", "Hold the gate.", json!({})).await;
    let started = serve.gate("started");
    eventually(Duration::from_secs(60), "the gate to start", || async {
        started.exists().then_some(())
    })
    .await;
    open_run(&b, &serve, &id).await;
    // The dialog asks; "keep it" changes nothing.
    click(&b, "form[data-action=cancel] button").await;
    b.until(
        "the confirm dialog to open",
        "return document.getElementById('confirm').open === true",
    )
    .await;
    let asked = b.find("#confirm-text").await.text().await.unwrap();
    assert!(asked.contains("cannot be undone"), "{asked}");
    b.screenshot("confirm-cancel").await;
    click(&b, "dialog#confirm button#confirm-no").await;
    b.until(
        "the dialog to close",
        "return document.getElementById('confirm').open === false",
    )
    .await;
    assert_eq!(
        serve.status(&id).await,
        RunStatus::Running,
        "keeping it changes nothing"
    );
    // Asked again and confirmed: cancelled, through the same store call as the API.
    click(&b, "form[data-action=cancel] button").await;
    b.until(
        "the confirm dialog to open",
        "return document.getElementById('confirm').open === true",
    )
    .await;
    click(&b, "dialog#confirm button#confirm-yes").await;
    let flash = b.find(".flash").await.text().await.unwrap();
    assert!(flash.to_lowercase().contains("cancel"), "{flash}");
    serve.wait_for(&id, RunStatus::Cancelled).await;
    waits_for_status(&b, "cancelled").await;
    teardown(db, serve, b).await;
}

#[tokio::test]
async fn a_sleeping_run_is_woken_from_the_page() {
    let Some((db, serve, b)) = setup(Backend::Sqlite, "browser_wake").await else {
        return;
    };
    sign_in(&b, &serve).await;
    let id = serve
        .enqueue("sleeper", "Sleep until CI is done.", json!({}))
        .await;
    serve.wait_for(&id, RunStatus::Waiting).await;
    open_run(&b, &serve, &id).await;
    let wakeup = b
        .find("ol#timeline > li[data-kind=wakeup]")
        .await
        .text()
        .await
        .unwrap();
    assert!(
        wakeup.contains("wait for CI"),
        "the wakeup says why: {wakeup}"
    );
    click(&b, "form[data-action=wake] button").await;
    b.find(".flash").await;
    serve.wait_for(&id, RunStatus::Succeeded).await;
    waits_for_status(&b, "succeeded").await;
    b.until(
        "the answer after waking",
        "return document.getElementById('timeline').innerText.includes('Woke up and finished.')",
    )
    .await;
    teardown(db, serve, b).await;
}

#[tokio::test]
async fn the_keyboard_alone_reaches_cancel_and_escape_keeps_the_run() {
    let Some((db, serve, b)) = setup(Backend::Sqlite, "browser_keyboard").await else {
        return;
    };
    sign_in(&b, &serve).await;
    let id = serve.enqueue("slow", "Hold the gate.", json!({})).await;
    serve.wait_for(&id, RunStatus::Running).await;
    open_run(&b, &serve, &id).await;
    // Tab from the top of the page until the cancel button has the focus.
    let on_cancel =
        "var a = document.activeElement; return !!a && !!a.closest('form[data-action=cancel]')";
    let mut tabs = 0;
    while b.js(on_cancel).await != json!(true) {
        tabs += 1;
        assert!(tabs <= 20, "the cancel button is not reached with Tab");
        b.press(Key::Tab).await;
    }
    let ring = b
        .js("return getComputedStyle(document.activeElement).outlineStyle")
        .await;
    assert_eq!(
        ring,
        json!("solid"),
        "the focused button shows a focus ring"
    );
    b.press(Key::Enter).await;
    b.until(
        "the confirm dialog to open",
        "return document.getElementById('confirm').open === true",
    )
    .await;
    // The dialog takes the focus on its safe choice; Escape closes it and changes nothing.
    let focused = b.js("return document.activeElement.id").await;
    assert_eq!(
        focused,
        json!("confirm-no"),
        "the safe button has the focus"
    );
    b.press(Key::Escape).await;
    b.until(
        "the dialog to close",
        "return document.getElementById('confirm').open === false",
    )
    .await;
    assert_eq!(serve.status(&id).await, RunStatus::Running);
    teardown(db, serve, b).await;
}

#[tokio::test]
async fn a_cross_site_form_is_refused_and_changes_nothing() {
    let Some((db, serve, b)) = setup(Backend::Sqlite, "browser_cross_site").await else {
        return;
    };
    sign_in(&b, &serve).await;
    let id = serve.enqueue("slow", "Hold the gate.", json!({})).await;
    serve.wait_for(&id, RunStatus::Running).await;
    // Another origin on the same host (so the browser still sends the session cookie) whose
    // page posts a cancel form to the dashboard as soon as it loads.
    let target = serve.url(&format!("/ui/runs/{id}/cancel"));
    let page = format!(
        "<!doctype html><form id=f method=post action=\"{target}\">\
         <input name=csrf value=guessed><input name=confirmed value=yes></form>\
         <script>document.getElementById('f').submit()</script>"
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let evil = format!("http://{}/", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        let app = axum::Router::new().route(
            "/",
            axum::routing::get(move || {
                let page = page.clone();
                async move { axum::response::Html(page) }
            }),
        );
        axum::serve(listener, app).await.unwrap();
    });
    b.goto(&evil).await;
    b.until(
        "the dashboard's refusal",
        "return location.pathname.endsWith('/cancel') && document.body.innerText.includes('Nothing was changed')",
    )
    .await;
    assert_eq!(
        serve.status(&id).await,
        RunStatus::Running,
        "the run was not cancelled"
    );
    server.abort();
    teardown(db, serve, b).await;
}
