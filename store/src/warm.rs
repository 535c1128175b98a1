//! A warm connection: one PostgreSQL connection kept for a hot loop of statements (the
//! worker pool's settles), so that loop always talks to the same server process.
//!
//! Why: a sqlx pool hands out its idle connections in turn. A loop of short statements on
//! the shared pool therefore wakes a different server process each time, one whose plan
//! cache and CPU caches went cold meanwhile; a settle on one kept connection is markedly
//! faster (the queue bench's numbers are in `bench/MEASUREMENTS.md`).
//!
//! What it guarantees:
//! - **Never waits for another caller.** [`Warm::take`] returns the connection only when
//!   nobody else holds it; a second caller gets `None` and takes another path (the store's
//!   transactional path, on its shared pool).
//! - **Never reuses a connection in an unknown state.** The connection is taken out while in
//!   use and put back only by [`Taken::keep`], after a statement that succeeded. A statement
//!   that failed, or a future dropped halfway, drops the connection; the next
//!   [`Warm::take`] opens a new one.
//! - **Checked after idling.** A connection idle for longer than [`PING_AFTER`] is pinged
//!   before use (a restarted server closed it), and replaced when the ping fails.
//! - **Set up before first use.** Each new connection runs the setup statement given to
//!   [`Warm::new`] (session settings) before it is handed out.
//! - **Plans follow the tables' growth.** PostgreSQL keeps a prepared statement's plan for
//!   the connection's life unless the tables are analyzed or vacuumed, so a plan made while
//!   the tables were empty (a new deployment, a fresh schema) would stay while they grow a
//!   thousandfold; and on tables it thinks tiny the planner may reach a row by id through any
//!   index holding the id (walking all of it) as readily as by its primary key. So the
//!   connection's plans are discarded (`DISCARD PLANS`, the statements stay prepared) and
//!   made again from the tables' present size whenever the rows its statements wrote since
//!   the plans were made reach the rows written before ([`REPLAN_FROM_ROWS`] at least), and
//!   at least every [`REPLAN_AT_LEAST_EVERY`]. The rows it counts are its own writes, a proxy
//!   for the tables' growth (others write too: enqueues, other daemons), so the minute is the
//!   bound; while the tables fill from empty the doubling remakes plans early and often, at
//!   the cost of a few plannings in a connection's life.

use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{ConnectOptions, Connection};
use tokio::sync::{Mutex, MutexGuard};

/// How long a connection may sit unused before it is pinged before its next statement.
pub(crate) const PING_AFTER: Duration = Duration::from_secs(1);

/// A connection's plans are remade once its statements have written this many rows since it
/// opened, then each time the rows written double (see [`replan_due`]).
pub(crate) const REPLAN_FROM_ROWS: u64 = 256;

/// The longest a connection keeps its plans.
pub(crate) const REPLAN_AT_LEAST_EVERY: Duration = Duration::from_secs(60);

/// One kept connection (opened on first use).
#[derive(Debug)]
pub(crate) struct Warm {
    options: PgConnectOptions,
    setup: &'static str,
    connect_timeout: Duration,
    slot: Mutex<Option<Kept>>,
}

#[derive(Debug)]
struct Kept {
    conn: PgConnection,
    last_used: Instant,
    plans: Plans,
}

/// What the connection's statements have written around its present plans.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Plans {
    /// When the present plans were made (discarded, to be exact: each is made at its
    /// statement's next use).
    pub(crate) made_at: Instant,
    /// Rows written before that, since the connection opened.
    pub(crate) rows_before: u64,
    /// Rows written since.
    pub(crate) rows_since: u64,
}

impl Plans {
    fn new(now: Instant) -> Self {
        Self {
            made_at: now,
            rows_before: 0,
            rows_since: 0,
        }
    }

    /// The plans remade at `now`.
    fn remade(self, now: Instant) -> Self {
        Self {
            made_at: now,
            rows_before: self.rows_before + self.rows_since,
            rows_since: 0,
        }
    }
}

/// Whether plans should be remade at `now`: the rows written since they were made reached
/// those written before (and [`REPLAN_FROM_ROWS`]), or they are [`REPLAN_AT_LEAST_EVERY`]
/// old.
pub(crate) fn replan_due(plans: Plans, now: Instant) -> bool {
    plans.rows_since >= plans.rows_before.max(REPLAN_FROM_ROWS)
        || now.saturating_duration_since(plans.made_at) >= REPLAN_AT_LEAST_EVERY
}

/// The connection while one caller uses it. Dropped without [`Taken::keep`], it closes.
pub(crate) struct Taken<'a> {
    slot: MutexGuard<'a, Option<Kept>>,
    conn: PgConnection,
    plans: Plans,
}

impl Warm {
    /// A kept connection opened with `options`, running `setup` (one or more statements,
    /// no parameters) when it opens.
    pub(crate) fn new(
        options: PgConnectOptions,
        setup: &'static str,
        connect_timeout: Duration,
    ) -> Self {
        Self {
            options,
            setup,
            connect_timeout,
            slot: Mutex::new(None),
        }
    }

    /// The connection, open and checked, or `None` when another caller holds it or it could
    /// not be opened (the caller then takes a path on the shared pool, which reports any
    /// error).
    pub(crate) async fn take(&self) -> Option<Taken<'_>> {
        let mut slot = self.slot.try_lock().ok()?;
        let kept = match slot.take() {
            Some(kept) if kept.last_used.elapsed() <= PING_AFTER => Some(kept),
            Some(mut kept) => kept.conn.ping().await.is_ok().then_some(kept),
            None => None,
        };
        let kept = match kept {
            Some(kept) => Self::replan_if_due(kept).await,
            None => None,
        };
        let (conn, plans) = match kept {
            Some(kept) => (kept.conn, kept.plans),
            None => {
                let conn = tokio::time::timeout(self.connect_timeout, self.open())
                    .await
                    .ok()?
                    .ok()?;
                (conn, Plans::new(Instant::now()))
            }
        };
        Some(Taken { slot, conn, plans })
    }

    /// `kept` with its plans discarded when [`replan_due`]; `None` when that failed (the
    /// connection is then dropped, as after any failed statement).
    async fn replan_if_due(mut kept: Kept) -> Option<Kept> {
        let now = Instant::now();
        if !replan_due(kept.plans, now) {
            return Some(kept);
        }
        sqlx::raw_sql("DISCARD PLANS")
            .execute(&mut kept.conn)
            .await
            .ok()?;
        kept.plans = kept.plans.remade(now);
        Some(kept)
    }

    async fn open(&self) -> sqlx::Result<PgConnection> {
        let mut conn = self.options.connect().await?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(self.setup))
            .execute(&mut conn)
            .await?;
        Ok(conn)
    }

    /// Closes the kept connection, if any (waiting for a caller that holds it).
    pub(crate) async fn close(&self) {
        if let Some(kept) = self.slot.lock().await.take() {
            let _ = kept.conn.close().await;
        }
    }
}

impl Taken<'_> {
    /// The connection, for one statement.
    pub(crate) fn conn(&mut self) -> &mut PgConnection {
        &mut self.conn
    }

    /// What its statements have written around its present plans.
    #[cfg(test)]
    pub(crate) fn plans(&self) -> Plans {
        self.plans
    }

    /// Puts the connection back for the next caller, after a statement that succeeded and
    /// wrote `rows` rows (they count towards remaking its plans).
    pub(crate) fn keep(mut self, rows: u64) {
        self.plans.rows_since += rows;
        *self.slot = Some(Kept {
            conn: self.conn,
            last_used: Instant::now(),
            plans: self.plans,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plans(made_ago: Duration, rows_before: u64, rows_since: u64, now: Instant) -> Plans {
        Plans {
            made_at: now - made_ago,
            rows_before,
            rows_since,
        }
    }

    #[test]
    fn plans_are_remade_when_the_rows_written_double() {
        let now = Instant::now();
        let second = Duration::from_secs(1);
        // A new connection: from REPLAN_FROM_ROWS rows on.
        assert!(!replan_due(
            plans(second, 0, REPLAN_FROM_ROWS - 1, now),
            now
        ));
        assert!(replan_due(plans(second, 0, REPLAN_FROM_ROWS, now), now));
        // Later: when as many rows were written since as before.
        assert!(!replan_due(plans(second, 10_000, 9_999, now), now));
        assert!(replan_due(plans(second, 10_000, 10_000, now), now));
        // Remade: the count starts again from all rows written so far.
        let remade = plans(second, 10_000, 10_000, now).remade(now);
        assert_eq!((remade.rows_before, remade.rows_since), (20_000, 0));
        assert_eq!(remade.made_at, now);
        assert!(!replan_due(remade, now));
    }

    async fn backend_pid(taken: &mut Taken<'_>) -> i32 {
        sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(taken.conn())
            .await
            .unwrap()
    }

    /// How many statements the connection has prepared (this one included).
    async fn prepared(taken: &mut Taken<'_>) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM pg_prepared_statements WHERE $1")
            .bind(true)
            .fetch_one(taken.conn())
            .await
            .unwrap()
    }

    /// A kept connection whose statements wrote enough rows has its plans discarded when it
    /// is next taken, and stays the same server process (the statements stay prepared).
    #[tokio::test]
    async fn a_taken_connection_remakes_its_plans_when_due() {
        let Ok(url) = std::env::var("NIGHTSHIFT_TEST_PG_URL") else {
            eprintln!(
                "SKIPPED a_taken_connection_remakes_its_plans_when_due: no NIGHTSHIFT_TEST_PG_URL"
            );
            return;
        };
        let options: PgConnectOptions = url.parse().unwrap();
        let warm = Warm::new(
            options,
            "SET application_name = 'warm-test'",
            Duration::from_secs(5),
        );
        let mut taken = warm.take().await.unwrap();
        let first_pid = backend_pid(&mut taken).await;
        let prepared_before = prepared(&mut taken).await;
        assert!(prepared_before >= 2, "sqlx prepares its statements");
        let opened = taken.plans();
        assert_eq!((opened.rows_before, opened.rows_since), (0, 0));
        taken.keep(REPLAN_FROM_ROWS - 1);
        let taken = warm.take().await.unwrap();
        assert_eq!(taken.plans().made_at, opened.made_at, "not due yet");
        taken.keep(1);
        let mut taken = warm.take().await.unwrap();
        let second_pid = backend_pid(&mut taken).await;
        assert_eq!(
            prepared(&mut taken).await,
            prepared_before,
            "still prepared"
        );
        let remade = taken.plans();
        assert!(remade.made_at > opened.made_at, "{remade:?}");
        assert_eq!(
            (remade.rows_before, remade.rows_since),
            (REPLAN_FROM_ROWS, 0)
        );
        assert_eq!(
            first_pid, second_pid,
            "the same connection, plans discarded"
        );
        taken.keep(0);
        warm.close().await;
    }

    #[test]
    fn plans_are_remade_at_least_every_minute() {
        let now = Instant::now();
        let almost = REPLAN_AT_LEAST_EVERY - Duration::from_millis(1);
        assert!(!replan_due(plans(almost, 1_000_000, 0, now), now));
        assert!(replan_due(
            plans(REPLAN_AT_LEAST_EVERY, 1_000_000, 0, now),
            now
        ));
    }
}
