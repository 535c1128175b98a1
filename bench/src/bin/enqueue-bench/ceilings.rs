//! The machine's ceilings the rows are compared with: single-row commits per second on SQLite
//! (one writer, WAL, `synchronous=FULL`) and single-row autocommit INSERTs per second on
//! PostgreSQL, with the bench's 256-byte payload.

use std::time::Instant;

use anyhow::Result;
use nightshift_store::{StoreConfig, SystemClock};

use super::payload;

/// One run and its job per autocommit statement through the `enqueue_start` view (what the
/// store's enqueue writes, minus the store), on one connection to `config`'s file.
pub(super) async fn sqlite_runs_per_commit(config: &StoreConfig, n: u64) -> Result<f64> {
    use sqlx::Connection;
    let mut conn = nightshift_bench::sqlite_connection(config).await?;
    let sql = "INSERT INTO enqueue_start (run_id, agent, trigger_kind, input, now, lane, \
               priority, run_at, max_attempts) VALUES (?, 'bench', 'api', ?, ?, 'default', 0, ?, 3)";
    let start = Instant::now();
    for i in 0..n {
        let now = nightshift_store::Clock::now(&SystemClock);
        sqlx::query(sql)
            .bind(format!("ceiling-{i:09}"))
            .bind(payload(i))
            .bind(now)
            .bind(now)
            .execute(&mut conn)
            .await?;
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    conn.close().await?;
    Ok(rate)
}

/// One run and its job per autocommit statement (`enqueue_plain.sql`'s two inserts, minus
/// the store), `producers` connections at once, in `config`'s schema.
pub(super) async fn pg_runs_per_commit(
    config: &StoreConfig,
    producers: usize,
    n: u64,
) -> Result<f64> {
    let sql = "WITH run AS (\
         INSERT INTO runs (id, agent, status, trigger_kind, input, created_at, updated_at) \
         VALUES ($1, 'bench', 'queued', 'api', $2, $3, $3) RETURNING id) \
         INSERT INTO jobs (run_id, kind, lane, priority, payload, run_at, max_attempts, \
         status, created_at, updated_at) \
         SELECT run.id, 'start', 'default', 0, $2, $3, 3, 'queued', $3, $3 FROM run";
    nightshift_bench::pg_statement_rate(config, producers, n, sql, |statement, i| {
        statement
            .bind(format!("ceiling-{i:09}"))
            .bind(payload(i))
            .bind(nightshift_store::Clock::now(&SystemClock))
    })
    .await
}
