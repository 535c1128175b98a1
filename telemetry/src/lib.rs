//! # Nightshift's telemetry
//!
//! Two parts: the Prometheus metrics (this page) and the OpenTelemetry traces of runs
//! ([`traces`]: a trace per run across its jobs and daemons, exported over OTLP).
//!
//! ## Metrics
//!
//! Every metric's name, help text, unit and label set is declared once, in [`catalog`]; the
//! crates that do the work call one typed function of [`record`] at each place where
//! something happens. Both are built on the `metrics` facade: until a recorder is installed
//! every call does nothing, so library users and unit tests pay nothing.
//!
//! The daemon calls [`install`] (once per process; calling it again returns the same handle,
//! so several daemons in one test process share one recorder) and serves [`render`]'s
//! Prometheus text at `GET /metrics`.
//!
//! ## Guarantees
//!
//! - **Bounded labels.** A label takes either one of a fixed set of values or a name from
//!   the config (agents, tools, providers, models, hooks, schedules, reserved lanes); a name
//!   that is not in the config is folded into `unknown` (lanes: `other`) by [`labels`]. No
//!   run id, job id, prompt, URL or error text is ever a label value.
//! - **Gauges of store state do not stick.** [`record::sample_jobs`] and
//!   [`record::sample_wakeups`] set every label set of the previous sample that is gone to 0.
//! - **Histograms are drained** by an upkeep thread every few seconds, so samples do not pile
//!   up between scrapes.
//!
//! ## The metrics
//!
//! | name | type | labels | meaning |
//! |---|---|---|---|
//! | `nightshift_jobs` | gauge | `state`, `lane` | live jobs per state and lane, read from the store at each scrape: `queued` (due now), `delayed` (queued for later), `running`, `parked` (of runs that have not ended) |
//! | `nightshift_queue_oldest_due_age_seconds` | gauge | `lane` | how long each lane's longest-waiting due job has waited |
//! | `nightshift_job_start_delay_seconds` | histogram | `lane`, `kind` | from when a job became due (enqueued, or its delay, retry or wakeup time) to its claim |
//! | `nightshift_job_outcomes_total` | counter | `agent`, `kind`, `outcome` | what the runtime made of each job: `done`, `retry`, `defer`, `park`, `await_approval` |
//! | `nightshift_worker_slots` | gauge | — | the pool's slots |
//! | `nightshift_worker_busy_slots` | gauge | — | the pool's slots running a job now |
//! | `nightshift_runs_started_total` | counter | `agent` | runs started (first job began; forks too) |
//! | `nightshift_runs_ended_total` | counter | `agent`, `status` | runs ended, by final status (by a job, or by a cancel, supersession or rescue while no job ran) |
//! | `nightshift_run_duration_seconds` | histogram | `agent`, `status` | a run's start to its end, waits included |
//! | `nightshift_model_calls_total` | counter | `provider`, `model`, `status` | model calls through an agent's fallback chain: `ok`, `unavailable`, `fatal`, `context_too_long`, `cancelled` |
//! | `nightshift_model_call_duration_seconds` | histogram | `provider`, `model`, `status` | a model call's time, retries and fallbacks included |
//! | `nightshift_model_tokens_total` | counter | `provider`, `model`, `kind` | tokens of replies: `input`, `output`, `cache_read`, `cache_write` |
//! | `nightshift_model_cost_usd` | gauge (only grows) | `provider`, `model` | USD spent at the agents' prices |
//! | `nightshift_model_breaker_state` | gauge | `provider`, `model` | circuit breaker: 0 closed, 1 half-open, 2 open |
//! | `nightshift_tool_calls_total` | counter | `tool`, `class`, `outcome` | tool calls: `ok`, `error`, `refused_input`, `denied`, `refused`, `interrupted`, `unresolved` |
//! | `nightshift_tool_call_duration_seconds` | histogram | `tool`, `class`, `outcome` | time of tool calls that ran |
//! | `nightshift_webhook_deliveries_total` | counter | `hook`, `outcome` | webhook deliveries by outcome |
//! | `nightshift_notification_deliveries_total` | counter | `agent`, `status` | run notice attempts: `delivered`, `retrying`, `dead` |
//! | `nightshift_wakeups_armed` | gauge | `agent` | sleeping runs with an armed resume job, read from the store at each scrape |
//! | `nightshift_wakeup_lateness_seconds` | histogram | — | a wakeup's due time to the claim of its resume job |
//! | `nightshift_schedule_fires_total` | counter | `schedule`, `trigger`, `outcome` | schedule fires (`timer`, `manual`): `enqueued`, `duplicate`, `skipped` |
//! | `nightshift_schedule_missed_fires_total` | counter | `schedule` | fires missed while no daemon led the timer |
//! | `nightshift_lease_expiries_total` | counter | `lane`, `outcome` | jobs whose worker stopped heartbeating, found by this daemon: `requeued`, `dead_lettered`, `cancelled` |
//! | `nightshift_dead_letters_total` | counter | `lane`, `reason` | jobs dead-lettered: `failed` (the run failed for good), `attempts_exhausted`, `lease_expired` |
//! | `nightshift_model_errors_total` | counter | `provider`, `model`, `kind` | failed attempts at a provider, each retry counted: `rate_limited` (429), `overloaded`, `server_error`, `timeout`, `network`, `stream_broken`, `malformed`, `client_error`, `context_too_long`, `other` |
//! | `nightshift_approvals_pending` | gauge | — | tool calls waiting for a decision, read from the store at each scrape |
//! | `nightshift_approval_oldest_pending_age_seconds` | gauge | — | how long the oldest pending approval has waited (0: none) |
//! | `nightshift_notifications_pending` | gauge | — | run notices not yet delivered, read from the store at each scrape |
//! | `nightshift_notification_oldest_pending_age_seconds` | gauge | — | how long the oldest undelivered notice has waited (0: none) |
//! | `nightshift_build_info` | gauge | `version` | always 1: the running version |
//! | `nightshift_retention_runs_purged_total` | counter | `status` | finished runs whose history the purger removed, by end state |
//! | `nightshift_retention_rows_purged_total` | counter | — | store rows purged (run rows too when no summary is kept) |
//! | `nightshift_retention_bytes_purged_total` | counter | — | bytes of events and checkpoints purged |
//! | `nightshift_retention_batch_duration_seconds` | histogram | — | one purge batch (one transaction) |
//! | `nightshift_retention_last_purge_timestamp_seconds` | gauge | — | Unix time of the last batch that removed runs |
//! | `nightshift_retention_files_removed_total` | counter | `kind` | run directories and files removed from the data directory: `workspace`, `artifacts`, `task_log`, `temp`, `checkout` |

use std::sync::OnceLock;
use std::time::Duration;

use metrics::{KeyName, Recorder, SharedString};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

pub mod catalog;
pub mod exposition;
pub mod labels;
pub mod record;
pub mod traces;

pub use record::*;

/// How often histogram samples are folded into their buckets between scrapes.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the process's recorder (the first call) and returns the handle that renders it.
/// When another recorder was installed first (an embedding program's), ours is not global
/// and renders only the metric descriptions; that is logged once.
pub fn install() -> &'static PrometheusHandle {
    HANDLE.get_or_init(|| {
        let recorder = build();
        let handle = recorder.handle();
        if metrics::set_global_recorder(recorder).is_err() {
            tracing::warn!(
                "another metrics recorder is installed in this process; GET /metrics shows none \
                 of Nightshift's samples"
            );
        }
        let upkeep = handle.clone();
        let spawned = std::thread::Builder::new()
            .name("nightshift-metrics".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(UPKEEP_EVERY);
                    upkeep.run_upkeep();
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start the metrics upkeep thread; histograms are folded at scrapes only");
        }
        handle
    })
}

/// The Prometheus text exposition of every metric (installing the recorder if need be).
pub fn render() -> String {
    install().render()
}

/// A recorder with every metric described and every histogram's buckets set.
pub fn build() -> metrics_exporter_prometheus::PrometheusRecorder {
    let mut builder = PrometheusBuilder::new();
    for m in catalog::METRICS.iter().filter(|m| !m.buckets.is_empty()) {
        builder = builder
            .set_buckets_for_metric(Matcher::Full(m.name.to_string()), m.buckets)
            .expect("the catalog's buckets are not empty");
    }
    let recorder = builder.build_recorder();
    for m in catalog::METRICS {
        let (name, help) = (KeyName::from(m.name), SharedString::from(m.help));
        match m.kind {
            catalog::Kind::Counter => recorder.describe_counter(name, None, help),
            catalog::Kind::Gauge => recorder.describe_gauge(name, None, help),
            catalog::Kind::Histogram => recorder.describe_histogram(name, None, help),
        }
    }
    recorder
}

#[cfg(test)]
mod tests;
