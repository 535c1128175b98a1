//! apalis 1.0 on SQLite (`apalis-sqlite`) as a benchmark [`Subject`].
//!
//! What it measures: `SqliteStorage::push` (one transaction per job) and an apalis worker
//! with `.concurrency(4)` draining no-op jobs, with the storage's batch size set to 1 or left
//! at its default (10).
//!
//! How it is set up: the way apalis-sqlite's README sets up its event-driven ("hooked")
//! worker, `SqliteStorage::connect_with_callback` + `SqliteStorage::setup` +
//! `poll_with_strategy(Strategy::new().stream(listener.ready_chunks(batch)).interval(..))`,
//! with one change for fairness. `connect_with_callback` takes only a URL, and `setup` runs
//! `PRAGMA synchronous = OFF` (plus `temp_store = MEMORY`, `cache_size = 64000`,
//! `journal_size_limit = 64 MiB`, `journal_mode = WAL`) on whichever pooled connection runs
//! it, so commits on that connection are never fsynced. Here `setup` runs on a throwaway
//! one-connection pool that is closed afterwards (its migrations and the persistent WAL mode
//! stay), and the pool the worker and producer use is built like `connect_with_callback`
//! builds it (an `after_connect` installing the same SQLite update hook: an insert into `Jobs`
//! wakes the worker) but with connect options giving every connection WAL and
//! `synchronous=FULL` like our store, and apalis's own non-durability tuning (`temp_store`,
//! `cache_size`, `journal_size_limit`). Each connection's `journal_mode` and `synchronous` are
//! read back when it opens and reported. The interval (1 s, our poll interval) is only a
//! fallback. A job counts as done when its row is `Done`.
//!
//! [`documented_setup`] measures apalis exactly as the README sets it up, for the notes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use apalis::prelude::*;
use apalis_sqlite::{Config, SqliteStorage};
use futures::StreamExt;
use futures::channel::mpsc as fmpsc;
use sqlx::SqlitePool;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqliteOperation, SqlitePoolOptions, SqliteSynchronous,
};
use tokio_util::sync::CancellationToken;

use crate::harness::{Probe, Running, Subject, apalis_noop};

/// The queue (apalis `job_type`) every run uses.
const QUEUE: &str = "bench";

/// The `(journal_mode, synchronous)` pairs seen on apalis's connections, with counts.
#[derive(Debug, Default)]
pub(crate) struct PragmaLog {
    seen: Mutex<BTreeMap<(String, i64), u64>>,
}

impl PragmaLog {
    fn record(&self, journal_mode: String, synchronous: i64) {
        let mut seen = self.seen.lock().expect("pragma log lock");
        *seen.entry((journal_mode, synchronous)).or_default() += 1;
    }

    /// E.g. `journal_mode=wal synchronous=2 (FULL) on 7 connections`.
    pub(crate) fn summary(&self) -> String {
        let seen = self.seen.lock().expect("pragma log lock");
        if seen.is_empty() {
            return "no connections opened".into();
        }
        seen.iter()
            .map(|((mode, sync), n)| {
                format!(
                    "journal_mode={mode} synchronous={sync} ({}) on {n} connections",
                    sync_name(*sync)
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

fn sync_name(level: i64) -> &'static str {
    match level {
        0 => "OFF",
        1 => "NORMAL",
        2 => "FULL",
        3 => "EXTRA",
        _ => "?",
    }
}

/// The connect options of the bench pool: our durability pragmas plus apalis's tuning.
fn options(path: &Path) -> SqliteConnectOptions {
    SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
        .pragma("temp_store", "MEMORY")
        .pragma("cache_size", "64000")
        .pragma("journal_size_limit", "67108864")
}

/// apalis-sqlite on a fresh file, with its update-hook listener.
pub(crate) struct ApalisSqlite {
    pool: SqlitePool,
    storage: SqliteStorage<String>,
    hook: Option<fmpsc::UnboundedReceiver<()>>,
    batch: usize,
    path: PathBuf,
}

impl ApalisSqlite {
    /// A set-up apalis store on a fresh file `name` in `dir`; `batch` None keeps apalis's
    /// default batch size.
    pub(crate) async fn open(
        dir: &Path,
        name: &str,
        batch: Option<usize>,
        pragmas: Arc<PragmaLog>,
    ) -> Result<Self> {
        let path = dir.join(format!("{name}.db"));
        let setup_pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(options(&path))
            .await
            .context("opening the apalis setup connection")?;
        SqliteStorage::setup(&setup_pool)
            .await
            .map_err(|e| anyhow!("apalis SqliteStorage::setup: {e}"))?;
        setup_pool.close().await;

        let (tx, rx) = fmpsc::unbounded::<()>();
        let pool = SqlitePoolOptions::new()
            .after_connect(move |conn, _meta| {
                let tx = tx.clone();
                let log = pragmas.clone();
                Box::pin(async move {
                    let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
                        .fetch_one(&mut *conn)
                        .await?;
                    let sync: i64 = sqlx::query_scalar("PRAGMA synchronous")
                        .fetch_one(&mut *conn)
                        .await?;
                    log.record(mode, sync);
                    let mut handle = conn.lock_handle().await?;
                    handle.set_update_hook(move |ev| {
                        if ev.operation == SqliteOperation::Insert && ev.table == "Jobs" {
                            let _ = tx.unbounded_send(());
                        }
                    });
                    Ok(())
                })
            })
            .connect_lazy_with(options(&path));
        let mut config = Config::default().queue(QUEUE);
        if let Some(b) = batch {
            config = config.batch_size(b);
        }
        let batch = config.batch_size;
        let storage = SqliteStorage::new(&pool).with_config(config);
        Ok(Self {
            pool,
            storage,
            hook: Some(rx),
            batch,
            path,
        })
    }
}

impl Subject for ApalisSqlite {
    async fn enqueue(&mut self) -> Result<()> {
        self.storage
            .push("payload".to_string())
            .await
            .map_err(|e| anyhow!("apalis push: {e}"))
    }

    async fn preload(&mut self, n: u64) -> Result<()> {
        let n = usize::try_from(n)?;
        for chunk in 0..n.div_ceil(1000) {
            let len = 1000.min(n - chunk * 1000);
            self.storage
                .push_bulk(vec!["payload".to_string(); len])
                .await
                .map_err(|e| anyhow!("apalis push_bulk: {e}"))?;
        }
        Ok(())
    }

    async fn done(&self) -> Result<u64> {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM Jobs WHERE status = 'Done'")
            .fetch_one(&self.pool)
            .await?;
        Ok(u64::try_from(n)?)
    }

    fn start(&mut self, probe: Probe) -> Result<Running> {
        let hook = self.hook.take().context("the worker was already started")?;
        let strategy = Strategy::new()
            .stream(hook.ready_chunks(self.batch))
            .interval(Duration::from_secs(1));
        let backend = self.storage.clone().poll_with_strategy(strategy);
        let worker = WorkerBuilder::new("bench-worker")
            .backend(backend)
            .data(probe)
            .concurrency(4)
            .build(apalis_noop);
        let stop = CancellationToken::new();
        let token = stop.clone();
        let join = tokio::spawn(async move {
            worker
                .run_until(async move {
                    token.cancelled().await;
                    Ok::<(), std::io::Error>(())
                })
                .await
                .map_err(|e| anyhow!("apalis worker: {e}"))
        });
        Ok(Running { stop, join })
    }

    async fn teardown(self) -> Result<()> {
        self.pool.close().await;
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", self.path.display()));
        }
        Ok(())
    }
}

/// apalis exactly as its README sets it up, for the notes.
#[derive(Debug, Clone)]
pub(crate) struct Documented {
    /// `PRAGMA synchronous` of each connection the pool had opened by the end of `setup`.
    pub(crate) synchronous: Vec<i64>,
    /// Jobs per second pushed one at a time through that pool.
    pub(crate) enqueue_rate: f64,
    pub(crate) jobs: u64,
}

/// Sets apalis up as its README does (`connect_with_callback` + `setup`), reads back
/// `PRAGMA synchronous` on each connection the pool opened, and times `jobs` single pushes.
pub(crate) async fn documented_setup(dir: &Path, jobs: u64) -> Result<Documented> {
    let path = dir.join("apalis-as-documented.db");
    let url = format!("sqlite://{}?mode=rwc", path.display());
    let (pool, _listener) = SqliteStorage::connect_with_callback(&url)
        .map_err(|e| anyhow!("apalis connect_with_callback: {e}"))?;
    SqliteStorage::setup(&pool)
        .await
        .map_err(|e| anyhow!("apalis SqliteStorage::setup: {e}"))?;
    // Hold every connection the pool has opened and read each one's level.
    let mut held = Vec::new();
    let mut synchronous = Vec::new();
    for _ in 0..pool.size().max(1) {
        let mut conn = pool.acquire().await?;
        let level: i64 = sqlx::query_scalar("PRAGMA synchronous")
            .fetch_one(&mut *conn)
            .await?;
        synchronous.push(level);
        held.push(conn);
    }
    drop(held);
    let mut storage =
        SqliteStorage::<String>::new(&pool).with_config(Config::default().queue(QUEUE));
    let t = Instant::now();
    for _ in 0..jobs {
        storage
            .push("payload".to_string())
            .await
            .map_err(|e| anyhow!("apalis push: {e}"))?;
    }
    let elapsed = t.elapsed();
    pool.close().await;
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    Ok(Documented {
        synchronous,
        enqueue_rate: jobs as f64 / elapsed.as_secs_f64().max(1e-9),
        jobs,
    })
}

/// Names `PRAGMA synchronous` levels for the notes, e.g. `[0 (OFF)]`.
pub(crate) fn synchronous_names(levels: &[i64]) -> String {
    let names: Vec<String> = levels
        .iter()
        .map(|l| format!("{l} ({})", sync_name(*l)))
        .collect();
    format!("[{}]", names.join(", "))
}
