//! The run and concurrency-key statements of [`QueueStatements`](crate::queue::QueueStatements):
//! inserting runs and jobs, the key's locks and holders, superseding, cancelling and resuming.
//! Each method only binds its parameters and reads its rows.

/// The run and key methods of `QueueStatements`, with the statements of `store/sql/$dir/`; expands inside the impl.
macro_rules! run_statements {
    ($dir:literal) => {
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

        async fn lock_key(c: &mut $crate::backend::Conn<Self>, key: &str) -> $crate::Result<()> {
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
    };
}
pub(crate) use run_statements;
