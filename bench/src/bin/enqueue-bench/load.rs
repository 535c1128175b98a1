//! The queue under load: a producer at a fixed, open-loop rate with its verdict (does the
//! queue keep up), and a producer keeping a depth target (the queue's capacity); and
//! `time_ms`, the median of 21 timed calls.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;
use nightshift_bench::pool::{Worker, start_pool};
use nightshift_store::{NewRun, Store};

use super::enqueue::enqueue_batch;
use super::new_run;

pub(super) struct FixedRate {
    enqueued: u64,
    completed: u64,
    max_depth: u64,
    seconds: f64,
    pub(super) completed_per_second: f64,
}

impl FixedRate {
    pub(super) fn verdict(&self, offered: f64) -> String {
        let enq = self.enqueued as f64 / self.seconds;
        let keeps_up = enq >= 0.95 * offered
            && self.completed as f64 >= 0.95 * self.enqueued as f64
            && (self.max_depth as f64) < offered;
        format!(
            "{}: enqueued {enq:.0}/s ({:.0}% of offered), completed {:.0}% of enqueued, max depth {}",
            if keeps_up { "keeps up" } else { "FALLS BEHIND" },
            100.0 * enq / offered,
            100.0 * self.completed as f64 / self.enqueued.max(1) as f64,
            self.max_depth
        )
    }
}

/// A producer offers `rate` single enqueues per second for `duration` to a pool of `slots`
/// running 1 ms jobs. Open loop, as requests reach a service: each enqueue starts at its due
/// time whether or not earlier ones have returned (at most 4,096 in flight; beyond that the
/// offer is not made, which the verdict shows).
pub(super) async fn fixed_rate(
    store: &Store,
    rate: f64,
    duration: Duration,
    slots: usize,
) -> Result<FixedRate> {
    const IN_FLIGHT: usize = 4_096;
    let completed = Arc::new(AtomicU64::new(0));
    let enqueued = Arc::new(AtomicU64::new(0));
    let (stop, task) = start_pool(store, Worker::one_ms(&completed), slots);
    let room = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
    let start = tokio::time::Instant::now();
    let interval = Duration::from_secs_f64(1.0 / rate);
    let mut ticker = tokio::time::interval(Duration::from_millis(1));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut offered = 0u64;
    let mut failures = tokio::task::JoinSet::new();
    let mut max_depth = 0;
    while start.elapsed() < duration {
        ticker.tick().await;
        // Every enqueue due by now is started now.
        let due = (start.elapsed().as_secs_f64() / interval.as_secs_f64()) as u64;
        while offered < due {
            let Ok(permit) = room.clone().try_acquire_owned() else {
                break;
            };
            let (store, enqueued) = (store.clone(), enqueued.clone());
            let i = offered;
            failures.spawn(async move {
                store.enqueue(&new_run(i)).await?;
                enqueued.fetch_add(1, Ordering::Relaxed);
                drop(permit);
                Ok::<_, anyhow::Error>(())
            });
            offered += 1;
        }
        let depth = enqueued
            .load(Ordering::Relaxed)
            .saturating_sub(completed.load(Ordering::Relaxed));
        max_depth = max_depth.max(depth);
        while let Some(done) = failures.try_join_next() {
            done??;
        }
    }
    while let Some(done) = failures.join_next().await {
        done??;
    }
    let seconds = start.elapsed().as_secs_f64();
    // Completions count up to one second after the offer ended (jobs still in flight).
    let settle = Instant::now();
    while completed.load(Ordering::Relaxed) < enqueued.load(Ordering::Relaxed)
        && settle.elapsed() < Duration::from_secs(1)
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let done = completed.load(Ordering::Relaxed);
    stop.cancel();
    task.await??;
    Ok(FixedRate {
        enqueued: enqueued.load(Ordering::Relaxed),
        completed: done,
        max_depth,
        seconds,
        completed_per_second: done as f64 / seconds,
    })
}

/// The median of 21 calls of `f`, in ms.
pub(super) async fn time_ms<F, Fut>(f: F) -> Result<f64>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = nightshift_store::Result<()>>,
{
    let mut ms = Vec::new();
    for _ in 0..21 {
        let t = Instant::now();
        f().await?;
        ms.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    ms.sort_by(f64::total_cmp);
    Ok(ms[10])
}

/// Keeps `target` runs queued (batches of 128) for `duration` while a pool of `slots` runs
/// 1 ms jobs; completions per second.
pub(super) async fn depth_target(
    store: &Store,
    target: u64,
    duration: Duration,
    slots: usize,
) -> Result<f64> {
    let completed = Arc::new(AtomicU64::new(0));
    let mut enqueued = 0u64;
    let mut i = 0u64;
    let fill = |i: &mut u64, n: u64| {
        let runs: Vec<NewRun> = (*i..*i + n).map(new_run).collect();
        *i += n;
        runs
    };
    enqueue_batch(store, &fill(&mut i, target)).await?;
    enqueued += target;
    let (stop, task) = start_pool(store, Worker::one_ms(&completed), slots);
    let start = Instant::now();
    let at_start = completed.load(Ordering::Relaxed);
    while start.elapsed() < duration {
        let depth = enqueued.saturating_sub(completed.load(Ordering::Relaxed));
        if depth < target {
            let n = (target - depth).min(128);
            enqueue_batch(store, &fill(&mut i, n)).await?;
            enqueued += n;
        } else {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    let rate =
        (completed.load(Ordering::Relaxed) - at_start) as f64 / start.elapsed().as_secs_f64();
    stop.cancel();
    task.await??;
    Ok(rate)
}
