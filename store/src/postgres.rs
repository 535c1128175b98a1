//! The PostgreSQL backend: many daemons on many machines share one queue. Claims lock rows
//! with `FOR UPDATE SKIP LOCKED` so claimers never wait on each other; fenced writes hold the
//! job row `FOR SHARE` so a concurrent claim cannot slip between check and write; writes that
//! make work due are announced after their commit with a coalesced `NOTIFY` on a channel per
//! schema (`announce.rs`), so idle workers everywhere wake at once without enqueues waiting
//! on PostgreSQL's notify lock.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, Postgres, Transaction};

use crate::announce::Announcer;
use crate::backend::Backend;
use crate::config::{StoreConfig, redact_url};
use crate::model::Job;
use crate::queue::{ClaimRow, FastSettle, JobEnd, QueuePaths, QueueStatements, RunRow};
use crate::text::{Text, encode};
use crate::warm::{PING_AFTER, Warm};
use crate::{Error, Result};

/// A transaction on a pooled connection.
pub(crate) type Tx = Transaction<'static, Postgres>;

/// The planner setting of [`CLAIM_PLANNER_SETTINGS`], written once for its two uses.
macro_rules! claim_planner_setting {
    () => {
        "enable_sort = off"
    };
}

/// How claims are planned: reading an index in claim order, never sorting the queued jobs.
///
/// A claim takes the first few due jobs in claim order; `jobs_claim` holds them in that
/// order within each priority (`claim.sql` steps through the priorities), so the read stops
/// after the claim's limit. When the table's statistics expect only a handful of queued jobs
/// (analyzed while the queue was empty, or before a burst), the planner prefers a bitmap scan
/// of `jobs_claim_lane` or `jobs_next_due` and a sort, whose cost grows with the queue
/// (several times slower with thousands queued; the numbers are in `bench/MEASUREMENTS.md`).
/// PostgreSQL has no index hints; with sorting disabled, the ordered read is the one plan left
/// without a sort, whatever the statistics. Only connections and transactions that claim get
/// this setting: the warm connection of the one-statement settle (for its session) and the
/// claiming transactions (`SET LOCAL`).
pub const CLAIM_PLANNER_SETTINGS: &str = concat!("SET ", claim_planner_setting!());

/// The session of the warm connection, which runs `settle.sql` only: claims planned as
/// [`CLAIM_PLANNER_SETTINGS`] says, always the generic plan, and no scan of a whole table.
///
/// With `plan_cache_mode` left at `auto`, PostgreSQL compares the generic plan's estimate
/// with the custom plans' and, once the tables hold a few thousand rows, plans every
/// execution anew, and planning becomes a large share of every settle
/// (`bench/MEASUREMENTS.md`). `settle.sql` reaches every row it writes through its key and walks
/// `jobs_claim` for its claim, so that plan is right for any statistics. A generic plan is
/// kept until the tables are analyzed again, though, and one made while they were nearly
/// empty would scan them whole (the cheapest way to read one page) while a burst fills them;
/// with sequential scans disabled, every table access keeps its index path, which
/// `settle.sql` has for all of them. The suite's `plans` tests read the plan under empty,
/// quiet and busy statistics.
pub const WARM_SETTINGS: &str = concat!(
    "SET ",
    claim_planner_setting!(),
    "; SET enable_seqscan = off; SET plan_cache_mode = force_generic_plan"
);

/// The planner setting of [`OVERVIEW_PLANNER_SETTINGS`], written once for its two uses.
macro_rules! overview_planner_setting {
    () => {
        "enable_bitmapscan = off"
    };
}

/// How the queue overview's reads are planned: never a bitmap scan.
///
/// The overview counts live jobs from `jobs_live_state_lane` and lists leases from
/// `jobs_lease_expiry`, partial indexes that keep the entries of jobs that have since finished
/// until vacuum removes them: after a burst, tens of thousands. A bitmap scan, which the
/// planner prefers for a count, checks each such entry against the table on every call and
/// never marks it (6.7 ms a call with 60,000 of them, until vacuum); an index scan marks the
/// dead entries on its first pass (the same 6 ms once), and later calls skip them (0.05 ms).
/// The suite's `plans` tests read both.
pub const OVERVIEW_PLANNER_SETTINGS: &str = concat!("SET ", overview_planner_setting!());

/// The start of the queue overview's read-only transaction (see
/// [`OVERVIEW_PLANNER_SETTINGS`]).
const BEGIN_OVERVIEW: &str = concat!("BEGIN READ ONLY; SET LOCAL ", overview_planner_setting!());

/// The setting of [`CLAIMING_PLAN_CACHE_MODE`], written once for its two uses.
macro_rules! claiming_plan_cache_mode {
    () => {
        "plan_cache_mode = force_custom_plan"
    };
}

/// How a claiming transaction's statements are planned: each anew, from its values and the
/// tables' present size.
///
/// Claiming transactions run on the shared pool, where `plan_cache_mode` is `auto`: after
/// five executions PostgreSQL keeps a statement's generic plan when it looks no costlier than
/// the custom ones had, and while the tables are small (a new deployment) both are scans of
/// whole tables, so that plan is kept, a scan of `jobs` and `runs` per claim and per end,
/// until the tables are next analyzed or vacuumed, however large they have grown. These
/// transactions are the settle's path once a second (the rescue of expired leases), for
/// claims that name lanes and for keyed jobs: planning each statement costs less than one
/// such scan. (The warm connection keeps generic plans and remakes them as the tables grow,
/// `warm.rs`.)
pub const CLAIMING_PLAN_CACHE_MODE: &str = concat!("SET ", claiming_plan_cache_mode!());

/// The start of a claiming transaction (see [`CLAIM_PLANNER_SETTINGS`] and
/// [`CLAIMING_PLAN_CACHE_MODE`]).
const BEGIN_CLAIMING: &str = concat!(
    "BEGIN; SET LOCAL ",
    claim_planner_setting!(),
    "; SET LOCAL ",
    claiming_plan_cache_mode!()
);

/// The payload of the `NOTIFY` that tells schedule timers of a changed schedule (work
/// announcements carry an empty one).
pub(crate) const SCHEDULES_CHANGED: &str = "schedules";

/// A PostgreSQL database (one schema of it).
#[derive(Debug, Clone)]
pub(crate) struct PgBackend {
    pool: PgPool,
    /// The connection kept for the worker pool's settles (see `warm.rs`).
    warm: Arc<Warm>,
    channel: String,
    schema: Option<String>,
    /// Sends the coalesced `NOTIFY` after writes that made work due.
    announcer: Arc<Announcer>,
}

impl Backend for PgBackend {
    type Db = Postgres;
    type Writer = PoolConnection<Postgres>;
    type Reader = PoolConnection<Postgres>;
    type Tx = Tx;

    /// A pooled connection to write on.
    async fn writer(&self) -> Result<PoolConnection<Postgres>> {
        Ok(self.pool.acquire().await?)
    }

    /// A pooled connection to read on (the same pool).
    async fn reader(&self) -> Result<PoolConnection<Postgres>> {
        Ok(self.pool.acquire().await?)
    }

    async fn begin(&self) -> Result<Tx> {
        self.begin_with("BEGIN").await
    }

    /// A transaction that claims jobs, planned as [`CLAIM_PLANNER_SETTINGS`] says.
    async fn begin_claiming(&self) -> Result<Tx> {
        self.begin_with(BEGIN_CLAIMING).await
    }

    async fn commit(tx: Tx) -> Result<()> {
        Ok(tx.commit().await?)
    }

    async fn rollback(tx: Tx) -> Result<()> {
        Ok(tx.rollback().await?)
    }
}

impl crate::listing::LiveReads for PgBackend {
    type LiveReader = Tx;

    async fn live_reader(&self) -> Result<Tx> {
        self.begin_with(BEGIN_OVERVIEW).await
    }
}

impl PgBackend {
    pub(crate) async fn connect(config: &StoreConfig) -> Result<Self> {
        let url = config.url.trim();
        let shown = redact_url(url);
        let mut options = PgConnectOptions::from_str(url)
            .map_err(|e| Error::Config(format!("database.url '{shown}' is not valid: {e}")))?;
        if let Some(schema) = &config.schema {
            options = options.options([("search_path", schema.as_str())]);
        }
        let target = format!(
            "{}:{}/{}",
            options.get_host(),
            options.get_port(),
            options.get_database().unwrap_or("(default database)")
        );
        // One direct connection first: a pool only reports "timed out", while this says why
        // (refused, unknown host, bad password, no such database).
        let probe = tokio::time::timeout(
            Duration::from_millis(config.connect_timeout_ms),
            options.connect(),
        )
        .await;
        let connect_error = |detail: String| Error::Connect {
            target: target.clone(),
            detail: format!(
                "{detail}; check that PostgreSQL is running there and that database.url is right"
            ),
        };
        match probe {
            Ok(Ok(conn)) => {
                let _ = conn.close().await;
            }
            Ok(Err(e)) => return Err(connect_error(e.to_string())),
            Err(_) => {
                return Err(connect_error(format!(
                    "no answer within {} ms (database.connect_timeout_ms)",
                    config.connect_timeout_ms
                )));
            }
        }
        let pool = Self::pool_options(config)
            .connect_with(options.clone())
            .await
            .map_err(|e| connect_error(e.to_string()))?;
        let warm = Arc::new(Warm::new(
            options,
            WARM_SETTINGS,
            Duration::from_millis(config.connect_timeout_ms),
        ));
        let channel = match &config.schema {
            Some(schema) => format!("nightshift_jobs_{schema}"),
            None => "nightshift_jobs".to_string(),
        };
        let announcer = Arc::new(Announcer::start(pool.clone(), channel.clone()));
        Ok(Self {
            pool,
            warm,
            channel,
            schema: config.schema.clone(),
            announcer,
        })
    }

    /// Pool settings: `database.max_connections`; a connection idle for longer than
    /// `PING_AFTER` is pinged before use, and one in steady use is not (a round trip saved per
    /// statement).
    fn pool_options(config: &StoreConfig) -> PgPoolOptions {
        PgPoolOptions::new()
            .max_connections(config.max_connections)
            .test_before_acquire(false)
            .before_acquire(|conn, meta| {
                Box::pin(async move {
                    if meta.idle_for > PING_AFTER {
                        conn.ping().await?;
                    }
                    Ok(true)
                })
            })
            .acquire_timeout(Duration::from_millis(config.connect_timeout_ms))
    }

    /// The pool, for migrations.
    pub(crate) fn pool(&self) -> &PgPool {
        &self.pool
    }

    pub(crate) fn schema(&self) -> Option<&str> {
        self.schema.as_deref()
    }

    /// Begins a transaction with `statement` in a task of its own, so that a caller that goes
    /// away while `BEGIN` is on the wire cannot leave the transaction open.
    ///
    /// sqlx 0.9 counts a transaction only once the server has answered `BEGIN`; dropped before
    /// that, it queues no rollback, and its connection went back to the pool inside the
    /// transaction: the next statements run there joined it and were never committed (seen in
    /// `queue::enqueues_dropped_midway_never_wedge_the_writer`). The task always sees `BEGIN`
    /// answered; a transaction nobody takes is dropped there, which queues its rollback.
    async fn begin_with(&self, statement: &'static str) -> Result<Tx> {
        let pool = self.pool.clone();
        let begun = tokio::spawn(async move { pool.begin_with(statement).await });
        let begun = begun.await.map_err(|e| {
            let what = format!("the task beginning a transaction ended early: {e}");
            Error::Database(sqlx::Error::Io(std::io::Error::other(what)))
        })?;
        Ok(begun?)
    }

    /// Forwards notifications on this schema's channel to `on_notify` with their payload
    /// until the task is aborted; after each (re)connection it is called with `None`, as
    /// anything may have happened while no one listened. A dropped listener connection is
    /// re-established; the poll fallback covers anything missed meanwhile.
    pub(crate) fn spawn_listener(
        &self,
        on_notify: impl Fn(Option<&str>) + Send + 'static,
    ) -> tokio::task::JoinHandle<()> {
        let pool = self.pool.clone();
        let channel = self.channel.clone();
        tokio::spawn(async move {
            while !pool.is_closed() {
                let mut listener = match PgListener::connect_with(&pool).await {
                    Ok(l) => l,
                    Err(_) if pool.is_closed() => return,
                    Err(e) => {
                        tracing::warn!(error = %e, "LISTEN connection failed; retrying in 1s");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        continue;
                    }
                };
                if let Err(e) = listener.listen(&channel).await {
                    tracing::warn!(error = %e, %channel, "LISTEN failed; retrying in 1s");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
                // Anything enqueued while we were not listening is found by the next claim.
                on_notify(None);
                loop {
                    match listener.recv().await {
                        Ok(n) => on_notify(Some(n.payload())),
                        Err(_) if pool.is_closed() => return,
                        Err(e) => {
                            tracing::warn!(error = %e, "LISTEN connection lost; reconnecting");
                            break;
                        }
                    }
                }
            }
        })
    }

    /// Tells every daemon's schedule timer that a schedule was created, changed or deleted
    /// (a `NOTIFY` with payload [`SCHEDULES_CHANGED`], after the change committed). A failure
    /// is logged: the timers then see the change at their next wake.
    pub(crate) async fn announce_schedules(&self) {
        let sent = sqlx::query(crate::backend::sql!("postgres", "notify"))
            .bind(&self.channel)
            .bind(SCHEDULES_CHANGED)
            .execute(&self.pool)
            .await;
        if let Err(e) = sent {
            tracing::warn!(error = %e, "cannot tell the other daemons' schedule timers of a change");
        }
    }

    /// Tells other daemons' idle workers, soon, that work may be due: after a committed
    /// write (see `announce.rs`).
    pub(crate) fn announce(&self) {
        self.announcer.announce();
    }

    pub(crate) async fn close(&self) {
        self.warm.close().await;
        self.pool.close().await;
    }

    /// `settle.sql` with nothing to end or claim, on the warm connection (see
    /// [`Store::warm_up`](crate::Store::warm_up)).
    pub(crate) async fn warm_up(&self, now: i64) -> Result<()> {
        let claim = ClaimRow {
            worker: "",
            lanes: None,
            limit: 0,
            lease_ms: 1,
            now,
        };
        self.fast_settle(&[], claim).await.map(|_| ())
    }
}

impl QueuePaths for PgBackend {
    /// claim.sql marks the runs of claimed jobs without a concurrency key running itself.
    const MARKS_PLAIN_RUNS: bool = true;

    /// Enqueues of one key run side by side; the advisory lock orders them.
    const LOCKS_KEYS: bool = true;

    /// A run that decides nothing ([`crate::queue::decides_nothing`]), in one statement: the
    /// start job's id, or `None` when the run's idempotency key was taken.
    async fn enqueue_plain(&self, run: RunRow<'_>) -> Result<Option<i64>> {
        Self::insert_plain(&mut *self.pool.acquire().await?, run).await
    }

    /// Every run in one statement (`enqueue_plain_many.sql`, parallel arrays).
    async fn enqueue_plain_many(&self, rows: &[RunRow<'_>]) -> Result<Option<Vec<Option<i64>>>> {
        let now = rows.first().map_or(0, |r| r.now);
        let text = |v: &str| encode(v).into_owned();
        let ids: Vec<&str> = rows.iter().map(|r| r.id).collect();
        let agents: Vec<&str> = rows.iter().map(|r| r.new.agent.as_str()).collect();
        let triggers: Vec<&str> = rows.iter().map(|r| r.new.trigger.as_str()).collect();
        let inputs: Vec<String> = rows.iter().map(|r| text(&r.new.input)).collect();
        let keys: Vec<Option<String>> = rows
            .iter()
            .map(|r| r.new.idempotency_key.as_deref().map(text))
            .collect();
        let lanes: Vec<&str> = rows.iter().map(|r| r.new.job.lane.as_str()).collect();
        let priorities: Vec<i64> = rows.iter().map(|r| r.new.job.priority).collect();
        let run_at: Vec<i64> = rows
            .iter()
            .map(|r| r.new.job.run_at.unwrap_or(r.now))
            .collect();
        let attempts: Vec<i64> = rows.iter().map(|r| r.new.job.max_attempts).collect();
        let notify: Vec<bool> = rows.iter().map(|r| r.notify).collect();
        // As enqueue_plain binds them: unescaped (a traceparent, a JSON object).
        let traces: Vec<Option<&str>> =
            rows.iter().map(|r| r.new.trace_parent.as_deref()).collect();
        let contexts: Vec<Option<&str>> = rows.iter().map(|r| r.new.context.as_deref()).collect();
        let concurrency_keys: Vec<Option<String>> = rows
            .iter()
            .map(|r| r.new.concurrency_key.as_deref().map(text))
            .collect();
        let inserted: Vec<(String, i64)> =
            sqlx::query_as(crate::backend::sql!("postgres", "enqueue_plain_many"))
                .bind(&ids)
                .bind(&agents)
                .bind(&triggers)
                .bind(&inputs)
                .bind(&keys)
                .bind(&lanes)
                .bind(&priorities)
                .bind(&run_at)
                .bind(&attempts)
                .bind(&notify)
                .bind(&traces)
                .bind(&contexts)
                .bind(now)
                .bind(&concurrency_keys)
                .fetch_all(&self.pool)
                .await?;
        let by_run: std::collections::HashMap<String, i64> = inserted.into_iter().collect();
        Ok(Some(
            rows.iter().map(|r| by_run.get(r.id).copied()).collect(),
        ))
    }

    /// The one-statement settle (`settle.sql`) on the warm connection: ends `done` and claims
    /// for `claim` (nothing when its limit is 0), in one round trip without an explicit
    /// transaction. `None` when the claim names lanes or the warm connection is not free (the
    /// caller takes the transactional path).
    async fn settle_fast(
        &self,
        done: &[JobEnd<'_>],
        claim: ClaimRow<'_>,
    ) -> Result<Option<FastSettle>> {
        if claim.lanes.is_some() {
            // Only claim_lane.sql reads one lane's index (see there).
            return Ok(None);
        }
        self.fast_settle(done, claim).await
    }

    /// Ends a batch of leased jobs in one statement (see `finish_jobs.sql`): per job,
    /// `Some(keyed)` when its lease held, `None` when it was lost.
    async fn finish_batch(tx: &mut Tx, done: &[JobEnd<'_>], now: i64) -> Result<Vec<Option<bool>>> {
        if done.is_empty() {
            return Ok(Vec::new());
        }
        let ends = Ends::of(done);
        let rows: Vec<(i64, i64, bool)> =
            sqlx::query_as(crate::backend::sql!("postgres", "finish_jobs"))
                .bind(&ends.ids)
                .bind(&ends.tokens)
                .bind(&ends.job_states)
                .bind(&ends.job_errors)
                .bind(&ends.statuses)
                .bind(&ends.results)
                .bind(&ends.errors)
                .bind(now)
                .fetch_all(&mut **tx)
                .await?;
        let won: std::collections::HashMap<(i64, i64), bool> = rows
            .into_iter()
            .map(|(id, token, keyed)| ((id, token), keyed))
            .collect();
        Ok(ends
            .ids
            .iter()
            .zip(&ends.tokens)
            .map(|(id, token)| won.get(&(*id, *token)).copied())
            .collect())
    }

    /// `claim_lane.sql` and the lane's name for one lane (what a pool's reserved slots ask
    /// for; it reads `jobs_claim_lane`), `claim.sql` and a JSON array for several, or NULL for
    /// every lane; the lanes bound as `$4`.
    async fn claim(tx: &mut Tx, claim: ClaimRow<'_>) -> Result<Vec<Job>> {
        let (statement, lanes) = PgBackend::claim_statement(claim.lanes);
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
    async fn mark_runs_running(tx: &mut Tx, run_ids: &[&str], now: i64) -> Result<()> {
        sqlx::query(crate::backend::sql!("postgres", "mark_runs_running"))
            .bind(now)
            .bind(run_ids)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }
}

impl PgBackend {
    /// The claim statement for `lanes` and its lane parameter (see [`QueuePaths::claim`]).
    fn claim_statement(lanes: Option<&[String]>) -> (&'static str, Option<String>) {
        match lanes {
            Some([lane]) => (
                crate::backend::sql!("postgres", "claim_lane"),
                Some(lane.clone()),
            ),
            lanes => (
                crate::backend::sql!("postgres", "claim"),
                lanes.map(|l| serde_json::to_string(l).expect("lane names serialise")),
            ),
        }
    }

    /// `settle.sql` on the warm connection (see [`QueuePaths::settle_fast`]); `None` when the
    /// warm connection is not free.
    async fn fast_settle(
        &self,
        done: &[JobEnd<'_>],
        claim: ClaimRow<'_>,
    ) -> Result<Option<FastSettle>> {
        use sqlx::{FromRow, Row};
        // Without the warm connection (another caller holds it, or it cannot be opened),
        // the caller takes the transactional path, which claims with the same settings.
        let Some(mut warm) = self.warm.take().await else {
            return Ok(None);
        };
        let ends = Ends::of(done);
        let rows = sqlx::query(crate::backend::sql!("postgres", "settle"))
            .bind(&ends.ids)
            .bind(&ends.tokens)
            .bind(&ends.job_states)
            .bind(&ends.job_errors)
            .bind(&ends.statuses)
            .bind(&ends.results)
            .bind(&ends.errors)
            .bind(claim.now)
            .bind(claim.worker)
            .bind(claim.lease_ms)
            .bind(claim.limit)
            .fetch_all(warm.conn())
            .await?;
        let first = rows
            .first()
            .ok_or_else(|| Error::Corrupt("settle returned no summary row".into()))?;
        let ids: Option<Vec<i64>> = first.try_get("ended_ids")?;
        let tokens: Option<Vec<i64>> = first.try_get("ended_tokens")?;
        let won: std::collections::HashSet<(i64, i64)> = ids
            .unwrap_or_default()
            .into_iter()
            .zip(tokens.unwrap_or_default())
            .collect();
        let keyed: bool = first.try_get("ended_keyed")?;
        let keyed_seen: i64 = first.try_get("keyed_seen")?;
        // A keyed job was due: the statement claimed nothing (the caller claims again).
        let claimed = if keyed_seen > 0 {
            None
        } else {
            let mut jobs = Vec::with_capacity(rows.len());
            for row in &rows {
                if row.try_get::<Option<i64>, _>("id")?.is_some() {
                    jobs.push(Job::from_row(row)?);
                }
            }
            Some(jobs)
        };
        // Each end that won and each claimed job wrote a job and its run.
        let claimed_count = claimed.as_ref().map_or(0, Vec::len);
        warm.keep(2 * (won.len() + claimed_count) as u64);
        // Whether one particular end held a key does not matter to the caller beyond "some
        // did" (it wakes local workers), so every won end reports the batch's flag.
        let ended = ends
            .ids
            .iter()
            .zip(&ends.tokens)
            .map(|(id, token)| won.contains(&(*id, *token)).then_some(keyed))
            .collect();
        Ok(Some(FastSettle { ended, claimed }))
    }
}

/// The ends of a batch as the parallel arrays `finish_jobs.sql` and `settle.sql` take.
struct Ends<'a> {
    ids: Vec<i64>,
    tokens: Vec<i64>,
    job_states: Vec<&'static str>,
    job_errors: Vec<Option<Text<'a>>>,
    statuses: Vec<&'static str>,
    results: Vec<Option<Text<'a>>>,
    errors: Vec<Option<Text<'a>>>,
}

impl<'a> Ends<'a> {
    fn of(done: &[JobEnd<'a>]) -> Self {
        let ends = || done.iter().map(|d| d.end);
        Self {
            ids: done.iter().map(|d| d.job_id).collect(),
            tokens: done.iter().map(|d| d.token).collect(),
            job_states: ends().map(|e| e.job_state().as_str()).collect(),
            job_errors: ends().map(|e| Text::opt(e.job_error())).collect(),
            statuses: ends().map(|e| e.run_status().as_str()).collect(),
            results: ends().map(|e| Text::opt(e.result())).collect(),
            errors: ends().map(|e| Text::opt(e.error())).collect(),
        }
    }
}

/// PostgreSQL takes each delivery in a transaction of its own, side by side (`group.rs`).
impl crate::webhooks::together::TakeTogether for PgBackend {
    type Together = crate::webhooks::together::NoBatchIntake;

    fn together(&self) -> Option<&Self::Together> {
        None
    }
}

crate::queue::queue_statements!(PgBackend, "postgres");
crate::wakeups::wakeup_statements!(PgBackend, "postgres");
crate::inbox::inbox_statements!(PgBackend, "postgres");
crate::check_runs::check_run_statements!(PgBackend, "postgres");
crate::audit::audit_statements!(PgBackend, "postgres");
crate::approvals::approval_statements!(PgBackend, "postgres");
crate::tasks::task_statements!(PgBackend, "postgres");
crate::schedules::schedule_statements!(PgBackend, "postgres");
crate::webhooks::webhook_statements!(PgBackend, "postgres");
crate::notifications::notification_statements!(PgBackend, "postgres");
crate::listing::listing_statements!(PgBackend, "postgres");

#[cfg(test)]
mod tests {
    use super::*;

    /// What `SHOW <setting>` says on `conn`.
    async fn show<'c, E: sqlx::PgExecutor<'c>>(setting: &'static str, conn: E) -> String {
        let sql = format!("SHOW {setting}");
        sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .fetch_one(conn)
            .await
            .unwrap()
    }

    /// A claim for one lane (a pool's reserved slots) is claim_lane.sql, whose lane is an
    /// equality on jobs_claim_lane (plans.rs checks its plan); other claims are claim.sql.
    #[test]
    fn a_claim_for_one_lane_has_its_own_statement() {
        let one = ["interactive".to_string()];
        let (sql, lane) = PgBackend::claim_statement(Some(&one));
        assert_eq!(sql, crate::backend::sql!("postgres", "claim_lane"));
        assert_eq!(lane.as_deref(), Some("interactive"));
        let (sql, lanes) = PgBackend::claim_statement(None);
        assert_eq!(sql, crate::backend::sql!("postgres", "claim"));
        assert_eq!(lanes, None);
        let two = ["a".to_string(), "b".to_string()];
        let (sql, lanes) = PgBackend::claim_statement(Some(&two));
        assert_eq!(sql, crate::backend::sql!("postgres", "claim"));
        assert_eq!(lanes.as_deref(), Some(r#"["a","b"]"#));
    }

    /// Claims are planned with sorting disabled, on the warm connection and in claiming
    /// transactions, and nothing else is: the setting of a claiming transaction ends with it.
    /// Likewise the queue overview's transaction alone reads without bitmap scans.
    /// The warm connection (settle.sql only) always takes the generic plan, a claiming
    /// transaction always plans anew; nothing else changes how plans are cached.
    #[tokio::test]
    async fn claims_and_only_claims_are_planned_without_sorting() {
        let Ok(url) = std::env::var("NIGHTSHIFT_TEST_PG_URL") else {
            eprintln!(
                "SKIPPED claims_and_only_claims_are_planned_without_sorting: no NIGHTSHIFT_TEST_PG_URL"
            );
            return;
        };
        let mut config = StoreConfig::for_url(url);
        config.max_connections = 1;
        let backend = PgBackend::connect(&config).await.unwrap();
        let mut warm = backend
            .warm
            .take()
            .await
            .expect("the warm connection opens");
        assert_eq!(show("enable_sort", warm.conn()).await, "off");
        assert_eq!(
            show("plan_cache_mode", warm.conn()).await,
            "force_generic_plan"
        );
        assert_eq!(show("enable_seqscan", warm.conn()).await, "off");
        warm.keep(0);
        let mut claiming = backend.begin_claiming().await.unwrap();
        assert_eq!(show("enable_sort", &mut *claiming).await, "off");
        assert_eq!(
            show("plan_cache_mode", &mut *claiming).await,
            "force_custom_plan"
        );
        assert!(BEGIN_CLAIMING.ends_with(&CLAIMING_PLAN_CACHE_MODE.replace("SET ", "SET LOCAL ")));
        assert_eq!(show("enable_seqscan", &mut *claiming).await, "on");
        claiming.commit().await.unwrap();
        assert_eq!(
            show("enable_sort", &backend.pool).await,
            "on",
            "the pool's one connection, after the claiming transaction"
        );
        assert_eq!(show("plan_cache_mode", &backend.pool).await, "auto");
        let mut other = backend.begin().await.unwrap();
        assert_eq!(show("enable_sort", &mut *other).await, "on");
        assert_eq!(show("enable_bitmapscan", &mut *other).await, "on");
        other.rollback().await.unwrap();
        // The queue overview reads without bitmap scans, read only, and only it does.
        let mut overview = crate::listing::LiveReads::live_reader(&backend)
            .await
            .unwrap();
        assert_eq!(show("enable_bitmapscan", &mut *overview).await, "off");
        assert_eq!(show("transaction_read_only", &mut *overview).await, "on");
        assert_eq!(show("enable_sort", &mut *overview).await, "on");
        drop(overview);
        assert_eq!(
            show("enable_bitmapscan", &backend.pool).await,
            "on",
            "the pool's one connection, after the overview's transaction"
        );
        backend.close().await;
    }
}
