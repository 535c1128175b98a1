//! The statements a leased job writes through (heartbeats, events, checkpoints, progress,
//! retries, ends, releases) and the rescue of expired leases; each is fenced by the lease
//! token in its SQL. Each method only binds its parameters and reads its rows.

/// The leased-job methods of `QueueStatements`, with the statements of `store/sql/$dir/`; expands inside the impl.
macro_rules! lease_statements {
    ($dir:literal) => {
        async fn heartbeat(
            c: &mut $crate::backend::Conn<Self>,
            job_id: i64,
            token: i64,
            lease_ms: i64,
            now: i64,
        ) -> $crate::Result<Option<i64>> {
            Ok(sqlx::query_scalar($crate::backend::sql!($dir, "heartbeat"))
                .bind(job_id)
                .bind(token)
                .bind(lease_ms)
                .bind(now)
                .fetch_optional(c)
                .await?)
        }

        async fn lease_probe(
            c: &mut $crate::backend::Conn<Self>,
            job_id: i64,
        ) -> $crate::Result<Option<$crate::queue::LeaseProbe>> {
            let row: Option<(String, i64, Option<i64>, String)> =
                sqlx::query_as($crate::backend::sql!($dir, "lease_probe"))
                    .bind(job_id)
                    .fetch_optional(c)
                    .await?;
            row.map(|(status, lease_token, cancel_requested_at, run_status)| {
                Ok($crate::queue::LeaseProbe {
                    status: $crate::queue::parse_job_state(&status)?,
                    lease_token,
                    cancel_requested_at,
                    run_status: $crate::queue::parse_run_status(&run_status)?,
                })
            })
            .transpose()
        }

        async fn append_event(
            c: &mut $crate::backend::Conn<Self>,
            event: $crate::queue::EventRow<'_>,
        ) -> $crate::Result<Option<i64>> {
            let query = sqlx::query_scalar($crate::backend::sql!($dir, "append_event"));
            Ok($crate::queue::bind_event_row!(query, event)
                .fetch_optional(c)
                .await?)
        }

        async fn append_event_live(
            c: &mut $crate::backend::Conn<Self>,
            event: $crate::queue::EventRow<'_>,
        ) -> $crate::Result<Option<i64>> {
            let query = sqlx::query_scalar($crate::backend::sql!($dir, "append_event_live"));
            Ok($crate::queue::bind_event_row!(query, event)
                .fetch_optional(c)
                .await?)
        }

        async fn write_checkpoint(
            c: &mut $crate::backend::Conn<Self>,
            checkpoint: $crate::queue::CheckpointRow<'_>,
        ) -> $crate::Result<bool> {
            let size = i64::try_from(checkpoint.body.len()).unwrap_or(i64::MAX);
            let written: Option<i64> =
                sqlx::query_scalar($crate::backend::sql!($dir, "write_checkpoint"))
                    .bind(checkpoint.job_id)
                    .bind(checkpoint.token)
                    .bind(checkpoint.through_seq)
                    .bind(checkpoint.format_version)
                    .bind(checkpoint.body)
                    .bind(size)
                    .bind(checkpoint.now)
                    .fetch_optional(c)
                    .await?;
            Ok(written.is_some())
        }

        async fn mark_progress(
            c: &mut $crate::backend::Conn<Self>,
            job_id: i64,
            token: i64,
        ) -> $crate::Result<bool> {
            let marked: Option<String> =
                sqlx::query_scalar($crate::backend::sql!($dir, "mark_progress"))
                    .bind(job_id)
                    .bind(token)
                    .fetch_optional(c)
                    .await?;
            Ok(marked.is_some())
        }

        async fn record_progress(
            c: &mut $crate::backend::Conn<Self>,
            job_id: i64,
            token: i64,
            progress: &$crate::model::RunProgress,
            now: i64,
        ) -> $crate::Result<bool> {
            let updated: Option<String> =
                sqlx::query_scalar($crate::backend::sql!($dir, "record_progress"))
                    .bind(job_id)
                    .bind(token)
                    .bind(progress.turns)
                    .bind(progress.input_tokens)
                    .bind(progress.output_tokens)
                    .bind(progress.cache_read_tokens)
                    .bind(progress.cache_write_tokens)
                    .bind(progress.cost_usd)
                    .bind(&progress.agent_hash)
                    .bind(now)
                    .fetch_optional(c)
                    .await?;
            Ok(updated.is_some())
        }

        async fn retry_job(
            c: &mut $crate::backend::Conn<Self>,
            retry: $crate::queue::RetryRow<'_>,
        ) -> $crate::Result<Option<$crate::queue::RetriedJob>> {
            let row: Option<(String, String)> =
                sqlx::query_as($crate::backend::sql!($dir, "retry_job"))
                    .bind(retry.job_id)
                    .bind(retry.token)
                    .bind(retry.run_at)
                    .bind($crate::text::Text(retry.error))
                    .bind(retry.now)
                    .bind(retry.counted)
                    .fetch_optional(c)
                    .await?;
            row.map(|(run_id, status)| {
                Ok($crate::queue::RetriedJob {
                    run_id,
                    status: $crate::queue::parse_job_state(&status)?,
                })
            })
            .transpose()
        }

        async fn finish_job(
            c: &mut $crate::backend::Conn<Self>,
            job_id: i64,
            token: i64,
            state: $crate::states::JobState,
            now: i64,
        ) -> $crate::Result<Option<$crate::queue::FinishedJob>> {
            let row: Option<(String, Option<i64>, Option<String>)> =
                sqlx::query_as($crate::backend::sql!($dir, "finish_job"))
                    .bind(job_id)
                    .bind(token)
                    .bind(state.as_str())
                    .bind(None::<String>)
                    .bind(now)
                    .fetch_optional(c)
                    .await?;
            Ok(row.map(
                |(run_id, cancel_requested_at, _)| $crate::queue::FinishedJob {
                    run_id,
                    cancel_requested_at,
                },
            ))
        }

        async fn release_job(
            c: &mut $crate::backend::Conn<Self>,
            job_id: i64,
            token: i64,
            reason: &str,
            now: i64,
        ) -> $crate::Result<Option<String>> {
            Ok(
                sqlx::query_scalar($crate::backend::sql!($dir, "release_job"))
                    .bind(job_id)
                    .bind(token)
                    .bind($crate::text::Text(reason))
                    .bind(now)
                    .fetch_optional(c)
                    .await?,
            )
        }

        async fn approval_decided(
            c: &mut $crate::backend::Conn<Self>,
            run_id: &str,
            call_id: &str,
        ) -> $crate::Result<bool> {
            let decided: i64 = sqlx::query_scalar($crate::backend::sql!($dir, "approvals/decided"))
                .bind(run_id)
                .bind($crate::text::Text(call_id))
                .fetch_one(c)
                .await?;
            Ok(decided > 0)
        }

        async fn rescue_expired(
            c: &mut $crate::backend::Conn<Self>,
            now: i64,
        ) -> $crate::Result<Vec<$crate::queue::RescuedJob>> {
            // The error is read decoded (it names the worker).
            let rows: Vec<(String, String, $crate::text::DbOptText, String)> =
                sqlx::query_as($crate::backend::sql!($dir, "rescue_expired"))
                    .bind(now)
                    .fetch_all(c)
                    .await?;
            rows.into_iter()
                .map(|(run_id, status, error, lane)| {
                    Ok($crate::queue::RescuedJob {
                        run_id,
                        lane,
                        status: $crate::queue::parse_job_state(&status)?,
                        error: error.0,
                    })
                })
                .collect()
        }
    };
}
pub(crate) use lease_statements;
