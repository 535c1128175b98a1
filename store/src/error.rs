//! Errors of the store. Every variant says what went wrong in words an operator can act on;
//! [`Error::is_transient`] tells callers whether trying again later can help.

use std::fmt;

/// What a store operation can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The writer no longer holds the lease it wrote under: another worker claimed the job, or
    /// the job was finished, cancelled or released. Nothing was written.
    #[error("lease lost: job {job_id} is no longer held with lease token {token} ({reason})")]
    LeaseLost {
        job_id: i64,
        token: i64,
        reason: LeaseLostReason,
    },
    /// The configuration of the store is unusable (bad URL, bad option value).
    #[error("{0}")]
    Config(String),
    /// The database could not be reached or opened.
    #[error("cannot connect to the database at {target}: {detail}")]
    Connect { target: String, detail: String },
    /// The database holds a schema written by a newer Nightshift.
    #[error(
        "the database schema is at version {database} but this nightshift binary only knows \
         versions up to {binary}; upgrade nightshift (or point it at another database) — \
         nothing was changed"
    )]
    SchemaTooNew { database: i64, binary: i64 },
    /// Applying migrations failed.
    #[error("migration failed: {0}")]
    Migrate(String),
    /// A referenced row does not exist.
    #[error("{what} {id} not found")]
    NotFound { what: &'static str, id: String },
    /// The request conflicts with the current state (for example cancelling a finished run).
    #[error("{0}")]
    Conflict(String),
    /// Bad input from the caller; nothing was changed.
    #[error("invalid input: {0}")]
    Invalid(String),
    /// A row read from the database breaks an invariant of the schema.
    #[error("corrupt row: {0}")]
    Corrupt(String),
    /// Any other database error.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
}

/// Why a lease-guarded write matched no row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseLostReason {
    /// The job was claimed again and now carries a newer token.
    Reclaimed { current_token: i64 },
    /// The job is no longer running (it was finished, released, rescued or cancelled).
    NotRunning { status: String },
    /// The job row is gone.
    Missing,
}

impl fmt::Display for LeaseLostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Reclaimed { current_token } => {
                write!(f, "another worker now owns it with token {current_token}")
            }
            Self::NotRunning { status } => write!(f, "the job is now {status}"),
            Self::Missing => write!(f, "the job no longer exists"),
        }
    }
}

impl Error {
    /// True when the same call may succeed later without any change by the caller
    /// (a dropped connection, a busy database, a pool timeout).
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Database(e) => {
                matches!(
                    e,
                    sqlx::Error::Io(_)
                        | sqlx::Error::PoolTimedOut
                        | sqlx::Error::PoolClosed
                        | sqlx::Error::WorkerCrashed
                ) || is_busy(e)
            }
            Error::Connect { .. } => true,
            _ => false,
        }
    }

    /// True for [`Error::LeaseLost`].
    pub fn is_lease_lost(&self) -> bool {
        matches!(self, Error::LeaseLost { .. })
    }
}

fn is_busy(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => {
            let code = db.code();
            // SQLite SQLITE_BUSY (5) / SQLITE_LOCKED (6); PostgreSQL serialization failure and
            // deadlock.
            matches!(code.as_deref(), Some("5" | "6" | "517" | "40001" | "40P01"))
        }
        _ => false,
    }
}

/// The store's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
