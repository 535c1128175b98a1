//! # nightshift
//!
//! The `nightshift` binary: reads the configuration, opens the store and runs one command.
//! `serve` is the daemon (`nightshift_runner::daemon`: migrations, then the HTTP API, timer,
//! notifier and worker pool until SIGTERM, stopped in a documented order); this binary adds
//! only what is process-wide — signals, the umask, not dumpable. The other commands are
//! one-shot operations on the same store, or on a remote daemon's API with `--server`
//! (see `cli`). The hidden `sandbox-exec` is the launcher that
//! confines a tool's command (see `nightshift_sandbox::launch`).

mod cli;

/// The process's allocator: mimalloc instead of glibc's malloc. A webhook delivery
/// allocates and frees thousands of small blocks (its 22 KB body parsed into a JSON tree,
/// HTTP buffers, statements' rows) across the runtime's threads, and in `perf` glibc's
/// `malloc`/`free` and their arena upkeep were a fifth of the daemon's samples under
/// `hooks-bench`; with mimalloc the same bench answered 9-26% more deliveries per second
/// (`bench/MEASUREMENTS.md`, "The allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Nightshift runs LLM agents as durable jobs: runs are queued in SQLite or PostgreSQL,
/// worked by a daemon (`nightshift serve`) that survives crashes and restarts, started from
/// this CLI, the HTTP API, cron schedules or webhooks, and watched and steered from here.
///
/// The operator commands (run, runs, queue, approvals, approve, deny, schedules,
/// notifications) work on the database the config names, or, with --server, on a remote
/// daemon through its HTTP API (no config file or database access needed).
#[derive(Debug, Parser)]
#[command(name = "nightshift", version)]
struct Cli {
    /// The config file (default: ./nightshift.toml when it exists).
    #[arg(long, global = true, value_name = "PATH")]
    config: Option<PathBuf>,
    /// The database URL, overriding the config and NIGHTSHIFT_DATABASE_URL.
    #[arg(long, global = true, value_name = "URL")]
    database_url: Option<String>,
    /// Work through this daemon's HTTP API (e.g. http://nightshift.internal:8080) instead of
    /// the database. The API token is read from the environment variable
    /// NIGHTSHIFT_API_TOKEN, never from a flag (flags show in `ps`). Ignored by serve,
    /// migrate, replay and demo.
    #[arg(long, global = true, env = "NIGHTSHIFT_SERVER", value_name = "URL")]
    server: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Apply the database migrations this binary has.
    Migrate,
    /// Run the daemon: apply migrations, then work the queue until SIGTERM or Ctrl-C.
    Serve {
        /// Worker slots (jobs run at once), overriding worker.slots.
        #[arg(long)]
        slots: Option<usize>,
    },
    /// Enqueue a run of AGENT on PROMPT and print its id.
    Run(cli::RunArgs),
    /// List, follow, inspect, cancel or wake runs.
    Runs {
        #[command(subcommand)]
        command: cli::RunsCommand,
    },
    /// Show the live jobs per state and lane, how long the oldest has waited, and the
    /// workers with the age of their last heartbeat.
    Queue,
    /// Approve a tool call waiting for a decision (see `nightshift approvals`).
    Approve {
        /// The run whose tool call waits (the RUN column of `nightshift approvals`).
        run_id: String,
        /// The tool call's id (the CALL column of `nightshift approvals`, e.g. toolu_01…).
        call_id: String,
        /// Why, kept with the decision and shown in the run's events.
        #[arg(long)]
        reason: Option<String>,
    },
    /// Deny a tool call waiting for a decision; the model gets a `denied` result.
    Deny {
        /// The run whose tool call waits (the RUN column of `nightshift approvals`).
        run_id: String,
        /// The tool call's id (the CALL column of `nightshift approvals`, e.g. toolu_01…).
        call_id: String,
        /// Why, kept with the decision and given to the model with the denial.
        #[arg(long)]
        reason: Option<String>,
    },
    /// List the tool calls waiting for a decision, oldest first.
    Approvals,
    /// Show the audit trail: who approved, denied, cancelled, woke, changed or triggered
    /// what, newest first.
    Audit {
        /// Only the actions on this run.
        #[arg(long)]
        run: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: i64,
    },
    /// List or trigger cron schedules.
    Schedules {
        #[command(subcommand)]
        command: cli::SchedulesCommand,
    },
    /// List run notice deliveries, or send a dead one again.
    Notifications {
        #[command(subcommand)]
        command: cli::NotificationsCommand,
    },
    /// Replay a run from its file (`nightshift runs export`), offline: the agent loop runs
    /// again with this config's agent and tools, model replies and tool results from the file
    /// (no network, no database, nothing run), and the first model call whose request differs
    /// from the recorded one is reported with its turn. Exits non-zero on a divergence.
    Replay {
        /// The replay file.
        file: PathBuf,
    },
    /// Run a sample agent end to end on the embedded default: SQLite, a scripted model (no
    /// API key), real file and command tools. Prints the transcript and usage.
    Demo {
        /// Keep the demo's files (database, workspace) in this directory instead of a
        /// temporary one.
        #[arg(long, value_name = "DIR")]
        keep: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    // `nightshift sandbox-exec …` is the launcher of sandboxed commands: handled first, while
    // this process is still single-threaded (no runtime, no logging), and never returns when
    // it runs the command.
    if let Some(code) = nightshift_sandbox::launch::dispatch(std::env::args_os().collect()) {
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    // Before anything is created: the database, data directory and logs are private.
    nightshift_runner::private::restrict_umask();
    let cli = Cli::parse();
    if ends_quietly_on_a_closed_pipe(&cli.command) {
        quiet_on_closed_pipe();
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(cli::dispatch(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Whether `command` only prints: such a command whose reader went away (`runs list | head`)
/// should end at once and quietly, as `ls` or `grep` do, instead of panicking on the failed
/// write. Not the daemons (`serve`, `demo`): they keep ignoring SIGPIPE, so a pipe to a tool's
/// command that closes early is an error they handle, never their end.
fn ends_quietly_on_a_closed_pipe(command: &Command) -> bool {
    !matches!(command, Command::Serve { .. } | Command::Demo { .. })
}

/// Restores SIGPIPE's default action (Rust's runtime ignores it), so a write to a closed pipe
/// ends the process by the signal — exit status 128+13 in a shell, no backtrace.
#[allow(unsafe_code)] // The binary's one `unsafe`: see SAFETY below.
fn quiet_on_closed_pipe() {
    use nix::sys::signal::{SigHandler, Signal, signal};
    // SAFETY: SIG_DFL installs no handler of ours; nothing else in this process has set one
    // for SIGPIPE, and no thread has been started yet.
    let _ = unsafe { signal(Signal::SIGPIPE, SigHandler::SigDfl) };
}
