//! The SQLite backend: one file in WAL mode, `synchronous=FULL` by default, a busy timeout
//! for other processes, one writer connection (so in-process writers queue in order instead
//! of sleeping in SQLite's busy handler) and a pool of readers. Every write transaction is
//! `BEGIN IMMEDIATE`, so it takes the write lock before it reads.

use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Sqlite, Transaction};

use crate::config::{StoreConfig, Synchronous};
use crate::{Error, Result};

/// A SQLite database.
#[derive(Debug, Clone)]
pub(crate) struct SqliteBackend {
    writer: SqlitePool,
    reader: SqlitePool,
}

impl SqliteBackend {
    pub(crate) async fn connect(config: &StoreConfig) -> Result<Self> {
        let url = config.url.trim();
        let options = SqliteConnectOptions::from_str(url)
            .map_err(|e| Error::Config(format!("database.url '{url}' is not valid: {e}")))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(match config.synchronous {
                Synchronous::Full => SqliteSynchronous::Full,
                Synchronous::Extra => SqliteSynchronous::Extra,
                Synchronous::Normal => SqliteSynchronous::Normal,
            })
            .busy_timeout(Duration::from_millis(config.busy_timeout_ms))
            .foreign_keys(true);
        let in_memory = url.contains(":memory:") || url.contains("mode=memory");
        let acquire = Duration::from_millis(config.connect_timeout_ms);
        let connect_error = |e: sqlx::Error| Error::Connect {
            target: url.to_string(),
            detail: format!("{e}; check that the directory exists and is writable"),
        };
        // Opening a new file switches it to WAL, which needs a lock another process creating
        // the same file may hold for a moment; retry "database is locked" for the busy timeout.
        let deadline = tokio::time::Instant::now() + Duration::from_millis(config.busy_timeout_ms);
        let writer = loop {
            let attempt = SqlitePoolOptions::new()
                .max_connections(1)
                .min_connections(1)
                .acquire_timeout(acquire)
                .connect_with(options.clone())
                .await;
            match attempt {
                Ok(pool) => break pool,
                Err(e) if is_locked(&e) && tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => return Err(connect_error(e)),
            }
        };
        let reader = if in_memory {
            writer.clone()
        } else {
            SqlitePoolOptions::new()
                .max_connections(config.max_connections)
                .acquire_timeout(acquire)
                .connect_with(options.read_only(true).create_if_missing(false))
                .await
                .map_err(connect_error)?
        };
        Ok(Self { writer, reader })
    }

    pub(crate) fn writer(&self) -> &SqlitePool {
        &self.writer
    }

    pub(crate) fn reader(&self) -> &SqlitePool {
        &self.reader
    }

    async fn begin(&self) -> Result<Transaction<'static, Sqlite>> {
        Ok(self.writer.begin_with("BEGIN IMMEDIATE").await?)
    }

    /// SQLite wakes workers in-process only (see `Store::wake`); nothing to do in SQL.
    async fn notify_enqueued(
        &self,
        _tx: &mut Transaction<'static, Sqlite>,
        _lane: &str,
    ) -> Result<()> {
        Ok(())
    }

    /// SQLite has no writing CTEs: the general path enqueues (see `enqueue_run`).
    async fn enqueue_plain(
        &self,
        _run_id: &str,
        _new: &crate::model::NewRun,
        _now: i64,
    ) -> Result<Option<Option<i64>>> {
        Ok(None)
    }

    /// The runs of claimed jobs are marked running one statement each (cheap in-process).
    const MARKS_PLAIN_RUNS: bool = false;

    /// SQLite has no writing CTEs, and its statements are in-process and cheap: every settle
    /// takes the transactional path.
    #[allow(clippy::type_complexity)]
    async fn settle_fast(
        &self,
        _done: &[(i64, i64, &crate::model::RunEnd)],
        _worker: &str,
        _claim: Option<(Option<&[String]>, i64)>,
        _lease_ms: i64,
        _now: i64,
    ) -> Result<Option<(Vec<Option<bool>>, Option<Vec<crate::model::Job>>)>> {
        Ok(None)
    }

    /// SQLite statements are in-process and cheap, so a batch ends its jobs one pair of
    /// statements each, still in the one transaction (see `finish_each`).
    async fn finish_batch(
        &self,
        _tx: &mut Transaction<'static, Sqlite>,
        _done: &[(i64, i64, &crate::model::RunEnd)],
        _now: i64,
    ) -> Result<Option<Vec<Option<bool>>>> {
        Ok(None)
    }

    pub(crate) async fn close(&self) {
        self.writer.close().await;
        self.reader.close().await;
    }
}

fn is_locked(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if matches!(db.code().as_deref(), Some("5" | "6")))
}

crate::backend::queue_operations!(SqliteBackend, Sqlite, "sqlite");
crate::batch::settle_operations!(SqliteBackend, Sqlite, "sqlite");
crate::wakeups::wakeup_operations!(SqliteBackend, "sqlite");
crate::approvals::approval_operations!(SqliteBackend, "sqlite");
crate::tasks::task_operations!(SqliteBackend, "sqlite");
crate::schedules::schedule_operations!(SqliteBackend, "sqlite");
crate::webhooks::webhook_operations!(SqliteBackend, "sqlite");
crate::notifications::notification_operations!(SqliteBackend, "sqlite");
