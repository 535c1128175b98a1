//! The daemon against a hostile model provider: a loopback fake of the Anthropic Messages API
//! and OpenAI chat completions (JSON and SSE) that sends what real providers and proxies
//! sometimes send — duplicate, missing and reused tool-call ids, empty content, cut-off tool
//! calls, malformed 200 bodies, unknown stop reasons, NUL bytes and long outages — and that
//! refuses, like the real APIs, any request that breaks their rules.
//!
//! Each case runs a real `nightshift serve` on both backends and checks what a user would
//! check: the run's status and result, its events, the tool ledger and every request the fake
//! received. Waits are on conditions; a runaway loop is caught by bounding events and ledger
//! lines, not by a timeout alone.
//!
//! - `validate`: the real APIs' request rules, as functions with their own unit tests.
//! - `script`: the steps a conversation is scripted with, and their wire forms.
//! - `server`: the fake itself: routing, recording, validation, outages.
//! - `daemon`: a configured `nightshift serve`, the API calls and the ledger tool.
//! - `thinking_rules`: the providers' rules for reasoning (Anthropic thinking, DeepSeek
//!   `reasoning_content`), and the signatures the fake puts on what it hands out.
//! - `ids`, `schema`, `empty`, `outage`, `malformed`, `text`: the cases of issue 13;
//!   `reasoning`: reasoning kept byte-exact through tool loops and a SIGKILL (issue 41);
//!   `numbers`: numbers in tool input kept exactly as the model wrote them (issue 41).

mod daemon;
mod empty;
mod ids;
mod malformed;
mod numbers;
mod outage;
mod reasoning;
mod schema;
pub(crate) mod script;
pub(crate) mod server;
mod text;
mod thinking_rules;
mod validate;

use std::time::Duration;

use nightshift_store::{Event, RunStatus};
use nightshift_tests::eventually;
use serde_json::Value;

use daemon::Daemon;
use server::Hostile;

/// Waits until the run ends, or until `runaway` says it is running away (too many events or
/// executions); returns the run and its events either way, so the test's assertions explain.
async fn settle(
    d: &Daemon,
    run_id: &str,
    runaway: impl Fn(&[Event]) -> bool,
) -> (Value, Vec<Event>) {
    eventually(
        Duration::from_secs(20),
        &format!("run {run_id} to end"),
        || async {
            let run = d.run(run_id).await;
            let events = d.events(run_id).await;
            let status = run["status"].as_str().unwrap_or_default();
            let terminal = !status.parse::<RunStatus>().is_ok_and(|s| !s.is_terminal());
            (terminal || runaway(&events)).then_some((run, events))
        },
    )
    .await
}

/// No request the fake received broke the real API's rules.
fn assert_all_valid(hostile: &Hostile) {
    let invalid = hostile.invalid();
    assert!(
        invalid.is_empty(),
        "the fake refused {} of {} requests as the real API would: {invalid:#?}",
        invalid.len(),
        hostile.request_count()
    );
}

/// The run ended `succeeded` with `result`.
fn assert_succeeded(run: &Value, events: &[Event], result: &str) {
    assert_eq!(
        (run["status"].as_str(), run["result"].as_str()),
        (Some("succeeded"), Some(result)),
        "{}",
        daemon::describe(run, events)
    );
}
