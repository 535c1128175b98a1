//! How the dashboard looks, checked where it can be measured and kept as screenshots: a mix
//! of runs in every state on a laptop screen, the same pages on a phone (nothing wider than
//! the screen), and in dark mode (the dark palette really applied). The PNGs are the ones in
//! `docs/screenshots/` (`./scripts/screenshots`).

use nightshift_store::RunStatus;
use nightshift_tests::{Backend, TestDb};
use serde_json::json;

use crate::daemon::Serve;
use crate::flows::{open_run, sign_in, teardown};
use crate::harness::Browser;

/// Runs in most states: succeeded, awaiting approval, waiting on a wakeup, running, queued.
async fn a_day_of_runs(serve: &Serve) -> String {
    let reviewed = serve
        .enqueue(
            "reviewer",
            "Review PR #412: retry the webhook on 502",
            json!({"concurrency_key": "acme/api#412"}),
        )
        .await;
    serve.wait_for(&reviewed, RunStatus::Succeeded).await;
    let deploy = serve
        .enqueue("deployer", "Deploy v2 to staging", json!({}))
        .await;
    serve.wait_for(&deploy, RunStatus::AwaitingApproval).await;
    let sleeper = serve
        .enqueue(
            "sleeper",
            "Nightly digest: wait for CI, then summarise",
            json!({}),
        )
        .await;
    serve.wait_for(&sleeper, RunStatus::Waiting).await;
    let slow = serve
        .enqueue("slow", "Run the migration dry-run", json!({}))
        .await;
    serve.wait_for(&slow, RunStatus::Running).await;
    serve
        .enqueue(
            "reviewer",
            "Review PR #413: bump tokio",
            json!({"delay_seconds": 3600, "concurrency_key": "acme/api#413"}),
        )
        .await;
    reviewed
}

/// True when nothing on the page is wider than the window.
const FITS: &str = "return document.documentElement.scrollWidth <= window.innerWidth";

#[tokio::test]
async fn the_main_pages_fit_a_laptop_and_a_phone_and_are_kept_as_screenshots() {
    let Some(db) = TestDb::new(Backend::Sqlite, "browser_looks").await else {
        return;
    };
    let Some(b) = Browser::start("browser_looks").await else {
        return;
    };
    let serve = Serve::start(&db).await;
    b.goto(&serve.url("/ui/login")).await;
    b.find("form#login").await;
    b.screenshot("login").await;
    sign_in(&b, &serve).await;
    let reviewed = a_day_of_runs(&serve).await;
    assert_eq!(serve.deliver("delivery-7", "main").await, 202);
    let pages = [
        ("/ui/runs", "runs"),
        ("/ui/queue", "queue"),
        ("/ui/schedules", "schedules"),
        ("/ui/hooks", "webhooks"),
        ("/ui/notifications", "notifications"),
        ("/ui/approvals", "approvals"),
    ];
    for (path, name) in pages {
        b.goto(&serve.url(path)).await;
        b.find("main h1").await;
        assert_eq!(b.js(FITS).await, json!(true), "{path} fits a laptop screen");
        b.screenshot(name).await;
    }
    open_run(&b, &serve, &reviewed).await;
    b.screenshot("run-timeline").await;

    b.client.set_window_size(390, 844).await.unwrap();
    for (path, name) in pages {
        b.goto(&serve.url(path)).await;
        b.find("main h1").await;
        assert_eq!(b.js(FITS).await, json!(true), "{path} fits a phone");
        if name == "runs" {
            b.screenshot("phone-runs").await;
        }
    }
    open_run(&b, &serve, &reviewed).await;
    assert_eq!(b.js(FITS).await, json!(true), "the timeline fits a phone");
    b.screenshot("phone-run-timeline").await;
    teardown(db, serve, b).await;
}

#[tokio::test]
async fn dark_mode_uses_the_dark_palette() {
    let Some(db) = TestDb::new(Backend::Sqlite, "browser_dark").await else {
        return;
    };
    let Some(b) = Browser::start_with("browser_dark", &["--force-dark-mode"]).await else {
        return;
    };
    let serve = Serve::start(&db).await;
    sign_in(&b, &serve).await;
    let reviewed = a_day_of_runs(&serve).await;
    assert_eq!(
        b.js("return matchMedia('(prefers-color-scheme: dark)').matches")
            .await,
        json!(true),
        "the browser prefers dark"
    );
    let background = b
        .js("return getComputedStyle(document.body).backgroundColor")
        .await;
    assert_eq!(background, json!("rgb(13, 17, 23)"), "the dark background");
    b.goto(&serve.url("/ui/runs")).await;
    b.find("table#runs tr[data-run-id]").await;
    b.screenshot("dark-runs").await;
    open_run(&b, &serve, &reviewed).await;
    b.screenshot("dark-run-timeline").await;
    teardown(db, serve, b).await;
}
