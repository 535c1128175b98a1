//! Outages pause runs instead of failing them (issue 13, item 5): a provider answering 529
//! for longer than the client's retries and the job's attempts leaves the run unfinished,
//! with the real cause in a `model_unavailable` event, and the run succeeds once the provider
//! is back; past the agent's `outage_limit_seconds` the run fails with that real cause.

use std::time::Duration;

use nightshift_tests::{TestDb, eventually, on_both_backends};

use super::daemon::{Daemon, Setup, describe};
use super::script::{Gate, Step, Wire, text};
use super::server::Hostile;
use super::{assert_all_valid, assert_succeeded};

on_both_backends! {
    a_long_529_outage_pauses_the_run_and_it_succeeds_when_the_provider_is_back => outage_pauses;
    an_outage_past_outage_limit_seconds_fails_the_run_with_the_real_cause => outage_limit;
}

const RETRY: &str = "{ max_attempts = 2, base_delay_ms = 10, max_delay_ms = 20 }";
const BREAKER: &str = "{ failure_threshold = 2, cooldown_ms = 300 }";

fn setup(wire: Wire, stream: bool) -> Setup {
    let mut s = Setup::new(wire, stream);
    s.retry = RETRY.into();
    s.breaker = BREAKER.into();
    s
}

fn is_terminal(status: &str) -> bool {
    !matches!(
        status,
        "queued" | "running" | "waiting" | "awaiting_approval"
    )
}

async fn outage_pauses(db: &TestDb) {
    let key = "[outage] Say something once the provider is back.";
    let gate = Gate::new();
    let hostile = Hostile::start().await;
    hostile.script(key, vec![Step::Down(gate.clone()), text("Back again.")]);
    let d = Daemon::start(db, &hostile, setup(Wire::Anthropic, false)).await;
    // Two job attempts of two client attempts each: four 529s would use them all up today.
    let run_id = d.enqueue(key, 2).await;
    let (run, events) = eventually(
        Duration::from_secs(20),
        "the run to end, or to log the outage while the fake answered 529 six times",
        || async {
            let run = d.run(&run_id).await;
            let events = d.events(&run_id).await;
            let logged = events.iter().any(|e| {
                e.event_type == "model_unavailable"
                    && e.payload.contains("529")
                    && e.payload.contains("Overloaded")
            });
            let ended = is_terminal(run["status"].as_str().unwrap_or_default());
            (ended || (logged && hostile.request_count() >= 6)).then_some((run, events))
        },
    )
    .await;
    assert!(
        !is_terminal(run["status"].as_str().unwrap_or_default()),
        "an outage longer than the retries does not end the run: {}",
        describe(&run, &events)
    );
    // While it waits, the run's API view names the real cause too.
    let waiting = eventually(
        Duration::from_secs(20),
        "the run's last_error to name the outage",
        || async {
            let run = d.run(&run_id).await;
            let last = run["last_error"].as_str().unwrap_or_default().to_string();
            (last.contains("529") && last.contains("Overloaded")).then_some(run)
        },
    )
    .await;
    assert!(
        !is_terminal(waiting["status"].as_str().unwrap_or_default()),
        "{waiting}"
    );
    gate.release();
    let run = d.finished(&run_id).await;
    let events = d.events(&run_id).await;
    assert_succeeded(&run, &events, "Back again.");
    assert_all_valid(&hostile);

    // Every 529 the fake answered is one failed attempt in the metrics; the success is none.
    let text = d
        .http
        .get(format!("{}/metrics", d.api))
        .bearer_auth(crate::process::API_TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let errors = |kind: &str| -> f64 {
        nightshift_telemetry::exposition::parse(&text)
            .iter()
            .filter(|s| {
                s.name == "nightshift_model_errors_total"
                    && s.labels.iter().any(|(k, v)| k == "kind" && v == kind)
            })
            .map(|s| s.value)
            .sum()
    };
    assert_eq!(
        errors("overloaded"),
        (hostile.request_count() - 1) as f64,
        "one per 529:\n{text}"
    );
    assert_eq!(errors("rate_limited"), 0.0);
    assert!(
        text.contains(&format!(
            "nightshift_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        )),
        "{text}"
    );
}

async fn outage_limit(db: &TestDb) {
    let key = "[outage-limit] The provider never comes back.";
    let hostile = Hostile::start().await;
    hostile.script(key, vec![Step::Down(Gate::new())]);
    let mut s = setup(Wire::OpenAi, true);
    s.agent_keys = "outage_limit_seconds = 1".into();
    let d = Daemon::start(db, &hostile, s).await;
    let run_id = d.enqueue(key, 2).await;
    let run = d.finished(&run_id).await;
    let events = d.events(&run_id).await;
    let error = run["error"].as_str().unwrap_or_default();
    assert_eq!(
        run["status"],
        "failed",
        "past the limit the run fails: {}",
        describe(&run, &events)
    );
    assert!(
        error.contains("529") && error.contains("Overloaded"),
        "the error keeps the provider's real cause, not only the breaker's: {error}"
    );
}
