//! Pickup latency: from the enqueue call to the handler's start, with an idle pool, and runs
//! armed to start later (agents asleep) for the claims to pass over.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use nightshift_bench::pool::{Worker, start_pool};
use nightshift_store::{NewRun, Store};
use tokio::sync::mpsc;

use super::enqueue::enqueue_batch;
use super::{SLOTS, new_run};

/// Runs armed to start an hour later in the pickup case with sleeping runs.
pub(super) const SLEEPING: u64 = 20_000;

/// Enqueues `n` runs due an hour from now, in batches of 500.
pub(super) async fn arm_sleeping(store: &Store, n: u64) -> Result<()> {
    let later = store.now() + 3_600_000;
    let mut i = 0;
    while i < n {
        let runs: Vec<NewRun> = (i..(i + 500).min(n))
            .map(|i| new_run(i).run_at(later))
            .collect();
        i += runs.len() as u64;
        enqueue_batch(store, &runs).await?;
    }
    Ok(())
}

/// Pickup latency in ms (p50, p99): one run at a time into an idle pool.
pub(super) async fn pickup(store: &Store, samples: usize) -> Result<(f64, f64)> {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let completed = Arc::new(AtomicU64::new(0));
    let (stop, task) = start_pool(
        store,
        Worker {
            work: Duration::ZERO,
            completed: completed.clone(),
            started: Some(tx),
        },
        SLOTS,
    );
    // Let the pool go idle first.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut ms = Vec::with_capacity(samples);
    for i in 0..samples as u64 {
        let sent = Instant::now();
        store.enqueue(&new_run(i)).await?;
        let Some(started) = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await? else {
            bail!("the pool stopped");
        };
        ms.push((started - sent).as_secs_f64() * 1000.0);
        // Wait for the job to end and the pool to go idle again, so every sample starts idle.
        while completed.load(Ordering::Relaxed) <= i {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.cancel();
    task.await??;
    ms.sort_by(f64::total_cmp);
    Ok((
        nightshift_bench::percentile(&ms, 0.50),
        nightshift_bench::percentile(&ms, 0.99),
    ))
}
