//! The SQLite backend: one file in WAL mode, `synchronous=FULL` by default, a busy timeout
//! for other processes, one writer connection (so in-process writers queue in order instead
//! of sleeping in SQLite's busy handler) and a pool of readers. Every write transaction is
//! `BEGIN IMMEDIATE`, so it takes the write lock before it reads.

use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{ConnectOptions, Sqlite};

use crate::backend::Backend;
use crate::config::{StoreConfig, Synchronous};
use crate::model::Job;
use crate::queue::{ClaimRow, FastSettle, JobEnd, QueuePaths, QueueStatements, RunRow};
use crate::writer::{Held, Read, WriteTx, Writer};
use crate::{Error, Result};

/// A SQLite database.
#[derive(Debug, Clone)]
pub(crate) struct SqliteBackend {
    writer: Writer,
    /// Read-only connections to the file; `None` for an in-memory database, which reads
    /// through the writer.
    reader: Option<SqlitePool>,
}

impl Backend for SqliteBackend {
    type Db = Sqlite;
    type Writer = Held;
    type Reader = Read;
    type Tx = WriteTx;

    /// The writing connection, once free (see [`Writer::lock`]).
    async fn writer(&self) -> Result<Held> {
        self.writer.lock().await
    }

    /// A connection to read on.
    async fn reader(&self) -> Result<Read> {
        match &self.reader {
            Some(pool) => Ok(Read::Pool(pool.acquire().await?)),
            None => Ok(Read::Writer(self.writer.lock().await?)),
        }
    }

    async fn begin(&self) -> Result<WriteTx> {
        self.writer.begin().await
    }

    /// A transaction that claims jobs: as any other (SQLite's claim statements name their
    /// index).
    async fn begin_claiming(&self) -> Result<WriteTx> {
        self.writer.begin().await
    }

    async fn commit(tx: WriteTx) -> Result<()> {
        Ok(tx.commit().await?)
    }

    async fn rollback(tx: WriteTx) -> Result<()> {
        Ok(tx.rollback().await?)
    }
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
            .pragma("cache_size", cache_size_pragma(config))
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
            match options.connect().await {
                Ok(conn) => break Writer::new(conn, acquire),
                Err(e) if is_locked(&e) && tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => return Err(connect_error(e)),
            }
        };
        // The readers are not pinged before they are handed out (sqlx's default): a SQLite
        // connection is a file handle in this process that no server can drop, and the ping
        // is a round trip to the connection's thread.
        let reader = if in_memory {
            None
        } else {
            let pool = SqlitePoolOptions::new()
                .max_connections(config.max_connections)
                .test_before_acquire(false)
                .acquire_timeout(acquire)
                .connect_with(options.read_only(true).create_if_missing(false))
                .await;
            match pool {
                Ok(pool) => Some(pool),
                Err(e) => {
                    writer.close().await;
                    return Err(connect_error(e));
                }
            }
        };
        Ok(Self { writer, reader })
    }

    pub(crate) async fn close(&self) {
        self.writer.close().await;
        if let Some(reader) = &self.reader {
            reader.close().await;
        }
    }
}

/// `PRAGMA cache_size` for `database.cache_mib`: a negative value is a size in KiB.
impl SqliteBackend {
    /// The claim statement for `lanes` and its lane parameter (see [`QueuePaths::claim`]).
    fn claim_statement(lanes: Option<&[String]>) -> (&'static str, Option<String>) {
        match lanes {
            Some([lane]) => (
                crate::backend::sql!("sqlite", "claim_lane"),
                Some(lane.clone()),
            ),
            lanes => (
                crate::backend::sql!("sqlite", "claim"),
                lanes.map(|l| serde_json::to_string(l).expect("lane names serialise")),
            ),
        }
    }
}

impl QueuePaths for SqliteBackend {
    /// A claim's own statement marks the runs of the jobs it takes without a concurrency key
    /// running (the trigger `claim_marks_run`, migration 18).
    const MARKS_PLAIN_RUNS: bool = true;

    /// Every write transaction holds the one writer (`BEGIN IMMEDIATE`): no key lock needed.
    const LOCKS_KEYS: bool = false;

    /// A run that decides nothing ([`crate::queue::decides_nothing`]), in one statement and one
    /// round trip (the view
    /// `enqueue_start`'s trigger; SQLite has no writing CTEs): the start job's id, or `None`
    /// when the run's idempotency key was taken.
    async fn enqueue_plain(&self, run: RunRow<'_>) -> Result<Option<i64>> {
        Self::insert_plain(&mut *self.writer().await?, run).await
    }

    /// One statement for the whole batch (`enqueue_plain_in.sql`: every entry of a JSON list
    /// through the `enqueue_start` view's trigger, in order) in a transaction of its own,
    /// sent with its `BEGIN IMMEDIATE` and `COMMIT` as one query: one round trip to the
    /// connection's thread instead of one per run, each of which costs a wake-up of that
    /// thread and of the caller's (`bench/MEASUREMENTS.md`, "SQLite batches in one
    /// statement"). JSON carries any text, NULs included (`\u0000`).
    async fn enqueue_plain_many(&self, rows: &[RunRow<'_>]) -> Result<Option<Vec<Option<i64>>>> {
        let jobs: std::collections::HashMap<String, i64> = self
            .writer
            .fetch_in_transaction::<(String, i64)>(
                crate::backend::sql!("sqlite", "enqueue_plain_in"),
                run_list(rows),
            )
            .await?
            .into_iter()
            .collect();
        Ok(Some(rows.iter().map(|r| jobs.get(r.id).copied()).collect()))
    }

    /// SQLite has no writing CTEs, and its statements are in-process and cheap: every settle
    /// takes the transactional path.
    async fn settle_fast(
        &self,
        _done: &[JobEnd<'_>],
        _claim: ClaimRow<'_>,
    ) -> Result<Option<FastSettle>> {
        Ok(None)
    }

    /// Ends a batch of jobs, and their runs, in one round trip to SQLite's connection thread
    /// whatever its size (`finish_batch.sql`: the runs, then the jobs, each fenced by its
    /// token). Per job: `Some(keyed)` when it ended, `None` when its lease was lost.
    async fn finish_batch(
        tx: &mut WriteTx,
        done: &[JobEnd<'_>],
        now: i64,
    ) -> Result<Vec<Option<bool>>> {
        if done.is_empty() {
            return Ok(Vec::new());
        }
        let ends: Vec<_> = done
            .iter()
            .map(|d| {
                (
                    d.job_id,
                    d.token,
                    d.end.job_state().as_str(),
                    d.end.job_error(),
                    d.end.run_status().as_str(),
                    d.end.result(),
                    d.end.error(),
                )
            })
            .collect();
        let ends = serde_json::to_string(&ends).expect("job ends serialise");
        let won: std::collections::HashMap<(i64, i64), bool> =
            sqlx::query_as(crate::backend::sql!("sqlite", "finish_batch"))
                .bind(ends)
                .bind(now)
                .fetch_all(&mut **tx)
                .await?
                .into_iter()
                .map(|(id, token, keyed)| ((id, token), keyed))
                .collect();
        Ok(done
            .iter()
            .map(|d| won.get(&(d.job_id, d.token)).copied())
            .collect())
    }

    /// `claim.sql` for every lane (no `?4`), `claim_lane.sql` and the lane's name for one lane
    /// (what a pool's reserved slots ask for), `claim.sql` and a JSON array for several. Each
    /// reads the due jobs a priority at a time from an index in claim order and stops at the
    /// limit (claim.sql says why).
    async fn claim(tx: &mut WriteTx, claim: ClaimRow<'_>) -> Result<Vec<Job>> {
        let (statement, lanes) = SqliteBackend::claim_statement(claim.lanes);
        Ok(sqlx::query_as(statement)
            .bind(claim.now)
            .bind(claim.worker)
            .bind(claim.lease_ms)
            .bind(lanes)
            .bind(claim.limit)
            .fetch_all(&mut **tx)
            .await?)
    }

    /// Marks the runs of claimed jobs running, in one statement.
    async fn mark_runs_running(tx: &mut WriteTx, run_ids: &[&str], now: i64) -> Result<()> {
        let ids = serde_json::to_string(run_ids).expect("run ids serialise");
        sqlx::query(crate::backend::sql!("sqlite", "mark_runs_running"))
            .bind(now)
            .bind(ids)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }
}

fn cache_size_pragma(config: &StoreConfig) -> String {
    let mib = config.cache_mib.unwrap_or(crate::config::DEFAULT_CACHE_MIB);
    format!("-{}", u64::from(mib) * 1024)
}

fn is_locked(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if matches!(db.code().as_deref(), Some("5" | "6")))
}

crate::queue::queue_statements!(SqliteBackend, "sqlite");
crate::wakeups::wakeup_statements!(SqliteBackend, "sqlite");
crate::inbox::inbox_statements!(SqliteBackend, "sqlite");
crate::check_runs::check_run_statements!(SqliteBackend, "sqlite");
crate::content::content_statements!(SqliteBackend, "sqlite");
crate::audit::audit_statements!(SqliteBackend, "sqlite");
crate::approvals::approval_statements!(SqliteBackend, "sqlite");
crate::tasks::task_statements!(SqliteBackend, "sqlite");
crate::schedules::schedule_statements!(SqliteBackend, "sqlite");
crate::webhooks::webhook_statements!(SqliteBackend, "sqlite");
crate::notifications::notification_statements!(SqliteBackend, "sqlite");
crate::listing::listing_statements!(SqliteBackend, "sqlite");
crate::retention::retention_statements!(SqliteBackend, "sqlite");
crate::forks::fork_statements!(SqliteBackend, "sqlite");

/// SQLite takes a group batch of deliveries together, with its own batch statements.
impl crate::webhooks::together::TakeTogether for SqliteBackend {
    type Together = Self;

    fn together(&self) -> Option<&Self> {
        Some(self)
    }
}

/// A group batch of deliveries in three statements and three round trips
/// (`webhooks/together.rs`).
impl crate::webhooks::together::BatchIntake<SqliteBackend> for SqliteBackend {
    /// `BEGIN IMMEDIATE` and `claim_many.sql`, sent together.
    async fn begin_claiming_many(
        &self,
        takings: &[&crate::webhooks::take::Taking],
    ) -> Result<(WriteTx, Vec<crate::webhooks::WebhookDelivery>)> {
        let list = json_list(
            takings
                .iter()
                .map(|t| crate::webhooks::together::claim_entry(t)),
        );
        self.writer
            .begin_fetching(crate::backend::sql!("sqlite", "webhooks/claim_many"), list)
            .await
    }

    async fn enqueue_plain_in(
        &self,
        c: &mut sqlx::SqliteConnection,
        rows: &[RunRow<'_>],
    ) -> Result<std::collections::HashMap<String, i64>> {
        let jobs: Vec<(String, i64)> =
            sqlx::query_as(crate::backend::sql!("sqlite", "enqueue_plain_in"))
                .bind(run_list(rows))
                .fetch_all(c)
                .await?;
        Ok(jobs.into_iter().collect())
    }

    /// `finish_many.sql` and `COMMIT`, sent together.
    async fn finish_many_and_commit(
        &self,
        tx: WriteTx,
        done: &[(&crate::webhooks::take::Taking, String)],
    ) -> Result<std::collections::HashSet<(String, String)>> {
        let list = json_list(
            done.iter()
                .map(|(t, runs)| crate::webhooks::together::finish_entry(t, runs)),
        );
        let finished: Vec<(String, String)> = tx
            .commit_fetching(crate::backend::sql!("sqlite", "webhooks/finish_many"), list)
            .await?;
        Ok(finished.into_iter().collect())
    }
}

/// `enqueue_plain_in.sql`'s list of `rows`.
fn run_list(rows: &[RunRow<'_>]) -> String {
    json_list(rows.iter().map(crate::webhooks::together::run_entry))
}

/// A batch statement's `?1`: its entries as one JSON array.
fn json_list(entries: impl Iterator<Item = serde_json::Value>) -> String {
    serde_json::Value::Array(entries.collect()).to_string()
}

impl crate::listing::LiveReads for SqliteBackend {
    type LiveReader = Read;

    /// A reader: SQLite keeps no dead index entries to skip.
    async fn live_reader(&self) -> Result<Read> {
        self.reader().await
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A fresh directory for one test's database file, and that file's URL.
    fn scratch(name: &str) -> (std::path::PathBuf, String) {
        let dir = std::env::temp_dir().join(format!(
            "nightshift-{name}-{}-{}",
            std::process::id(),
            uuid::Uuid::now_v7()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let url = format!("sqlite://{}", dir.join("p.db").display());
        (dir, url)
    }

    /// A migrated store on a fresh file, and the directory to remove afterwards.
    pub(crate) async fn migrated(name: &str) -> (SqliteBackend, std::path::PathBuf) {
        let (dir, url) = scratch(name);
        let backend = SqliteBackend::connect(&StoreConfig::for_url(&url))
            .await
            .unwrap();
        crate::migrate::apply_sqlite(&mut backend.writer().await.unwrap())
            .await
            .unwrap();
        (backend, dir)
    }

    /// The connection settings reach both pools: WAL, the configured sync level, and the
    /// page cache (`database.cache_mib`, or the default when unset).
    #[tokio::test]
    async fn connections_carry_the_configured_pragmas() {
        let (dir, url) = scratch("pragmas");
        let default = -i64::from(crate::config::DEFAULT_CACHE_MIB) * 1024;
        for (cache_mib, expected) in [(Some(7), -7 * 1024), (None, default)] {
            let mut config = StoreConfig::for_url(&url);
            config.cache_mib = cache_mib;
            let backend = SqliteBackend::connect(&config).await.unwrap();
            let mut writer = backend.writer().await.unwrap();
            let mut reader = backend.reader().await.unwrap();
            assert!(matches!(reader, Read::Pool(_)), "a file has its readers");
            for conn in [&mut *writer, &mut *reader] {
                let cache: i64 = sqlx::query_scalar("PRAGMA cache_size")
                    .fetch_one(&mut *conn)
                    .await
                    .unwrap();
                assert_eq!(cache, expected, "cache_mib {cache_mib:?}");
                let sync: i64 = sqlx::query_scalar("PRAGMA synchronous")
                    .fetch_one(&mut *conn)
                    .await
                    .unwrap();
                assert_eq!(sync, 2, "synchronous=FULL");
            }
            let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
                .fetch_one(&mut *writer)
                .await
                .unwrap();
            drop((writer, reader));
            assert_eq!(mode, "wal");
            backend.close().await;
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A claim from every lane, from one lane or from a list of lanes reads the due jobs of
    /// one priority at a time as a range of its claim index (`run_at<?` is a bound of the
    /// search, so jobs not yet due are never read), in claim order: the priorities are the
    /// outer loop and nothing is sorted (a sort, or a walk of every queued job, made each
    /// claim cost time in proportion to the queue). Checked on the plan SQLite makes, with
    /// queued jobs in the table.
    #[tokio::test]
    async fn a_claim_searches_due_jobs_priority_by_priority_and_never_sorts() {
        let (backend, dir) = migrated("claim-plan").await;
        for i in 0..50 {
            let new = crate::model::NewRun::new("agent", "p");
            let id = format!("run-{i}");
            let row = crate::queue::RunRow {
                id: &id,
                new: &new,
                notify: false,
                now: 1,
            };
            crate::queue::enqueue_run(&backend, row).await.unwrap();
        }
        let plan = |(sql, lanes): (&'static str, Option<String>)| {
            let backend = backend.clone();
            async move {
                let rows: Vec<(i64, i64, i64, String)> =
                    sqlx::query_as(sqlx::AssertSqlSafe(format!("EXPLAIN QUERY PLAN {sql}")))
                        .bind(10_i64)
                        .bind("w")
                        .bind(1000_i64)
                        .bind(lanes)
                        .bind(4_i64)
                        .fetch_all(&mut *backend.writer().await.unwrap())
                        .await
                        .unwrap();
                rows.into_iter().map(|r| r.3).collect::<Vec<_>>().join("\n")
            }
        };
        let searches = |plan: &str, search: &str| {
            let lines: Vec<&str> = plan.lines().collect();
            let outer = lines.iter().position(|l| *l == "SCAN p");
            let inner = lines.iter().position(|l| l.ends_with(search));
            assert!(
                matches!((outer, inner), (Some(o), Some(i)) if o < i),
                "the priorities should be the outer loop around `{search}`:\n{plan}"
            );
            assert!(!plan.contains("TEMP B-TREE"), "{plan}");
        };
        let all_lanes = plan(SqliteBackend::claim_statement(None)).await;
        searches(
            &all_lanes,
            "SEARCH q USING INDEX jobs_claim (priority=? AND run_at<?)",
        );
        let one = ["default".to_string()];
        let one_lane = plan(SqliteBackend::claim_statement(Some(&one))).await;
        searches(
            &one_lane,
            "SEARCH q USING INDEX jobs_claim_lane (lane=? AND priority=? AND run_at<?)",
        );
        let two = ["default".to_string(), "batch".to_string()];
        let listed = plan(SqliteBackend::claim_statement(Some(&two))).await;
        searches(
            &listed,
            "SEARCH q USING INDEX jobs_claim (priority=? AND run_at<?)",
        );
        backend.close().await;
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Timing the next claim (`next_due.sql`) and the overview's oldest due job
    /// (`listing/oldest_due.sql`) read jobs_next_due in order and stop at its first entry:
    /// no scan of the table, no sort (as on PostgreSQL, where `MIN` read every entry).
    #[tokio::test]
    async fn next_due_reads_the_first_entry_of_jobs_next_due() {
        let (backend, dir) = migrated("next-due-plan").await;
        for (name, sql) in [
            ("next_due", crate::backend::sql!("sqlite", "next_due")),
            (
                "oldest_due",
                crate::backend::sql!("sqlite", "listing/oldest_due"),
            ),
        ] {
            let rows: Vec<(i64, i64, i64, String)> =
                sqlx::query_as(sqlx::AssertSqlSafe(format!("EXPLAIN QUERY PLAN {sql}")))
                    .bind(10_i64)
                    .fetch_all(&mut *backend.writer().await.unwrap())
                    .await
                    .unwrap();
            let plan = rows.into_iter().map(|r| r.3).collect::<Vec<_>>().join("\n");
            assert!(plan.contains("INDEX jobs_next_due"), "{name}:\n{plan}");
            assert!(!plan.contains("TEMP B-TREE"), "{name}:\n{plan}");
        }
        backend.close().await;
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A daemon of schema version 10 still running on a file that a newer binary migrated
    /// inserts into `enqueue_start` without the `notify` column: its runs still enqueue, and
    /// notify as every run did before version 11.
    #[tokio::test]
    async fn an_enqueue_written_for_version_10_still_works_and_notifies() {
        let (backend, dir) = migrated("enqueue-v10").await;
        // enqueue_plain.sql as version 10 shipped it.
        let job: Option<i64> = sqlx::query_scalar(
            "INSERT INTO enqueue_start (run_id, agent, trigger_kind, input, idempotency_key, now, \
             lane, priority, run_at, max_attempts) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10); \
             SELECT id FROM jobs WHERE run_id = ?1 AND kind = 'start' ORDER BY id LIMIT 1",
        )
        .bind("old-run")
        .bind("agent")
        .bind("api")
        .bind("p")
        .bind(None::<String>)
        .bind(1_i64)
        .bind("default")
        .bind(0_i64)
        .bind(1_i64)
        .bind(3_i64)
        .fetch_optional(&mut *backend.writer().await.unwrap())
        .await
        .unwrap();
        assert!(job.is_some(), "the old statement enqueued its job");
        let notify: bool = sqlx::query_scalar("SELECT notify FROM runs WHERE id = 'old-run'")
            .fetch_one(&mut *backend.writer().await.unwrap())
            .await
            .unwrap();
        assert!(notify);
        backend.close().await;
        let _ = std::fs::remove_dir_all(&dir);
    }
}
