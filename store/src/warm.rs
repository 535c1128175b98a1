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

use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{ConnectOptions, Connection};
use tokio::sync::{Mutex, MutexGuard};

/// How long a connection may sit unused before it is pinged before its next statement.
pub(crate) const PING_AFTER: Duration = Duration::from_secs(1);

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
}

/// The connection while one caller uses it. Dropped without [`Taken::keep`], it closes.
pub(crate) struct Taken<'a> {
    slot: MutexGuard<'a, Option<Kept>>,
    conn: PgConnection,
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
        let conn = match slot.take() {
            Some(kept) if kept.last_used.elapsed() <= PING_AFTER => Some(kept.conn),
            Some(mut kept) => kept.conn.ping().await.is_ok().then_some(kept.conn),
            None => None,
        };
        let conn = match conn {
            Some(conn) => conn,
            None => tokio::time::timeout(self.connect_timeout, self.open())
                .await
                .ok()?
                .ok()?,
        };
        Some(Taken { slot, conn })
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

    /// Puts the connection back for the next caller (after a statement that succeeded).
    pub(crate) fn keep(mut self) {
        *self.slot = Some(Kept {
            conn: self.conn,
            last_used: Instant::now(),
        });
    }
}
