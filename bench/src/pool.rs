//! A pool for the benches: slots running jobs that only sleep a fixed time and count
//! themselves, so that what a bench measures is the queue's turn-around (claims, settles,
//! wake-ups), not any handler's work.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nightshift_store::Store;
use nightshift_worker::{Handler, JobContext, JobOutcome, Pool, PoolConfig};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Counts completions; sleeps `work` per job; reports each start on `started`.
pub struct Worker {
    /// How long each job sleeps.
    pub work: Duration,
    /// Jobs finished so far.
    pub completed: Arc<AtomicU64>,
    /// Where each job's start is told, if anywhere.
    pub started: Option<mpsc::UnboundedSender<Instant>>,
}

impl Worker {
    /// 1 ms jobs, counted in `completed`.
    pub fn one_ms(completed: &Arc<AtomicU64>) -> Self {
        Worker {
            work: Duration::from_millis(1),
            completed: completed.clone(),
            started: None,
        }
    }
}

impl Handler for Worker {
    async fn handle(&self, _ctx: JobContext) -> JobOutcome {
        if let Some(tx) = &self.started {
            let _ = tx.send(Instant::now());
        }
        if !self.work.is_zero() {
            tokio::time::sleep(self.work).await;
        }
        self.completed.fetch_add(1, Ordering::Relaxed);
        JobOutcome::succeeded("ok")
    }
}

/// A pool of `slots` running `worker`; returns the token that stops it and its task.
pub fn start_pool(
    store: &Store,
    worker: Worker,
    slots: usize,
) -> (
    CancellationToken,
    tokio::task::JoinHandle<nightshift_store::Result<nightshift_worker::PoolReport>>,
) {
    let pool = Pool::new(
        store.clone(),
        worker,
        PoolConfig {
            slots,
            ..PoolConfig::default()
        },
    );
    let stop = CancellationToken::new();
    let task = tokio::spawn({
        let stop = stop.clone();
        async move { pool.run(stop).await }
    });
    (stop, task)
}
