//! [`QueueStatements`](super::QueueStatements) for a backend, from its SQL directory: the
//! binding of each statement's parameters and the reading of its rows, which both backends do
//! the same way (text goes through [`Text`](crate::text::Text), which escapes NUL bytes on
//! PostgreSQL). Nothing here decides anything.

/// Binds an [`EventRow`](super::EventRow) to `$query`, in the order both event statements
/// (`append_event`, `append_event_live`) take it.
macro_rules! bind_event_row {
    ($query:expr, $event:expr) => {
        $query
            .bind($event.job_id)
            .bind($event.token)
            .bind($crate::text::Text($event.event_type))
            .bind($crate::text::Text($event.payload))
            .bind($event.now)
    };
}
pub(crate) use bind_event_row;

/// Implements `QueueStatements` for `$backend` with the statements of `store/sql/$dir/`.
macro_rules! queue_statements {
    ($backend:ty, $dir:literal) => {
        impl $crate::queue::QueueStatements for $backend {
            async fn set_run_status(
                c: &mut $crate::backend::Conn<Self>,
                run_id: &str,
                update: $crate::store::RunUpdate<'_>,
                now: i64,
            ) -> $crate::Result<()> {
                sqlx::query($crate::backend::sql!($dir, "set_run_status"))
                    .bind(run_id)
                    .bind(update.status.as_str())
                    .bind($crate::text::Text::opt(update.result))
                    .bind($crate::text::Text::opt(update.error))
                    .bind(update.finished_at)
                    .bind(now)
                    .execute(c)
                    .await?;
                Ok(())
            }

            async fn insert_plain(
                c: &mut $crate::backend::Conn<Self>,
                run: $crate::queue::RunRow<'_>,
            ) -> $crate::Result<Option<i64>> {
                let new = run.new;
                Ok(
                    sqlx::query_scalar($crate::backend::sql!($dir, "enqueue_plain"))
                        .bind(run.id)
                        .bind(&new.agent)
                        .bind(new.trigger.as_str())
                        .bind($crate::text::Text(&new.input))
                        .bind($crate::text::Text::opt(new.idempotency_key.as_deref()))
                        .bind(run.now)
                        .bind(&new.job.lane)
                        .bind(new.job.priority)
                        .bind(new.job.run_at.unwrap_or(run.now))
                        .bind(new.job.max_attempts)
                        .bind(run.notify)
                        .bind(new.trace_parent.as_deref())
                        .bind(new.context.as_deref())
                        .bind($crate::text::Text::opt(new.concurrency_key.as_deref()))
                        .fetch_optional(c)
                        .await?,
                )
            }

            async fn delete_run(
                c: &mut $crate::backend::Conn<Self>,
                run_id: &str,
            ) -> $crate::Result<()> {
                sqlx::query($crate::backend::sql!($dir, "delete_run"))
                    .bind(run_id)
                    .execute(c)
                    .await?;
                Ok(())
            }

            async fn insert_run(
                c: &mut $crate::backend::Conn<Self>,
                run: $crate::queue::RunRow<'_>,
            ) -> $crate::Result<bool> {
                let inserted: Option<String> =
                    sqlx::query_scalar($crate::backend::sql!($dir, "insert_run"))
                        .bind(run.id)
                        .bind(&run.new.agent)
                        .bind(run.new.trigger.as_str())
                        .bind($crate::text::Text(&run.new.input))
                        .bind($crate::text::Text::opt(run.new.idempotency_key.as_deref()))
                        .bind($crate::text::Text::opt(run.new.concurrency_key.as_deref()))
                        .bind(run.now)
                        .bind(run.notify)
                        .bind(run.new.trace_parent.as_deref())
                        .bind(run.new.context.as_deref())
                        .fetch_optional(c)
                        .await?;
                Ok(inserted.is_some())
            }

            async fn lock_key(
                c: &mut $crate::backend::Conn<Self>,
                key: &str,
            ) -> $crate::Result<()> {
                sqlx::query($crate::backend::sql!($dir, "lock_key"))
                    .bind($crate::text::Text(key))
                    .execute(c)
                    .await?;
                Ok(())
            }

            async fn try_lock_key(
                c: &mut $crate::backend::Conn<Self>,
                key: &str,
            ) -> $crate::Result<bool> {
                Ok(
                    sqlx::query_scalar($crate::backend::sql!($dir, "try_lock_key"))
                        .bind($crate::text::Text(key))
                        .fetch_one(c)
                        .await?,
                )
            }

            async fn key_holder(
                c: &mut $crate::backend::Conn<Self>,
                key: &str,
                job_id: i64,
            ) -> $crate::Result<Option<i64>> {
                Ok(
                    sqlx::query_scalar($crate::backend::sql!($dir, "key_holder"))
                        .bind($crate::text::Text(key))
                        .bind(job_id)
                        .fetch_optional(c)
                        .await?,
                )
            }

            async fn active_runs_of_key(
                c: &mut $crate::backend::Conn<Self>,
                key: &str,
                run_id: &str,
            ) -> $crate::Result<Vec<$crate::queue::ActiveRun>> {
                let rows: Vec<(String, String, Option<i64>)> =
                    sqlx::query_as($crate::backend::sql!($dir, "active_runs_of_key"))
                        .bind($crate::text::Text(key))
                        .bind(run_id)
                        .fetch_all(c)
                        .await?;
                rows.into_iter()
                    .map(|(id, status, started_at)| {
                        Ok($crate::queue::ActiveRun {
                            id,
                            status: $crate::queue::parse_run_status(&status)?,
                            started_at,
                        })
                    })
                    .collect()
            }

            async fn newest_job_of_run(
                c: &mut $crate::backend::Conn<Self>,
                run_id: &str,
            ) -> $crate::Result<Option<i64>> {
                Ok(
                    sqlx::query_scalar($crate::backend::sql!($dir, "newest_job_of_run"))
                        .bind(run_id)
                        .fetch_one(c)
                        .await?,
                )
            }

            async fn supersede_run(
                c: &mut $crate::backend::Conn<Self>,
                run_id: &str,
                why: &str,
                now: i64,
            ) -> $crate::Result<bool> {
                let ended: Option<String> =
                    sqlx::query_scalar($crate::backend::sql!($dir, "supersede_run"))
                        .bind(run_id)
                        .bind(why)
                        .bind(now)
                        .fetch_optional(c)
                        .await?;
                Ok(ended.is_some())
            }

            async fn insert_job(
                c: &mut $crate::backend::Conn<Self>,
                job: $crate::queue::JobRow<'_>,
            ) -> $crate::Result<Option<i64>> {
                Ok(
                    sqlx::query_scalar($crate::backend::sql!($dir, "insert_job"))
                        .bind(job.run_id)
                        .bind(job.kind.as_str())
                        .bind(job.lane)
                        .bind(job.priority)
                        .bind($crate::text::Text(job.payload))
                        .bind(job.run_at)
                        .bind(job.max_attempts)
                        .bind($crate::text::Text::opt(job.dedupe_key))
                        .bind(job.now)
                        .fetch_optional(c)
                        .await?,
                )
            }

            async fn find_run_by_key(
                c: &mut $crate::backend::Conn<Self>,
                key: &str,
            ) -> $crate::Result<$crate::queue::KeyHolder> {
                let (run_id, start_job): (String, Option<i64>) =
                    sqlx::query_as($crate::backend::sql!($dir, "find_run_by_key"))
                        .bind($crate::text::Text(key))
                        .fetch_one(c)
                        .await?;
                Ok($crate::queue::KeyHolder { run_id, start_job })
            }

            async fn find_job_by_key(
                c: &mut $crate::backend::Conn<Self>,
                key: &str,
            ) -> $crate::Result<(String, i64)> {
                Ok(
                    sqlx::query_as($crate::backend::sql!($dir, "find_job_by_key"))
                        .bind($crate::text::Text(key))
                        .fetch_one(c)
                        .await?,
                )
            }

            async fn run_status(
                c: &mut $crate::backend::Conn<Self>,
                run_id: &str,
            ) -> $crate::Result<Option<$crate::states::RunStatus>> {
                let status: Option<String> =
                    sqlx::query_scalar($crate::backend::sql!($dir, "run_status"))
                        .bind(run_id)
                        .fetch_optional(c)
                        .await?;
                status
                    .as_deref()
                    .map($crate::queue::parse_run_status)
                    .transpose()
            }

            async fn cancel_pending_wakeups(
                c: &mut $crate::backend::Conn<Self>,
                run_id: &str,
                job_id: i64,
                now: i64,
            ) -> $crate::Result<()> {
                sqlx::query($crate::backend::sql!($dir, "cancel_pending_wakeups"))
                    .bind(run_id)
                    .bind(job_id)
                    .bind(now)
                    .execute(c)
                    .await?;
                Ok(())
            }

            async fn resume_target(
                c: &mut $crate::backend::Conn<Self>,
                run_id: &str,
                job_id: i64,
            ) -> $crate::Result<$crate::queue::ResumeTarget> {
                let (key, busy): (Option<String>, i64) =
                    sqlx::query_as($crate::backend::sql!($dir, "resume_target"))
                        .bind(run_id)
                        .bind(job_id)
                        .fetch_one(c)
                        .await?;
                Ok($crate::queue::ResumeTarget {
                    has_concurrency_key: key.is_some(),
                    busy,
                })
            }

            async fn cancel_queued_jobs(
                c: &mut $crate::backend::Conn<Self>,
                run_id: &str,
                now: i64,
            ) -> $crate::Result<()> {
                sqlx::query($crate::backend::sql!($dir, "cancel_queued_jobs"))
                    .bind(run_id)
                    .bind(now)
                    .execute(c)
                    .await?;
                Ok(())
            }

            async fn flag_running_jobs(
                c: &mut $crate::backend::Conn<Self>,
                run_id: &str,
                now: i64,
            ) -> $crate::Result<Vec<i64>> {
                Ok(
                    sqlx::query_scalar($crate::backend::sql!($dir, "flag_running_jobs"))
                        .bind(run_id)
                        .bind(now)
                        .fetch_all(c)
                        .await?,
                )
            }

            async fn give_back(
                c: &mut $crate::backend::Conn<Self>,
                job_id: i64,
                now: i64,
            ) -> $crate::Result<()> {
                sqlx::query($crate::backend::sql!($dir, "give_back"))
                    .bind(job_id)
                    .bind(now)
                    .execute(c)
                    .await?;
                Ok(())
            }

            async fn request_cancel(
                c: &mut $crate::backend::Conn<Self>,
                run_id: &str,
                now: i64,
            ) -> $crate::Result<()> {
                sqlx::query($crate::backend::sql!($dir, "request_cancel"))
                    .bind(run_id)
                    .bind(now)
                    .execute(c)
                    .await?;
                Ok(())
            }

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
                let decided: i64 =
                    sqlx::query_scalar($crate::backend::sql!($dir, "approvals/decided"))
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

            async fn get_run(
                c: &mut $crate::backend::Conn<Self>,
                id: &str,
            ) -> $crate::Result<Option<$crate::model::Run>> {
                Ok(sqlx::query_as($crate::backend::sql!($dir, "get_run"))
                    .bind(id)
                    .fetch_optional(c)
                    .await?)
            }

            async fn find_active_run_by_concurrency_key(
                c: &mut $crate::backend::Conn<Self>,
                key: &str,
            ) -> $crate::Result<Option<$crate::model::Run>> {
                Ok(sqlx::query_as($crate::backend::sql!(
                    $dir,
                    "find_active_run_by_concurrency_key"
                ))
                .bind($crate::text::Text(key))
                .fetch_optional(c)
                .await?)
            }

            async fn list_runs(
                c: &mut $crate::backend::Conn<Self>,
                status: Option<$crate::states::RunStatus>,
                limit: i64,
            ) -> $crate::Result<Vec<$crate::model::Run>> {
                Ok(sqlx::query_as($crate::backend::sql!($dir, "list_runs"))
                    .bind(status.map($crate::states::RunStatus::as_str))
                    .bind(limit)
                    .fetch_all(c)
                    .await?)
            }

            async fn get_job(
                c: &mut $crate::backend::Conn<Self>,
                id: i64,
            ) -> $crate::Result<Option<$crate::model::Job>> {
                Ok(sqlx::query_as($crate::backend::sql!($dir, "get_job"))
                    .bind(id)
                    .fetch_optional(c)
                    .await?)
            }

            async fn jobs_of_run(
                c: &mut $crate::backend::Conn<Self>,
                run_id: &str,
            ) -> $crate::Result<Vec<$crate::model::Job>> {
                Ok(sqlx::query_as($crate::backend::sql!($dir, "jobs_of_run"))
                    .bind(run_id)
                    .fetch_all(c)
                    .await?)
            }

            async fn events_after(
                c: &mut $crate::backend::Conn<Self>,
                run_id: &str,
                after_seq: i64,
            ) -> $crate::Result<Vec<$crate::model::Event>> {
                Ok(sqlx::query_as($crate::backend::sql!($dir, "events_after"))
                    .bind(run_id)
                    .bind(after_seq)
                    .fetch_all(c)
                    .await?)
            }

            async fn latest_checkpoint(
                c: &mut $crate::backend::Conn<Self>,
                run_id: &str,
            ) -> $crate::Result<Option<$crate::model::Checkpoint>> {
                Ok(
                    sqlx::query_as($crate::backend::sql!($dir, "latest_checkpoint"))
                        .bind(run_id)
                        .fetch_optional(c)
                        .await?,
                )
            }

            async fn job_counts(
                c: &mut $crate::backend::Conn<Self>,
            ) -> $crate::Result<Vec<$crate::model::JobCount>> {
                let rows: Vec<(String, i64)> =
                    sqlx::query_as($crate::backend::sql!($dir, "job_counts"))
                        .fetch_all(c)
                        .await?;
                rows.into_iter()
                    .map(|(state, count)| {
                        Ok($crate::model::JobCount {
                            state: state
                                .parse()
                                .map_err(|e| $crate::Error::Corrupt(format!("jobs.status: {e}")))?,
                            count,
                        })
                    })
                    .collect()
            }

            async fn next_due(c: &mut $crate::backend::Conn<Self>) -> $crate::Result<Option<i64>> {
                Ok(sqlx::query_scalar($crate::backend::sql!($dir, "next_due"))
                    .fetch_one(c)
                    .await?)
            }

            async fn upsert_worker(
                c: &mut $crate::backend::Conn<Self>,
                id: &str,
                host: &str,
                pid: i64,
                now: i64,
            ) -> $crate::Result<()> {
                sqlx::query($crate::backend::sql!($dir, "upsert_worker"))
                    .bind(id)
                    .bind(host)
                    .bind(pid)
                    .bind(now)
                    .execute(c)
                    .await?;
                Ok(())
            }

            async fn remove_worker(
                c: &mut $crate::backend::Conn<Self>,
                id: &str,
            ) -> $crate::Result<()> {
                sqlx::query($crate::backend::sql!($dir, "remove_worker"))
                    .bind(id)
                    .execute(c)
                    .await?;
                Ok(())
            }

            async fn list_workers(
                c: &mut $crate::backend::Conn<Self>,
            ) -> $crate::Result<Vec<$crate::model::WorkerRow>> {
                Ok(sqlx::query_as($crate::backend::sql!($dir, "list_workers"))
                    .fetch_all(c)
                    .await?)
            }
        }
    };
}
pub(crate) use queue_statements;
