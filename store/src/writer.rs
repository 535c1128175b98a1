//! The SQLite writer: the one connection every write goes through, kept out of any pool.
//!
//! SQLite lets one connection write at a time, so the store has one writing connection and
//! in-process writers queue for it in order (a fair lock) instead of sleeping in SQLite's busy
//! handler. It used to be a pool of one. sqlx pings a pooled connection every time it goes
//! back to its pool, and a SQLite connection's ping is a round trip to the thread sqlx runs it
//! on, so every statement waited for the ping after the one before (an enqueue took well over
//! half as long again; `bench/MEASUREMENTS.md`).
//!
//! What it guarantees:
//! - [`Writer::lock`] hands the connection out in the order callers asked, and gives up with
//!   sqlx's `PoolTimedOut` after the acquire timeout, as the pool did.
//! - A transaction ([`Writer::begin`], `BEGIN IMMEDIATE`) that was neither committed nor rolled
//!   back, because its owner returned early, failed or was dropped at any await (even inside
//!   `BEGIN` or `COMMIT`), is rolled back before the next holder gets the connection. The slot
//!   remembers that a transaction may be open from before `BEGIN` is sent until `COMMIT` or
//!   `ROLLBACK` has returned; the connection's thread runs statements in the order they were
//!   sent, so the rollback comes after whatever the last owner left running. A dropped
//!   [`WriteTx`] also rolls back at once, from a task holding the writer, so that other
//!   processes writing the file do not wait for this one's next write.
//! - After [`Writer::close`], `lock` fails with sqlx's `PoolClosed`.
//!
//! An in-memory database exists only on its one connection, so its reads go through the writer
//! too ([`Read::Writer`]); a file's reads take a pooled read-only connection ([`Read::Pool`]).

use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::sqlite::{SqliteConnection, SqliteRow};
use sqlx::{AssertSqlSafe, Connection, FromRow, Sqlite};
use tokio::sync::{Mutex, OwnedMutexGuard};

use crate::Result;

/// The writing connection and what its last holder left open.
#[derive(Debug)]
pub(crate) struct Slot {
    conn: Option<SqliteConnection>,
    /// Set before `BEGIN` is sent and cleared when `COMMIT` or `ROLLBACK` returned: while set,
    /// a transaction may be open, and the next holder rolls it back first.
    maybe_in_transaction: bool,
}

/// The store's one SQLite writing connection, behind a fair lock.
#[derive(Debug, Clone)]
pub(crate) struct Writer {
    slot: Arc<Mutex<Slot>>,
    wait: Duration,
}

impl Writer {
    /// Keeps `conn`; `lock` waits at most `wait` for it.
    pub(crate) fn new(conn: SqliteConnection, wait: Duration) -> Self {
        Self {
            slot: Arc::new(Mutex::new(Slot {
                conn: Some(conn),
                maybe_in_transaction: false,
            })),
            wait,
        }
    }

    /// The connection, once every earlier caller let it go, with no transaction open.
    pub(crate) async fn lock(&self) -> Result<Held> {
        let slot = tokio::time::timeout(self.wait, self.slot.clone().lock_owned())
            .await
            .map_err(|_| sqlx::Error::PoolTimedOut)?;
        if slot.conn.is_none() {
            return Err(sqlx::Error::PoolClosed.into());
        }
        let mut held = Held(slot);
        held.roll_back_left_transaction().await?;
        Ok(held)
    }

    /// Locks the connection and begins a write transaction (`BEGIN IMMEDIATE`: the write lock
    /// is taken before anything is read).
    pub(crate) async fn begin(&self) -> Result<WriteTx> {
        let mut tx = self.lock_for_transaction().await?;
        sqlx::query("BEGIN IMMEDIATE").execute(&mut *tx).await?;
        Ok(tx)
    }

    /// The connection, held for a transaction its holder is about to send `BEGIN` for: from
    /// here on a transaction may be open, and one left open is rolled back (module doc).
    async fn lock_for_transaction(&self) -> Result<WriteTx> {
        let mut held = self.lock().await?;
        held.0.maybe_in_transaction = true;
        Ok(WriteTx { held: Some(held) })
    }

    /// Begins a write transaction and runs `first` in it, in one round trip to the
    /// connection's thread (`BEGIN IMMEDIATE` and `first` sent as one query): the rows
    /// `first` returns, and the transaction. `first` binds `?1` to `list`, one JSON array (a
    /// batch statement). Fails like [`Writer::begin`] followed by `first`; a transaction
    /// left open by a failing `first` is rolled back as any other (see the module doc).
    pub(crate) async fn begin_fetching<R>(
        &self,
        first: &str,
        list: String,
    ) -> Result<(WriteTx, Vec<R>)>
    where
        R: for<'r> FromRow<'r, SqliteRow> + Send + Unpin,
    {
        let mut tx = self.lock_for_transaction().await?;
        let sql = format!("BEGIN IMMEDIATE;\n{}", statement_text(first));
        let rows = tx.fetch_list(sql, list).await?;
        Ok((tx, rows))
    }

    /// Runs `statements` (binding `?1` to `list`, one JSON array) in a write transaction of
    /// their own, sent with its `BEGIN IMMEDIATE` and `COMMIT` as one query: one round trip to
    /// the connection's thread instead of three. The rows they return once committed; on an
    /// error nothing they wrote is kept.
    pub(crate) async fn fetch_in_transaction<R>(
        &self,
        statements: &str,
        list: String,
    ) -> Result<Vec<R>>
    where
        R: for<'r> FromRow<'r, SqliteRow> + Send + Unpin,
    {
        let with_commit = format!("{};\nCOMMIT", statement_text(statements));
        let (mut tx, rows) = self.begin_fetching(&with_commit, list).await?;
        tx.ended();
        Ok(rows)
    }

    /// Closes the connection once its current holder let it go.
    pub(crate) async fn close(&self) {
        let mut slot = self.slot.lock().await;
        if let Some(conn) = slot.conn.take() {
            let _ = conn.close().await;
        }
    }
}

/// `statements` ready for another statement after them: without a trailing `;`.
fn statement_text(statements: &str) -> &str {
    statements.trim_end().trim_end_matches(';')
}

/// The writing connection, held until dropped.
#[derive(Debug)]
pub(crate) struct Held(OwnedMutexGuard<Slot>);

impl Held {
    /// Rolls back the transaction a previous owner may have left open (if one is), and
    /// forgets it.
    async fn roll_back_left_transaction(&mut self) -> Result<()> {
        if !self.0.maybe_in_transaction {
            return Ok(());
        }
        match sqlx::query("ROLLBACK").execute(&mut **self).await {
            Ok(_) => {}
            Err(sqlx::Error::Database(e)) if e.message().contains("no transaction is active") => {}
            Err(e) => return Err(e.into()),
        }
        self.0.maybe_in_transaction = false;
        Ok(())
    }
}

impl Deref for Held {
    type Target = SqliteConnection;

    fn deref(&self) -> &SqliteConnection {
        self.0
            .conn
            .as_ref()
            .expect("a held writer has its connection")
    }
}

impl DerefMut for Held {
    fn deref_mut(&mut self) -> &mut SqliteConnection {
        self.0
            .conn
            .as_mut()
            .expect("a held writer has its connection")
    }
}

/// A write transaction on the held writer. Dropped without `commit` or `rollback`, it is
/// rolled back at once by a task that keeps the writer until then, so the file's write lock
/// is not held for other processes until this one writes again (and, should that task not
/// run, before the writer's next use).
#[derive(Debug)]
pub(crate) struct WriteTx {
    /// Always `Some` until dropped.
    held: Option<Held>,
}

impl WriteTx {
    /// Commits; on success the writer is free of the transaction.
    pub(crate) async fn commit(mut self) -> std::result::Result<(), sqlx::Error> {
        self.finish("COMMIT").await
    }

    /// Rolls back.
    pub(crate) async fn rollback(mut self) -> std::result::Result<(), sqlx::Error> {
        self.finish("ROLLBACK").await
    }

    /// Runs `last` (binding `?1` to `list`, one JSON array) and commits, in one round trip to
    /// the connection's thread (`last` and `COMMIT` sent as one query): the rows `last`
    /// returned, once committed. When `last` fails, `COMMIT` is not run and the transaction is
    /// rolled back as a dropped one is.
    pub(crate) async fn commit_fetching<R>(mut self, last: &str, list: String) -> Result<Vec<R>>
    where
        R: for<'r> FromRow<'r, SqliteRow> + Send + Unpin,
    {
        let sql = format!("{};\nCOMMIT", statement_text(last));
        let rows = self.fetch_list(sql, list).await?;
        self.ended();
        Ok(rows)
    }

    /// Runs `sql` (one or more statements) with `?1` bound to `list`; every row returned.
    async fn fetch_list<R>(&mut self, sql: String, list: String) -> Result<Vec<R>>
    where
        R: for<'r> FromRow<'r, SqliteRow> + Send + Unpin,
    {
        Ok(sqlx::query_as(AssertSqlSafe(sql))
            .bind(list)
            .fetch_all(&mut **self)
            .await?)
    }

    /// Notes that the transaction's `COMMIT` or `ROLLBACK` returned: none is open any more.
    fn ended(&mut self) {
        if let Some(held) = self.held.as_mut() {
            held.0.maybe_in_transaction = false;
        }
    }

    async fn finish(&mut self, statement: &'static str) -> std::result::Result<(), sqlx::Error> {
        sqlx::query(statement).execute(&mut **self).await?;
        self.ended();
        Ok(())
    }
}

impl Drop for WriteTx {
    fn drop(&mut self) {
        let Some(mut held) = self.held.take() else {
            return;
        };
        if !held.0.maybe_in_transaction {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            // On failure the flag stays set, and the next `lock` tries again.
            runtime.spawn(async move {
                let _ = held.roll_back_left_transaction().await;
            });
        }
    }
}

impl Deref for WriteTx {
    type Target = SqliteConnection;

    fn deref(&self) -> &SqliteConnection {
        self.held
            .as_ref()
            .expect("a live transaction holds the writer")
    }
}

impl DerefMut for WriteTx {
    fn deref_mut(&mut self) -> &mut SqliteConnection {
        self.held
            .as_mut()
            .expect("a live transaction holds the writer")
    }
}

/// A connection to read on: the writer (in-memory databases) or a pooled reader.
#[derive(Debug)]
pub(crate) enum Read {
    Writer(Held),
    Pool(PoolConnection<Sqlite>),
}

impl Deref for Read {
    type Target = SqliteConnection;

    fn deref(&self) -> &SqliteConnection {
        match self {
            Read::Writer(held) => held,
            Read::Pool(conn) => conn,
        }
    }
}

impl DerefMut for Read {
    fn deref_mut(&mut self) -> &mut SqliteConnection {
        match self {
            Read::Writer(held) => held,
            Read::Pool(conn) => conn,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::ConnectOptions;
    use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode};

    struct File(std::path::PathBuf);

    impl Drop for File {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    async fn writer(wait: Duration) -> (Writer, SqliteConnectOptions, File) {
        let dir = std::env::temp_dir().join(format!(
            "nightshift-writer-{}-{}",
            std::process::id(),
            uuid::Uuid::now_v7()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let options = SqliteConnectOptions::new()
            .filename(dir.join("w.db"))
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal);
        let mut conn = options.connect().await.unwrap();
        sqlx::query("CREATE TABLE t (v INTEGER NOT NULL)")
            .execute(&mut conn)
            .await
            .unwrap();
        (Writer::new(conn, wait), options, File(dir))
    }

    /// Writes `v` into `t` on `conn`.
    async fn insert(conn: &mut SqliteConnection, v: i64) {
        sqlx::query("INSERT INTO t VALUES (?1)")
            .bind(v)
            .execute(conn)
            .await
            .unwrap();
    }

    /// Writes `v` into `t` on the writer, outside any transaction (autocommit).
    async fn insert_alone(writer: &Writer, v: i64) {
        insert(&mut writer.lock().await.unwrap(), v).await;
    }

    /// What another connection (another process) sees committed.
    async fn committed(options: &SqliteConnectOptions) -> Vec<i64> {
        let mut other = options.connect().await.unwrap();
        sqlx::query_scalar("SELECT v FROM t ORDER BY v")
            .fetch_all(&mut other)
            .await
            .unwrap()
    }

    /// A transaction its owner left open (returned early, or dropped at an await) is rolled
    /// back before the next holder's first statement, whose writes then commit on their own.
    #[tokio::test]
    async fn a_transaction_left_open_is_rolled_back_before_the_next_holder() {
        let (writer, options, _file) = writer(Duration::from_secs(5)).await;
        let mut tx = writer.begin().await.unwrap();
        insert(&mut tx, 1).await;
        drop(tx);
        let (entered, mut inside) = tokio::sync::mpsc::channel(1);
        let stuck = {
            let writer = writer.clone();
            tokio::spawn(async move {
                let mut tx = writer.begin().await.unwrap();
                insert(&mut tx, 2).await;
                entered.send(()).await.unwrap();
                std::future::pending::<()>().await;
                tx.commit().await
            })
        };
        inside.recv().await.unwrap();
        stuck.abort();
        let _ = stuck.await;
        let mut held = writer.lock().await.unwrap();
        let seen: Vec<i64> = sqlx::query_scalar("SELECT v FROM t")
            .fetch_all(&mut *held)
            .await
            .unwrap();
        assert!(seen.is_empty(), "neither left transaction wrote: {seen:?}");
        insert(&mut held, 3).await;
        drop(held);
        assert_eq!(committed(&options).await, vec![3], "autocommit again");
        let mut tx = writer.begin().await.unwrap();
        insert(&mut tx, 4).await;
        tx.commit().await.unwrap();
        let mut tx = writer.begin().await.unwrap();
        insert(&mut tx, 5).await;
        tx.rollback().await.unwrap();
        assert_eq!(committed(&options).await, vec![3, 4]);
        writer.close().await;
    }

    /// A dropped transaction lets go of the file's write lock at once: another process can
    /// write without this one touching the writer again.
    #[tokio::test]
    async fn a_dropped_transaction_frees_the_file_for_other_processes() {
        let (writer, options, _file) = writer(Duration::from_secs(5)).await;
        let mut tx = writer.begin().await.unwrap();
        insert(&mut tx, 1).await;
        drop(tx);
        let mut other = options
            .clone()
            .busy_timeout(Duration::from_secs(2))
            .connect()
            .await
            .unwrap();
        sqlx::query("INSERT INTO t VALUES (2)")
            .execute(&mut other)
            .await
            .expect("the dropped transaction no longer holds the write lock");
        drop(other);
        assert_eq!(committed(&options).await, vec![2]);
        writer.close().await;
    }

    /// Inserts every value of the JSON list `?1` into `t`, returning each.
    const INSERT_LIST: &str = "INSERT INTO t SELECT value FROM json_each(?1) RETURNING v;\n";

    /// A transaction sent whole with its `BEGIN` and `COMMIT` answers its statements' rows once
    /// committed, and keeps nothing of them when one fails (a NULL breaks `t`'s NOT NULL
    /// after the first statement wrote), leaving the writer free and in autocommit.
    #[tokio::test]
    async fn a_transaction_sent_whole_commits_all_or_nothing() {
        let (writer, options, _file) = writer(Duration::from_secs(5)).await;
        let two = format!("{INSERT_LIST}; {INSERT_LIST}");
        let rows: Vec<(i64,)> = writer
            .fetch_in_transaction(&two, "[1, 2]".into())
            .await
            .unwrap();
        assert_eq!(rows, vec![(1,), (2,), (1,), (2,)]);
        assert_eq!(committed(&options).await, vec![1, 1, 2, 2]);
        let failing = format!("{INSERT_LIST}; INSERT INTO t VALUES (NULL)");
        let e = writer
            .fetch_in_transaction::<(i64,)>(&failing, "[3]".into())
            .await
            .unwrap_err();
        assert!(e.to_string().contains("NOT NULL"), "{e}");
        insert_alone(&writer, 4).await;
        assert_eq!(
            committed(&options).await,
            vec![1, 1, 2, 2, 4],
            "3 was rolled back"
        );
        writer.close().await;
    }

    /// `begin_fetching` and `commit_fetching` carry a transaction's first and last statements
    /// with its `BEGIN` and `COMMIT`: what they and the statements between wrote is committed
    /// together, and a failing last statement keeps nothing of the transaction.
    #[tokio::test]
    async fn a_transaction_begun_and_committed_beside_its_statements() {
        let (writer, options, _file) = writer(Duration::from_secs(5)).await;
        let (mut tx, first): (WriteTx, Vec<(i64,)>) = writer
            .begin_fetching(INSERT_LIST, "[1]".into())
            .await
            .unwrap();
        assert_eq!(first, vec![(1,)]);
        insert(&mut tx, 2).await;
        assert!(
            committed(&options).await.is_empty(),
            "nothing committed yet"
        );
        let last: Vec<(i64,)> = tx.commit_fetching(INSERT_LIST, "[3]".into()).await.unwrap();
        assert_eq!(last, vec![(3,)]);
        assert_eq!(committed(&options).await, vec![1, 2, 3]);
        let (tx, _): (WriteTx, Vec<(i64,)>) = writer
            .begin_fetching(INSERT_LIST, "[4]".into())
            .await
            .unwrap();
        let e = tx
            .commit_fetching::<(i64,)>("INSERT INTO t VALUES (NULL) RETURNING v", String::new())
            .await
            .unwrap_err();
        assert!(e.to_string().contains("NOT NULL"), "{e}");
        insert_alone(&writer, 5).await;
        assert_eq!(
            committed(&options).await,
            vec![1, 2, 3, 5],
            "4 was rolled back"
        );
        writer.close().await;
    }

    /// Callers get the writer in the order they asked; one that waits longer than the acquire
    /// timeout gets a transient error, and after `close` every caller gets one.
    #[tokio::test]
    async fn the_writer_is_handed_out_in_order_within_the_timeout() {
        let (writer, options, _file) = writer(Duration::from_millis(200)).await;
        let first = writer.lock().await.unwrap();
        let mut queued = Vec::new();
        for v in 0..5_i64 {
            let writer = writer.clone();
            queued.push(tokio::spawn(async move {
                let mut held = writer.lock().await.unwrap();
                sqlx::query("INSERT INTO t VALUES (?1)")
                    .bind(v)
                    .execute(&mut *held)
                    .await
                    .unwrap();
            }));
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        drop(first);
        for task in queued {
            task.await.unwrap();
        }
        let rows: Vec<i64> = {
            let mut other = options.connect().await.unwrap();
            sqlx::query_scalar("SELECT v FROM t ORDER BY rowid")
                .fetch_all(&mut other)
                .await
                .unwrap()
        };
        assert_eq!(rows, vec![0, 1, 2, 3, 4], "in the order they asked");
        let held = writer.lock().await.unwrap();
        let late = writer.lock().await.unwrap_err();
        assert!(
            matches!(late, crate::Error::Database(sqlx::Error::PoolTimedOut)),
            "{late}"
        );
        assert!(late.is_transient());
        drop(held);
        writer.close().await;
        let closed = writer.lock().await.unwrap_err();
        assert!(
            matches!(closed, crate::Error::Database(sqlx::Error::PoolClosed)),
            "{closed}"
        );
    }
}
