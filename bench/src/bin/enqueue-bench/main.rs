//! # enqueue-bench
//!
//! Everything that puts work into the queue, measured against the machine's own ceilings in
//! the same run, on SQLite (a file in a temp dir, production pragmas) and PostgreSQL (a fresh
//! schema per case). Prints one table per backend.
//!
//! Rows:
//! 1. **ceiling**: on SQLite, single-row INSERT commits per second (one writer, WAL,
//!    `synchronous=FULL`); on PostgreSQL, single-row autocommit INSERTs per second into a
//!    plain table with the same number of producers as the row it is compared with.
//!    Beside it, **the schema alone**: a run and its start job committed by one plain
//!    statement each (SQLite: through the `enqueue_start` view, one writer; PostgreSQL:
//!    `enqueue_plain.sql`'s two inserts, that many producers) into a migrated store nothing
//!    else uses: what the rows, index entries and constraints of an enqueue cost without any
//!    of the store's code, so the gap to the single-row ceiling splits into the schema's part
//!    and the store's.
//! 2. **concurrent enqueue**: 1, 8 and 32 producers each calling `Store::enqueue` (no
//!    concurrency key) in a loop; runs per second, the ratio to the ceiling, and in the notes
//!    the ratio to the schema alone.
//! 3. **batch enqueue**: one producer calling `Store::enqueue_many` with 1, 16 and 128 runs
//!    per call; runs per second.
//! 4. **pickup**: an idle pool of 16 slots, one run enqueued at a time; p50/p99 from the
//!    enqueue call to the handler's start. Then the same with 20,000 runs armed to start an
//!    hour later (agents asleep), beside the median time of a claim that finds nothing due
//!    among them: what every claim of a pool with free slots costs.
//! 5. **fixed rate**: a producer offering a fixed rate of single enqueues, open loop (each
//!    starts at its due time whether earlier ones returned or not; SQLite: 0.6× its commit
//!    rate; PostgreSQL: 2,000/s) to a pool of 16 slots running 1 ms jobs, for a few seconds;
//!    the verdict says whether the queue keeps up: enqueues ≥ 95% of the offered rate,
//!    completions ≥ 95% of enqueues, and the depth stays under one second of offered work.
//! 6. **depth target**: a producer keeps 1,000 runs queued with batches of 128 while the pool
//!    of 16 slots runs 1 ms jobs; completions per second is the queue's capacity.
//! 7. **the same with 64 slots**: the fixed rate and the depth target again with a pool of 64.
//!    A slot takes its next job only in the commit that made its last job's end durable, so
//!    with 1 ms jobs a pool's capacity is the ends one settle carries (about half its slots)
//!    per settle; beside the 16-slot rows these show how much of the gap to the ceiling is
//!    the pool's turn-around and how much the machine's.
//!
//! Usage: `cargo run --release -p nightshift-bench --bin enqueue-bench [-- --quick]
//! [--sqlite-only | --postgres-only]`. PostgreSQL comes from `NIGHTSHIFT_BENCH_PG_URL`
//! (default `postgres://postgres@127.0.0.1:5432/test`).
//!
//! The cases are in `ceilings`, `enqueue`, `pickup` and `load`; the plan, the table and the
//! order of the rows are here.

mod ceilings;
mod enqueue;
mod load;
mod pickup;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use nightshift_store::{BackendKind, NewRun, Store, StoreConfig, SystemClock};

use ceilings::{pg_runs_per_commit, sqlite_runs_per_commit};
use enqueue::{batch_enqueue, concurrent_enqueue};
use load::{depth_target, fixed_rate, time_ms};
use pickup::{SLEEPING, arm_sleeping, pickup};

/// The payload of every run: 256 bytes, as in the third-party queue benchmark's contract.
fn payload(i: u64) -> String {
    format!("{i:0>256}")
}

fn new_run(i: u64) -> NewRun {
    NewRun::new("bench", payload(i))
}

/// Sizes of one run of the bench.
struct Plan {
    /// Runs per concurrent-enqueue case.
    enqueues: u64,
    /// Runs per batch case.
    batched: u64,
    pickups: usize,
    fixed_rate_for: Duration,
    commits: u64,
}

impl Plan {
    fn new(quick: bool) -> Self {
        if quick {
            Self {
                enqueues: 1_000,
                batched: 2_048,
                pickups: 50,
                fixed_rate_for: Duration::from_secs(3),
                commits: 500,
            }
        } else {
            Self {
                enqueues: 6_000,
                batched: 12_800,
                pickups: 300,
                fixed_rate_for: Duration::from_secs(10),
                commits: 3_000,
            }
        }
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let plan = Plan::new(std::env::args().any(|a| a == "--quick"));
    let dir = tempfile::tempdir()?;
    let backends = nightshift_bench::backends(dir.path(), "enqueue").await;
    for (name, config) in &backends {
        println!("\n## {name}");
        println!(
            "{:<44} {:>12} {:>12} {:>8}  notes",
            "case", "measured", "ceiling", "ratio"
        );
        let mut bench = Bench {
            base: config.clone(),
            dir: dir.path().to_path_buf(),
            cases: 0,
        };
        bench.run(name, &plan).await?;
    }
    println!(
        "\nmeasured and ceiling in runs (rows) per second unless the case says ms; load \
         average at the end: {}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    Ok(())
}

struct Bench {
    base: StoreConfig,
    dir: std::path::PathBuf,
    cases: u32,
}

/// What the schema-alone ceiling rows measure.
const SCHEMA_ALONE: &str = "one run and its job per commit, plain SQL: the schema alone";

fn row(case: &str, measured: f64, ceiling: Option<f64>, notes: &str) {
    let (c, r) = match ceiling {
        Some(c) => (format!("{c:.0}"), format!("{:.2}x", measured / c)),
        None => ("—".into(), "—".into()),
    };
    println!("{case:<44} {measured:>12.0} {c:>12} {r:>8}  {notes}");
}

impl Bench {
    /// A store in a place of its own (a new file or schema), migrated.
    async fn fresh(&mut self) -> Result<(Store, StoreConfig)> {
        self.cases += 1;
        let mut config = self.base.clone();
        match config.backend()? {
            BackendKind::Sqlite => {
                config.url = format!(
                    "sqlite://{}",
                    self.dir.join(format!("case{}.db", self.cases)).display()
                );
            }
            BackendKind::Postgres => {
                config.schema = Some(format!(
                    "{}_{}",
                    config.schema.as_deref().unwrap_or("bench"),
                    self.cases
                ));
                config.max_connections = 48;
            }
        }
        let store = Store::connect(&config, Arc::new(SystemClock)).await?;
        store.migrate().await?;
        Ok((store, config))
    }

    async fn done(&self, store: Store, config: &StoreConfig) {
        store.close().await;
        nightshift_bench::drop_schema(config).await;
    }

    async fn run(&mut self, name: &str, plan: &Plan) -> Result<()> {
        let sqlite = self.base.backend()? == BackendKind::Sqlite;
        let commit_rate = if sqlite {
            let c = nightshift_bench::sqlite_commit_rate(&self.dir, plan.commits).await?;
            row("ceiling: single-row commits (1 writer)", c, None, "");
            Some(c)
        } else {
            None
        };
        // SQLite has one writer however many producers there are: its schema ceiling once.
        let sqlite_schema_alone = match commit_rate {
            Some(commits) => {
                let rate = self.schema_ceiling(1, plan.enqueues).await?;
                row(
                    "ceiling: run + job (1 writer)",
                    rate,
                    Some(commits),
                    SCHEMA_ALONE,
                );
                Some(rate)
            }
            None => None,
        };
        for producers in [1usize, 8, 32] {
            let ceiling = match commit_rate {
                Some(c) => c,
                None => {
                    let c = self.pg_insert_ceiling(producers, plan.enqueues).await?;
                    row(
                        &format!("ceiling: INSERT, {producers} producers"),
                        c,
                        None,
                        "",
                    );
                    c
                }
            };
            let schema_alone = match sqlite_schema_alone {
                Some(rate) => rate,
                None => {
                    let rate = self.schema_ceiling(producers, plan.enqueues).await?;
                    row(
                        &format!("ceiling: run + job, {producers} producers"),
                        rate,
                        Some(ceiling),
                        SCHEMA_ALONE,
                    );
                    rate
                }
            };
            let (store, config) = self.fresh().await?;
            let rate = concurrent_enqueue(&store, producers, plan.enqueues).await?;
            self.done(store, &config).await;
            row(
                &format!("enqueue, {producers} producers"),
                rate,
                Some(ceiling),
                &format!("{:.2}x the schema alone", rate / schema_alone),
            );
        }
        for per_call in [1u64, 16, 128] {
            let (store, config) = self.fresh().await?;
            let n = if per_call == 1 {
                plan.enqueues
            } else {
                plan.batched
            };
            let rate = batch_enqueue(&store, per_call, n).await?;
            self.done(store, &config).await;
            row(
                &format!("batch enqueue, {per_call} per call, 1 producer"),
                rate,
                commit_rate,
                "",
            );
        }
        let (store, config) = self.fresh().await?;
        let (p50, p99) = pickup(&store, plan.pickups).await?;
        self.done(store, &config).await;
        println!(
            "{:<44} {:>12.2} {:>12} {:>8}  p99 {p99:.2} ms, {} samples",
            "pickup p50 ms, idle pool of 16", p50, "—", "—", plan.pickups
        );
        let (store, config) = self.fresh().await?;
        arm_sleeping(&store, SLEEPING).await?;
        let lease = Duration::from_secs(30);
        let idle_claim = time_ms(|| async {
            let got = store.claim("bench", None, 16, lease).await?;
            assert!(got.is_empty(), "a sleeping run was due");
            Ok(())
        })
        .await?;
        let (p50, p99) = pickup(&store, plan.pickups).await?;
        self.done(store, &config).await;
        println!(
            "{:<44} {:>12.2} {:>12} {:>8}  p99 {p99:.2} ms; a claim finding nothing due {idle_claim:.2} ms",
            format!("pickup p50 ms, {SLEEPING} runs sleeping"),
            p50,
            "—",
            "—"
        );
        let offered = match commit_rate {
            Some(c) => (c * 0.6).round(),
            None => 2_000.0,
        };
        let fixed_for = plan.fixed_rate_for;
        self.fixed_rate_row(offered, commit_rate, fixed_for, SLOTS, ": completions/s")
            .await?;
        let (store, config) = self.fresh().await?;
        let capacity = depth_target(&store, 1_000, fixed_for, SLOTS).await?;
        row(
            &format!("depth target 1000, {SLOTS} slots: completions/s"),
            capacity,
            commit_rate,
            "",
        );
        // Depth with the history that run left: the live per-lane counts operators, the
        // dashboard and /metrics read, beside a count over every job ever run.
        let history: i64 = store.job_counts().await?.iter().map(|c| c.count).sum();
        let live = time_ms(|| async { store.queue_overview().await.map(|_| ()) }).await?;
        let all = time_ms(|| async { store.job_counts().await.map(|_| ()) }).await?;
        println!(
            "{:<44} {live:>12.2} {:>12} {:>8}  job_counts (every job ever) {all:.2} ms; {history} jobs in history",
            "depth: queue_overview ms (live jobs only)", "—", "—"
        );
        self.done(store, &config).await;
        let many = format!(", {MANY_SLOTS} slots");
        self.fixed_rate_row(offered, commit_rate, fixed_for, MANY_SLOTS, &many)
            .await?;
        let (store, config) = self.fresh().await?;
        let capacity = depth_target(&store, 1_000, fixed_for, MANY_SLOTS).await?;
        self.done(store, &config).await;
        row(
            &format!("depth target 1000, {MANY_SLOTS} slots"),
            capacity,
            commit_rate,
            "",
        );
        let _ = name;
        Ok(())
    }

    /// The fixed-rate case on a fresh store with a pool of `slots`, printed as a row named
    /// after the offered rate and `label`, with its verdict.
    async fn fixed_rate_row(
        &mut self,
        offered: f64,
        commit_rate: Option<f64>,
        duration: Duration,
        slots: usize,
        label: &str,
    ) -> Result<()> {
        let (store, config) = self.fresh().await?;
        let fixed = fixed_rate(&store, offered, duration, slots).await?;
        self.done(store, &config).await;
        row(
            &format!("fixed rate {offered:.0}/s{label}"),
            fixed.completed_per_second,
            commit_rate,
            &fixed.verdict(offered),
        );
        Ok(())
    }

    /// What the schema itself allows an enqueue: a run and its start job (their rows, index
    /// entries and constraints) committed by one plain statement per run, `producers`
    /// connections at once (SQLite: one, its single writer, whatever `producers` says), into a
    /// freshly migrated store that nothing else uses; runs per second. Beside the single-row
    /// ceilings it splits the gap between the schema's cost and the store's own.
    async fn schema_ceiling(&mut self, producers: usize, n: u64) -> Result<f64> {
        let (store, config) = self.fresh().await?;
        store.close().await;
        let rate = match config.backend()? {
            BackendKind::Sqlite => sqlite_runs_per_commit(&config, n).await?,
            BackendKind::Postgres => pg_runs_per_commit(&config, producers, n).await?,
        };
        nightshift_bench::drop_schema(&config).await;
        Ok(rate)
    }

    /// Single-row autocommit INSERTs per second into a plain table, `producers` at once.
    async fn pg_insert_ceiling(&mut self, producers: usize, rows: u64) -> Result<f64> {
        let (store, config) = self.fresh().await?;
        store.close().await;
        let rate = nightshift_bench::pg_insert_rate(&config, producers, rows).await?;
        nightshift_bench::drop_schema(&config).await;
        Ok(rate)
    }
}

/// The pool's slots in every case but the last two.
const SLOTS: usize = 16;

/// The pool's slots in the last two cases.
const MANY_SLOTS: usize = 64;
