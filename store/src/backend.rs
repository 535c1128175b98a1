//! The queue operations, written once and expanded for each backend.
//!
//! SQLite and PostgreSQL run the same logic with their own SQL (`store/sql/<backend>/*.sql`);
//! only the statements differ (`FOR UPDATE SKIP LOCKED` and `FOR SHARE` on PostgreSQL, a
//! single writer connection and `BEGIN IMMEDIATE` on SQLite). sqlx's typed APIs make code
//! generic over a database heavy with bounds, so the logic is a macro instantiated per backend
//! with its SQL directory, and the conformance suite holds both to the same behaviour.
//!
//! Every lease-guarded write matches `id = ? AND lease_token = ? AND status = 'running'`; when
//! it matches no row, [`lease_lost`](crate::backend) reads why and returns `LeaseLost`.

/// Expands the queue operations for one backend. `$dir` names the SQL directory; the backend
/// type must provide `writer()` and `reader()` (async, a connection to run one statement on),
/// `begin()`, a `Tx` type in its module, and `notify_enqueued(tx, lane)`.
macro_rules! queue_operations {
    ($backend:ty, $db:ty, $dir:literal) => {
        macro_rules! sql {
            ($name:literal) => {
                include_str!(concat!("../sql/", $dir, "/", $name, ".sql"))
            };
        }

        #[allow(clippy::too_many_arguments)]
        impl $backend {
            /// Moves a run that is not yet terminal (the statement leaves terminal runs alone).
            async fn set_run(
                conn: &mut <$db as sqlx::Database>::Connection,
                run_id: &str,
                update: $crate::store::RunUpdate<'_>,
                now: i64,
            ) -> $crate::Result<()> {
                sqlx::query(sql!("set_run_status"))
                    .bind(run_id)
                    .bind(update.status.as_str())
                    .bind($crate::text::Text::opt(update.result))
                    .bind($crate::text::Text::opt(update.error))
                    .bind(update.finished_at)
                    .bind(now)
                    .execute(conn)
                    .await?;
                Ok(())
            }

            pub(crate) async fn enqueue_run(
                &self,
                run_id: &str,
                new: &$crate::model::NewRun,
                notify: bool,
                now: i64,
            ) -> $crate::Result<$crate::model::Enqueued> {
                if new.concurrency_key.is_none() {
                    return match self.enqueue_plain(run_id, new, notify, now).await? {
                        Some(job_id) => Ok($crate::model::Enqueued {
                            run_id: run_id.to_string(),
                            job_id,
                            duplicate: false,
                            skipped: false,
                            superseded: Vec::new(),
                        }),
                        None => self.duplicate_run(new).await,
                    };
                }
                let mut tx = self.begin().await?;
                let inserted: Option<String> = sqlx::query_scalar(sql!("insert_run"))
                    .bind(run_id)
                    .bind(&new.agent)
                    .bind(new.trigger.as_str())
                    .bind($crate::text::Text(&new.input))
                    .bind($crate::text::Text::opt(new.dedupe_key.as_deref()))
                    .bind($crate::text::Text::opt(new.concurrency_key.as_deref()))
                    .bind(now)
                    .bind(notify)
                    .fetch_optional(&mut *tx)
                    .await?;
                if inserted.is_none() {
                    tx.rollback().await?;
                    return self.duplicate_run(new).await;
                }
                let mut run_at = new.job.run_at.unwrap_or(now);
                let mut superseded = Vec::new();
                if let Some(key) = &new.concurrency_key {
                    sqlx::query(sql!("lock_key"))
                        .bind($crate::text::Text(key))
                        .execute(&mut *tx)
                        .await?;
                    let active: Vec<(String, String, Option<i64>)> =
                        sqlx::query_as(sql!("active_runs_of_key"))
                            .bind($crate::text::Text(key))
                            .bind(run_id)
                            .fetch_all(&mut *tx)
                            .await?;
                    use $crate::model::ConcurrencyPolicy as P;
                    let to_supersede: Vec<&String> = match new.concurrency_policy {
                        P::Queue => Vec::new(),
                        P::Skip => {
                            if let Some((holder, _, _)) = active.last() {
                                tx.rollback().await?;
                                let job_id: Option<i64> =
                                    sqlx::query_scalar(sql!("newest_job_of_run"))
                                        .bind(holder)
                                        .fetch_one(&mut *self.writer().await?)
                                        .await?;
                                return Ok($crate::model::Enqueued {
                                    run_id: holder.clone(),
                                    job_id: job_id.unwrap_or_default(),
                                    duplicate: false,
                                    skipped: true,
                                    superseded: Vec::new(),
                                });
                            }
                            Vec::new()
                        }
                        P::Supersede => active.iter().map(|(id, _, _)| id).collect(),
                        P::Debounce { window_ms } => {
                            run_at = run_at.max(now.saturating_add(window_ms));
                            active
                                .iter()
                                .filter(|(_, status, started)| {
                                    status == "queued" && started.is_none()
                                })
                                .map(|(id, _, _)| id)
                                .collect()
                        }
                    };
                    let why = format!("superseded by run {run_id}");
                    for old in to_supersede {
                        let ended: Option<String> = sqlx::query_scalar(sql!("supersede_run"))
                            .bind(old)
                            .bind(&why)
                            .bind(now)
                            .fetch_optional(&mut *tx)
                            .await?;
                        if ended.is_none() {
                            continue;
                        }
                        Self::stop_jobs(&mut tx, old, now).await?;
                        superseded.push(old.clone());
                    }
                }
                let job_id: i64 = sqlx::query_scalar(sql!("insert_job"))
                    .bind(run_id)
                    .bind($crate::states::JobKind::Start.as_str())
                    .bind(&new.job.lane)
                    .bind(new.job.priority)
                    .bind($crate::text::Text(&new.input))
                    .bind(run_at)
                    .bind(new.job.max_attempts)
                    .bind(None::<String>)
                    .bind(now)
                    .fetch_one(&mut *tx)
                    .await?;
                self.notify_enqueued(&mut tx, &new.job.lane).await?;
                tx.commit().await?;
                Ok($crate::model::Enqueued {
                    run_id: run_id.to_string(),
                    job_id,
                    duplicate: false,
                    skipped: false,
                    superseded,
                })
            }

            /// The run that already holds `new`'s idempotency key.
            async fn duplicate_run(
                &self,
                new: &$crate::model::NewRun,
            ) -> $crate::Result<$crate::model::Enqueued> {
                let key = new.dedupe_key.as_deref().unwrap_or_default();
                let (run_id, job_id): (String, Option<i64>) =
                    sqlx::query_as(sql!("find_run_by_key"))
                        .bind($crate::text::Text(key))
                        .fetch_one(&mut *self.writer().await?)
                        .await?;
                let job_id = job_id.ok_or_else(|| {
                    $crate::Error::Corrupt(format!("run {run_id} has no start job"))
                })?;
                Ok($crate::model::Enqueued {
                    run_id,
                    job_id,
                    duplicate: true,
                    skipped: false,
                    superseded: Vec::new(),
                })
            }

            pub(crate) async fn enqueue_resume(
                &self,
                new: &$crate::model::NewResume,
                now: i64,
            ) -> $crate::Result<$crate::model::Enqueued> {
                let mut tx = self.begin().await?;
                let status: Option<String> = sqlx::query_scalar(sql!("run_status"))
                    .bind(&new.run_id)
                    .fetch_optional(&mut *tx)
                    .await?;
                let status = $crate::store::parse_status(status, &new.run_id)?;
                let inserted: Option<i64> = sqlx::query_scalar(sql!("insert_job"))
                    .bind(&new.run_id)
                    .bind($crate::states::JobKind::Resume.as_str())
                    .bind(&new.job.lane)
                    .bind(new.job.priority)
                    .bind($crate::text::Text(&new.payload))
                    .bind(new.job.run_at.unwrap_or(now))
                    .bind(new.job.max_attempts)
                    .bind($crate::text::Text::opt(new.dedupe_key.as_deref()))
                    .bind(now)
                    .fetch_optional(&mut *tx)
                    .await?;
                let Some(job_id) = inserted else {
                    tx.rollback().await?;
                    let key = new.dedupe_key.as_deref().unwrap_or_default();
                    let (run_id, job_id): (String, i64) = sqlx::query_as(sql!("find_job_by_key"))
                        .bind($crate::text::Text(key))
                        .fetch_one(&mut *self.writer().await?)
                        .await?;
                    return Ok($crate::model::Enqueued {
                        run_id,
                        job_id,
                        duplicate: true,
                        skipped: false,
                        superseded: Vec::new(),
                    });
                };
                if status.is_terminal() {
                    tx.rollback().await?;
                    return Err($crate::Error::Conflict(format!(
                        "run {} already finished as {status}; a finished run cannot be resumed",
                        new.run_id
                    )));
                }
                if status == $crate::states::RunStatus::Waiting {
                    sqlx::query(sql!("cancel_pending_wakeups"))
                        .bind(&new.run_id)
                        .bind(job_id)
                        .bind(now)
                        .execute(&mut *tx)
                        .await?;
                }
                let (key, busy): (Option<String>, i64) = sqlx::query_as(sql!("resume_target"))
                    .bind(&new.run_id)
                    .bind(job_id)
                    .fetch_one(&mut *tx)
                    .await?;
                if key.is_none() && busy > 0 {
                    // Two jobs of one run must never run at once; a concurrency key makes the
                    // queue hold the second until the first lets go, without one there is
                    // nothing to hold it.
                    tx.rollback().await?;
                    return Err($crate::Error::Conflict(format!(
                        "run {} is busy (a job of it is queued or running) and has no \
                         concurrency key; resume it once it waits, or start runs with a \
                         concurrency key",
                        new.run_id
                    )));
                }
                self.notify_enqueued(&mut tx, &new.job.lane).await?;
                tx.commit().await?;
                Ok($crate::model::Enqueued {
                    run_id: new.run_id.clone(),
                    job_id,
                    duplicate: false,
                    skipped: false,
                    superseded: Vec::new(),
                })
            }

            /// Cancels the run's queued jobs and asks its running ones to stop (at their next
            /// heartbeat); returns the running jobs' ids.
            async fn stop_jobs(
                conn: &mut <$db as sqlx::Database>::Connection,
                run_id: &str,
                now: i64,
            ) -> $crate::Result<Vec<i64>> {
                sqlx::query(sql!("cancel_queued_jobs"))
                    .bind(run_id)
                    .bind(now)
                    .execute(&mut *conn)
                    .await?;
                Ok(sqlx::query_scalar(sql!("flag_running_jobs"))
                    .bind(run_id)
                    .bind(now)
                    .fetch_all(&mut *conn)
                    .await?)
            }

            async fn give_back(
                conn: &mut <$db as sqlx::Database>::Connection,
                job_id: i64,
                now: i64,
            ) -> $crate::Result<()> {
                sqlx::query(sql!("give_back"))
                    .bind(job_id)
                    .bind(now)
                    .execute(conn)
                    .await?;
                Ok(())
            }

            pub(crate) async fn heartbeat(
                &self,
                job_id: i64,
                token: i64,
                lease_ms: i64,
                now: i64,
            ) -> $crate::Result<$crate::model::Heartbeat> {
                let extended: Option<i64> = sqlx::query_scalar(sql!("heartbeat"))
                    .bind(job_id)
                    .bind(token)
                    .bind(lease_ms)
                    .bind(now)
                    .fetch_optional(&mut *self.writer().await?)
                    .await?;
                if let Some(expires_at) = extended {
                    return Ok($crate::model::Heartbeat::Extended { expires_at });
                }
                self.cancel_requested(job_id, token).await?;
                Ok($crate::model::Heartbeat::CancelRequested)
            }

            /// After a lease-guarded statement that also required no cancel request matched no
            /// row: `Ok` when the lease is still held and cancellation was requested, else
            /// `LeaseLost` with the reason read from the job row.
            async fn cancel_requested(&self, job_id: i64, token: i64) -> $crate::Result<()> {
                match self.lease_probe(job_id).await? {
                    Some((status, current, Some(_))) if current == token && status == "running" => {
                        Ok(())
                    }
                    probe => Err($crate::store::lease_lost(job_id, token, probe)),
                }
            }

            async fn lease_probe(
                &self,
                job_id: i64,
            ) -> $crate::Result<Option<(String, i64, Option<i64>)>> {
                Ok(sqlx::query_as(sql!("lease_probe"))
                    .bind(job_id)
                    .fetch_optional(&mut *self.writer().await?)
                    .await?)
            }

            /// The value a lease-guarded statement returned, or `LeaseLost` (with the reason
            /// read from the job row) when it matched no row.
            async fn fenced<T>(
                &self,
                job_id: i64,
                token: i64,
                row: Option<T>,
            ) -> $crate::Result<T> {
                match row {
                    Some(v) => Ok(v),
                    None => Err(self.lost(job_id, token).await),
                }
            }

            pub(crate) async fn lost(&self, job_id: i64, token: i64) -> $crate::Error {
                match self.lease_probe(job_id).await {
                    Ok(probe) => $crate::store::lease_lost(job_id, token, probe),
                    Err(e) => e,
                }
            }

            pub(crate) async fn append_event(
                &self,
                job_id: i64,
                token: i64,
                event_type: &str,
                payload: &str,
                now: i64,
            ) -> $crate::Result<i64> {
                let seq: Option<i64> = sqlx::query_scalar(sql!("append_event"))
                    .bind(job_id)
                    .bind(token)
                    .bind($crate::text::Text(event_type))
                    .bind($crate::text::Text(payload))
                    .bind(now)
                    .fetch_optional(&mut *self.writer().await?)
                    .await?;
                self.fenced(job_id, token, seq).await
            }

            pub(crate) async fn append_event_live(
                &self,
                job_id: i64,
                token: i64,
                event_type: &str,
                payload: &str,
                now: i64,
            ) -> $crate::Result<Option<i64>> {
                let seq: Option<i64> = sqlx::query_scalar(sql!("append_event_live"))
                    .bind(job_id)
                    .bind(token)
                    .bind($crate::text::Text(event_type))
                    .bind($crate::text::Text(payload))
                    .bind(now)
                    .fetch_optional(&mut *self.writer().await?)
                    .await?;
                if seq.is_some() {
                    return Ok(seq);
                }
                self.cancel_requested(job_id, token).await?;
                Ok(None)
            }

            pub(crate) async fn write_checkpoint(
                &self,
                job_id: i64,
                token: i64,
                through_seq: i64,
                format_version: i64,
                body: &[u8],
                now: i64,
            ) -> $crate::Result<()> {
                let size = i64::try_from(body.len()).unwrap_or(i64::MAX);
                let written: Option<i64> = sqlx::query_scalar(sql!("write_checkpoint"))
                    .bind(job_id)
                    .bind(token)
                    .bind(through_seq)
                    .bind(format_version)
                    .bind(body)
                    .bind(size)
                    .bind(now)
                    .fetch_optional(&mut *self.writer().await?)
                    .await?;
                self.fenced(job_id, token, written).await.map(|_| ())
            }

            /// Marks the leased attempt as having made progress (see `record_progress`).
            pub(crate) async fn mark_progress(
                &self,
                job_id: i64,
                token: i64,
            ) -> $crate::Result<()> {
                let marked: Option<String> = sqlx::query_scalar(sql!("mark_progress"))
                    .bind(job_id)
                    .bind(token)
                    .fetch_optional(&mut *self.writer().await?)
                    .await?;
                self.fenced(job_id, token, marked).await.map(|_| ())
            }

            pub(crate) async fn record_progress(
                &self,
                job_id: i64,
                token: i64,
                progress: &$crate::model::RunProgress,
                now: i64,
            ) -> $crate::Result<()> {
                // One transaction: the totals and the mark that this attempt made progress
                // (which keeps a later lease expiry from counting it), both fenced.
                let mut tx = self.begin().await?;
                let marked: Option<String> = sqlx::query_scalar(sql!("mark_progress"))
                    .bind(job_id)
                    .bind(token)
                    .fetch_optional(&mut *tx)
                    .await?;
                if marked.is_none() {
                    tx.rollback().await?;
                    return Err(self.lost(job_id, token).await);
                }
                let updated: Option<String> = sqlx::query_scalar(sql!("record_progress"))
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
                    .fetch_optional(&mut *tx)
                    .await?;
                if updated.is_none() {
                    tx.rollback().await?;
                    return Err(self.lost(job_id, token).await);
                }
                tx.commit().await?;
                Ok(())
            }

            /// Re-queues the leased job at `run_at`. `counted`: the attempt counts (a
            /// retry: dead-letters on the last attempt); otherwise it is given back and
            /// never dead-letters (a deferral).
            pub(crate) async fn retry(
                &self,
                job_id: i64,
                token: i64,
                run_at: i64,
                error: &str,
                counted: bool,
                now: i64,
            ) -> $crate::Result<$crate::model::RetryOutcome> {
                let mut tx = self.begin().await?;
                let done: Option<(String, String)> = sqlx::query_as(sql!("retry_job"))
                    .bind(job_id)
                    .bind(token)
                    .bind(run_at)
                    .bind($crate::text::Text(error))
                    .bind(now)
                    .bind(counted)
                    .fetch_optional(&mut *tx)
                    .await?;
                let Some((run_id, job_status)) = done else {
                    tx.rollback().await?;
                    return Err(self.lost(job_id, token).await);
                };
                let (status, finished, outcome) =
                    $crate::store::run_after_retry(&job_status, run_at, now);
                Self::set_run(
                    &mut tx,
                    &run_id,
                    $crate::store::RunUpdate {
                        status,
                        result: None,
                        error: finished.map(|_| error),
                        finished_at: finished,
                    },
                    now,
                )
                .await?;
                if job_status == "queued" {
                    self.notify_enqueued(&mut tx, "").await?;
                }
                tx.commit().await?;
                Ok(outcome)
            }

            pub(crate) async fn park(
                &self,
                job_id: i64,
                token: i64,
                resume: &$crate::model::JobOptions,
                payload: &str,
                waiting: $crate::states::RunStatus,
                approval_call: Option<&str>,
                now: i64,
            ) -> $crate::Result<Option<i64>> {
                let mut tx = self.begin().await?;
                let done: Option<(String, Option<i64>, Option<String>)> =
                    sqlx::query_as(sql!("finish_job"))
                        .bind(job_id)
                        .bind(token)
                        .bind($crate::states::JobState::Parked.as_str())
                        .bind(None::<String>)
                        .bind(now)
                        .fetch_optional(&mut *tx)
                        .await?;
                let Some((run_id, cancel_requested, _)) = done else {
                    tx.rollback().await?;
                    return Err(self.lost(job_id, token).await);
                };
                if cancel_requested.is_some() {
                    // Cancellation won the race with parking: end the run instead of arming a
                    // job nobody wants.
                    Self::set_run(
                        &mut tx,
                        &run_id,
                        $crate::store::RunUpdate {
                            status: $crate::states::RunStatus::Cancelled,
                            result: None,
                            error: Some("cancelled on request"),
                            finished_at: Some(now),
                        },
                        now,
                    )
                    .await?;
                    tx.commit().await?;
                    return Ok(None);
                }
                let mut run_at = resume.run_at.unwrap_or(now);
                if let Some(call_id) = approval_call {
                    // Serialised with decide_approval: a decision that landed before this park
                    // makes the resume due now instead of at the timeout.
                    sqlx::query(sql!("lock_key"))
                        .bind($crate::text::Text(&format!("approval:{run_id}")))
                        .execute(&mut *tx)
                        .await?;
                    let decided: i64 = sqlx::query_scalar(include_str!(concat!(
                        "../sql/",
                        $dir,
                        "/approvals/decided.sql"
                    )))
                    .bind(&run_id)
                    .bind($crate::text::Text(call_id))
                    .fetch_one(&mut *tx)
                    .await?;
                    if decided > 0 {
                        run_at = now;
                    }
                }
                let resume_id: i64 = sqlx::query_scalar(sql!("insert_job"))
                    .bind(&run_id)
                    .bind($crate::states::JobKind::Resume.as_str())
                    .bind(&resume.lane)
                    .bind(resume.priority)
                    .bind($crate::text::Text(payload))
                    .bind(run_at)
                    .bind(resume.max_attempts)
                    .bind(None::<String>)
                    .bind(now)
                    .fetch_one(&mut *tx)
                    .await?;
                Self::set_run(
                    &mut tx,
                    &run_id,
                    $crate::store::RunUpdate {
                        status: waiting,
                        result: None,
                        error: None,
                        finished_at: None,
                    },
                    now,
                )
                .await?;
                self.notify_enqueued(&mut tx, &resume.lane).await?;
                tx.commit().await?;
                Ok(Some(resume_id))
            }

            pub(crate) async fn release(
                &self,
                job_id: i64,
                token: i64,
                reason: &str,
                now: i64,
            ) -> $crate::Result<()> {
                let mut tx = self.begin().await?;
                let done: Option<String> = sqlx::query_scalar(sql!("release_job"))
                    .bind(job_id)
                    .bind(token)
                    .bind($crate::text::Text(reason))
                    .bind(now)
                    .fetch_optional(&mut *tx)
                    .await?;
                let Some(run_id) = done else {
                    tx.rollback().await?;
                    return Err(self.lost(job_id, token).await);
                };
                Self::set_run(
                    &mut tx,
                    &run_id,
                    $crate::store::RunUpdate {
                        status: $crate::states::RunStatus::Queued,
                        result: None,
                        error: None,
                        finished_at: None,
                    },
                    now,
                )
                .await?;
                self.notify_enqueued(&mut tx, "").await?;
                tx.commit().await?;
                Ok(())
            }

            pub(crate) async fn cancel_run(
                &self,
                run_id: &str,
                now: i64,
            ) -> $crate::Result<$crate::model::CancelOutcome> {
                let mut tx = self.begin().await?;
                let status: Option<String> = sqlx::query_scalar(sql!("run_status"))
                    .bind(run_id)
                    .fetch_optional(&mut *tx)
                    .await?;
                let status = $crate::store::parse_status(status, run_id)?;
                if status.is_terminal() {
                    tx.rollback().await?;
                    return Err($crate::Error::Conflict(format!(
                        "run {run_id} already finished as {status}; there is nothing to cancel"
                    )));
                }
                sqlx::query(sql!("request_cancel"))
                    .bind(run_id)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                let running = Self::stop_jobs(&mut tx, run_id, now).await?;
                let outcome = if running.is_empty() {
                    Self::set_run(
                        &mut tx,
                        run_id,
                        $crate::store::RunUpdate {
                            status: $crate::states::RunStatus::Cancelled,
                            result: None,
                            error: Some("cancelled on request"),
                            finished_at: Some(now),
                        },
                        now,
                    )
                    .await?;
                    $crate::model::CancelOutcome::Cancelled
                } else {
                    $crate::model::CancelOutcome::Requested
                };
                tx.commit().await?;
                Ok(outcome)
            }

            pub(crate) async fn run(&self, id: &str) -> $crate::Result<Option<$crate::model::Run>> {
                Ok(sqlx::query_as(sql!("get_run"))
                    .bind(id)
                    .fetch_optional(&mut *self.reader().await?)
                    .await?)
            }

            pub(crate) async fn active_run_by_concurrency_key(
                &self,
                key: &str,
            ) -> $crate::Result<Option<$crate::model::Run>> {
                Ok(sqlx::query_as(sql!("find_active_run_by_concurrency_key"))
                    .bind($crate::text::Text(key))
                    .fetch_optional(&mut *self.reader().await?)
                    .await?)
            }

            pub(crate) async fn list_runs(
                &self,
                status: Option<&str>,
                limit: i64,
            ) -> $crate::Result<Vec<$crate::model::Run>> {
                Ok(sqlx::query_as(sql!("list_runs"))
                    .bind(status)
                    .bind(limit)
                    .fetch_all(&mut *self.reader().await?)
                    .await?)
            }

            pub(crate) async fn job(&self, id: i64) -> $crate::Result<Option<$crate::model::Job>> {
                Ok(sqlx::query_as(sql!("get_job"))
                    .bind(id)
                    .fetch_optional(&mut *self.reader().await?)
                    .await?)
            }

            pub(crate) async fn jobs_of_run(
                &self,
                run_id: &str,
            ) -> $crate::Result<Vec<$crate::model::Job>> {
                Ok(sqlx::query_as(sql!("jobs_of_run"))
                    .bind(run_id)
                    .fetch_all(&mut *self.reader().await?)
                    .await?)
            }

            pub(crate) async fn events_after(
                &self,
                run_id: &str,
                after_seq: i64,
            ) -> $crate::Result<Vec<$crate::model::Event>> {
                Ok(sqlx::query_as(sql!("events_after"))
                    .bind(run_id)
                    .bind(after_seq)
                    .fetch_all(&mut *self.reader().await?)
                    .await?)
            }

            pub(crate) async fn latest_checkpoint(
                &self,
                run_id: &str,
            ) -> $crate::Result<Option<$crate::model::Checkpoint>> {
                Ok(sqlx::query_as(sql!("latest_checkpoint"))
                    .bind(run_id)
                    .fetch_optional(&mut *self.reader().await?)
                    .await?)
            }

            pub(crate) async fn job_counts(&self) -> $crate::Result<Vec<(String, i64)>> {
                Ok(sqlx::query_as(sql!("job_counts"))
                    .fetch_all(&mut *self.reader().await?)
                    .await?)
            }

            pub(crate) async fn next_due(&self) -> $crate::Result<Option<i64>> {
                Ok(sqlx::query_scalar(sql!("next_due"))
                    .fetch_one(&mut *self.reader().await?)
                    .await?)
            }

            pub(crate) async fn upsert_worker(
                &self,
                id: &str,
                host: &str,
                pid: i64,
                now: i64,
            ) -> $crate::Result<()> {
                sqlx::query(sql!("upsert_worker"))
                    .bind(id)
                    .bind(host)
                    .bind(pid)
                    .bind(now)
                    .execute(&mut *self.writer().await?)
                    .await?;
                Ok(())
            }

            pub(crate) async fn remove_worker(&self, id: &str) -> $crate::Result<()> {
                sqlx::query(sql!("remove_worker"))
                    .bind(id)
                    .execute(&mut *self.writer().await?)
                    .await?;
                Ok(())
            }

            pub(crate) async fn workers(&self) -> $crate::Result<Vec<$crate::model::WorkerRow>> {
                Ok(sqlx::query_as(sql!("list_workers"))
                    .fetch_all(&mut *self.reader().await?)
                    .await?)
            }
        }
    };
}

pub(crate) use queue_operations;
