//! The Nightshift test suite: one binary, so the heavy link happens once.
//!
//! - `queue`: the queue conformance suite, run against SQLite and PostgreSQL.
//! - `pool`: the worker pool over both backends.
//! - `process`: real processes (the test worker and `nightshift` itself) killed with real
//!   signals.
//! - `agent`: the agent runtime: loop, WAL, recovery, fidelity, budgets, compaction.
//! - `api`: the HTTP API: token, enqueue, dedupe, validation, listing, events, cancel.
//! - `cli`: the `nightshift` command line.
//! - `hooks`: webhook intake: signatures, routing, templates, dedupe, refusals, a real daemon.
//! - `crash`: real `nightshift serve` SIGKILLed mid-tool-call and between turns; cancellation.
//! - `provider`: the daemon against a fake Anthropic Messages API on loopback.
//! - `setup`: connecting and migrating: concurrent starters, bad URLs, unreachable servers,
//!   newer schemas.

mod agent;
mod api;
mod cli;
mod crash;
mod hooks;
mod pool;
mod process;
mod provider;
mod queue;
mod setup;
