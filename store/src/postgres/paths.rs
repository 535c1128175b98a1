//! PostgreSQL's fast write paths ([`QueuePaths`]): enqueues as one statement, ends and
//! claims in one `settle.sql` on the warm connection, and the per-step fallbacks a claiming
//! transaction takes. What each writes is the same as the generic path's; the conformance
//! suite compares them.

use super::{PgBackend, Tx};
use crate::model::Job;
use crate::queue::{ClaimRow, FastSettle, JobEnd, QueuePaths, QueueStatements, RunRow};
use crate::text::{Text, encode};
use crate::{Error, Result};

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
    pub(super) fn claim_statement(lanes: Option<&[String]>) -> (&'static str, Option<String>) {
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
    pub(super) async fn fast_settle(
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
