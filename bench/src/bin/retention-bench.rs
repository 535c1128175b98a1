//! # retention-bench
//!
//! What purging costs the queue: the throughput of a pool running 1 ms jobs alone, then while
//! the purger's loop removes 100,000 finished runs, on SQLite and PostgreSQL. Prints one
//! table, a row per backend, with the ratio (the target: at least 0.90).
//!
//! How: 100,000 runs that ended 60 days ago are seeded by plain SQL, each with its start
//! job, 3 events of ~200 bytes and a 1 KB checkpoint (the rows a purge removes). A feeder keeps
//! a backlog of runs queued for a real worker [`Pool`](nightshift_worker::Pool) of 16 slots
//! whose jobs sleep 1 ms. The purge runs exactly as the daemon's purger does
//! (`Store::purge_batch` of 500 runs, then the rest
//! `nightshift_runner::retention::purger::rest_after` gives), but behind a gate: windows of
//! `--window-seconds` alternate, the purger paused then purging, until every seeded run is
//! purged. Alternating cancels the drift of a shared machine (other builds, the tables
//! growing); the ratio compares the medians of the two kinds of window.
//!
//! Usage: `cargo run --release -p nightshift-bench --bin retention-bench [-- --sqlite-only |
//! --postgres-only] [--runs N] [--window-seconds S] [--batch B] [--pause-ms P]`. PostgreSQL comes
//! from `NIGHTSHIFT_BENCH_PG_URL` (default `postgres://postgres@127.0.0.1:5432/test`), in a
//! fresh schema.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;
use nightshift_bench::pool::{Worker, start_pool};
use nightshift_runner::retention::purger::rest_after;
use nightshift_store::{NewRun, PurgeRule, RunStatus, Store, StoreConfig, SystemClock};
use tokio_util::sync::CancellationToken;

const SLOTS: usize = 16;
/// Runs kept queued ahead of the pool.
const BACKLOG: i64 = 2_000;
const DAY_MS: i64 = 86_400_000;

fn arg(name: &str) -> Option<u64> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
}

struct Measured {
    /// Jobs/s of each window with the purger paused, and with it purging.
    alone: Vec<f64>,
    purging: Vec<f64>,
    /// Seconds the purger was purging, until every seeded run was gone.
    purge_seconds: f64,
    purged: u64,
    batches: u64,
    max_batch_ms: f64,
}

#[tokio::main]
async fn main() -> Result<()> {
    let runs = arg("--runs").unwrap_or(100_000);
    let window = Duration::from_secs(arg("--window-seconds").unwrap_or(3));
    let batch = arg("--batch").unwrap_or(500) as i64;
    let pause = Duration::from_millis(arg("--pause-ms").unwrap_or(50));
    let dir = tempfile::tempdir()?;
    let backends = nightshift_bench::backends(dir.path(), "retention").await;
    println!(
        "## Purge of {runs} finished runs beside a pool of {SLOTS} slots of 1 ms jobs \
         (batch {batch}, pause {} ms, windows of {} s)",
        pause.as_millis(),
        window.as_secs()
    );
    println!(
        "{:<12} {:>8} {:>10} {:>10} {:>7} {:>8} {:>10} {:>13} {:>8} {:>10}",
        "backend",
        "windows",
        "alone/s",
        "purging/s",
        "ratio",
        "worst",
        "purge (s)",
        "runs/s purged",
        "batches",
        "max batch"
    );
    for (name, config) in &backends {
        let m = measure(config, runs, window, batch, pause).await?;
        let (alone, purging) = (median(&m.alone), median(&m.purging));
        // The worst pair: each purging window against the alone window before it.
        let worst = m
            .purging
            .iter()
            .zip(&m.alone)
            .map(|(p, a)| p / a)
            .fold(f64::INFINITY, f64::min);
        println!(
            "{name:<12} {:>8} {alone:>10.0} {purging:>10.0} {:>7.2} {worst:>8.2} {:>10.1} {:>13.0} {:>8} {:>8.0}ms",
            m.purging.len(),
            purging / alone,
            m.purge_seconds,
            m.purged as f64 / m.purge_seconds,
            m.batches,
            m.max_batch_ms
        );
        nightshift_bench::drop_schema(config).await;
    }
    println!(
        "\nwindows alternate: the purger paused, then purging, until every run is purged; \
         alone/s and purging/s are the medians, ratio = purging ÷ alone, worst = the lowest \
         purging window ÷ the alone window before it. Load average at the end: {}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    Ok(())
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    nightshift_bench::percentile(&sorted, 0.5)
}

async fn measure(
    config: &StoreConfig,
    runs: u64,
    window: Duration,
    batch: i64,
    pause: Duration,
) -> Result<Measured> {
    let store = Store::connect(config, Arc::new(SystemClock)).await?;
    store.migrate().await?;
    let ended_at = store.now() - 60 * DAY_MS;
    seed(config, runs, ended_at).await?;
    let completed = Arc::new(AtomicU64::new(0));
    let feeding = CancellationToken::new();
    let feeder = tokio::spawn(feed(store.clone(), completed.clone(), feeding.clone()));
    let (stop, pool) = start_pool(&store, Worker::one_ms(&completed), SLOTS);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (purging, gate) = tokio::sync::watch::channel(false);
    let purger = tokio::spawn(purge_all(store.clone(), batch, pause, gate));
    let mut m = Measured {
        alone: Vec::new(),
        purging: Vec::new(),
        purge_seconds: 0.0,
        purged: 0,
        batches: 0,
        max_batch_ms: 0.0,
    };
    while !purger.is_finished() {
        purging.send_replace(false);
        let alone = rate(&completed, window).await;
        purging.send_replace(true);
        let during = rate(&completed, window).await;
        m.purge_seconds += window.as_secs_f64();
        // A window the purge ended in is not a purging window.
        if !purger.is_finished() {
            m.alone.push(alone);
            m.purging.push(during);
        }
    }
    let (purged, batches, max_batch) = purger.await??;
    (m.purged, m.batches, m.max_batch_ms) = (purged, batches, max_batch.as_secs_f64() * 1000.0);
    feeding.cancel();
    feeder.await??;
    stop.cancel();
    pool.await??;
    store.close().await;
    Ok(m)
}

/// Jobs finished per second over `window`.
async fn rate(completed: &AtomicU64, window: Duration) -> f64 {
    let start = completed.load(Ordering::Relaxed);
    let t = Instant::now();
    tokio::time::sleep(window).await;
    (completed.load(Ordering::Relaxed) - start) as f64 / t.elapsed().as_secs_f64()
}

/// The purger's loop over one rule: batches of `batch`, each followed by its rest, while
/// `gate` says to purge.
async fn purge_all(
    store: Store,
    batch: i64,
    pause: Duration,
    mut gate: tokio::sync::watch::Receiver<bool>,
) -> Result<(u64, u64, Duration)> {
    let rule = PurgeRule {
        status: RunStatus::Succeeded,
        ended_before: store.now() - 30 * DAY_MS,
        agent: None,
        except_agents: Vec::new(),
        keep_summary: true,
    };
    let (mut purged, mut batches, mut max) = (0, 0, Duration::ZERO);
    loop {
        gate.wait_for(|on| *on).await?;
        let t = Instant::now();
        let done = store.purge_batch(&rule, batch).await?;
        let took = t.elapsed();
        if done.runs.is_empty() {
            return Ok((purged, batches, max));
        }
        purged += done.runs.len() as u64;
        batches += 1;
        max = max.max(took);
        tokio::time::sleep(rest_after(took, pause)).await;
    }
}

/// Keeps about [`BACKLOG`] runs queued ahead of the pool until `stop`.
async fn feed(store: Store, completed: Arc<AtomicU64>, stop: CancellationToken) -> Result<()> {
    let mut enqueued: u64 = 0;
    while !stop.is_cancelled() {
        let queued = enqueued as i64 - completed.load(Ordering::Relaxed) as i64;
        if queued >= BACKLOG {
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        }
        let runs: Vec<NewRun> = (0..200).map(|_| NewRun::new("live", "work")).collect();
        for r in store.enqueue_many(&runs).await? {
            r?;
            enqueued += 1;
        }
    }
    Ok(())
}

/// Seeds `runs` runs that succeeded at `ended_at`, each with its job, 3 events and a
/// checkpoint, by plain SQL.
async fn seed(config: &StoreConfig, runs: u64, ended_at: i64) -> Result<()> {
    let payload = format!("{{\"text\":\"{}\"}}", "x".repeat(190));
    let sqlite = [
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1) \
         INSERT INTO runs (id, agent, status, trigger_kind, input, created_at, updated_at, \
         started_at, finished_at) SELECT 'old-' || i, 'old', 'succeeded', 'api', 'p', ?2, ?2, \
         ?2, ?2 FROM n WHERE ?3 IS NOT NULL",
        "INSERT INTO jobs (run_id, kind, lane, payload, run_at, max_attempts, status, \
         created_at, updated_at, finished_at) SELECT id, 'start', 'default', '{}', ?2, 5, \
         'succeeded', ?2, ?2, ?2 FROM runs WHERE agent = 'old' AND ?1 > 0 AND ?3 IS NOT NULL",
        "INSERT INTO run_events (run_id, seq, job_id, lease_token, type, payload, created_at) \
         SELECT r.id, s.seq, 0, 0, 'note', ?3, ?2 FROM runs r, (SELECT 1 AS seq UNION ALL \
         SELECT 2 UNION ALL SELECT 3) s WHERE r.agent = 'old' AND ?1 > 0",
        "INSERT INTO checkpoints (run_id, through_seq, format_version, body, size_bytes, \
         job_id, lease_token, created_at) SELECT id, 3, 1, zeroblob(1000), 1000, 0, 0, ?2 \
         FROM runs WHERE agent = 'old' AND ?1 > 0 AND ?3 IS NOT NULL",
    ];
    let postgres = [
        "INSERT INTO runs (id, agent, status, trigger_kind, input, created_at, updated_at, \
         started_at, finished_at) SELECT 'old-' || i, 'old', 'succeeded', 'api', 'p', $2, $2, \
         $2, $2 FROM generate_series(1, $1) AS i WHERE $3::text IS NOT NULL",
        "INSERT INTO jobs (run_id, kind, lane, payload, run_at, max_attempts, status, \
         created_at, updated_at, finished_at) SELECT id, 'start', 'default', '{}', $2, 5, \
         'succeeded', $2, $2, $2 FROM runs WHERE agent = 'old' AND $1 > 0 \
         AND $3::text IS NOT NULL",
        "INSERT INTO run_events (run_id, seq, job_id, lease_token, type, payload, created_at) \
         SELECT r.id, s.seq, 0, 0, 'note', $3, $2 FROM runs r, generate_series(1, 3) AS s(seq) \
         WHERE r.agent = 'old' AND $1 > 0",
        "INSERT INTO checkpoints (run_id, through_seq, format_version, body, size_bytes, \
         job_id, lease_token, created_at) SELECT id, 3, 1, decode(repeat('00', 1000), 'hex'), \
         1000, 0, 0, $2 FROM runs WHERE agent = 'old' AND $1 > 0 AND $3::text IS NOT NULL",
    ];
    let n = i64::try_from(runs)?;
    if let Some(schema) = &config.schema {
        use sqlx::Connection;
        let opts: sqlx::postgres::PgConnectOptions = config.url.parse()?;
        let mut c =
            sqlx::PgConnection::connect_with(&opts.options([("search_path", schema)])).await?;
        for sql in postgres {
            bind(sqlx::query(sql), n, ended_at, &payload)
                .execute(&mut c)
                .await?;
        }
        sqlx::query("ANALYZE").execute(&mut c).await?;
    } else {
        let mut c = nightshift_bench::sqlite_connection(config).await?;
        for sql in sqlite {
            bind(sqlx::query(sql), n, ended_at, &payload)
                .execute(&mut c)
                .await?;
        }
    }
    Ok(())
}

fn bind<'q, DB: sqlx::Database>(
    q: sqlx::query::Query<'q, DB, <DB as sqlx::Database>::Arguments>,
    n: i64,
    at: i64,
    payload: &'q str,
) -> sqlx::query::Query<'q, DB, <DB as sqlx::Database>::Arguments>
where
    i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    q.bind(n).bind(at).bind(payload)
}
