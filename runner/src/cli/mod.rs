//! The commands. Each opens the store from the layered config, does one thing and reports
//! it on stdout; errors go to stderr with a non-zero exit status.

use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use nightshift_scheduler::cron::{self as schedules, FireOutcome};
use nightshift_scheduler::{Intake, RunRequest};
use nightshift_store::{CancelOutcome, Store, Trigger};

use nightshift_runner::config::{Config, Overrides};
use nightshift_runner::logging::{self, LogFormat};
use nightshift_runner::notify::shown_url;
use nightshift_runner::redaction;

mod serve;

use crate::Cli;
use crate::Command;

/// Arguments of `nightshift run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The agent to run.
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
    /// unless it succeeded). The daemon (`nightshift serve`) must be running.
    #[arg(long)]
    wait: bool,
}

/// `nightshift runs …`
#[derive(Debug, Subcommand)]
pub enum RunsCommand {
    /// List runs, newest first.
    List {
        /// Only runs in this state (queued, running, waiting, succeeded, failed, …).
        #[arg(long)]
        status: Option<String>,
        #[arg(long, default_value_t = 20)]
        limit: i64,
    },
    /// Print a run and its jobs as JSON.
    Show { id: String },
    /// Print a run's events as JSON lines.
    Events { id: String },
    /// Cancel a run (a running job stops at its next heartbeat; a sleeping run ends now).
    Cancel { id: String },
    /// Wake a sleeping run now instead of at its wakeup time.
    Wake { id: String },
    /// List sleeping runs and when each wakes, soonest first.
    Wakeups {
        #[arg(long, default_value_t = 100)]
        limit: i64,
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
        #[arg(long, default_value_t = 50)]
        limit: i64,
    },
}

/// `nightshift notifications …`
#[derive(Debug, Subcommand)]
pub enum NotificationsCommand {
    /// Run notice deliveries, newest first: delivery id, run, status, attempts, last error,
    /// URL (without its path and query).
    List {
        /// Only this run's deliveries.
        #[arg(long)]
        run: Option<String>,
        /// Only deliveries in this state (pending, delivered, dead).
        #[arg(long)]
        status: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: i64,
    },
    /// Send a dead delivery again: fresh attempts, the same delivery id.
    Redeliver { delivery_id: String },
}

/// `nightshift schedules …`
#[derive(Debug, Subcommand)]
pub enum SchedulesCommand {
    /// List the schedules: next fire in the schedule's zone and in UTC, last fire, last run.
    List,
    /// Fire a schedule now (its timing is unchanged; the overlap policy applies).
    Trigger { name: String },
}

pub async fn dispatch(cli: Cli) -> anyhow::Result<()> {
    if let Command::Demo { keep } = cli.command {
        // The demo prints a transcript; progress lines would interleave with it.
        logging::init(LogFormat::Text, "warn");
        return nightshift_runner::demo::run(keep).await;
    }
    let slots = match &cli.command {
        Command::Serve { slots } => *slots,
        _ => None,
    };
    let overrides = Overrides {
        database_url: cli.database_url.clone(),
        slots,
    };
    let config = Config::load(cli.config.as_deref(), &overrides)?;
    logging::init(config.log.format, "info,sqlx=warn");
    // From here on every log line is redacted with every secret the config names; the daemon
    // builds that set itself, once, after resolving its API token (one of the secrets).
    if !matches!(cli.command, Command::Serve { .. }) {
        redaction::install_for_logs(redaction::secrets(&config).redactor().clone());
    }
    let store = nightshift_runner::open_store(&config).await?;
    let result = match cli.command {
        Command::Migrate => migrate(&store).await,
        Command::Serve { .. } => serve::serve(&store, &config, cli.config.clone(), overrides).await,
        Command::Run(args) => run(&store, &config, args).await,
        Command::Runs { command } => runs(&store, command).await,
        Command::Queue => queue(&store).await,
        Command::Approve {
            run_id,
            call_id,
            reason,
        } => decide(&store, &run_id, &call_id, true, reason).await,
        Command::Deny {
            run_id,
            call_id,
            reason,
        } => decide(&store, &run_id, &call_id, false, reason).await,
        Command::Approvals => approvals(&store).await,
        Command::Schedules { command } => {
            let intake = Intake::new(store.clone(), config.agents.iter().map(|a| a.name.clone()));
            schedules_command(&intake, command).await
        }
        Command::Notifications { command } => notifications_command(&store, command).await,
        Command::Demo { .. } => unreachable!("handled above"),
    };
    store.close().await;
    result
}

async fn migrate(store: &Store) -> anyhow::Result<()> {
    let report = store.migrate().await?;
    if report.applied.is_empty() {
        println!("schema is up to date (version {})", report.version);
    } else {
        println!(
            "applied {} migration(s); schema is at version {}",
            report.applied.len(),
            report.version
        );
    }
    Ok(())
}

async fn run(store: &Store, config: &Config, args: RunArgs) -> anyhow::Result<()> {
    let req = RunRequest {
        agent: args.agent,
        prompt: args.prompt,
        trigger: Trigger::Cli,
        idempotency_key: args.idempotency_key,
        lane: args.lane,
        priority: args.priority,
        delay: args.delay.map(Duration::from_secs),
        max_attempts: args.max_attempts,
        concurrency_key: None,
        concurrency_policy: None,
    };
    let wait = args.wait;
    // A run can be enqueued before the daemon first started: bring the schema up first
    // (idempotent, under the migration lock).
    store.migrate().await?;
    let intake = Intake::new(store.clone(), config.agents.iter().map(|a| a.name.clone()));
    let enqueued = intake.submit(req).await?;
    if enqueued.duplicate {
        println!(
            "{}\t(already enqueued with this idempotency key; job {})",
            enqueued.run_id, enqueued.job_id
        );
    } else {
        println!("{}\t(enqueued as job {})", enqueued.run_id, enqueued.job_id);
    }
    if wait {
        let run =
            nightshift_runner::transcript::follow(store, &enqueued.run_id, Duration::MAX).await?;
        println!("status: {}", run.status);
        println!(
            "usage: {} model calls, {} input + {} output tokens, ${:.4}",
            run.turns, run.input_tokens, run.output_tokens, run.cost_usd
        );
        if run.status != nightshift_store::RunStatus::Succeeded {
            anyhow::bail!(
                "run {} ended as {}: {}",
                run.id,
                run.status,
                run.error.unwrap_or_default()
            );
        }
    }
    Ok(())
}

/// A listing's `--status` flag parsed as `S`; the error names the flag and the allowed values.
fn status_flag<S: std::str::FromStr<Err = nightshift_store::UnknownName>>(
    status: Option<String>,
) -> anyhow::Result<Option<S>> {
    status
        .map(|s| s.parse::<S>())
        .transpose()
        .map_err(|e| anyhow::anyhow!("--status: {e}"))
}

async fn runs(store: &Store, command: RunsCommand) -> anyhow::Result<()> {
    match command {
        RunsCommand::List { status, limit } => {
            let status = status_flag::<nightshift_store::RunStatus>(status)?;
            for run in store.list_runs(status, limit).await? {
                println!(
                    "{}\t{}\t{}\t{} turns\t${:.4}",
                    run.id, run.agent, run.status, run.turns, run.cost_usd
                );
            }
        }
        RunsCommand::Show { id } => {
            let run = store
                .run(&id)
                .await?
                .with_context(|| format!("run {id} not found"))?;
            let jobs = store.jobs_of_run(&id).await?;
            let notifications: Vec<serde_json::Value> = store
                .notifications(Some(&id), None, 100)
                .await?
                .into_iter()
                .map(|n| {
                    serde_json::json!({
                        "delivery_id": n.delivery_id,
                        "url": shown_url(&n.url),
                        "status": n.status,
                        "attempts": n.attempts,
                        "last_error": n.last_error,
                        "delivered_at": n.delivered_at,
                    })
                })
                .collect();
            let doc =
                serde_json::json!({ "run": run, "jobs": jobs, "notifications": notifications });
            println!("{}", serde_json::to_string_pretty(&doc)?);
        }
        RunsCommand::Events { id } => {
            store
                .run(&id)
                .await?
                .with_context(|| format!("run {id} not found"))?;
            for event in store.events(&id, 0).await? {
                println!("{}", serde_json::to_string(&event)?);
            }
        }
        RunsCommand::Wake { id } => {
            store.wake_now(&id).await?;
            println!("{id}\twoken; it resumes as soon as a worker is free");
        }
        RunsCommand::Wakeups { limit } => {
            for w in store.pending_wakeups(limit).await? {
                let due = chrono::DateTime::from_timestamp_millis(w.due_at)
                    .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
                    .unwrap_or_default();
                println!(
                    "{}\t{}\t{due}\t{}",
                    w.run_id,
                    w.agent,
                    w.reason().unwrap_or_default()
                );
            }
        }
        RunsCommand::Tasks { run, status, limit } => {
            let status = status_flag::<nightshift_store::TaskStatus>(status)?;
            let tasks = match &run {
                Some(id) => {
                    store
                        .run(id)
                        .await?
                        .with_context(|| format!("run {id} not found"))?;
                    let mut tasks = store.tasks_of_run(id).await?;
                    tasks.retain(|t| status.is_none_or(|s| t.status == s));
                    tasks.reverse();
                    tasks
                }
                None => store.list_tasks(status, limit).await?,
            };
            for t in tasks
                .iter()
                .take(usize::try_from(limit.max(1)).unwrap_or(50))
            {
                println!(
                    "{}\t{}\t{}\t{}\t{}",
                    t.id,
                    t.run_id,
                    t.status,
                    t.detail.as_deref().unwrap_or("-"),
                    t.command
                );
            }
        }
        RunsCommand::Cancel { id } => match store.cancel_run(&id).await? {
            CancelOutcome::Cancelled => println!("{id}\tcancelled"),
            CancelOutcome::Requested => {
                println!(
                    "{id}\tcancellation requested; the running job stops at its next heartbeat"
                )
            }
        },
    }
    Ok(())
}

async fn decide(
    store: &Store,
    run_id: &str,
    call_id: &str,
    approve: bool,
    reason: Option<String>,
) -> anyhow::Result<()> {
    store
        .decide_approval(run_id, call_id, approve, reason.as_deref())
        .await?;
    let verb = if approve { "approved" } else { "denied" };
    println!("{run_id}\t{call_id}\t{verb}; the run resumes as soon as a worker is free");
    Ok(())
}

async fn approvals(store: &Store) -> anyhow::Result<()> {
    for a in store.pending_approvals(1000).await? {
        let expires = chrono::DateTime::from_timestamp_millis(a.expires_at)
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
            .unwrap_or_default();
        println!(
            "{}\t{}\t{}\texpires {expires}\t{}",
            a.run_id, a.call_id, a.tool, a.input
        );
    }
    Ok(())
}

async fn notifications_command(store: &Store, command: NotificationsCommand) -> anyhow::Result<()> {
    match command {
        NotificationsCommand::List { run, status, limit } => {
            let status = status_flag::<nightshift_store::DeliveryStatus>(status)?;
            for n in store.notifications(run.as_deref(), status, limit).await? {
                println!(
                    "{}\t{}\t{}\t{}/{}\t{}\t{}",
                    n.delivery_id,
                    n.run_id,
                    n.status,
                    n.attempts,
                    n.max_attempts,
                    n.last_error.as_deref().unwrap_or("-"),
                    shown_url(&n.url)
                );
            }
        }
        NotificationsCommand::Redeliver { delivery_id } => {
            store.redeliver(&delivery_id).await?;
            println!("{delivery_id}\tqueued again; the notifier sends it with fresh attempts");
        }
    }
    Ok(())
}

async fn schedules_command(intake: &Intake, command: SchedulesCommand) -> anyhow::Result<()> {
    let store = intake.store();
    // The schedules table may be newer than the database (idempotent, under the lock).
    store.migrate().await?;
    match command {
        SchedulesCommand::List => {
            let rows = store.schedules().await?;
            if rows.is_empty() {
                println!(
                    "no schedules; add [[schedules]] to nightshift.toml or POST /v1/schedules"
                );
                return Ok(());
            }
            println!(
                "NAME\tSOURCE\tCRON\tZONE\tNEXT (LOCAL)\tNEXT (UTC)\tLAST FIRE (LOCAL)\tLAST RUN\t\
                 STATUS\tFIRED/SKIPPED/MISSED"
            );
            for row in rows {
                let v = schedules::describe(store, row).await?;
                let next_local = match (&v.next_fire_local, v.row.enabled) {
                    (_, false) => "disabled".to_string(),
                    (Some(t), true) => t.clone(),
                    (None, true) => "never".to_string(),
                };
                println!(
                    "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}/{}/{}",
                    v.row.name,
                    v.row.source.as_str(),
                    v.row.cron,
                    v.row.timezone,
                    next_local,
                    v.next_fire_utc.as_deref().unwrap_or("-"),
                    v.last_fire_local.as_deref().unwrap_or("-"),
                    v.row.last_run_id.as_deref().unwrap_or("-"),
                    v.last_run_status.map_or("-".to_string(), |s| s.to_string()),
                    v.row.fired_count,
                    v.row.skipped_count,
                    v.row.missed_count,
                );
            }
        }
        SchedulesCommand::Trigger { name } => match schedules::trigger(intake, &name).await? {
            FireOutcome::Enqueued { run_id, duplicate } => {
                println!(
                    "{run_id}\t(enqueued{})",
                    if duplicate { ", already" } else { "" }
                )
            }
            FireOutcome::Skipped { active_run } => println!(
                "skipped: run {active_run} of this schedule is still active (overlap = skip)"
            ),
        },
    }
    Ok(())
}

async fn queue(store: &Store) -> anyhow::Result<()> {
    for jobs in store.job_counts().await? {
        println!("{}\t{}", jobs.state, jobs.count);
    }
    for w in store.workers().await? {
        println!(
            "worker\t{}\tpid {}\tlast heartbeat {}",
            w.id, w.pid, w.last_heartbeat_at
        );
    }
    Ok(())
}
