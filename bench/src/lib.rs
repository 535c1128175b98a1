//! What the bench binaries share (the queue bench in `main.rs` keeps its own harness, and
//! takes [`percentile`] from here).
//!
//! [`backends`] gives the stores a bench measures on: a SQLite file in the given directory,
//! and PostgreSQL from `NIGHTSHIFT_BENCH_PG_URL` (else `NIGHTSHIFT_TEST_PG_URL`, else
//! `postgres://postgres@127.0.0.1:5432/test`) in a schema of its own, unless `--sqlite-only`
//! is passed or the server cannot be reached (then a note says its rows are skipped);
//! `--postgres-only` leaves SQLite out.

pub mod dashboard_seed;
pub mod long_run;
pub mod pool;
pub mod timeline_seed;

use std::path::Path;
use std::sync::Arc;

use nightshift_store::{Store, StoreConfig, SystemClock};

/// Every bench binary allocates with mimalloc, as the `nightshift` binary does (see its
/// `main.rs`), so that a bench measures what the daemon does.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The nearest-rank percentile `q` of `sorted` values (NaN when there are none).
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The backends to measure on, named for the table: `SQLite` (a file `<name>.db` in `dir`)
/// and, when reachable and not excluded by `--sqlite-only`, `PostgreSQL` in a schema
/// `bench_<name>_<pid>`.
pub async fn backends(dir: &Path, name: &str) -> Vec<(&'static str, StoreConfig)> {
    let mut backends = vec![(
        "SQLite",
        StoreConfig::for_url(format!(
            "sqlite://{}",
            dir.join(format!("{name}.db")).display()
        )),
    )];
    if std::env::args().any(|a| a == "--postgres-only") {
        backends.clear();
    }
    if std::env::args().any(|a| a == "--sqlite-only") {
        return backends;
    }
    let pg_url = std::env::var("NIGHTSHIFT_BENCH_PG_URL")
        .or_else(|_| std::env::var("NIGHTSHIFT_TEST_PG_URL"))
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let mut pg = StoreConfig::for_url(&pg_url);
    pg.schema = Some(format!("bench_{name}_{}", std::process::id()));
    if Store::connect(&pg, Arc::new(SystemClock)).await.is_ok() {
        backends.push(("PostgreSQL", pg));
    } else {
        println!("note: PostgreSQL at {pg_url} is unreachable; its rows are skipped");
    }
    backends
}

/// Single-row INSERT commits per second on a fresh SQLite file in `dir`, in WAL mode with
/// `synchronous=FULL` (the pragmas of our store), over `commits` commits: the disk's commit
/// rate, which bounds every SQLite write path that commits once per item.
pub async fn sqlite_commit_rate(dir: &Path, commits: u64) -> anyhow::Result<f64> {
    use anyhow::Context;
    use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
    use sqlx::{ConnectOptions, Connection};
    let path = dir.join("commit-rate.db");
    let mut conn = SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
        .connect()
        .await
        .context("opening the commit-rate database")?;
    sqlx::query("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)")
        .execute(&mut conn)
        .await?;
    let t = std::time::Instant::now();
    for i in 0..commits {
        sqlx::query("INSERT INTO t (v) VALUES (?)")
            .bind(format!("row {i}"))
            .execute(&mut conn)
            .await?;
    }
    let elapsed = t.elapsed();
    conn.close().await?;
    let _ = std::fs::remove_file(&path);
    Ok(commits as f64 / elapsed.as_secs_f64().max(1e-9))
}

/// A plain connection to `config`'s SQLite file with the store's pragmas (WAL,
/// `synchronous=FULL`), for a bench's own statements beside the store.
pub async fn sqlite_connection(config: &StoreConfig) -> anyhow::Result<sqlx::SqliteConnection> {
    use sqlx::ConnectOptions;
    use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
    Ok(config
        .url
        .parse::<SqliteConnectOptions>()?
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
        .connect()
        .await?)
}

/// Single-row autocommit INSERTs (256-byte rows) per second into a plain table in
/// `config`'s schema, `producers` connections at once, `rows` in all: the server's commit
/// rate for that many clients, which bounds every write path that commits once per item.
pub async fn pg_insert_rate(
    config: &StoreConfig,
    producers: usize,
    rows: u64,
) -> anyhow::Result<f64> {
    use sqlx::Connection;
    let schema = config.schema.clone().unwrap_or_else(|| "public".into());
    let mut setup = sqlx::PgConnection::connect(&config.url).await?;
    for ddl in [
        format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\""),
        format!("CREATE TABLE \"{schema}\".ceiling (id BIGSERIAL PRIMARY KEY, v TEXT NOT NULL)"),
    ] {
        sqlx::query(sqlx::AssertSqlSafe(ddl))
            .execute(&mut setup)
            .await?;
    }
    let rate = pg_statement_rate(
        config,
        producers,
        rows,
        "INSERT INTO ceiling (v) VALUES ($1)",
        |query, _| query.bind("x".repeat(256)),
    )
    .await?;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP TABLE \"{schema}\".ceiling"
    )))
    .execute(&mut setup)
    .await?;
    Ok(rate)
}

/// A statement of a PostgreSQL rate measurement, before its values are bound.
pub type PgStatement = sqlx::query::Query<'static, sqlx::Postgres, sqlx::postgres::PgArguments>;

/// `n` autocommit executions of `sql` per second, from `producers` connections at once, each
/// with `config`'s schema as its search path; the `i`-th execution's values are bound by
/// `bind(statement, i)`. Connecting is timed with the rest, as a producer's would be.
pub async fn pg_statement_rate(
    config: &StoreConfig,
    producers: usize,
    n: u64,
    sql: &'static str,
    bind: fn(PgStatement, u64) -> PgStatement,
) -> anyhow::Result<f64> {
    use sqlx::Connection;
    use std::sync::atomic::{AtomicU64, Ordering};
    let schema = config.schema.clone().unwrap_or_else(|| "public".into());
    let next = Arc::new(AtomicU64::new(0));
    let start = std::time::Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..producers {
        let (url, next, schema) = (config.url.clone(), next.clone(), schema.clone());
        tasks.push(tokio::spawn(async move {
            let mut conn = sqlx::PgConnection::connect(&url).await?;
            let path = format!("SET search_path = \"{schema}\"");
            sqlx::query(sqlx::AssertSqlSafe(path))
                .execute(&mut conn)
                .await?;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return Ok::<_, anyhow::Error>(());
                }
                bind(sqlx::query(sql), i).execute(&mut conn).await?;
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

/// Drops the PostgreSQL schema a bench measured in (nothing for SQLite, whose file goes with
/// its temporary directory). Failing to drop it is not an error of the bench.
pub async fn drop_schema(config: &StoreConfig) {
    use sqlx::Connection;
    let Some(schema) = &config.schema else {
        return;
    };
    if let Ok(mut conn) = sqlx::PgConnection::connect(&config.url).await {
        let sql = format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE");
        let _ = sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(&mut conn)
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::percentile;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=200).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.50), 100.0);
        assert_eq!(percentile(&v, 0.99), 198.0);
        assert_eq!(percentile(&[3.0], 0.99), 3.0);
        assert!(percentile(&[], 0.5).is_nan());
    }
}
