//! The recording functions, one per thing that happens, each one line at its call site. Label
//! values are given in the order of the metric's labels in [`crate::catalog`]; values of a
//! fixed label set are checked against it in debug builds. Without an installed recorder
//! every function does nothing.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use metrics::Label;

use crate::catalog::{self as c, Values};

/// The labels of `metric` with `values`, in the catalog's order.
fn labels(metric: &'static str, values: &[&str]) -> Vec<Label> {
    let m = c::find(metric).expect("every recorded metric is in the catalog");
    debug_assert_eq!(m.labels.len(), values.len(), "{metric}: label count");
    m.labels
        .iter()
        .zip(values)
        .map(|(label, value)| {
            if let Values::Fixed(allowed) = label.values {
                debug_assert!(
                    allowed.contains(value),
                    "{metric}: {}={value} is not one of {allowed:?}",
                    label.name
                );
            }
            Label::new(label.name, value.to_string())
        })
        .collect()
}

fn count(metric: &'static str, values: &[&str], n: u64) {
    metrics::counter!(metric, labels(metric, values)).increment(n);
}

fn observe(metric: &'static str, values: &[&str], seconds: f64) {
    metrics::histogram!(metric, labels(metric, values)).record(seconds);
}

fn set(metric: &'static str, values: &[&str], value: f64) {
    metrics::gauge!(metric, labels(metric, values)).set(value);
}

/// A job of `kind` in `lane` was claimed `delay` after it became due.
pub fn job_claimed(lane: &str, kind: &'static str, delay: Duration) {
    observe(
        c::JOB_START_DELAY,
        &[crate::labels::lane(lane), kind],
        delay.as_secs_f64(),
    );
}

/// The resume job a wakeup armed was claimed `lateness` after the wakeup's due time.
pub fn wakeup_claimed(lateness: Duration) {
    observe(c::WAKEUP_LATENESS, &[], lateness.as_secs_f64());
}

/// The runtime made `outcome` of a job of `kind` of a run of `agent` (a configured name or
/// [`crate::labels::UNKNOWN`]).
pub fn job_outcome(agent: &str, kind: &'static str, outcome: &'static str) {
    count(c::JOB_OUTCOMES_TOTAL, &[agent, kind, outcome], 1);
}

/// The pool has `slots` slots.
pub fn worker_slots(slots: usize) {
    set(c::WORKER_SLOTS, &[], slots as f64);
}

/// `busy` slots of the pool run a job now.
pub fn busy_slots(busy: usize) {
    set(c::WORKER_BUSY_SLOTS, &[], busy as f64);
}

/// A run of `agent` started.
pub fn run_started(agent: &str) {
    count(c::RUNS_STARTED, &[agent], 1);
}

/// A run of `agent` ended with `status`, `duration` after it started (when known).
pub fn run_ended(agent: &str, status: &'static str, duration: Option<Duration>) {
    count(c::RUNS_ENDED, &[agent, status], 1);
    if let Some(d) = duration {
        observe(c::RUN_DURATION, &[agent, status], d.as_secs_f64());
    }
}

/// Tokens of one model reply.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tokens {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
}

/// One model call: a configured provider and model, how it ended (one of
/// [`c::MODEL_STATUSES`]), how long it took, and for a reply its tokens and cost.
#[derive(Debug, Clone, Copy)]
pub struct ModelCall<'a> {
    pub provider: &'a str,
    pub model: &'a str,
    pub status: &'static str,
    pub duration: Duration,
    pub tokens: Tokens,
    pub cost_usd: f64,
}

/// Counts a model call with its tokens and cost.
pub fn model_call(call: &ModelCall<'_>) {
    let (provider, model) = (call.provider, call.model);
    count(c::MODEL_CALLS, &[provider, model, call.status], 1);
    observe(
        c::MODEL_CALL_DURATION,
        &[provider, model, call.status],
        call.duration.as_secs_f64(),
    );
    let t = call.tokens;
    for (kind, n) in [
        ("input", t.input),
        ("output", t.output),
        ("cache_read", t.cache_read),
        ("cache_write", t.cache_write),
    ] {
        count(c::MODEL_TOKENS, &[provider, model, kind], n);
    }
    if call.cost_usd.is_finite() && call.cost_usd > 0.0 {
        metrics::gauge!(c::MODEL_COST, labels(c::MODEL_COST, &[provider, model]))
            .increment(call.cost_usd);
    }
}

/// Where a circuit breaker is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Breaker {
    Closed = 0,
    HalfOpen = 1,
    Open = 2,
}

/// The breaker of `provider`/`model` is at `state`.
pub fn breaker(provider: &str, model: &str, state: Breaker) {
    set(c::MODEL_BREAKER, &[provider, model], f64::from(state as u8));
}

/// A call of `tool` (a name the agent was given, or [`crate::labels::UNKNOWN`]) of durability
/// `class` ended with `outcome`; `ran_for` is how long it ran, for calls that ran.
pub fn tool_call(
    tool: &str,
    class: &'static str,
    outcome: &'static str,
    ran_for: Option<Duration>,
) {
    count(c::TOOL_CALLS, &[tool, class, outcome], 1);
    if let Some(d) = ran_for {
        observe(
            c::TOOL_CALL_DURATION,
            &[tool, class, outcome],
            d.as_secs_f64(),
        );
    }
}

/// A delivery to webhook `hook` (a configured hook) ended with `outcome`.
pub fn webhook_delivery(hook: &str, outcome: &'static str) {
    count(c::WEBHOOK_DELIVERIES, &[hook, outcome], 1);
}

/// An attempt at a notice of a run of `agent` left its delivery `status`.
pub fn notification_delivery(agent: &str, status: &'static str) {
    count(c::NOTIFICATION_DELIVERIES, &[agent, status], 1);
}

/// Schedule `schedule` fired (`trigger`: timer or manual) with `outcome`.
pub fn schedule_fire(schedule: &str, trigger: &'static str, outcome: &'static str) {
    count(c::SCHEDULE_FIRES, &[schedule, trigger, outcome], 1);
}

/// `missed` fires of `schedule` were missed.
pub fn schedule_missed(schedule: &str, missed: u64) {
    if missed > 0 {
        count(c::SCHEDULE_MISSED, &[schedule], missed);
    }
}

/// The worker of a job in `lane` stopped heartbeating, and a rescue made `outcome` (one of
/// [`c::RESCUE_OUTCOMES`]) of its job.
pub fn lease_expired(lane: &str, outcome: &'static str) {
    count(c::LEASE_EXPIRIES, &[crate::labels::lane(lane), outcome], 1);
    if outcome == "dead_lettered" {
        dead_lettered(lane, "lease_expired");
    }
}

/// A job in `lane` was dead-lettered for `reason` (one of [`c::DEAD_LETTER_REASONS`]).
pub fn dead_lettered(lane: &str, reason: &'static str) {
    count(c::DEAD_LETTERS, &[crate::labels::lane(lane), reason], 1);
}

/// An attempt at `provider`/`model` failed with `kind` (one of [`c::MODEL_ERROR_KINDS`]).
pub fn model_error(provider: &str, model: &str, kind: &'static str) {
    count(c::MODEL_ERRORS, &[provider, model, kind], 1);
}

/// The backlogs a human or a receiver clears, as the store counts them at a scrape.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Backlogs {
    pub approvals_pending: i64,
    pub oldest_approval_age_seconds: f64,
    pub notifications_pending: i64,
    pub oldest_notification_age_seconds: f64,
}

/// Sets the backlog gauges.
pub fn sample_backlogs(b: Backlogs) {
    set(c::APPROVALS_PENDING, &[], b.approvals_pending as f64);
    set(c::APPROVAL_OLDEST, &[], b.oldest_approval_age_seconds);
    set(
        c::NOTIFICATIONS_PENDING,
        &[],
        b.notifications_pending as f64,
    );
    set(
        c::NOTIFICATION_OLDEST,
        &[],
        b.oldest_notification_age_seconds,
    );
}

/// Sets `nightshift_build_info` (once, at start).
pub fn build_info() {
    set(c::BUILD_INFO, &[env!("CARGO_PKG_VERSION")], 1.0);
}

/// The label sets each sampled gauge was last set for, so that sets gone from the next
/// sample go back to 0 instead of sticking at their last value.
static SAMPLED: Mutex<Option<HashMap<&'static str, LabelSets>>> = Mutex::new(None);

/// The label value lists a gauge was set for.
type LabelSets = BTreeSet<Vec<String>>;

/// Sets sampled gauge `metric` to `sample` (label values → value; values of one label set
/// are added up), and every label set of the previous sample that is not in this one to 0.
fn set_sample(metric: &'static str, sample: impl IntoIterator<Item = (Vec<String>, f64)>) {
    let mut now: HashMap<Vec<String>, f64> = HashMap::new();
    for (values, v) in sample {
        *now.entry(values).or_default() += v;
    }
    let mut sampled = SAMPLED.lock().unwrap_or_else(|p| p.into_inner());
    let before = sampled
        .get_or_insert_with(HashMap::new)
        .insert(metric, now.keys().cloned().collect())
        .unwrap_or_default();
    drop(sampled);
    for gone in before.iter().filter(|v| !now.contains_key(*v)) {
        let values: Vec<&str> = gone.iter().map(String::as_str).collect();
        set(metric, &values, 0.0);
    }
    for (values, v) in &now {
        let values: Vec<&str> = values.iter().map(String::as_str).collect();
        set(metric, &values, *v);
    }
}

/// Sets the live jobs gauge from the store's counts per (state, lane); lanes are folded
/// (see [`crate::labels::lane`]).
pub fn sample_jobs<'a>(counts: impl IntoIterator<Item = (&'a str, &'a str, i64)>) {
    set_sample(
        c::JOBS,
        counts.into_iter().map(|(state, lane, n)| {
            (
                vec![state.to_string(), crate::labels::lane(lane).to_string()],
                n as f64,
            )
        }),
    );
}

/// Sets the oldest-due-age gauge from `(lane, seconds)` per lane with a due job; a lane
/// that has none loses its series (set to 0).
/// Lanes folded into one label keep the oldest age, not a sum.
pub fn sample_oldest_due<'a>(ages: impl IntoIterator<Item = (&'a str, f64)>) {
    let mut oldest: HashMap<Vec<String>, f64> = HashMap::new();
    for (lane, age) in ages {
        let entry = oldest
            .entry(vec![crate::labels::lane(lane).to_string()])
            .or_default();
        *entry = entry.max(age);
    }
    set_sample(c::QUEUE_OLDEST_DUE, oldest);
}

/// Sets the armed wakeups gauge from the sleeping runs' agents (configured names or
/// [`crate::labels::UNKNOWN`]), one entry per run.
pub fn sample_wakeups<'a>(agents: impl IntoIterator<Item = &'a str>) {
    set_sample(
        c::WAKEUPS_ARMED,
        agents
            .into_iter()
            .map(|agent| (vec![agent.to_string()], 1.0)),
    );
}

/// A purge batch removed `runs` runs that ended as `status` (one of
/// [`c::RUN_END_STATUSES`]), `rows` rows and `bytes` bytes of history, in `took`; `at` is
/// now, as Unix seconds.
pub fn retention_batch(
    status: &'static str,
    runs: u64,
    rows: u64,
    bytes: u64,
    took: Duration,
    at: f64,
) {
    observe(c::RETENTION_BATCH_DURATION, &[], took.as_secs_f64());
    if runs == 0 {
        return;
    }
    count(c::RETENTION_RUNS_PURGED, &[status], runs);
    count(c::RETENTION_ROWS_PURGED, &[], rows);
    count(c::RETENTION_BYTES_PURGED, &[], bytes);
    set(c::RETENTION_LAST_PURGE, &[], at);
}

/// `n` of a run's directories or files of `kind` (one of [`c::RETENTION_FILE_KINDS`]) were
/// removed from the data directory.
pub fn retention_files_removed(kind: &'static str, n: u64) {
    if n > 0 {
        count(c::RETENTION_FILES_REMOVED, &[kind], n);
    }
}
