//! # timer-bench
//!
//! Timer accuracy of wakeups: how late a parked run's resume job starts after its due time,
//! with 10,000 wakeups armed at once. Prints one table, a row per backend.
//!
//! How: 10,000 runs are enqueued, claimed and parked through the store's real park path
//! (`LeasedJob::park_until`, exactly what `schedule_wakeup` does), with due times spread
//! evenly over a window that starts after the arming is done. Then a real worker
//! [`Pool`] (8 slots, the default poll interval) works the queue: its handler records
//! `start − due` for each resume job and acknowledges it. The pool sleeps until the next due
//! time (the store's `next_due`), so lateness is the timer's slack plus claim latency; when
//! wakeups fall due faster than the pool drains them, queueing shows up in the tail — the
//! table prints the rate so the two can be told apart.
//!
//! Usage: `cargo run --release -p nightshift-bench --bin timer-bench [-- --sqlite-only |
//! --postgres-only] [--wakeups N] [--window-seconds S]`. PostgreSQL comes from `NIGHTSHIFT_BENCH_PG_URL`
//! (default `postgres://postgres@127.0.0.1:5432/test`), in a fresh schema.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;
use nightshift_store::{NewRun, ResumeReason, Store, StoreConfig, SystemClock};
use nightshift_worker::{Handler, JobContext, JobOutcome, Pool, PoolConfig};
use tokio_util::sync::CancellationToken;

const LEASE: Duration = Duration::from_secs(600);

/// Records how late each resume job started.
struct Recorder {
    lateness_ms: Arc<Mutex<Vec<i64>>>,
}

impl Handler for Recorder {
    async fn handle(&self, ctx: JobContext) -> JobOutcome {
        let job = ctx.lease.job();
        let late = ctx.lease.store().now() - job.run_at;
        self.lateness_ms.lock().unwrap().push(late);
        JobOutcome::succeeded("woke")
    }
}

fn arg(name: &str) -> Option<u64> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
}

#[tokio::main]
async fn main() -> Result<()> {
    let n = arg("--wakeups").unwrap_or(10_000);
    let window = Duration::from_secs(arg("--window-seconds").unwrap_or(60));
    let dir = tempfile::tempdir()?;
    let backends = nightshift_bench::backends(dir.path(), "timer").await;
    println!(
        "## Timer accuracy: {n} armed wakeups due over {} s, pool of 8 slots",
        window.as_secs()
    );
    println!(
        "{:<12} {:>10} {:>10} {:>12} {:>12} {:>12} {:>12}",
        "backend", "wakeups", "due/s", "arm (s)", "p50 ms", "p99 ms", "max ms"
    );
    for (name, config) in &backends {
        let r = measure(config, n, window).await?;
        println!(
            "{name:<12} {n:>10} {:>10.0} {:>12.1} {:>12} {:>12} {:>12}",
            n as f64 / window.as_secs_f64(),
            r.arm_seconds,
            r.p50,
            r.p99,
            r.max
        );
        nightshift_bench::drop_schema(config).await;
    }
    println!(
        "\nlateness = start of the resume job − its due time (the store's clock); \
         load average at the end: {}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    Ok(())
}

struct Measured {
    arm_seconds: f64,
    p50: i64,
    p99: i64,
    max: i64,
}

async fn measure(config: &StoreConfig, n: u64, window: Duration) -> Result<Measured> {
    let store = Store::connect(config, Arc::new(SystemClock)).await?;
    store.migrate().await?;
    // Arm: enqueue the runs, then claim and park each. Parking is one transaction each and
    // costs up to a few times what an enqueue does (enqueues share commits), so the margin
    // before the window is four times the enqueue time, and a note says when it was short.
    let armed_at = Instant::now();
    for i in 0..n {
        store
            .enqueue(&NewRun::new("sleeper", format!("wakeup {i}")))
            .await?;
    }
    let margin_ms = (armed_at.elapsed().as_secs_f64() * 4000.0) as i64 + 3000;
    let start = store.now() + margin_ms;
    let step = (window.as_millis() as i64 / n as i64).max(1);
    let mut i = 0i64;
    while (i as u64) < n {
        let batch = store.claim("armer", None, 500, LEASE).await?;
        anyhow::ensure!(!batch.is_empty(), "enqueued runs were not claimable");
        for lease in batch {
            park(&lease, start + i * step).await?;
            i += 1;
        }
    }
    let arm_seconds = armed_at.elapsed().as_secs_f64();
    if store.now() > start {
        println!(
            "note: arming took longer than estimated; the first wakeups were due before the \
             pool started"
        );
    }
    let lateness = Arc::new(Mutex::new(Vec::with_capacity(n as usize)));
    let recorder = Recorder {
        lateness_ms: lateness.clone(),
    };
    let pool = Pool::new(
        store.clone(),
        recorder,
        PoolConfig {
            slots: 8,
            lease_ms: 60_000,
            heartbeat_ms: 20_000,
            ..PoolConfig::default()
        },
    );
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let stop = stop.clone();
        async move { pool.run(stop).await }
    });
    let deadline = Instant::now() + window + Duration::from_millis(margin_ms as u64 + 120_000);
    while lateness.lock().unwrap().len() < n as usize {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the wakeups did not all fire in time"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop.cancel();
    let _ = running.await;
    store.close().await;
    let mut late = lateness.lock().unwrap().clone();
    late.sort_unstable();
    let pick = |q: f64| late[((late.len() as f64 - 1.0) * q).round() as usize];
    Ok(Measured {
        arm_seconds,
        p50: pick(0.5),
        p99: pick(0.99),
        max: *late.last().unwrap(),
    })
}

async fn park(lease: &nightshift_store::LeasedJob, due: i64) -> Result<()> {
    let reason = ResumeReason::Wakeup {
        reason: "bench".into(),
        slept_at: lease.store().now(),
        due_at: due,
    };
    lease.park_until(due, &reason.to_payload()).await?;
    Ok(())
}
