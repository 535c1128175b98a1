//! Every metric in one table: its name, type, unit, help text and label set, each label with
//! the bound on its values. The recorder is described from it, the reference's list
//! (`docs/reference/metrics.md`) is checked
//! against it, and the unit tests check every rendered series against it.

/// What kind of series a metric is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    /// The Prometheus `# TYPE` word.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// What bounds a label's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Values {
    /// Exactly these.
    Fixed(&'static [&'static str]),
    /// Names from the config (agents, tools, providers, models, hooks, schedules, lanes),
    /// with anything else folded into [`crate::labels::UNKNOWN`] or
    /// [`crate::labels::OTHER_LANE`] by the recording functions.
    Config,
}

/// One label of a metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Label {
    pub name: &'static str,
    pub values: Values,
}

/// One metric.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Metric {
    pub name: &'static str,
    pub kind: Kind,
    pub help: &'static str,
    pub labels: &'static [Label],
    /// Histogram bucket bounds (empty for other kinds).
    pub buckets: &'static [f64],
}

const fn fixed(name: &'static str, values: &'static [&'static str]) -> Label {
    Label {
        name,
        values: Values::Fixed(values),
    }
}

const fn config(name: &'static str) -> Label {
    Label {
        name,
        values: Values::Config,
    }
}

/// Job states a live job can be in (`jobs.status` of unfinished jobs).
pub const LIVE_JOB_STATES: &[&str] = &["queued", "delayed", "running", "parked"];
/// Job kinds.
pub const JOB_KINDS: &[&str] = &["start", "resume"];
/// What a handler made of a job.
pub const JOB_OUTCOMES: &[&str] = &["done", "retry", "defer", "park", "await_approval"];
/// How a run can end.
pub const RUN_END_STATUSES: &[&str] = &[
    "succeeded",
    "failed",
    "cancelled",
    "budget_exhausted",
    "max_rounds",
    "superseded",
];
/// How a model call (through the agent's fallback chain) ended.
pub const MODEL_STATUSES: &[&str] = &[
    "ok",
    "unavailable",
    "fatal",
    "context_too_long",
    "cancelled",
];
/// Kinds of tokens.
pub const TOKEN_KINDS: &[&str] = &["input", "output", "cache_read", "cache_write"];
/// Tool durability classes.
pub const TOOL_CLASSES: &[&str] = &["read_only", "idempotent", "side_effect"];
/// How a tool call ended.
pub const TOOL_OUTCOMES: &[&str] = &[
    "ok",
    "error",
    "refused_input",
    "denied",
    "refused",
    "interrupted",
    "unresolved",
];
/// What became of a webhook delivery (the counts `GET /v1/hooks` shows).
pub const HOOK_OUTCOMES: &[&str] = &[
    "accepted",
    "duplicate",
    "unauthorized",
    "bad_request",
    "too_large",
    "unmatched",
    "no_run",
    "error",
    "ping",
    "ignored",
];
/// What one attempt at a run notice did to its delivery.
pub const NOTIFY_STATUSES: &[&str] = &["delivered", "retrying", "dead"];
/// What fired a schedule.
pub const FIRE_TRIGGERS: &[&str] = &["timer", "manual"];
/// What a schedule fire did.
pub const FIRE_OUTCOMES: &[&str] = &["enqueued", "duplicate", "skipped"];

/// What a rescue did with a job whose worker's lease expired.
pub const RESCUE_OUTCOMES: &[&str] = &["requeued", "dead_lettered", "cancelled"];
/// Why a job was dead-lettered: its run failed for good (a fatal error), it failed its last
/// attempt, or its worker's lease expired during its last attempt.
pub const DEAD_LETTER_REASONS: &[&str] = &["failed", "attempts_exhausted", "lease_expired"];
/// What a failed attempt at a model provider met (`nightshift_llm::ProviderError::kind`).
pub const MODEL_ERROR_KINDS: &[&str] = &[
    "rate_limited",
    "overloaded",
    "server_error",
    "timeout",
    "network",
    "stream_broken",
    "malformed",
    "client_error",
    "context_too_long",
    "other",
];
/// What of a run's files a retention sweep or purge removed.
pub const RETENTION_FILE_KINDS: &[&str] =
    &["workspace", "artifacts", "task_log", "temp", "checkout"];
/// This build's version, the one value of `nightshift_build_info`'s label.
pub const VERSIONS: &[&str] = &[env!("CARGO_PKG_VERSION")];

/// Waits in seconds, 1 ms to an hour: the start delay of jobs, the lateness of wakeups.
pub const WAIT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0,
    1800.0, 3600.0,
];
/// Run durations in seconds, a second to a day.
pub const RUN_BUCKETS: &[f64] = &[
    1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 14400.0, 28800.0,
    86400.0,
];
/// Tool call durations in seconds, 5 ms to 10 minutes.
pub const TOOL_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];
/// Purge batch durations in seconds, 1 ms to a minute.
pub const BATCH_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];
/// Model call durations in seconds, 50 ms to 10 minutes.
pub const MODEL_BUCKETS: &[f64] = &[
    0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];

pub const JOBS: &str = "nightshift_jobs";
pub const QUEUE_OLDEST_DUE: &str = "nightshift_queue_oldest_due_age_seconds";
pub const JOB_START_DELAY: &str = "nightshift_job_start_delay_seconds";
pub const JOB_OUTCOMES_TOTAL: &str = "nightshift_job_outcomes_total";
pub const WORKER_SLOTS: &str = "nightshift_worker_slots";
pub const WORKER_BUSY_SLOTS: &str = "nightshift_worker_busy_slots";
pub const RUNS_STARTED: &str = "nightshift_runs_started_total";
pub const RUNS_ENDED: &str = "nightshift_runs_ended_total";
pub const RUN_DURATION: &str = "nightshift_run_duration_seconds";
pub const MODEL_CALLS: &str = "nightshift_model_calls_total";
pub const MODEL_CALL_DURATION: &str = "nightshift_model_call_duration_seconds";
pub const MODEL_TOKENS: &str = "nightshift_model_tokens_total";
pub const MODEL_COST: &str = "nightshift_model_cost_usd";
pub const MODEL_BREAKER: &str = "nightshift_model_breaker_state";
pub const TOOL_CALLS: &str = "nightshift_tool_calls_total";
pub const TOOL_CALL_DURATION: &str = "nightshift_tool_call_duration_seconds";
pub const WEBHOOK_DELIVERIES: &str = "nightshift_webhook_deliveries_total";
pub const NOTIFICATION_DELIVERIES: &str = "nightshift_notification_deliveries_total";
pub const WAKEUPS_ARMED: &str = "nightshift_wakeups_armed";
pub const WAKEUP_LATENESS: &str = "nightshift_wakeup_lateness_seconds";
pub const SCHEDULE_FIRES: &str = "nightshift_schedule_fires_total";
pub const SCHEDULE_MISSED: &str = "nightshift_schedule_missed_fires_total";
pub const LEASE_EXPIRIES: &str = "nightshift_lease_expiries_total";
pub const DEAD_LETTERS: &str = "nightshift_dead_letters_total";
pub const MODEL_ERRORS: &str = "nightshift_model_errors_total";
pub const APPROVALS_PENDING: &str = "nightshift_approvals_pending";
pub const APPROVAL_OLDEST: &str = "nightshift_approval_oldest_pending_age_seconds";
pub const NOTIFICATIONS_PENDING: &str = "nightshift_notifications_pending";
pub const NOTIFICATION_OLDEST: &str = "nightshift_notification_oldest_pending_age_seconds";
pub const BUILD_INFO: &str = "nightshift_build_info";
pub const RETENTION_RUNS_PURGED: &str = "nightshift_retention_runs_purged_total";
pub const RETENTION_ROWS_PURGED: &str = "nightshift_retention_rows_purged_total";
pub const RETENTION_BYTES_PURGED: &str = "nightshift_retention_bytes_purged_total";
pub const RETENTION_BATCH_DURATION: &str = "nightshift_retention_batch_duration_seconds";
pub const RETENTION_LAST_PURGE: &str = "nightshift_retention_last_purge_timestamp_seconds";
pub const RETENTION_FILES_REMOVED: &str = "nightshift_retention_files_removed_total";

const fn metric(
    name: &'static str,
    kind: Kind,
    help: &'static str,
    labels: &'static [Label],
) -> Metric {
    Metric {
        name,
        kind,
        help,
        labels,
        buckets: &[],
    }
}

const fn histogram(
    name: &'static str,
    help: &'static str,
    labels: &'static [Label],
    buckets: &'static [f64],
) -> Metric {
    Metric {
        name,
        kind: Kind::Histogram,
        help,
        labels,
        buckets,
    }
}

/// Every metric Nightshift exports.
pub const METRICS: &[Metric] = &[
    metric(
        JOBS,
        Kind::Gauge,
        "Live jobs per state and lane, read from the store at each scrape: queued (due now), \
         delayed (queued for later), running, parked (of runs that have not ended).",
        &[fixed("state", LIVE_JOB_STATES), config("lane")],
    ),
    metric(
        QUEUE_OLDEST_DUE,
        Kind::Gauge,
        "Seconds the longest-waiting due job of each lane has waited since it became due; no \
         series for a lane with no due job.",
        &[config("lane")],
    ),
    histogram(
        JOB_START_DELAY,
        "Seconds from when a job became due (enqueued, or its delay, retry or wakeup time) to \
         its claim by this daemon's pool.",
        &[config("lane"), fixed("kind", JOB_KINDS)],
        WAIT_BUCKETS,
    ),
    metric(
        JOB_OUTCOMES_TOTAL,
        Kind::Counter,
        "Jobs this daemon ran, by agent, job kind and what the agent runtime made of them.",
        &[
            config("agent"),
            fixed("kind", JOB_KINDS),
            fixed("outcome", JOB_OUTCOMES),
        ],
    ),
    metric(
        WORKER_SLOTS,
        Kind::Gauge,
        "Worker slots of this daemon's pool (worker.slots).",
        &[],
    ),
    metric(
        WORKER_BUSY_SLOTS,
        Kind::Gauge,
        "Worker slots of this daemon's pool running a job now.",
        &[],
    ),
    metric(
        RUNS_STARTED,
        Kind::Counter,
        "Runs this daemon started (their first job began), by agent.",
        &[config("agent")],
    ),
    metric(
        RUNS_ENDED,
        Kind::Counter,
        "Runs that ended on this daemon, by agent and final status: by a job it ran (a run \
         failed by its last attempt counts as failed), or by a cancel, supersession or rescue of a \
         lost worker's job it made while no job of the run ran.",
        &[config("agent"), fixed("status", RUN_END_STATUSES)],
    ),
    histogram(
        RUN_DURATION,
        "Seconds from a run's start to its end, waits included, by agent and final status.",
        &[config("agent"), fixed("status", RUN_END_STATUSES)],
        RUN_BUCKETS,
    ),
    metric(
        MODEL_CALLS,
        Kind::Counter,
        "Model calls through an agent's fallback chain, by configured provider, model and how \
         they ended (a failure is counted under the agent's main model).",
        &[
            config("provider"),
            config("model"),
            fixed("status", MODEL_STATUSES),
        ],
    ),
    histogram(
        MODEL_CALL_DURATION,
        "Seconds a model call took, retries and fallbacks included.",
        &[
            config("provider"),
            config("model"),
            fixed("status", MODEL_STATUSES),
        ],
        MODEL_BUCKETS,
    ),
    metric(
        MODEL_TOKENS,
        Kind::Counter,
        "Tokens of successful model calls, by provider, model and kind.",
        &[
            config("provider"),
            config("model"),
            fixed("kind", TOKEN_KINDS),
        ],
    ),
    metric(
        MODEL_COST,
        Kind::Gauge,
        "USD spent on model calls at the agents' configured prices; only grows (a gauge since \
         the counters count whole numbers): take increase() or rate() of it as of a counter.",
        &[config("provider"), config("model")],
    ),
    metric(
        MODEL_BREAKER,
        Kind::Gauge,
        "The circuit breaker of each configured model: 0 closed, 1 half-open, 2 open; updated \
         at start and after each call through the model.",
        &[config("provider"), config("model")],
    ),
    metric(
        TOOL_CALLS,
        Kind::Counter,
        "Tool calls, by tool (a name the agent was not given counts as `unknown`), durability \
         class and outcome.",
        &[
            config("tool"),
            fixed("class", TOOL_CLASSES),
            fixed("outcome", TOOL_OUTCOMES),
        ],
    ),
    histogram(
        TOOL_CALL_DURATION,
        "Seconds a tool call that ran took (outcomes ok and error).",
        &[
            config("tool"),
            fixed("class", TOOL_CLASSES),
            fixed("outcome", TOOL_OUTCOMES),
        ],
        TOOL_BUCKETS,
    ),
    metric(
        WEBHOOK_DELIVERIES,
        Kind::Counter,
        "Webhook deliveries, by hook and outcome (the counts GET /v1/hooks shows).",
        &[config("hook"), fixed("outcome", HOOK_OUTCOMES)],
    ),
    metric(
        NOTIFICATION_DELIVERIES,
        Kind::Counter,
        "Attempts at run notices, by agent and what they left the delivery in: delivered, \
         retrying (failed, tried again later) or dead (failed for the last time).",
        &[config("agent"), fixed("status", NOTIFY_STATUSES)],
    ),
    metric(
        WAKEUPS_ARMED,
        Kind::Gauge,
        "Sleeping runs with an armed resume job (a wakeup the agent set, or a wait for its \
         background task), by agent, read from the store at each scrape.",
        &[config("agent")],
    ),
    histogram(
        WAKEUP_LATENESS,
        "Seconds from a wakeup's due time to the claim of the resume job it armed.",
        &[],
        WAIT_BUCKETS,
    ),
    metric(
        SCHEDULE_FIRES,
        Kind::Counter,
        "Schedule fires, by schedule, what fired it (the timer, or a manual trigger) and \
         outcome (skipped: held back by overlap = \"skip\").",
        &[
            config("schedule"),
            fixed("trigger", FIRE_TRIGGERS),
            fixed("outcome", FIRE_OUTCOMES),
        ],
    ),
    metric(
        SCHEDULE_MISSED,
        Kind::Counter,
        "Schedule fires missed because no daemon led the timer at their time (dropped, or \
         folded into one fire under missed = \"run_once\").",
        &[config("schedule")],
    ),
    metric(
        LEASE_EXPIRIES,
        Kind::Counter,
        "Jobs whose worker stopped heartbeating and whose lease this daemon found expired, by \
         lane and what became of them: requeued, dead_lettered (it was the last attempt) or \
         cancelled (cancellation had been requested).",
        &[config("lane"), fixed("outcome", RESCUE_OUTCOMES)],
    ),
    metric(
        DEAD_LETTERS,
        Kind::Counter,
        "Jobs this daemon dead-lettered, by lane and reason: failed (the run failed for good), \
         attempts_exhausted (its last attempt failed) or lease_expired (its worker was lost \
         during its last attempt).",
        &[config("lane"), fixed("reason", DEAD_LETTER_REASONS)],
    ),
    metric(
        MODEL_ERRORS,
        Kind::Counter,
        "Failed attempts at a model provider, each retry counted, by configured provider, \
         model and kind (rate_limited is HTTP 429; overloaded is 529 or an overloaded error).",
        &[
            config("provider"),
            config("model"),
            fixed("kind", MODEL_ERROR_KINDS),
        ],
    ),
    metric(
        APPROVALS_PENDING,
        Kind::Gauge,
        "Tool calls waiting for a human's decision, read from the store at each scrape.",
        &[],
    ),
    metric(
        APPROVAL_OLDEST,
        Kind::Gauge,
        "Seconds the oldest pending approval has waited; 0 when none waits.",
        &[],
    ),
    metric(
        NOTIFICATIONS_PENDING,
        Kind::Gauge,
        "Run notices not yet delivered (first attempt or retrying), read from the store at \
         each scrape.",
        &[],
    ),
    metric(
        NOTIFICATION_OLDEST,
        Kind::Gauge,
        "Seconds the oldest undelivered run notice has waited since it was made; 0 when none \
         waits.",
        &[],
    ),
    metric(
        BUILD_INFO,
        Kind::Gauge,
        "Always 1; its label names the running version.",
        &[fixed("version", VERSIONS)],
    ),
    metric(
        RETENTION_RUNS_PURGED,
        Kind::Counter,
        "Finished runs whose history this daemon's purger (or an operator's purge through it) \
         removed, by end state.",
        &[fixed("status", RUN_END_STATUSES)],
    ),
    metric(
        RETENTION_ROWS_PURGED,
        Kind::Counter,
        "Store rows purged: events, checkpoints, jobs, approvals, tasks, outbox rows, \
         notifications, check-run claims, and run rows when no summary is kept.",
        &[],
    ),
    metric(
        RETENTION_BYTES_PURGED,
        Kind::Counter,
        "Bytes of run events and checkpoints purged.",
        &[],
    ),
    histogram(
        RETENTION_BATCH_DURATION,
        "Seconds one purge batch (one transaction) took.",
        &[],
        BATCH_BUCKETS,
    ),
    metric(
        RETENTION_LAST_PURGE,
        Kind::Gauge,
        "Unix time of the last purge batch that removed runs on this daemon (absent until one \
         did).",
        &[],
    ),
    metric(
        RETENTION_FILES_REMOVED,
        Kind::Counter,
        "Directories and files of runs removed from this daemon's data directory, by kind: \
         workspace (at the run's end, or its purge), artifacts, task_log, temp, checkout.",
        &[fixed("kind", RETENTION_FILE_KINDS)],
    ),
];

/// The metric named `name`.
pub fn find(name: &str) -> Option<&'static Metric> {
    METRICS.iter().find(|m| m.name == name)
}
