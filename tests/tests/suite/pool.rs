//! The worker pool over both backends: outcomes, cancellation, lane reservations, drain,
//! ends written in batches (group commit) under concurrency, and a sleeping pool woken for an
//! earlier job armed elsewhere.

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nightshift_store::{JobCount, JobState, NewRun, RunEnd, RunStatus, Store};
use nightshift_tests::{TestDb, eventually, on_both_backends};
use nightshift_worker::{CancelReason, Handler, JobContext, JobOutcome, Pool, PoolConfig};
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

on_both_backends! {
    handler_outcomes_are_written_and_retries_run_again => outcomes_are_written;
    cancel_reaches_a_running_handler_within_a_heartbeat => cancel_reaches_running_handler;
    reserved_lane_runs_while_a_batch_burst_fills_the_rest => reserved_lane_is_never_starved;
    shutdown_drains_then_releases_unfinished_jobs => shutdown_drains_then_releases;
    an_idle_pool_is_woken_by_an_enqueue_not_by_polling => idle_pool_is_woken_by_enqueue;
    a_lost_lease_stops_the_handler_and_drops_its_outcome => lost_lease_stops_the_handler;
    two_pools_end_every_job_once_in_batches => two_pools_end_every_job_once;
    a_batched_end_whose_lease_was_lost_is_dropped_the_job_runs_again_and_its_handler_hears_it =>
        lost_lease_in_a_pool_batch;
    a_sleeping_pool_wakes_for_an_earlier_job_armed_elsewhere => pool_wakes_for_earlier_job;
}

fn config() -> PoolConfig {
    PoolConfig {
        slots: 2,
        lease_ms: 2_000,
        heartbeat_ms: 200,
        poll_interval_ms: 100,
        shutdown_grace_ms: 5_000,
        retry_base_ms: 10,
        retry_cap_ms: 20,
        ..PoolConfig::default()
    }
}

async fn status(store: &Store, run_id: &str) -> RunStatus {
    store.run(run_id).await.unwrap().unwrap().status
}

/// Fails each job's first attempt, succeeds on the second.
struct FlakyOnce;

impl Handler for FlakyOnce {
    async fn handle(&self, ctx: JobContext) -> JobOutcome {
        if ctx.lease.job().attempts == 1 {
            JobOutcome::retry("first attempt fails")
        } else {
            JobOutcome::succeeded(format!("ok after {}", ctx.lease.job().attempts))
        }
    }
}

async fn outcomes_are_written(db: &TestDb) {
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
struct WaitsForCancel {
    seen: mpsc::UnboundedSender<(CancelReason, tokio::time::Instant)>,
    started: Arc<Notify>,
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

async fn cancel_reaches_running_handler(db: &TestDb) {
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

/// Batch jobs block until released; interactive jobs finish at once.
struct Gate {
    open: CancellationToken,
    batch_running: Arc<AtomicUsize>,
}

impl Handler for Gate {
    async fn handle(&self, ctx: JobContext) -> JobOutcome {
        if ctx.lease.job().lane == "batch" {
            self.batch_running.fetch_add(1, Ordering::SeqCst);
            self.open.cancelled().await;
        }
        JobOutcome::succeeded("done")
    }
}

async fn reserved_lane_is_never_starved(db: &TestDb) {
    let store = db.store().await;
    let open = CancellationToken::new();
    let batch_running = Arc::new(AtomicUsize::new(0));
    let cfg = PoolConfig {
        slots: 3,
        lanes: BTreeMap::from([("interactive".to_string(), 1)]),
        ..config()
    };
    let handler = Gate {
        open: open.clone(),
        batch_running: batch_running.clone(),
    };
    let stop = CancellationToken::new();
    let pool = tokio::spawn(Pool::new(store.clone(), handler, cfg).run(stop.clone()));
    for i in 0..50 {
        store
            .enqueue(&NewRun::new("a", format!("{i}")).lane("batch"))
            .await
            .unwrap();
    }
    eventually(
        Duration::from_secs(10),
        "batch fills the shared slots",
        || async { (batch_running.load(Ordering::SeqCst) == 2).then_some(()) },
    )
    .await;
    let urgent = store
        .enqueue(&NewRun::new("a", "now").lane("interactive"))
        .await
        .unwrap();
    eventually(
        Duration::from_secs(10),
        "interactive run done during the burst",
        || async { (status(&store, &urgent.run_id).await == RunStatus::Succeeded).then_some(()) },
    )
    .await;
    assert_eq!(
        batch_running.load(Ordering::SeqCst),
        2,
        "batch never took the reserved slot"
    );
    open.cancel();
    eventually(Duration::from_secs(30), "the burst to drain", || async {
        let counts = store.job_counts().await.unwrap();
        (counts
            == vec![JobCount {
                state: JobState::Succeeded,
                count: 51,
            }])
        .then_some(())
    })
    .await;
    stop.cancel();
    pool.await.unwrap().unwrap();
}

/// Finishes quickly when the payload says "quick"; otherwise never (until dropped).
struct QuickOrStuck {
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

async fn shutdown_drains_then_releases(db: &TestDb) {
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

/// Records that it ran: each job's payload, as it starts.
struct Records {
    pub(crate) ran: mpsc::UnboundedSender<String>,
}

impl Handler for Records {
    async fn handle(&self, ctx: JobContext) -> JobOutcome {
        let _ = self.ran.send(ctx.lease.job().payload.clone());
        JobOutcome::succeeded("")
    }
}

async fn idle_pool_is_woken_by_enqueue(db: &TestDb) {
    let store = db.store().await;
    // On PostgreSQL the enqueue comes from another store (another connection pool, as another
    // daemon would), so only NOTIFY can wake the pool; SQLite wakes in-process.
    let producer = match db.backend {
        nightshift_tests::Backend::Sqlite => store.clone(),
        nightshift_tests::Backend::Postgres => db.store().await,
    };
    let (tx, mut rx) = mpsc::unbounded_channel();
    // A minute between polls: a pickup within the test's 10 s can only come from a wake-up.
    let cfg = PoolConfig {
        poll_interval_ms: 60_000,
        ..config()
    };
    let stop = CancellationToken::new();
    let pool = tokio::spawn(Pool::new(store.clone(), Records { ran: tx }, cfg).run(stop.clone()));
    // Let the pool go idle (its first claim finds nothing), then enqueue.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for i in 0..3 {
        producer
            .enqueue(&NewRun::new("a", format!("job {i}")))
            .await
            .unwrap();
        let ran = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("picked up without waiting for the poll interval")
            .unwrap();
        assert_eq!(ran, format!("job {i}"));
    }
    stop.cancel();
    pool.await.unwrap().unwrap();
}

async fn lost_lease_stops_the_handler(db: &TestDb) {
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
struct Counts {
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

async fn two_pools_end_every_job_once(db: &TestDb) {
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
struct LosesOneLease {
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

async fn lost_lease_in_a_pool_batch(db: &TestDb) {
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

async fn pool_wakes_for_earlier_job(db: &TestDb) {
    let store = db.store().await;
    // On PostgreSQL the job is armed through another store (another daemon's connections),
    // so only its announcement can re-time the pool; SQLite wakes in-process.
    let armer = match db.backend {
        nightshift_tests::Backend::Sqlite => store.clone(),
        nightshift_tests::Backend::Postgres => db.store().await,
    };
    // A job due in an hour: the idle pool sleeps its whole poll interval (a minute).
    store
        .enqueue(&NewRun::new("a", "later").run_at(store.now() + 3_600_000))
        .await
        .unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let config = PoolConfig {
        poll_interval_ms: 60_000,
        ..PoolConfig::default()
    };
    let stop = CancellationToken::new();
    let pool =
        tokio::spawn(Pool::new(store.clone(), Records { ran: tx }, config).run(stop.clone()));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let due = armer.now() + 700;
    armer
        .enqueue(&NewRun::new("a", "sooner").run_at(due))
        .await
        .unwrap();
    let ran = tokio::time::timeout(Duration::from_secs(20), rx.recv())
        .await
        .expect("the earlier job ran without waiting for the minute's poll")
        .unwrap();
    assert_eq!(ran, "sooner");
    assert!(store.now() >= due, "not before it was due");
    stop.cancel();
    pool.await.unwrap().unwrap();
}
