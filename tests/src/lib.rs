//! Test support for Nightshift's suites: a fresh database per test on each backend, and the
//! helpers the pool, process and daemon tests share.
//!
//! The per-test database ([`TestDb`] on a [`Backend`], [`pg`], [`on_both_backends!`]) is the
//! store's conformance crate's (`nightshift-store-conformance`), re-exported here: PostgreSQL
//! comes from `NIGHTSHIFT_TEST_PG_URL` when set; otherwise from a throwaway cluster started
//! with the machine's `initdb`/`pg_ctl` when present; otherwise PostgreSQL tests print a loud
//! `SKIPPED` line and pass. Each test gets its own schema (PostgreSQL) or file (SQLite).
//!
//! [`git_http`] is a fake GitHub git host (smart HTTP through `git http-backend`, installation
//! tokens checked as GitHub checks them) for the workspace checkout's tests.
//!
//! [`http`] calls a daemon's HTTP API with its token (`GET`, a JSON `POST`) and gives the
//! status and the JSON answer, so the suite's tests do not repeat the `reqwest` chain.
//!
//! [`process`] starts the real `nightshift` binary: `nightshift serve` on a config (one
//! helper, with the environment and log receiver the suites need), killed when dropped.

pub mod config_text;
pub mod git_http;
pub mod http;
pub mod process;

use std::time::Duration;

pub use nightshift_store_conformance::{Arg, Backend, TestDb, on_both_backends, pg};

/// Polls `check` every 20 ms until it returns `Some`, or panics after `timeout` naming `what`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
