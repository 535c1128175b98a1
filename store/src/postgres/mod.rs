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
use crate::queue::ClaimRow;
use crate::warm::{PING_AFTER, Warm};
use crate::{Error, Result};

/// A transaction on a pooled connection.
pub(crate) type Tx = Transaction<'static, Postgres>;

mod paths;
mod planner;

use planner::{BEGIN_CLAIMING, BEGIN_OVERVIEW};
pub use planner::{
    CLAIM_PLANNER_SETTINGS, CLAIMING_PLAN_CACHE_MODE, OVERVIEW_PLANNER_SETTINGS, WARM_SETTINGS,
};
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
crate::content::content_statements!(PgBackend, "postgres");
crate::audit::audit_statements!(PgBackend, "postgres");
crate::approvals::approval_statements!(PgBackend, "postgres");
crate::tasks::task_statements!(PgBackend, "postgres");
crate::schedules::schedule_statements!(PgBackend, "postgres");
crate::webhooks::webhook_statements!(PgBackend, "postgres");
crate::notifications::notification_statements!(PgBackend, "postgres");
crate::listing::listing_statements!(PgBackend, "postgres");
crate::retention::retention_statements!(PgBackend, "postgres");
crate::forks::fork_statements!(PgBackend, "postgres");
