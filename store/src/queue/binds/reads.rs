//! The reads of [`QueueStatements`](crate::queue::QueueStatements): runs, jobs, events,
//! checkpoints, counts, the next due time, and the workers' rows (with their two writes).
//! Each method only binds its parameters and reads its rows.

/// The read (and worker) methods of `QueueStatements`, with the statements of `store/sql/$dir/`; expands inside the impl.
macro_rules! read_statements {
    ($dir:literal) => {
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
        ) -> $crate::Result<Vec<$crate::content::EventRecord>> {
            Ok(sqlx::query_as($crate::backend::sql!($dir, "events_after"))
                .bind(run_id)
                .bind(after_seq)
                .fetch_all(c)
                .await?)
        }

        async fn latest_checkpoint(
            c: &mut $crate::backend::Conn<Self>,
            run_id: &str,
        ) -> $crate::Result<Option<$crate::content::CheckpointRecord>> {
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
    };
}
pub(crate) use read_statements;
