//! What an operator does in the dashboard, in a real browser against a real daemon: sign in
//! (and be refused with a wrong token), find a run and read its timeline, approve a call
//! (asked first, seeing the call, the prompt and the model's text, in the dialog or on the
//! confirm page), cancel through the confirm dialog, wake a sleeper, filter and page the
//! list, watch a run, the runs list, the queue and the approvals inbox change without
//! reloading, and have a cross-site form refused.
//!
//! The flows are in [`runs`], [`approvals`], [`actions`], [`forks`] and [`lists`]; the setup, sign-in and
//! page helpers they share (and `live_page` and `looks` use) are here.

mod actions;
mod approvals;
mod forks;
mod lists;
mod runs;

use nightshift_tests::{Backend, TestDb};

use crate::daemon::Serve;
use crate::harness::Browser;

/// A fresh database, daemon and browser for `test`, or `None` when skipped.
pub(crate) async fn setup(backend: Backend, test: &str) -> Option<(TestDb, Serve, Browser)> {
    let db = TestDb::new(backend, test).await?;
    let browser = Browser::start(test).await?;
    let serve = Serve::start(&db).await;
    Some((db, serve, browser))
}

pub(crate) async fn teardown(db: TestDb, serve: Serve, browser: Browser) {
    browser.finish().await;
    serve.stop().await;
    db.cleanup().await;
}

/// Signs in through the login form with `token`.
async fn sign_in_with(b: &Browser, serve: &Serve, token: &str) {
    b.goto(&serve.url("/ui/login")).await;
    let field = b.find("form#login input[name=token]").await;
    field.send_keys(token).await.unwrap();
    b.find("form#login button[type=submit]")
        .await
        .click()
        .await
        .unwrap();
}

pub(crate) async fn sign_in(b: &Browser, serve: &Serve) {
    sign_in_with(b, serve, &serve.token).await;
    b.until(
        "the runs list after signing in",
        "return location.pathname === '/ui/runs' && !!document.querySelector('table#runs')",
    )
    .await;
}

/// The run ids in the runs table, top to bottom.
async fn ids(b: &Browser) -> Vec<String> {
    let v = b
        .js("return Array.from(document.querySelectorAll('table#runs tr[data-run-id]')).map(r => r.dataset.runId)")
        .await;
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

async fn click(b: &Browser, css: &str) {
    b.find(css)
        .await
        .click()
        .await
        .unwrap_or_else(|e| panic!("click `{css}`: {e}"));
}

/// Opens the run's page and waits for its timeline.
pub(crate) async fn open_run(b: &Browser, serve: &Serve, id: &str) {
    b.goto(&serve.url(&format!("/ui/runs/{id}"))).await;
    b.find("ol#timeline").await;
}

async fn opens_the_dialog(b: &Browser) {
    b.until(
        "the confirm dialog to open",
        "return document.getElementById('confirm').open === true",
    )
    .await;
}

pub(crate) async fn waits_for_status(b: &Browser, status: &str) {
    b.until(
        &format!("the run page to say {status}"),
        &format!(
            "var s = document.getElementById('run-status'); return !!s && s.dataset.status === '{status}'"
        ),
    )
    .await;
}
