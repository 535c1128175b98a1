//! The soak's verdict (pure): from the accepted runs, the database rows and the ledger, the
//! numbers of the table and the invariants they break.
//!
//! Definitions, all from stored rows, never from what the daemons said:
//! - **lost**: a run the API acknowledged that has no row at the end, or whose status is not
//!   terminal after the bounded wait.
//! - **executions of a call**: ledger lines with its `(run_id, call_id)`; a side-effect call
//!   is one `tool_started` of a `side_effect` tool. Max must be 1.
//! - **outcome unknown**: `tool_result` events with `interrupted: true`.
//! - **re-runs of a class**: its ledger lines minus the distinct calls they belong to.
//! - **duplicated model turn**: an `assistant_message` whose script turn (the marker text
//!   the script put in that reply, i.e. the number of assistant messages in the request the
//!   scripted provider answered) was already logged earlier in the same run.
//! - **short of its script**: a succeeded run whose log lacks one of its script's replies,
//!   or a `tool_started` (tool and `turn` input) of one of its scripted calls, or that call's
//!   `tool_result`, or whose result is not the script's final text. This is exactly "fewer
//!   tool calls and model turns than the script asked for".
//!
//! A run's log is read against its script in `run_log`, the runs are judged in `judge`, and
//! the report says what broke and renders its table in `report`.

mod judge;
mod report;
mod run_log;

use std::collections::BTreeMap;

pub use judge::judge;

/// A run the API acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    pub run_id: String,
    pub agent: String,
}

/// How the soak went, besides what the database says.
#[derive(Debug, Clone, Default)]
pub struct Context {
    pub backend: String,
    pub daemons: usize,
    pub kills_planned: usize,
    pub kill_moments: usize,
    pub daemons_killed: usize,
    pub enqueue_refused: usize,
    pub seed: u64,
}

/// The numbers of one backend's table.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub ctx: Context,
    pub accepted: usize,
    pub terminal: usize,
    pub lost: Vec<String>,
    pub by_status: BTreeMap<String, usize>,
    pub max_job_attempts: i64,
    pub side_effect_calls: usize,
    pub side_effect_max: usize,
    pub side_effect_twice: Vec<String>,
    pub side_effect_never_ran: usize,
    pub outcome_unknown: usize,
    pub outcome_unknown_ran: usize,
    /// class → (executions, distinct calls executed)
    pub executions: BTreeMap<&'static str, (usize, usize)>,
    pub duplicated_turns: usize,
    pub runs_with_duplicated_turns: usize,
    pub unscripted_replies: usize,
    pub succeeded: usize,
    pub short: Vec<(String, String)>,
    pub results_not_once: Vec<String>,
    pub key_changed: Vec<String>,
    pub key_shared: Vec<String>,
    pub ok_without_execution: Vec<String>,
    pub turn_counter_mismatch: usize,
    pub foreign_ledger_lines: usize,
    pub failure_reasons: BTreeMap<String, usize>,
}

#[cfg(test)]
mod tests;
