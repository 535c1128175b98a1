//! Every recording function through a recorder of its own, and every series it rendered
//! checked against the catalog: known metric, exactly its labels, fixed labels within their
//! set, and no hostile text (ids, prompts, URLs) anywhere.

use std::time::Duration;

use crate::catalog::{self, Kind, METRICS, Values};
use crate::exposition::parse;
use crate::labels::{self, UNKNOWN};
use crate::record::*;

/// Records through every function, with names that must be folded or never appear.
fn record_everything() {
    labels::know_lanes(["interactive"]);
    job_claimed("interactive", "start", Duration::from_millis(3));
    job_claimed("run-0192f0c4-lane", "resume", Duration::from_secs(2));
    wakeup_claimed(Duration::from_millis(40));
    job_outcome("triage", "start", "done");
    job_outcome(UNKNOWN, "resume", "retry");
    worker_slots(4);
    busy_slots(1);
    run_started("triage");
    run_ended("triage", "succeeded", Some(Duration::from_secs(90)));
    model_call(&ModelCall {
        provider: "claude",
        model: "claude-sonnet-4-5",
        status: "ok",
        duration: Duration::from_millis(800),
        tokens: Tokens {
            input: 100,
            output: 20,
            cache_read: 5,
            cache_write: 7,
        },
        cost_usd: 0.0123,
    });
    breaker("claude", "claude-sonnet-4-5", Breaker::HalfOpen);
    tool_call(
        "read_file",
        "read_only",
        "ok",
        Some(Duration::from_millis(2)),
    );
    tool_call(
        labels::configured("curl https://example.invalid/?token=abc", false),
        "side_effect",
        "error",
        Some(Duration::from_millis(2)),
    );
    webhook_delivery("github", "accepted");
    notification_delivery("triage", "delivered");
    schedule_fire("nightly", "manual", "enqueued");
    schedule_missed("nightly", 3);
    sample_jobs([
        ("queued", "default", 2),
        ("running", "some-free-form-lane", 1),
    ]);
    sample_wakeups(["triage", "triage"]);
    lease_expired("interactive", "requeued");
    lease_expired("run-0192f0c4-lane", "dead_lettered");
    dead_lettered("interactive", "attempts_exhausted");
    model_error("claude", "claude-sonnet-4-5", "rate_limited");
    sample_backlogs(Backlogs {
        approvals_pending: 2,
        oldest_approval_age_seconds: 30.5,
        notifications_pending: 1,
        oldest_notification_age_seconds: 4.0,
    });
    build_info();
}

/// The sampled gauges remember, process-wide, which label sets they last set; tests that
/// sample take turns so one never sees another's sample as its "before".
static SAMPLING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn sampling() -> std::sync::MutexGuard<'static, ()> {
    SAMPLING.lock().unwrap_or_else(|p| p.into_inner())
}

fn rendered() -> String {
    let _turn = sampling();
    let recorder = crate::build();
    metrics::with_local_recorder(&recorder, record_everything);
    recorder.handle().render()
}

/// The catalog entry of a sample (a histogram's `_bucket`, `_sum` and `_count` are its own).
fn metric_of(name: &str) -> &'static catalog::Metric {
    catalog::find(name)
        .or_else(|| {
            ["_bucket", "_sum", "_count"]
                .iter()
                .filter_map(|s| name.strip_suffix(s))
                .filter_map(catalog::find)
                .find(|m| m.kind == Kind::Histogram)
        })
        .unwrap_or_else(|| panic!("{name} is not in the catalog"))
}

#[test]
fn every_series_has_exactly_its_metrics_labels_within_their_bounds() {
    let text = rendered();
    let samples = parse(&text);
    assert!(samples.len() > 20, "{text}");
    for s in &samples {
        let m = metric_of(&s.name);
        let names: Vec<&str> = s
            .labels
            .iter()
            .map(|(k, _)| k.as_str())
            .filter(|k| *k != "le")
            .collect();
        let declared: Vec<&str> = m.labels.iter().map(|l| l.name).collect();
        assert_eq!(names, declared, "labels of {}", s.name);
        for (key, value) in &s.labels {
            if let Some(l) = m.labels.iter().find(|l| l.name == key)
                && let Values::Fixed(allowed) = l.values
            {
                assert!(
                    allowed.contains(&value.as_str()),
                    "{}: {key}={value}",
                    s.name
                );
            }
        }
    }
    for hostile in [
        "0192f0c4",
        "https://",
        "token=abc",
        "rm -rf",
        "some-free-form-lane",
    ] {
        assert!(!text.contains(hostile), "{hostile} leaked into:\n{text}");
    }
}

#[test]
fn invented_tools_and_free_form_lanes_are_folded() {
    let samples = parse(&rendered());
    let has = |name: &str, label: (&str, &str)| {
        samples.iter().any(|s| {
            s.name == name
                && s.labels
                    .iter()
                    .any(|(k, v)| (k.as_str(), v.as_str()) == label)
        })
    };
    assert!(has("nightshift_tool_calls_total", ("tool", UNKNOWN)));
    assert!(has("nightshift_jobs", ("lane", labels::OTHER_LANE)));
    assert!(has(
        "nightshift_job_start_delay_seconds_count",
        ("lane", labels::OTHER_LANE)
    ));
}

#[test]
fn a_lease_lost_on_the_last_attempt_is_a_dead_letter_too() {
    let recorder = crate::build();
    metrics::with_local_recorder(&recorder, || {
        labels::know_lanes(["reviews"]);
        lease_expired("reviews", "requeued");
        lease_expired("reviews", "dead_lettered");
    });
    let samples = parse(&recorder.handle().render());
    let value = |name: &str, label: (&str, &str)| {
        samples
            .iter()
            .find(|s| {
                s.name == name
                    && s.labels
                        .iter()
                        .any(|(k, v)| (k.as_str(), v.as_str()) == label)
            })
            .map(|s| s.value)
    };
    assert_eq!(
        value("nightshift_lease_expiries_total", ("outcome", "requeued")),
        Some(1.0)
    );
    assert_eq!(
        value("nightshift_dead_letters_total", ("reason", "lease_expired")),
        Some(1.0)
    );
    assert_eq!(
        value("nightshift_dead_letters_total", ("reason", "failed")),
        None
    );
}

#[test]
fn sampled_gauges_go_back_to_zero_for_label_sets_that_vanished() {
    let _turn = sampling();
    let recorder = crate::build();
    metrics::with_local_recorder(&recorder, || {
        sample_wakeups(["zeroing-agent"]);
        sample_wakeups(["other-agent"]);
    });
    let samples = parse(&recorder.handle().render());
    let value = |agent: &str| {
        samples
            .iter()
            .find(|s| s.name == "nightshift_wakeups_armed" && s.labels[0].1 == agent)
            .map(|s| s.value)
    };
    assert_eq!(value("zeroing-agent"), Some(0.0));
    assert_eq!(value("other-agent"), Some(1.0));
}

#[test]
fn histograms_have_buckets_and_every_metric_a_help_line() {
    let text = rendered();
    assert!(text.contains("nightshift_job_start_delay_seconds_bucket{lane=\"interactive\",kind=\"start\",le=\"0.005\"} 1"), "{text}");
    for m in METRICS {
        if text.contains(&format!("\n{}", m.name)) || text.starts_with(m.name) {
            assert!(text.contains(&format!("# HELP {} ", m.name)), "{}", m.name);
            assert!(
                text.contains(&format!("# TYPE {} {}", m.name, m.kind.as_str())),
                "{}",
                m.name
            );
        }
    }
}

#[test]
fn the_crate_doc_and_the_metrics_reference_list_every_metric() {
    let doc = include_str!("lib.rs");
    let reference = include_str!("../../docs/reference/metrics.md");
    for m in METRICS {
        assert!(
            doc.contains(&format!("`{}`", m.name)),
            "lib.rs doc lacks {}",
            m.name
        );
        assert!(
            reference.contains(&format!("`{}`", m.name)),
            "docs/reference/metrics.md lacks {}",
            m.name
        );
    }
}
