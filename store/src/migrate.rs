//! Schema migrations, numbered per backend in `migrations/{sqlite,postgres}/` (in lockstep)
//! and embedded in the binary. Applying is idempotent and takes the backend's migration lock,
//! so several daemons starting at once apply each migration once. A database whose schema is
//! newer than this binary is refused before anything is touched.

use sqlx::Connection;
use sqlx::migrate::{Migrate, MigrateError, Migrator};

use crate::{Error, Result};

static SQLITE: Migrator = sqlx::migrate!("../migrations/sqlite");
static POSTGRES: Migrator = sqlx::migrate!("../migrations/postgres");

/// What applying migrations did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationReport {
    /// Versions applied by this call, in order.
    pub applied: Vec<i64>,
    /// The schema version the database is at now.
    pub version: i64,
}

/// How many migrations this binary carries.
pub fn migration_count() -> usize {
    SQLITE.iter().count()
}

/// The newest schema version this binary knows.
pub fn latest_version() -> i64 {
    SQLITE.iter().map(|m| m.version).max().unwrap_or(0)
}

pub(crate) async fn apply_sqlite(conn: &mut sqlx::SqliteConnection) -> Result<MigrationReport> {
    // SQLite has no migration lock of its own: one IMMEDIATE transaction around the whole
    // check-and-apply takes the write lock first, so concurrent starters apply each migration
    // once (sqlx nests its per-migration transactions as savepoints inside it).
    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
    let report = apply(&SQLITE, &mut *tx).await?;
    tx.commit().await?;
    Ok(report)
}

pub(crate) async fn apply_postgres(
    pool: &sqlx::PgPool,
    schema: Option<&str>,
) -> Result<MigrationReport> {
    let mut conn = pool.acquire().await?;
    // Hold the migration lock (a session advisory lock, re-entrant, so sqlx's own locking
    // inside `run_direct` nests in it) from before the schema exists to the end: daemons
    // starting together neither race to create the schema or the migrations table nor apply
    // a migration twice.
    conn.lock().await.map_err(migrate_error)?;
    let result = create_schema_and_apply(&mut conn, schema).await;
    let unlocked = conn.unlock().await.map_err(migrate_error);
    let report = result?;
    unlocked?;
    Ok(report)
}

async fn create_schema_and_apply(
    conn: &mut sqlx::PgConnection,
    schema: Option<&str>,
) -> Result<MigrationReport> {
    if let Some(schema) = schema {
        // The name was validated by StoreConfig::validate (lowercase letters, digits, _).
        let create = format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\"");
        sqlx::query(sqlx::AssertSqlSafe(create))
            .execute(&mut *conn)
            .await?;
    }
    apply(&POSTGRES, conn).await
}

/// Checks the applied versions against this binary's, then applies what is missing. The
/// caller holds the backend's migration lock.
async fn apply<C: Migrate>(migrator: &Migrator, conn: &mut C) -> Result<MigrationReport> {
    let known = migrator.iter().map(|m| m.version).max().unwrap_or(0);
    let table = "_sqlx_migrations";
    conn.ensure_migrations_table(table)
        .await
        .map_err(migrate_error)?;
    let before: Vec<i64> = conn
        .list_applied_migrations(table)
        .await
        .map_err(migrate_error)?
        .into_iter()
        .map(|m| m.version)
        .collect();
    if let Some(newest) = before.iter().copied().max().filter(|v| *v > known) {
        return Err(Error::SchemaTooNew {
            database: newest,
            binary: known,
        });
    }
    migrator
        .run_direct(None, conn, false)
        .await
        .map_err(migrate_error)?;
    let applied: Vec<i64> = migrator
        .iter()
        .map(|m| m.version)
        .filter(|v| !before.contains(v))
        .collect();
    Ok(MigrationReport {
        applied,
        version: known,
    })
}

fn migrate_error(e: MigrateError) -> Error {
    match e {
        MigrateError::VersionMismatch(v) => Error::Migrate(format!(
            "migration {v} in the database differs from the one in this binary; the schema was \
             changed by hand or by another build — restore it or use a fresh database"
        )),
        MigrateError::Dirty(v) => Error::Migrate(format!(
            "migration {v} was left half-applied by an earlier attempt; fix the schema by hand \
             and delete its row from _sqlx_migrations, then run `nightshift migrate` again"
        )),
        other => Error::Migrate(other.to_string()),
    }
}
