//! What the pool does with its handlers: their outcomes written (a retry runs again), a
//! cancel reaching a running handler within a heartbeat, and a shutdown that drains running
//! jobs and then releases the unfinished ones.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use nightshift_store::{JobState, NewRun, RunEnd, RunStatus};
use nightshift_tests::{TestDb, eventually};
use nightshift_worker::{CancelReason, Handler, JobContext, JobOutcome, Pool, PoolConfig};
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

use super::{config, status};

/// Fails each job's first attempt, succeeds on the second.
pub(super) struct FlakyOnce;

impl Handler for FlakyOnce {
    async fn handle(&self, ctx: JobContext) -> JobOutcome {
        if ctx.lease.job().attempts == 1 {
            JobOutcome::retry("first attempt fails")
        } else {
            JobOutcome::succeeded(format!("ok after {}", ctx.lease.job().attempts))
        }
    }
}

pub(super) async fn outcomes_are_written(db: &TestDb) {
    let store = db.store().await;
    let stop = CancellationToken::new();
    let pool = tokio::spawn(Pool::new(store.clone(), FlakyOnce, config()).run(stop.clone()));
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(
            store
                .enqueue(&NewRun::new("a", format!("{i}")))
                .await
                .unwrap(),
        );
    }
    for e in &ids {
        eventually(Duration::from_secs(20), "runs to succeed", || async {
            (status(&store, &e.run_id).await == RunStatus::Succeeded).then_some(())
        })
        .await;
        let run = store.run(&e.run_id).await.unwrap().unwrap();
        assert_eq!(run.result.as_deref(), Some("ok after 2"));
        let job = store.job(e.job_id).await.unwrap().unwrap();
        assert_eq!(
            (job.attempts, job.last_error.as_deref()),
            (2, Some("first attempt fails"))
        );
    }
    stop.cancel();
    let report = pool.await.unwrap().unwrap();
    assert_eq!(report.recorded, 10, "5 retries and 5 successes");
}

/// Waits for cancellation and reports when it saw it.
pub(super) struct WaitsForCancel {
    pub(super) seen: mpsc::UnboundedSender<(CancelReason, tokio::time::Instant)>,
    pub(super) started: Arc<Notify>,
}

impl Handler for WaitsForCancel {
    async fn handle(&self, ctx: JobContext) -> JobOutcome {
        self.started.notify_one();
        ctx.cancel.cancelled().await;
        let reason = ctx
            .stop_reason()
            .expect("a reason is set before the token fires");
        let _ = self.seen.send((reason, tokio::time::Instant::now()));
        JobOutcome::Done(RunEnd::Cancelled)
    }
}

pub(super) async fn cancel_reaches_running_handler(db: &TestDb) {
    let store = db.store().await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let started = Arc::new(Notify::new());
    let handler = WaitsForCancel {
        seen: tx,
        started: started.clone(),
    };
    let stop = CancellationToken::new();
    let pool = tokio::spawn(Pool::new(store.clone(), handler, config()).run(stop.clone()));
    let e = store.enqueue(&NewRun::new("a", "p")).await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), started.notified())
        .await
        .expect("job started");
    let asked = tokio::time::Instant::now();
    store.cancel_run(&e.run_id).await.unwrap();
    let (reason, at) = tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reason, CancelReason::CancelRequested);
    // One heartbeat is 200 ms; allow scheduling slack on a loaded machine.
    assert!(
        at - asked < Duration::from_millis(1500),
        "took {:?}",
        at - asked
    );
    eventually(Duration::from_secs(5), "run cancelled", || async {
        (status(&store, &e.run_id).await == RunStatus::Cancelled).then_some(())
    })
    .await;
    stop.cancel();
    pool.await.unwrap().unwrap();
}

/// Finishes quickly when the payload says "quick"; otherwise never (until dropped).
pub(super) struct QuickOrStuck {
    started: Arc<AtomicUsize>,
}

impl Handler for QuickOrStuck {
    async fn handle(&self, ctx: JobContext) -> JobOutcome {
        self.started.fetch_add(1, Ordering::SeqCst);
        if ctx.lease.job().payload == "quick" {
            tokio::time::sleep(Duration::from_millis(300)).await;
            return JobOutcome::succeeded("quick");
        }
        std::future::pending().await
    }
}

pub(super) async fn shutdown_drains_then_releases(db: &TestDb) {
    let store = db.store().await;
    let quick = store
        .enqueue(&NewRun::new("a", "quick").priority(1))
        .await
        .unwrap();
    let stuck = store.enqueue(&NewRun::new("a", "stuck")).await.unwrap();
    let started = Arc::new(AtomicUsize::new(0));
    let cfg = PoolConfig {
        shutdown_grace_ms: 1_000,
        ..config()
    };
    let stop = CancellationToken::new();
    let pool = tokio::spawn(
        Pool::new(
            store.clone(),
            QuickOrStuck {
                started: started.clone(),
            },
            cfg,
        )
        .run(stop.clone()),
    );
    eventually(Duration::from_secs(10), "both jobs to start", || async {
        (started.load(Ordering::SeqCst) == 2).then_some(())
    })
    .await;
    let late = store.enqueue(&NewRun::new("a", "late")).await.unwrap();
    stop.cancel();
    let report = pool.await.unwrap().unwrap();
    assert_eq!((report.recorded, report.released), (1, 1), "{report:?}");
    assert_eq!(
        status(&store, &quick.run_id).await,
        RunStatus::Succeeded,
        "finished within grace"
    );
    let job = store.job(stuck.job_id).await.unwrap().unwrap();
    assert_eq!(
        (job.status, job.attempts, job.lease_owner),
        (JobState::Queued, 0, None),
        "released"
    );
    assert_eq!(
        store.job(late.job_id).await.unwrap().unwrap().status,
        JobState::Queued,
        "no claims after shutdown"
    );
    let taken = store
        .claim("next", None, 5, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(
        taken.len(),
        2,
        "released and late jobs are claimable at once"
    );
    assert!(
        store.workers().await.unwrap().is_empty(),
        "the worker deregistered"
    );
}
