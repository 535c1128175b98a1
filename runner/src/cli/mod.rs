//! The commands. `serve`, `migrate` and `demo` work on the local config and store. Every
//! other command works through an [`Operator`]: the store the layered config names, or,
//! with `--server URL` (NIGHTSHIFT_SERVER), a daemon's HTTP API with the token from
//! NIGHTSHIFT_API_TOKEN — no config file and no database needed. Output goes to stdout;
//! errors go to stderr with a non-zero exit status.

mod approvals;
mod export;
mod fork;
mod format;
mod notifications;
mod operator;
mod purge;
mod queue;
mod remote;
mod replay;
mod runs;
mod schedules;
mod serve;

pub(crate) use notifications::NotificationsCommand;
pub(crate) use runs::{RunArgs, RunsCommand};
pub(crate) use schedules::SchedulesCommand;

use nightshift_runner::config::{Config, Overrides};
use nightshift_runner::logging::{self, LogFormat};
use nightshift_runner::redaction;

use crate::Cli;
use crate::Command;
use operator::Operator;
use remote::{ApiClient, TOKEN_ENV};

pub(crate) async fn dispatch(cli: Cli) -> anyhow::Result<()> {
    if let Command::Demo { keep } = cli.command {
        // The demo prints a transcript; progress lines would interleave with it.
        logging::init(LogFormat::Text, "warn");
        return nightshift_runner::demo::run(keep).await;
    }
    if let Command::Replay { file } = &cli.command {
        // Offline: the config's agents and tools, never its database, never a daemon.
        logging::init(LogFormat::Text, "warn");
        return replay::replay(cli.config.as_deref(), file).await;
    }
    let local_only = matches!(cli.command, Command::Migrate | Command::Serve { .. });
    if let Some(server) = cli.server.as_deref().filter(|_| !local_only) {
        logging::init(LogFormat::Text, "warn");
        let op = Operator::Remote(ApiClient::new(server, std::env::var(TOKEN_ENV).ok())?);
        return operate(&op, cli.command).await;
    }
    let slots = match &cli.command {
        Command::Serve { slots } => *slots,
        _ => None,
    };
    let overrides = Overrides {
        database_url: cli.database_url.clone(),
        slots,
    };
    if !local_only {
        refuse_without_a_database(cli.config.as_deref(), cli.database_url.as_deref())?;
    }
    let config = Config::load(cli.config.as_deref(), &overrides)?;
    logging::init(config.log.format, "info,sqlx=warn");
    // `serve` exports traces when the config says where to; nothing else does.
    if let (Command::Serve { .. }, Some(endpoint)) = (&cli.command, &config.telemetry.otlp_endpoint)
    {
        // The exporter's HTTP client is reqwest's, built without a TLS crypto provider.
        nightshift_llm::http::install_crypto_provider();
        nightshift_telemetry::traces::install(endpoint, &config.telemetry.service_name)?;
    }
    // From here on every log line is redacted with every secret the config names; the daemon
    // builds that set itself, once, after resolving its API token (one of the secrets).
    if !matches!(cli.command, Command::Serve { .. }) {
        redaction::install_for_logs(redaction::secrets(&config).redactor().clone());
    }
    let store = nightshift_runner::open_store(&config).await?;
    let result = match cli.command {
        Command::Migrate => migrate(&store).await,
        Command::Serve { .. } => serve::serve(&store, &config, cli.config.clone(), overrides).await,
        command => {
            let op = Operator::Local {
                store: store.clone(),
                config: Box::new(config.clone()),
                agents: config.agents.iter().map(|a| a.name.clone()).collect(),
                data_dir: config.runtime.data_dir.clone(),
            };
            operate(&op, command)
                .await
                .map_err(|e| with_schema_hint(e, &config.database.url))
        }
    };
    store.close().await;
    result
}

/// An operator command run where no config says which database to use (no `--config`, no
/// `./nightshift.toml`, no `--database-url` or NIGHTSHIFT_DATABASE_URL) is refused before a
/// database file is created beside the caller.
fn refuse_without_a_database(
    config: Option<&std::path::Path>,
    database_url: Option<&str>,
) -> anyhow::Result<()> {
    use nightshift_runner::config::{DATABASE_URL_ENV, DEFAULT_PATH};
    let env_url = std::env::var(DATABASE_URL_ENV)
        .ok()
        .filter(|u| !u.trim().is_empty());
    if config.is_some()
        || database_url.is_some()
        || env_url.is_some()
        || std::path::Path::new(DEFAULT_PATH).exists()
    {
        return Ok(());
    }
    let here = std::env::current_dir()
        .map(|d| d.display().to_string())
        .unwrap_or_else(|_| ".".into());
    anyhow::bail!(
        "no config: there is no {DEFAULT_PATH} in {here}; pass --config PATH, or \
         --database-url URL (or set {DATABASE_URL_ENV}), or --server URL for a remote daemon \
         (nothing was created)"
    )
}

/// `e` with a hint when the database has no Nightshift schema yet.
fn with_schema_hint(e: anyhow::Error, url: &str) -> anyhow::Error {
    let text = format!("{e:#}");
    let no_schema = text.contains("no such table")
        || (text.contains("relation \"") && text.contains("does not exist"));
    if !no_schema {
        return e;
    }
    let shown = nightshift_store::config::redact_url(url);
    e.context(format!(
        "the database {shown} has no Nightshift schema yet; run `nightshift migrate` (or start \
         `nightshift serve`, which migrates first)"
    ))
}

/// The operator commands, the same over the store and over the API.
async fn operate(op: &Operator, command: Command) -> anyhow::Result<()> {
    match command {
        Command::Run(args) => runs::run(op, args).await,
        Command::Runs { command } => runs::runs(op, command).await,
        Command::Queue => queue::queue(op).await,
        Command::Approve {
            run_id,
            call_id,
            reason,
        } => approvals::decide(op, &run_id, &call_id, true, reason).await,
        Command::Deny {
            run_id,
            call_id,
            reason,
        } => approvals::decide(op, &run_id, &call_id, false, reason).await,
        Command::Approvals => approvals::list(op).await,
        Command::Audit { run, limit } => approvals::audit(op, run.as_deref(), limit).await,
        Command::Schedules { command } => schedules::schedules(op, command).await,
        Command::Notifications { command } => notifications::notifications(op, command).await,
        Command::Migrate
        | Command::Serve { .. }
        | Command::Demo { .. }
        | Command::Replay { .. } => {
            unreachable!("handled by dispatch")
        }
    }
}

async fn migrate(store: &nightshift_store::Store) -> anyhow::Result<()> {
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

/// A listing as a person or a machine reads it: one JSON object per line with `json`, else
/// an aligned table under `header`, each row's cells from `cells`.
fn print_listing<T: serde::Serialize>(
    rows: Vec<T>,
    json: bool,
    header: &[&str],
    cells: impl FnMut(T) -> Vec<String>,
) -> anyhow::Result<()> {
    if json {
        for row in &rows {
            println!("{}", serde_json::to_string(row)?);
        }
        return Ok(());
    }
    let rows: Vec<Vec<String>> = rows.into_iter().map(cells).collect();
    println!("{}", format::table(header, &rows));
    Ok(())
}

/// A listing's `flag` (e.g. `--status`) parsed as `S`; the error names the flag and the
/// allowed values.
fn status_flag<S: std::str::FromStr<Err = nightshift_store::UnknownName>>(
    flag: &str,
    value: Option<String>,
) -> anyhow::Result<Option<S>> {
    value
        .map(|s| s.parse::<S>())
        .transpose()
        .map_err(|e| anyhow::anyhow!("{flag}: {e}"))
}
