//! When the pool claims: a reserved lane runs while a burst fills the other slots, an idle
//! pool is woken by an enqueue (not by polling), and a sleeping pool wakes for an earlier job
//! armed elsewhere.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use nightshift_store::{JobCount, JobState, NewRun, RunStatus};
use nightshift_tests::{TestDb, eventually};
use nightshift_worker::{Handler, JobContext, JobOutcome, Pool, PoolConfig};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{config, status};

/// Batch jobs block until released; interactive jobs finish at once.
pub(super) struct Gate {
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

pub(super) async fn reserved_lane_is_never_starved(db: &TestDb) {
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

/// Records that it ran: each job's payload, as it starts.
pub(super) struct Records {
    pub(crate) ran: mpsc::UnboundedSender<String>,
}

impl Handler for Records {
    async fn handle(&self, ctx: JobContext) -> JobOutcome {
        let _ = self.ran.send(ctx.lease.job().payload.clone());
        JobOutcome::succeeded("")
    }
}

pub(super) async fn idle_pool_is_woken_by_enqueue(db: &TestDb) {
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

pub(super) async fn pool_wakes_for_earlier_job(db: &TestDb) {
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
