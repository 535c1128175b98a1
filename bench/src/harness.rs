//! The measurement procedures every queue under test goes through, written once.
//!
//! A queue under test is a [`Subject`]: it can enqueue one no-op job (one transaction), fill
//! itself untimed, count the jobs durably marked done, and start a worker with 4 concurrent
//! slots whose handler reports its start time through a [`Probe`] and returns at once.
//!
//! - [`enqueue_interleaved`]: N jobs enqueued one at a time by one producer into each of two
//!   queues, in 10 alternating chunks, each queue's time summed (enqueue rate). Alternating
//!   spreads any drift in the machine's speed (other load, the disk) over both alike.
//! - [`drain`]: on a queue holding N jobs, starts the worker and times from worker start until
//!   all N are marked done in the database (claim+ack rate). The handler's start messages tell
//!   when all N started; only from then on is the database polled (every 2 ms), so polling
//!   adds no load while the worker drains.
//! - [`latency`]: with an idle worker running, enqueues one job and records the time from the
//!   start of the enqueue call to the handler's start, waits until the job is marked done and
//!   10 ms more, and repeats (after 3 unrecorded warm-up rounds).
//! - [`fsync_commit_rate`]: single-row INSERT commits on a fresh SQLite file with the pragmas
//!   our store uses (WAL, `synchronous=FULL`): the disk's bound on any durable SQLite queue.
//!
//! Every handler start is counted, so a job run twice shows up as `extra_runs`.

use nightshift_bench::percentile;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// How long without any progress before a measurement is declared stalled.
const STALL: Duration = Duration::from_secs(30);
/// How long one pickup may take before the latency run is abandoned.
const PICKUP_TIMEOUT: Duration = Duration::from_secs(10);
/// Unrecorded latency rounds before the recorded ones.
const WARMUP_ROUNDS: usize = 3;

/// Handed to a worker's handler: it calls [`Probe::started`] first thing for every job.
#[derive(Debug, Clone)]
pub(crate) struct Probe {
    tx: mpsc::UnboundedSender<Instant>,
}

impl Probe {
    /// A probe and the receiver of its start times.
    pub(crate) fn new() -> (Self, mpsc::UnboundedReceiver<Instant>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Self { tx }, rx)
    }

    /// Records that a handler started now.
    pub(crate) fn started(&self) {
        let _ = self.tx.send(Instant::now());
    }
}

/// A running worker: stop it with [`Running::stop`].
#[derive(Debug)]
pub(crate) struct Running {
    pub(crate) stop: CancellationToken,
    pub(crate) join: JoinHandle<Result<()>>,
}

impl Running {
    /// Asks the worker to shut down gracefully and waits for it.
    pub(crate) async fn stop(self) -> Result<()> {
        self.stop.cancel();
        match tokio::time::timeout(STALL, self.join).await {
            Ok(Ok(result)) => result,
            Ok(Err(e)) => bail!("worker task failed: {e}"),
            Err(_) => bail!("worker did not stop within {STALL:?}"),
        }
    }
}

/// A job queue under test, with its own fresh database, schema or file.
pub(crate) trait Subject {
    /// Enqueues one no-op job (one transaction).
    async fn enqueue(&mut self) -> Result<()>;

    /// Fills the queue with `n` no-op jobs, untimed (the same jobs `enqueue` makes).
    async fn preload(&mut self, n: u64) -> Result<()> {
        for _ in 0..n {
            self.enqueue().await?;
        }
        Ok(())
    }

    /// How many jobs are durably marked done.
    async fn done(&self) -> Result<u64>;

    /// Starts a worker running 4 jobs at once, each handler calling `probe.started()`.
    fn start(&mut self, probe: Probe) -> Result<Running>;

    /// Closes connections and drops the database, schema or file.
    async fn teardown(self) -> Result<()>;
}

/// Enqueues `n` jobs into each of `a` and `b`, one at a time, in `rounds` alternating chunks
/// (`a` first in even rounds, `b` first in odd ones), so that a change in the machine's speed
/// during the run (other load, the disk) falls on both alike. Returns each one's total time.
pub(crate) async fn enqueue_interleaved<A: Subject, B: Subject>(
    a: &mut A,
    b: &mut B,
    n: u64,
    rounds: u64,
) -> Result<(Duration, Duration)> {
    let (mut ta, mut tb) = (Duration::ZERO, Duration::ZERO);
    for round in 0..rounds {
        let chunk = n / rounds + u64::from(round < n % rounds);
        if round % 2 == 0 {
            ta += enqueue_timed(a, chunk).await?;
            tb += enqueue_timed(b, chunk).await?;
        } else {
            tb += enqueue_timed(b, chunk).await?;
            ta += enqueue_timed(a, chunk).await?;
        }
    }
    Ok((ta, tb))
}

async fn enqueue_timed<S: Subject>(subject: &mut S, n: u64) -> Result<Duration> {
    let t = Instant::now();
    for _ in 0..n {
        subject.enqueue().await?;
    }
    Ok(t.elapsed())
}

/// The outcome of one [`drain`].
#[derive(Debug, Clone)]
pub(crate) struct Drain {
    /// Jobs per second claimed, run and acked, or why the drain failed.
    pub(crate) rate: Result<f64, String>,
    /// Wall time from worker start to the end of the wait.
    pub(crate) time: Duration,
    /// Handler starts beyond one per job (jobs run more than once).
    pub(crate) extra_runs: u64,
    /// An error the worker returned when stopped, if any.
    pub(crate) stop_error: Option<String>,
}

/// Starts the worker on a subject holding `n` queued jobs and times it from start until all
/// `n` are marked done; then stops it and tears the subject down (whatever happens).
pub(crate) async fn drain<S: Subject>(mut subject: S, n: u64) -> Result<Drain> {
    let result = run_drain(&mut subject, n).await;
    let torn_down = subject.teardown().await;
    let result = result?;
    torn_down.context("tearing down after the drain")?;
    Ok(result)
}

async fn run_drain<S: Subject>(subject: &mut S, n: u64) -> Result<Drain> {
    let (probe, mut rx) = Probe::new();
    let t = Instant::now();
    let running = subject.start(probe)?;
    let mut started = 0u64;
    let waited = wait_drained(subject, &mut rx, n, &mut started).await;
    let time = t.elapsed();
    let stop_error = running.stop().await.err().map(|e| format!("{e:#}"));
    while rx.try_recv().is_ok() {
        started += 1;
    }
    Ok(Drain {
        rate: waited.map(|()| rate(n, time)),
        time,
        extra_runs: started.saturating_sub(n),
        stop_error,
    })
}

/// Waits until `n` handlers started, then until `n` jobs are marked done.
async fn wait_drained<S: Subject>(
    subject: &S,
    rx: &mut mpsc::UnboundedReceiver<Instant>,
    n: u64,
    started: &mut u64,
) -> Result<(), String> {
    while *started < n {
        match tokio::time::timeout(STALL, rx.recv()).await {
            Ok(Some(_)) => *started += 1,
            Ok(None) => return Err(format!("worker exited after {started}/{n} jobs started")),
            Err(_) => {
                return Err(format!(
                    "stalled: no job started for {STALL:?} ({started}/{n} started)"
                ));
            }
        }
    }
    let mut last = (0, Instant::now());
    loop {
        while rx.try_recv().is_ok() {
            *started += 1;
        }
        let done = subject.done().await.map_err(|e| format!("{e:#}"))?;
        if done >= n {
            return Ok(());
        }
        if done > last.0 {
            last = (done, Instant::now());
        } else if last.1.elapsed() > STALL {
            return Err(format!("stalled: {done}/{n} marked done after all started"));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Pickup latencies of one [`latency`] run, in milliseconds.
#[derive(Debug, Clone)]
pub(crate) struct Latency {
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) max_ms: f64,
    pub(crate) extra_runs: u64,
}

/// Measures enqueue-call-start → handler-start latency `samples` times on an idle worker.
/// The subject is torn down whatever happens.
pub(crate) async fn latency<S: Subject>(mut subject: S, samples: usize) -> Result<Latency> {
    let result = run_latency(&mut subject, samples).await;
    let torn_down = subject.teardown().await;
    let result = result?;
    torn_down.context("tearing down after the latency run")?;
    Ok(result)
}

async fn run_latency<S: Subject>(subject: &mut S, samples: usize) -> Result<Latency> {
    let (probe, mut rx) = Probe::new();
    let running = subject.start(probe)?;
    tokio::time::sleep(Duration::from_millis(300)).await; // let it register and go idle
    let result = sample_latencies(subject, &mut rx, samples).await;
    let stopped = running.stop().await;
    let mut extra = 0;
    while rx.try_recv().is_ok() {
        extra += 1;
    }
    let mut ms = result?;
    stopped.context("stopping the worker after the latency run")?;
    ms.sort_by(f64::total_cmp);
    Ok(Latency {
        p50_ms: percentile(&ms, 0.50),
        p99_ms: percentile(&ms, 0.99),
        max_ms: ms.last().copied().unwrap_or(0.0),
        extra_runs: extra,
    })
}

async fn sample_latencies<S: Subject>(
    subject: &mut S,
    rx: &mut mpsc::UnboundedReceiver<Instant>,
    samples: usize,
) -> Result<Vec<f64>> {
    let mut ms = Vec::with_capacity(samples);
    for round in 0..WARMUP_ROUNDS + samples {
        let t0 = Instant::now();
        subject.enqueue().await?;
        let start = match tokio::time::timeout(PICKUP_TIMEOUT, rx.recv()).await {
            Ok(Some(at)) => at,
            Ok(None) => bail!("worker exited during the latency run"),
            Err(_) => bail!("job {round} was not picked up within {PICKUP_TIMEOUT:?}"),
        };
        if round >= WARMUP_ROUNDS {
            ms.push(start.saturating_duration_since(t0).as_secs_f64() * 1e3);
        }
        let want = u64::try_from(round + 1).unwrap_or(u64::MAX);
        let waiting = Instant::now();
        while subject.done().await? < want {
            if waiting.elapsed() > PICKUP_TIMEOUT {
                bail!("job {round} was not marked done within {PICKUP_TIMEOUT:?}");
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(ms)
}

fn rate(n: u64, elapsed: Duration) -> f64 {
    n as f64 / elapsed.as_secs_f64().max(1e-9)
}

/// Single-row INSERT commits per second on SQLite with our pragmas (see
/// [`nightshift_bench::sqlite_commit_rate`]).
pub(crate) async fn fsync_commit_rate(dir: &Path, commits: u64) -> Result<f64> {
    nightshift_bench::sqlite_commit_rate(dir, commits).await
}

/// The no-op apalis handler: reports its start and succeeds.
pub(crate) async fn apalis_noop(
    _job: String,
    probe: apalis::prelude::Data<Probe>,
) -> Result<(), apalis::prelude::BoxDynError> {
    probe.started();
    Ok(())
}
