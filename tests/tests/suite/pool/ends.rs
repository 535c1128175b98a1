//! How jobs end: two pools end every job once in batches, a lost lease stops its handler and
//! drops its outcome, and a batched end whose lease was lost is dropped while the job runs
//! again and its handler hears it.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nightshift_store::{JobCount, JobState, NewRun, RunStatus};
use nightshift_tests::{TestDb, eventually};
use nightshift_worker::{CancelReason, Handler, JobContext, JobOutcome, Pool, PoolConfig};
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

use super::handlers::WaitsForCancel;
use super::{config, status};

pub(super) async fn lost_lease_stops_the_handler(db: &TestDb) {
    let (store, clock) = db.manual().await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let started = Arc::new(Notify::new());
    // The handler would report success after being stopped; the pool must not write it.
    struct SucceedsWhenStopped(WaitsForCancel);
    impl Handler for SucceedsWhenStopped {
        async fn handle(&self, ctx: JobContext) -> JobOutcome {
            self.0.handle(ctx).await;
            JobOutcome::succeeded("stale")
        }
    }
    let handler = SucceedsWhenStopped(WaitsForCancel {
        seen: tx,
        started: started.clone(),
    });
    let stop = CancellationToken::new();
    // One slot, so the pool itself never claims (and so rescues) the expired job; heartbeats
    // are real-time and extend the lease from the manual clock's now, so the first comes only
    // after the thief has claimed: a 60 s lease, beats every 3 s.
    let cfg = PoolConfig {
        slots: 1,
        lease_ms: 60_000,
        heartbeat_ms: 3_000,
        ..config()
    };
    let pool = tokio::spawn(Pool::new(store.clone(), handler, cfg).run(stop.clone()));
    let e = store.enqueue(&NewRun::new("a", "p")).await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), started.notified())
        .await
        .expect("job started");
    // The pool's worker stalls past its lease (as after a long GC pause or a network split) and
    // another worker takes the job over.
    clock.advance(Duration::from_secs(61));
    let thief = store
        .claim("thief", None, 1, Duration::from_secs(60))
        .await
        .unwrap()
        .remove(0);
    assert_eq!(thief.id(), e.job_id);
    let (reason, _) = tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reason, CancelReason::LeaseLost);
    stop.cancel();
    let report = pool.await.unwrap().unwrap();
    assert_eq!((report.lease_lost, report.recorded), (1, 0), "{report:?}");
    let job = store.job(e.job_id).await.unwrap().unwrap();
    assert_eq!(
        (job.status, job.lease_owner.as_deref(), job.lease_token),
        (JobState::Running, Some("thief"), thief.token())
    );
    assert_eq!(
        status(&store, &e.run_id).await,
        RunStatus::Running,
        "the stale success was not written"
    );
}

/// Counts how often each job ran, and finishes at once or after a yield.
pub(super) struct Counts {
    runs: Arc<Mutex<HashMap<i64, usize>>>,
}

impl Handler for Counts {
    async fn handle(&self, ctx: JobContext) -> JobOutcome {
        let id = ctx.lease.id();
        *self.runs.lock().unwrap().entry(id).or_default() += 1;
        if id % 3 == 0 {
            tokio::task::yield_now().await;
        }
        JobOutcome::succeeded(format!("job {id}"))
    }
}

pub(super) async fn two_pools_end_every_job_once(db: &TestDb) {
    let store = db.store().await;
    const N: usize = 300;
    let mut runs = Vec::new();
    for i in 0..N {
        let lane = if i % 4 == 0 { "interactive" } else { "batch" };
        runs.push(
            store
                .enqueue(&NewRun::new("a", format!("{i}")).lane(lane))
                .await
                .unwrap(),
        );
    }
    let counts = Arc::new(Mutex::new(HashMap::new()));
    // Long leases: this test is about batching, not expiry; no lease may lapse on a slow box.
    let cfg = PoolConfig {
        slots: 4,
        lease_ms: 60_000,
        heartbeat_ms: 20_000,
        ..config()
    };
    let laned = PoolConfig {
        lanes: BTreeMap::from([("interactive".to_string(), 1)]),
        ..cfg.clone()
    };
    let stop = CancellationToken::new();
    // The second pool has its own store (its own connections), as another daemon would.
    let other = db.store().await;
    let pools = [
        tokio::spawn(
            Pool::new(
                store.clone(),
                Counts {
                    runs: counts.clone(),
                },
                cfg,
            )
            .run(stop.clone()),
        ),
        tokio::spawn(
            Pool::new(
                other.clone(),
                Counts {
                    runs: counts.clone(),
                },
                laned,
            )
            .run(stop.clone()),
        ),
    ];
    eventually(Duration::from_secs(60), "every job to succeed", || async {
        let counts = store.job_counts().await.unwrap();
        (counts
            == vec![JobCount {
                state: JobState::Succeeded,
                count: N as i64,
            }])
        .then_some(())
    })
    .await;
    stop.cancel();
    let mut recorded = 0;
    for pool in pools {
        let report = pool.await.unwrap().unwrap();
        assert_eq!(
            (report.lease_lost, report.failed_writes, report.released),
            (0, 0, 0),
            "{report:?}"
        );
        recorded += report.recorded;
    }
    assert_eq!(recorded, N, "every end written once, by one pool");
    let counts = counts.lock().unwrap().clone();
    assert_eq!(counts.len(), N);
    assert!(counts.values().all(|n| *n == 1), "each job ran once");
    for e in &runs {
        let run = store.run(&e.run_id).await.unwrap().unwrap();
        let expected = format!("job {}", e.job_id);
        assert_eq!(
            (run.status, run.result.as_deref()),
            (RunStatus::Succeeded, Some(expected.as_str()))
        );
    }
}

/// Gives the lease of the job with payload "victim" back the first time it runs (so the end
/// it then returns is stale), and succeeds otherwise; tells `written` what became of each
/// end it returned (its payload, its result, whether the pool wrote it).
pub(super) struct LosesOneLease {
    lost_once: Arc<AtomicUsize>,
    written: mpsc::UnboundedSender<(String, &'static str, bool)>,
}

impl Handler for LosesOneLease {
    async fn handle(&self, ctx: JobContext) -> JobOutcome {
        let payload = ctx.lease.job().payload.clone();
        let result = if payload == "victim" && self.lost_once.fetch_add(1, Ordering::SeqCst) == 0 {
            ctx.lease.release("taken away by the test").await.unwrap();
            "stale"
        } else {
            "fresh"
        };
        let tell = self.written.clone();
        ctx.when_outcome_written(move |written| {
            let _ = tell.send((payload, result, written));
        });
        JobOutcome::succeeded(result)
    }
}

pub(super) async fn lost_lease_in_a_pool_batch(db: &TestDb) {
    let store = db.store().await;
    let mut runs = Vec::new();
    for i in 0..20 {
        let payload = if i == 7 {
            "victim".to_string()
        } else {
            format!("{i}")
        };
        runs.push(store.enqueue(&NewRun::new("a", payload)).await.unwrap());
    }
    let cfg = PoolConfig {
        slots: 4,
        lease_ms: 60_000,
        heartbeat_ms: 20_000,
        ..config()
    };
    let stop = CancellationToken::new();
    let (tell, mut written) = mpsc::unbounded_channel();
    let handler = LosesOneLease {
        lost_once: Arc::new(AtomicUsize::new(0)),
        written: tell,
    };
    let pool = tokio::spawn(Pool::new(store.clone(), handler, cfg).run(stop.clone()));
    eventually(Duration::from_secs(30), "every job to succeed", || async {
        let counts = store.job_counts().await.unwrap();
        (counts
            == vec![JobCount {
                state: JobState::Succeeded,
                count: 20,
            }])
        .then_some(())
    })
    .await;
    stop.cancel();
    let report = pool.await.unwrap().unwrap();
    assert_eq!(
        (report.recorded, report.lease_lost, report.failed_writes),
        (20, 1, 0),
        "the stale end was refused, every other end written: {report:?}"
    );
    for e in &runs {
        let run = store.run(&e.run_id).await.unwrap().unwrap();
        assert_eq!(
            (run.status, run.result.as_deref()),
            (RunStatus::Succeeded, Some("fresh")),
            "the stale end of the victim changed nothing"
        );
    }
    let victim = store.job(runs[7].job_id).await.unwrap().unwrap();
    assert_eq!(victim.attempts, 1, "release does not count the attempt");
    // What each handler heard of its end (`JobContext::when_outcome_written`): the stale end was
    // not written, every fresh one was — so a handler that counts there counts each once.
    // Every one was told before the pool returned (a draining pool's last ends too).
    let mut heard = BTreeMap::new();
    while let Ok((payload, result, was_written)) = written.try_recv() {
        *heard
            .entry((payload == "victim", result, was_written))
            .or_insert(0) += 1;
    }
    assert_eq!(
        heard,
        BTreeMap::from([
            ((false, "fresh", true), 19),
            ((true, "fresh", true), 1),
            ((true, "stale", false), 1),
        ])
    );
}
