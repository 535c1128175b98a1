//! The Nightshift test suite: one binary, so the heavy link happens once.
//!
//! The store's own conformance (the queue, attempts, group commit, concurrency keys, the
//! outbox, NUL text, listing, migrations, PostgreSQL's plans) is not here: it is the library
//! `nightshift-store-conformance` (`store-conformance/`), run on both backends by its own
//! tests. What is here needs more than the store.
//!
//! - `attempts`: the worker's `JobOutcome::Defer` written through `defer_until`.
//! - `pool`: the worker pool over both backends.
//! - `process`: real processes (the test worker and `nightshift` itself) killed with real
//!   signals.
//! - `agent`: the agent runtime: loop, WAL, recovery, fidelity, budgets, compaction.
//! - `approval`: tool calls that wait for a human's decision, also across SIGKILL.
//! - `api`: the HTTP API: token, enqueue, dedupe, validation, listing, events, cancel.
//! - `cli`: the `nightshift` command line.
//! - `hooks`: webhook intake: signatures, routing, templates, dedupe, refusals, a real daemon.
//! - `crash`: real `nightshift serve` SIGKILLed mid-tool-call and between turns; cancellation.
//! - `daemon`: a whole daemon in process (`nightshift_runner::daemon`) on port 0: a run over
//!   its HTTP API, then a run in flight at the shutdown drained and recorded, in order.
//! - `provider`: the daemon against a fake Anthropic Messages API on loopback.
//! - `hostile`: the daemon against a hostile provider speaking both wire formats: duplicate
//!   and reused tool-call ids, schema violations, empty and cut-off replies, outages,
//!   malformed 200s, NUL bytes and unknown stop reasons; every request checked like the real
//!   APIs check it.
//! - `wakeup`: wakeups the agent sets (park, resume in the same session, crash) and the
//!   fence that keeps a superseded run from starting side effects.
//! - `schedules`: cron schedules with a manual clock: DST, missed fires, overlap, config
//!   schedules.
//! - `schedules_ha`: several daemons on one database: exactly-once fires, compare-and-set,
//!   leader takeover and fencing.
//! - `schedules_http`: the `/v1/schedules` API, and a real `nightshift serve` firing a schedule.
//! - `schedules_clock`: the real daemon following schedule edits (SIGHUP, `PATCH`) at once,
//!   fires owed after downtime, and two PostgreSQL daemons with skewed clocks (libfaketime).
//! - `notify`: run notifications: signed deliveries with retries to a real receiver, and the
//!   daemon SIGKILLed around them.
//! - `tasks`: background commands: a run waiting for and woken by its task, lost tasks, and a
//!   real `nightshift serve` SIGKILLed with a task running.
//! - `hostile_loop`: the agent loop in process against duplicate, missing and reused tool-call
//!   ids, empty replies, schema violations, outages and old logs.
//! - `nul_text`: a prompt holding NUL bytes accepted over HTTP and read back identical.
//! - `loop_property`: the loop through generated hostile replies and crash points, with its
//!   promises checked after each case.
//! - `sandbox`: the command sandbox through the real daemon: attacks on its environment,
//!   memory, token, database and other runs fail; `serve` refuses where it cannot be enforced.
//! - `sandbox_reach`: what commands reach besides files: PostgreSQL over its socket and TCP,
//!   a loopback HTTP service, an outside UNIX socket and a SysV queue refused with the
//!   network on (the egress proxy) and off; a `[sandbox] connect` grant reached when on.
//! - `security`: every secret the daemon holds (provider key, API token, hook, notify and
//!   runtime secrets) printed by commands in plain and encoded forms and across cut points,
//!   written by the model, echoed by a provider's 401 — then a sweep of every byte the
//!   daemon wrote or sent finds none of them.
//! - `dashboard`: the web dashboard as a browser speaks to it: sign-in, pages, CSRF refusals.
//! - `dashboard_pages`: its queue, schedules, webhooks, notifications and approvals pages and
//!   their actions, each refused without CSRF or from another site.
//! - `runs_list`: listing runs over `GET /v1/runs`: filters, pages, bad parameters refused.
//! - `logs`: the daemon's JSON log: every line an object, the job's lines carrying its run,
//!   job, attempt and agent, one line at the run's start and one at its end.
//! - `openapi`: `GET /openapi.json` lists every route served (and the README's), with the
//!   bearer scheme, the error answers and the request schemas the handlers check.
//! - `store_down`: the API while the store is really down (a cut proxy to PostgreSQL, a
//!   held SQLite write lock): 503 with `Retry-After`, `/readyz` not ready, then recovery.
//! - `metrics`: `GET /metrics` of a daemon in process: a run with tools, then the scrape's
//!   counts per agent, model, tool, hook, schedule, notice and wakeup.
//! - `traces`: OTLP traces of a real `serve` decoded by a receiver: one trace per run across
//!   its jobs, the sender's `traceparent` continued, GenAI attributes, nothing secret.
//! - `cli_remote`: `runs follow` on a webhook run, and every operator command over `--server`
//!   printing what the local mode prints.
//! - `service`: `ops/nightshift.service` through `systemd-analyze verify`, and `serve` under
//!   the unit's restrictions still running sandboxed commands.
//! - `github_tools`: the GitHub tools in a daemon against a fake GitHub REST API (App JWT
//!   verified): reads, pagination, marker comments, a review pinned to the run's head.
//! - `github_checks`: check runs kept for pull-request runs (started before the first model
//!   call, filled in by the model, completed from the run's outbox — also for a run cancelled
//!   while queued), and the merged-pull-request search.
//! - `checkout`: a repository cloned into a run's workspace from a fake git host (smart
//!   HTTP behind GitHub's token check): a head SHA at depth 1, a branch, a pinned commit kept
//!   or fetched again, no token on disk, and each failure its own error.
//! - `review_bot`: `ops/examples/review-bot` run by `serve` against the fake GitHub with a git
//!   host: check run, checkout at the head, review, verdict, a comment answered, an expired
//!   installation token refreshed, no token in any stored byte or file.
//! - `command_path`: sandboxed commands get the minimal PATH (or `[sandbox] path`), never the
//!   daemon's; a bad entry stops `serve`.
//! - `file_bounds`: a sparse 2 GiB one-line file read, edited and searched through a real
//!   `serve`: clear cut answers, and the daemon's peak RSS grows by less than 64 MiB.
//! - `http_limits`: the daemon's API and metrics listener refuse a 100 KB request head with
//!   431 and still answer ordinary requests.
//! - `workspace`: `[agents.workspace]` checkouts in a daemon: a branch's newest commit ready
//!   before the model, a missing ref or an unrenderable template failing the run first.
//! - `github_review`: the review bot through real processes and signed deliveries: SIGKILLed
//!   right after the review POST (exactly one review), and superseded by a push mid-review.
//! - `examples`: each example in `ops/examples/` loaded from its real file and run by a real
//!   `nightshift serve` against fakes (model, GitHub, Slack): the nightly digest schedule
//!   posting the day's merged pull requests, and a long task that sleeps on a wakeup and
//!   reads and stops its background command.

mod agent;
mod api;
mod approval;
mod attempts;
mod audit;
mod checkout;
mod cli;
mod cli_remote;
mod command_path;
mod crash;
mod daemon;
mod dashboard;
mod dashboard_pages;
mod examples;
mod fake_github;
mod fakes;
mod file_bounds;
mod github_checks;
mod github_lost_answers;
mod github_review;
mod github_tools;
mod hooks;
mod hostile;
mod hostile_loop;
mod http_limits;
mod inbox;
mod logs;
mod loop_property;
mod mcp_runs;
mod mcp_stdio;
mod metrics;
mod notify;
mod nul_text;
mod openapi;
mod openapi_conformance;
mod pool;
mod process;
mod provider;
mod replay;
mod retention;
mod review_bot;
mod runs_list;
mod sandbox;
mod sandbox_reach;
mod schedules;
mod schedules_clock;
mod schedules_ha;
mod schedules_http;
mod security;
mod service;
mod store_down;
mod tasks;
mod traces;
mod wakeup;
mod workspace;
