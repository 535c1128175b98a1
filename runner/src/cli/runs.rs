//! `nightshift run` and `nightshift runs …`: enqueue, list, show, follow, read the events of,
//! cancel, wake and purge runs, locally or through a daemon's API (see [`Operator`]).
//! `runs follow` and `run --wait` print a run's transcript from its start and as it happens,
//! and exit zero only when it succeeded; Ctrl-C stops following and leaves the run alone.

use std::time::Duration;

use clap::{Args, Subcommand};
use nightshift_store::{CancelOutcome, RunFilter, RunStatus, Trigger};

use super::format;
use super::operator::{NewRunArgs, Operator, RunRow, RunState};
use super::{print_listing, status_flag};
use nightshift_runner::transcript;

/// Arguments of `nightshift run`.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The agent to run (an `[[agents]]` name of the config).
    agent: String,
    /// What the agent should do.
    prompt: String,
    /// Runs with the same key are started once; a repeat prints the first run's id.
    #[arg(long)]
    idempotency_key: Option<String>,
    /// The lane (worker slots can be reserved per lane).
    #[arg(long)]
    lane: Option<String>,
    /// Higher runs first (-1000 to 1000; default 0).
    #[arg(long, allow_hyphen_values = true)]
    priority: Option<i64>,
    /// Start no earlier than this many seconds from now.
    #[arg(long, value_name = "SECONDS")]
    delay: Option<u64>,
    /// Dead-letter after this many attempts (default 5).
    #[arg(long)]
    max_attempts: Option<i64>,
    /// Follow the run: print its transcript as it happens and exit when it ends (non-zero
    /// unless it succeeded). Ctrl-C stops following; the run goes on.
    #[arg(long)]
    wait: bool,
    /// Print `{"run_id", "job_id", "duplicate"}` as one JSON line instead of the id alone.
    #[arg(long)]
    json: bool,
}

/// `nightshift runs …`
#[derive(Debug, Subcommand)]
pub(crate) enum RunsCommand {
    /// List runs, newest first: id, agent, status, trigger, age, duration, turns, cost and
    /// the first line of the error.
    List {
        /// Only runs in this state (queued, running, waiting, awaiting_approval, succeeded,
        /// failed, cancelled, …).
        #[arg(long)]
        status: Option<String>,
        /// Only runs of this agent.
        #[arg(long)]
        agent: Option<String>,
        /// Only runs started this way (cli, api, schedule, webhook, …).
        #[arg(long)]
        trigger: Option<String>,
        /// Only runs created since then: a span back from now (30m, 2h, 7d), an RFC 3339
        /// time, or epoch milliseconds.
        #[arg(long, value_name = "WHEN")]
        since: Option<String>,
        /// Only runs with this concurrency key.
        #[arg(long)]
        key: Option<String>,
        /// At most this many runs (1-200).
        #[arg(long, default_value_t = 20)]
        limit: i64,
        /// JSON lines, one run each, instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Print a run, its jobs and its notice deliveries as JSON.
    Show {
        /// The run's id.
        id: String,
    },
    /// Print a run's transcript from its start and as it happens, until it ends; exits
    /// non-zero unless it succeeded. Works on any run (CLI, API, schedule, webhook).
    /// Ctrl-C stops following; the run goes on.
    Follow {
        /// The run's id.
        id: String,
    },
    /// Print a run's events: one readable line each (sequence number, time, type, summary),
    /// or JSON lines with `--json`.
    Events {
        /// The run's id.
        id: String,
        /// JSON lines (`seq`, `type`, `created_at`, `payload` as a JSON value).
        #[arg(long)]
        json: bool,
    },
    /// Cancel a run (a running job stops at its next heartbeat; a sleeping run ends now).
    Cancel {
        /// The run's id.
        id: String,
    },
    /// Fork a run: a new run that goes on from its state after N model calls, reusing their
    /// recorded tool results (no side effect at or before that point runs again), with a
    /// prompt, model or replaced tool results of your choice.
    Fork(super::fork::ForkArgs),
    /// Rerun a run from its start with its input, or (with --status) every ended run a
    /// filter matches, each once.
    Rerun(super::fork::RerunArgs),
    /// Wake a sleeping run now instead of at its wakeup time.
    Wake {
        /// The run's id.
        id: String,
    },
    /// List sleeping runs and when each wakes, soonest first.
    Wakeups {
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: i64,
        /// JSON lines, one sleeping run each (`due_at` in epoch ms), instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// List background tasks (`run_command` with `background: true`), newest first: id, run,
    /// status, how it ended, command.
    Tasks {
        /// Only this run's tasks.
        #[arg(long)]
        run: Option<String>,
        /// Only tasks in this state (running, succeeded, failed, timed_out, stopped, lost).
        #[arg(long)]
        status: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: i64,
        /// JSON lines, one task each, instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Purge finished runs that ended before a time: their events, checkpoints, jobs,
    /// approvals, tasks, notices and files go; each run's row stays as its summary unless
    /// --no-summary. Runs not ended, or with work still running, are never touched.
    Purge(super::purge::PurgeArgs),
    /// Export an ended run as a replay file (its events, already redacted, and the request
    /// of each model call as the loop builds it with this config — the daemon's with
    /// --server), for `nightshift replay FILE`. JSON on stdout, or --output FILE.
    Export(super::export::ExportArgs),
}

pub(crate) async fn run(op: &Operator, args: RunArgs) -> anyhow::Result<()> {
    let (wait, json) = (args.wait, args.json);
    let submitted = op
        .submit(NewRunArgs {
            agent: args.agent,
            prompt: args.prompt,
            idempotency_key: args.idempotency_key,
            lane: args.lane,
            priority: args.priority,
            delay_seconds: args.delay,
            max_attempts: args.max_attempts,
        })
        .await?;
    if json {
        println!(
            "{}",
            serde_json::json!({"run_id": submitted.run_id, "job_id": submitted.job_id,
                               "duplicate": submitted.duplicate})
        );
    } else {
        // The id alone on stdout (`ID=$(nightshift run …)`); the rest is for a person.
        println!("{}", submitted.run_id);
        if submitted.duplicate {
            eprintln!(
                "already enqueued with this idempotency key (job {}); nothing new was enqueued",
                submitted.job_id
            );
        } else {
            eprintln!("enqueued as job {}", submitted.job_id);
        }
    }
    if wait {
        follow_to_end(op, &submitted.run_id).await?;
    }
    Ok(())
}

/// How often a follower asks for news.
const FOLLOW_POLL: Duration = Duration::from_millis(250);

/// Prints the run's transcript from its start and as events arrive, until it ends; then
/// its status and usage. An error unless it succeeded.
async fn follow_to_end(op: &Operator, run_id: &str) -> anyhow::Result<()> {
    eprintln!("following run {run_id}: Ctrl-C stops following; the run goes on");
    let mut seen = 0;
    let mut last_status: Option<RunStatus> = None;
    let mut checked_workers = false;
    let run: RunState = loop {
        // The state is read before the events, so the events that led to a terminal state
        // are printed before returning.
        let run = op.run_state(run_id).await?;
        for event in op.events(run_id, seen).await? {
            let payload = match &event.payload {
                serde_json::Value::String(raw) => raw.clone(),
                json => json.to_string(),
            };
            for line in transcript::render_parts(run_id, event.seq, &event.event_type, &payload) {
                println!("{line}");
            }
            seen = event.seq;
        }
        if run.status.is_terminal() {
            break run;
        }
        if run.status == RunStatus::Queued && !checked_workers {
            checked_workers = true;
            if !op.queue().await?.has_live_worker() {
                eprintln!("{}", no_worker_notice(run_id));
            }
        }
        if last_status != Some(run.status) {
            if let Some(why) = waiting(run.status) {
                println!("── the run is {why}; still following");
            }
            last_status = Some(run.status);
        }
        tokio::time::sleep(FOLLOW_POLL).await;
    };
    println!("status: {}", run.status);
    println!(
        "usage: {} model calls, {} input + {} output tokens, ${:.4}",
        run.turns, run.input_tokens, run.output_tokens, run.cost_usd
    );
    if run.status != RunStatus::Succeeded {
        anyhow::bail!(
            "run {} ended as {}: {}",
            run.id,
            run.status,
            run.error.unwrap_or_default()
        );
    }
    Ok(())
}

/// What a follower says when the run waits on something other than a worker.
fn waiting(status: RunStatus) -> Option<&'static str> {
    match status {
        RunStatus::Waiting => {
            Some("sleeping until its wakeup (`nightshift runs wake` ends it early)")
        }
        RunStatus::AwaitingApproval => Some("waiting for an approval (`nightshift approvals`)"),
        _ => None,
    }
}

/// The notice for a queued run that no live worker is consuming.
pub(crate) fn no_worker_notice(run_id: &str) -> String {
    format!(
        "note: run {run_id} is queued, but no daemon is consuming the queue (no worker has \
         sent a heartbeat lately); start one with `nightshift serve`. Ctrl-C stops following \
         (the run stays queued); `nightshift runs follow {run_id}` resumes following."
    )
}

pub(crate) async fn runs(op: &Operator, command: RunsCommand) -> anyhow::Result<()> {
    match command {
        RunsCommand::List {
            status,
            agent,
            trigger,
            since,
            key,
            limit,
            json,
        } => {
            let filter = RunFilter {
                status: status_flag::<RunStatus>("--status", status)?,
                agent,
                trigger: status_flag::<Trigger>("--trigger", trigger)?,
                concurrency_key: key,
                since: since.map(|s| format::since(&s, op.now())).transpose()?,
                ..RunFilter::default()
            };
            list_runs(op, &filter, limit, json).await?;
        }
        RunsCommand::Purge(args) => super::purge::purge(op, args).await?,
        RunsCommand::Export(args) => super::export::export(op, args).await?,
        RunsCommand::Show { id } => {
            println!("{}", serde_json::to_string_pretty(&op.show(&id).await?)?);
        }
        RunsCommand::Follow { id } => follow_to_end(op, &id).await?,
        RunsCommand::Events { id, json } => print_events(op, &id, json).await?,
        RunsCommand::Cancel { id } => match op.cancel(&id).await? {
            CancelOutcome::Cancelled => println!("{id}\tcancelled"),
            CancelOutcome::Requested => {
                println!(
                    "{id}\tcancellation requested; the running job stops at its next heartbeat"
                )
            }
        },
        RunsCommand::Fork(args) => super::fork::fork(op, args).await?,
        RunsCommand::Rerun(args) => super::fork::rerun(op, args).await?,
        RunsCommand::Wake { id } => {
            op.wake(&id).await?;
            println!("{id}\twoken; it resumes as soon as a worker is free");
        }
        RunsCommand::Wakeups { limit, json } => {
            let now = op.now();
            print_listing(
                op.wakeups(limit).await?,
                json,
                &["RUN", "AGENT", "WAKES", "REASON"],
                |w| {
                    vec![
                        w.run_id,
                        w.agent,
                        format::ago(now, w.due_at),
                        w.reason.unwrap_or_default(),
                    ]
                },
            )?;
        }
        RunsCommand::Tasks {
            run,
            status,
            limit,
            json,
        } => {
            let status = status_flag("--status", status)?;
            list_tasks(op, run.as_deref(), status, limit, json).await?;
        }
    }
    Ok(())
}

/// `runs tasks`: background tasks (of one run, or of all), a table or JSON lines.
async fn list_tasks(
    op: &Operator,
    run: Option<&str>,
    status: Option<nightshift_store::TaskStatus>,
    limit: i64,
    json: bool,
) -> anyhow::Result<()> {
    print_listing(
        op.tasks(run, status, limit).await?,
        json,
        &["TASK", "RUN", "STATUS", "ENDED", "COMMAND"],
        |t| {
            vec![
                t.id,
                t.run_id,
                t.status.to_string(),
                t.detail.unwrap_or_else(|| "-".to_string()),
                format::first_line(&t.command, COMMAND_CHARS),
            ]
        },
    )
}

/// `runs list`: the runs `filter` selects, newest first, a table or JSON lines.
async fn list_runs(
    op: &Operator,
    filter: &RunFilter,
    limit: i64,
    json: bool,
) -> anyhow::Result<()> {
    let now = op.now();
    print_listing(
        op.runs(filter, limit).await?,
        json,
        &[
            "ID", "AGENT", "STATUS", "TRIGGER", "AGE", "DURATION", "TURNS", "COST", "ERROR",
        ],
        |r| run_cells(r, now),
    )
}

/// `runs events`: a run's event log, a line per event (or its JSON).
async fn print_events(op: &Operator, id: &str, json: bool) -> anyhow::Result<()> {
    for e in &op.events(id, 0).await? {
        if json {
            println!("{}", serde_json::to_string(e)?);
        } else {
            println!(
                "{:>4}  {}  {:<19}  {}",
                e.seq,
                format::utc(e.created_at),
                e.event_type,
                format::event_summary(&e.event_type, &e.payload)
            );
        }
    }
    Ok(())
}

/// The most characters of a task's command `runs tasks` shows.
const COMMAND_CHARS: usize = 80;

/// The most characters of an error `runs list` shows.
const ERROR_CHARS: usize = 60;

/// The cells of a run's row in `runs list`.
fn run_cells(r: RunRow, now: i64) -> Vec<String> {
    let duration = match (r.started_at, r.finished_at) {
        (Some(s), Some(f)) => format::duration(f - s),
        (Some(s), None) => format!("{} so far", format::duration(now - s)),
        _ => "-".to_string(),
    };
    vec![
        r.id,
        r.agent,
        r.status.to_string(),
        r.trigger_kind.to_string(),
        format::ago(now, r.created_at),
        duration,
        r.turns.to_string(),
        format!("${:.4}", r.cost_usd),
        r.error_head
            .as_deref()
            .map_or(String::new(), |e| format::first_line(e, ERROR_CHARS)),
    ]
}
