//! Enqueues measured: producers calling `Store::enqueue` concurrently in a loop, and one
//! producer calling `Store::enqueue_many` with batches of a given size; runs per second.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use anyhow::Result;
use nightshift_store::{NewRun, Store};

use super::new_run;

/// `producers` tasks enqueue `n` runs between them, one call each; runs per second.
pub(super) async fn concurrent_enqueue(store: &Store, producers: usize, n: u64) -> Result<f64> {
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..producers {
        let (store, next) = (store.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return Ok::<_, anyhow::Error>(());
                }
                store.enqueue(&new_run(i)).await?;
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

/// One producer enqueues `n` runs `per_call` at a time; runs per second.
pub(super) async fn batch_enqueue(store: &Store, per_call: u64, n: u64) -> Result<f64> {
    let start = Instant::now();
    let mut i = 0;
    while i < n {
        let runs: Vec<NewRun> = (i..(i + per_call).min(n)).map(new_run).collect();
        i += runs.len() as u64;
        enqueue_batch(store, &runs).await?;
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

/// Enqueues `runs` with one call (`Store::enqueue_many`: one transaction).
pub(super) async fn enqueue_batch(store: &Store, runs: &[NewRun]) -> Result<()> {
    for one in store.enqueue_many(runs).await? {
        one?;
    }
    Ok(())
}
