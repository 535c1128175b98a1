//! The Nightshift test suite: one binary, so the heavy link happens once.
//!
//! - `queue`: the queue conformance suite, run against SQLite and PostgreSQL.
//! - `pool`: the worker pool over both backends.
//! - `process`: real processes (the test worker and `nightshift` itself) killed with real
//!   signals.
//! - `agent`: the agent runtime: loop, WAL, recovery, fidelity, budgets, compaction.
//! - `api`: the HTTP API: token, enqueue, dedupe, validation, listing, events, cancel.
//! - `cli`: the `nightshift` command line.
//! - `crash`: real `nightshift serve` SIGKILLed mid-tool-call and between turns; cancellation.
//! - `provider`: the daemon against a fake Anthropic Messages API on loopback.
//! - `schedules`: cron schedules with a manual clock: DST, missed fires, overlap, config
//!   schedules.
//! - `schedules_ha`: several daemons on one database: exactly-once fires, compare-and-set,
//!   leader takeover and fencing.
//! - `schedules_http`: the `/v1/schedules` API, and a real `nightshift serve` firing a schedule.
//! - `setup`: connecting and migrating: concurrent starters, bad URLs, unreachable servers,
//!   newer schemas.

mod agent;
mod api;
mod cli;
mod crash;
mod pool;
mod process;
mod provider;
mod queue;
mod schedules;
mod schedules_ha;
mod schedules_http;
mod setup;
