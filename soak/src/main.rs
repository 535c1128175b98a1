//! `crash-soak`: starts the real `nightshift serve` (one daemon on SQLite, two on one
//! PostgreSQL schema), enqueues scripted runs whose tools write a ledger, SIGKILLs the
//! daemons at random `--kills` times, lets every run finish, and prints one markdown table per
//! backend (what it measures: `nightshift_soak`). Exits 1 when an invariant broke
//! (the tables are printed first), 2 when the soak itself could not run or hit its time limit.
//!
//! `crash-soak tool --ledger PATH --class CLASS` is the soak's own command tool: it reads the
//! input on stdin and appends `run_id call_id idempotency_key class` to the ledger in one
//! `O_APPEND` write.

use std::io::{Read as _, Write as _};
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use nightshift_soak::{daemon, run, truth};
use tokio::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Backend {
    Sqlite,
    Postgres,
    Both,
}

#[derive(Debug, Parser)]
#[command(
    about = "SIGKILL real nightshift daemons at random and check that no run, tool call \
                   or model turn is lost or repeated"
)]
struct Args {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    /// Which backend(s) to soak.
    #[arg(long, value_enum, default_value = "both")]
    backend: Backend,
    /// Kill moments per backend (with two daemons a moment kills one or both).
    #[arg(long, default_value_t = 20)]
    kills: usize,
    /// Runs to enqueue per backend, spread over the kills. Default: twice the kills, at least 8.
    #[arg(long)]
    runs: Option<usize>,
    /// Seed of the kill schedule (default: from the clock; printed, so a soak can be repeated).
    #[arg(long)]
    seed: Option<u64>,
    /// The nightshift binary. Default: the one next to this binary, else
    /// ${CARGO_TARGET_DIR:-target}/{release,debug}/nightshift.
    #[arg(long)]
    binary: Option<PathBuf>,
    /// PostgreSQL server (the soak makes and drops a schema of its own). Default:
    /// NIGHTSHIFT_TEST_PG_URL, else postgres://postgres@127.0.0.1:5432/test.
    #[arg(long)]
    pg_url: Option<String>,
    /// Hard limit on the whole soak, in seconds.
    #[arg(long, default_value_t = 1800)]
    time_limit_secs: u64,
    /// How long runs may take to finish after the last kill, in seconds.
    #[arg(long, default_value_t = 180)]
    settle_secs: u64,
    /// Shortest and longest time the daemons work between kills, in ms.
    #[arg(long, default_value_t = 100)]
    min_work_ms: u64,
    #[arg(long, default_value_t = 1500)]
    max_work_ms: u64,
    /// Each scripted reply waits this long (so kills land inside model calls too).
    #[arg(long, default_value_t = 40)]
    model_delay_ms: u64,
    /// Each tool sleeps this long before and after its ledger line.
    #[arg(long, default_value_t = 15)]
    tool_sleep_ms: u64,
    /// `max_attempts` sent with every run (default: the server's).
    #[arg(long)]
    max_attempts: Option<i64>,
    /// Keep the temporary directory and the PostgreSQL schema for inspection.
    #[arg(long)]
    keep: bool,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// The soak's command tool (run by the daemons, not by people).
    #[command(hide = true)]
    Tool {
        #[arg(long)]
        ledger: PathBuf,
        #[arg(long)]
        class: String,
        #[arg(long, default_value_t = 0)]
        sleep_ms: u64,
    },
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    if let Some(Cmd::Tool {
        ledger,
        class,
        sleep_ms,
    }) = &args.cmd
    {
        return match tool(ledger, class, *sleep_ms) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("soak tool: {e:#}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    let rt = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let code = rt.block_on(soak(args));
    std::process::ExitCode::from(code)
}

/// One tool execution: the ledger line is written before the output, so an `ok` result
/// always has its line.
fn tool(ledger: &std::path::Path, class: &str, sleep_ms: u64) -> anyhow::Result<()> {
    let mut input = String::new();
    std::io::stdin().read_to_string(&mut input)?;
    let value: serde_json::Value = serde_json::from_str(&input)?;
    let env = |k: &str| std::env::var(k).unwrap_or_default();
    let line = truth::ledger_line(
        &env("NIGHTSHIFT_RUN_ID"),
        &env("NIGHTSHIFT_TOOL_CALL_ID"),
        &env("NIGHTSHIFT_IDEMPOTENCY_KEY"),
        class,
    );
    std::thread::sleep(Duration::from_millis(sleep_ms));
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(ledger)?;
    // One write of a short line to an O_APPEND file: never interleaved with another's.
    f.write_all(line.as_bytes())?;
    drop(f);
    std::thread::sleep(Duration::from_millis(sleep_ms));
    println!("{class} done for turn {}", value["turn"]);
    Ok(())
}

async fn soak(args: Args) -> u8 {
    let limit = Duration::from_secs(args.time_limit_secs);
    let deadline = Instant::now() + limit;
    // The hard limit: past it (plus time to stop), kill every daemon and give up.
    tokio::spawn(async move {
        tokio::time::sleep(limit + Duration::from_secs(30)).await;
        for pid in daemon::live_pids() {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
        eprintln!("crash-soak: hard time limit of {limit:?} reached; daemons killed");
        std::process::exit(2);
    });
    match soak_all(&args, deadline).await {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(e) => {
            eprintln!("crash-soak: {e:#}");
            2
        }
    }
}

/// Soaks each backend asked for; true when every invariant held.
async fn soak_all(args: &Args, deadline: Instant) -> anyhow::Result<bool> {
    let nightshift = run::find_nightshift(args.binary.as_deref())?;
    let tool_exe = std::env::current_exe()?;
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    if args.min_work_ms > args.max_work_ms {
        anyhow::bail!(
            "--min-work-ms {} is above --max-work-ms {}; give a range low..high",
            args.min_work_ms,
            args.max_work_ms
        );
    }
    let runs = args.runs.unwrap_or((2 * args.kills).max(8));
    let pg_url = args.pg_url.clone().unwrap_or_else(|| {
        std::env::var("NIGHTSHIFT_TEST_PG_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
    });
    println!(
        "crash soak: {} kills, {runs} runs per backend, seed {seed}, binary {}\n",
        args.kills,
        nightshift.display()
    );
    let mut all_ok = true;
    let backends: &[&'static str] = match args.backend {
        Backend::Sqlite => &["SQLite"],
        Backend::Postgres => &["PostgreSQL"],
        Backend::Both => &["SQLite", "PostgreSQL"],
    };
    for &backend in backends {
        let dir = tempfile::Builder::new().prefix("crash-soak-").tempdir()?;
        let (db, daemons) = if backend == "SQLite" {
            (truth::Db::Sqlite(dir.path().join("soak.db")), 1)
        } else {
            let schema = format!("crash_soak_{}_{}", std::process::id(), seed % 1_000_000);
            truth::check_postgres(&pg_url).await?;
            (
                truth::Db::Postgres {
                    url: pg_url.clone(),
                    schema,
                },
                2,
            )
        };
        let settings = run::Settings {
            backend,
            db: db.clone(),
            daemons,
            kills: args.kills,
            runs,
            seed,
            work_ms: (args.min_work_ms, args.max_work_ms),
            model_delay_ms: args.model_delay_ms,
            tool_sleep_ms: args.tool_sleep_ms,
            max_attempts: args.max_attempts,
            settle: Duration::from_secs(args.settle_secs),
            nightshift: nightshift.clone(),
            tool_exe: tool_exe.clone(),
            dir: dir.path().to_path_buf(),
        };
        let started = Instant::now();
        let result = run::soak(&settings, deadline).await;
        if args.keep {
            let kept = dir.keep();
            println!("kept {} (and the schema, if any)", kept.display());
        } else if let truth::Db::Postgres { url, schema } = &db {
            truth::drop_schema(url, schema).await;
        }
        let report = result?;
        println!("{}", report.render());
        println!("({backend}: {:.0} s)\n", started.elapsed().as_secs_f64());
        let broken = report.broken();
        for b in &broken {
            println!("INVARIANT BROKEN ({backend}): {b}");
        }
        all_ok &= broken.is_empty();
        if Instant::now() >= deadline {
            anyhow::bail!("the time limit of {} s was reached", args.time_limit_secs);
        }
    }
    Ok(all_ok)
}
