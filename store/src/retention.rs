//! Retention: removing the history of runs that ended long enough ago (migration 0023).
//!
//! What it guarantees:
//! - **Only what a rule says.** A [`PurgeRule`] names one end state, a cutoff and the agents
//!   it covers; a run is purged only when it is in that state (always an end state, checked
//!   again in SQL), ended before the cutoff, has no job queued or running and no background
//!   task running. A live run, or one that ended after the cutoff, is never touched.
//! - **Bounded and short.** [`Store::purge_batch`] purges at most `limit` runs in one
//!   transaction: it marks them (`purged_at`), removes every row of their history — the
//!   tables in [`History::ALL`], one list — and either keeps the run row as a summary or
//!   removes it too. On PostgreSQL rows another purger holds are skipped, never waited for.
//! - **Idempotent.** A purged run is never selected again; a batch that failed rolled back
//!   whole and is selected again by the next one.
//! - **The record stays.** `audit_log` rows, webhook deliveries and schedules naming a purged
//!   run are kept.
//!
//! Files (workspaces, artifacts, task logs) are not the store's: the caller removes them
//! after the commit, from the ids a batch returns, and sweeps what a crash left
//! ([`Store::settled_runs`], [`Store::known_tasks`]).

use std::future::Future;

use crate::audit::{AuditStatements, NewAudit, record_in};
use crate::backend::{Backend, Conn};
use crate::clock::Millis;
use crate::states::RunStatus;
use crate::store::{Store, dispatch};
use crate::{Error, Result};

/// Which ended runs a purge takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgeRule {
    /// The end state; a live state is refused.
    pub status: RunStatus,
    /// Runs that ended before this time (ms since the epoch).
    pub ended_before: Millis,
    /// Only this agent's runs; `None`: any agent but those in `except_agents`.
    pub agent: Option<String>,
    /// Agents left out (they have rules of their own).
    pub except_agents: Vec<String>,
    /// Keep each run's row, marked purged, as its summary.
    pub keep_summary: bool,
}

/// What one batch removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PurgedBatch {
    /// The runs purged (their files go next).
    pub runs: Vec<String>,
    /// The background tasks removed (their log files go next).
    pub tasks: Vec<String>,
    /// Rows removed, run rows included when no summary is kept.
    pub rows: u64,
    /// Runs, events, checkpoints and their bytes removed.
    pub counts: PurgeCounts,
}

/// What a purge would remove, or removed, summed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PurgeCounts {
    pub runs: u64,
    pub events: u64,
    pub checkpoints: u64,
    /// Bytes of events and checkpoints.
    pub bytes: u64,
}

impl PurgeCounts {
    /// Adds `other` to these counts.
    pub fn add(&mut self, other: PurgeCounts) {
        self.runs += other.runs;
        self.events += other.events;
        self.checkpoints += other.checkpoints;
        self.bytes += other.bytes;
    }
}

/// A run a daemon holds files of, as the sweep sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSettlement {
    pub run_id: String,
    pub agent: String,
    /// Ended, with no job queued or running and no background task running.
    pub settled: bool,
    /// Its history was purged (only the summary row is left).
    pub purged: bool,
}

/// The tables of a run's history, each emptied of a batch's runs by its own statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum History {
    Events,
    Checkpoints,
    /// The run's stored content (`run_blobs`, `content/`), which its events and checkpoint
    /// refer to: removed after them.
    Blobs,
    Notifications,
    Outbox,
    Approvals,
    CheckRuns,
    Jobs,
}

impl History {
    /// Every table of a run's history, in an order the foreign keys allow (notifications
    /// before the outbox rows they name). The one list of what a purge removes besides
    /// tasks (whose ids it returns) and the run row itself.
    pub(crate) const ALL: &'static [History] = &[
        History::Events,
        History::Checkpoints,
        History::Blobs,
        History::Notifications,
        History::Outbox,
        History::Approvals,
        History::CheckRuns,
        History::Jobs,
    ];
}

/// The statements of retention (`store/sql/<backend>/retention/`).
pub(crate) trait RetentionStatements: Backend {
    /// `retention/mark.sql`: marks at most `limit` runs the rule takes, returns their ids.
    fn mark_purged(
        c: &mut Conn<Self>,
        rule: &PurgeRule,
        except: &str,
        now: Millis,
        limit: i64,
    ) -> impl Future<Output = Result<Vec<String>>> + Send;
    /// `retention/preview.sql`: what the rule would take, with no limit.
    fn preview_purge(
        c: &mut Conn<Self>,
        rule: &PurgeRule,
        except: &str,
    ) -> impl Future<Output = Result<PurgeCounts>> + Send;
    /// `retention/measure.sql`: (events, checkpoints, bytes) of the runs (a JSON array).
    fn measure_history(
        c: &mut Conn<Self>,
        runs: &str,
    ) -> impl Future<Output = Result<PurgeCounts>> + Send;
    /// `retention/delete_*.sql`: removes one table's rows of the runs; how many.
    fn delete_history(
        c: &mut Conn<Self>,
        table: History,
        runs: &str,
    ) -> impl Future<Output = Result<u64>> + Send;
    /// `retention/delete_tasks.sql`: removes the runs' tasks; their ids.
    fn delete_tasks(
        c: &mut Conn<Self>,
        runs: &str,
    ) -> impl Future<Output = Result<Vec<String>>> + Send;
    /// `retention/keep_forked.sql`: unmarks the runs of a batch a kept fork holds; their ids.
    fn keep_forked(
        c: &mut Conn<Self>,
        runs: &str,
    ) -> impl Future<Output = Result<Vec<String>>> + Send;
    /// `retention/delete_runs.sql`: removes the marked run rows; how many.
    fn delete_runs(c: &mut Conn<Self>, runs: &str) -> impl Future<Output = Result<u64>> + Send;
    /// `retention/settled.sql`.
    fn settled_runs(
        c: &mut Conn<Self>,
        runs: &str,
    ) -> impl Future<Output = Result<Vec<RunSettlement>>> + Send;
    /// `retention/known_tasks.sql`.
    fn known_tasks(
        c: &mut Conn<Self>,
        tasks: &str,
    ) -> impl Future<Output = Result<Vec<String>>> + Send;
}

/// Implements [`RetentionStatements`] for a backend from its SQL directory.
macro_rules! retention_statements {
    ($backend:ty, $dir:literal) => {
        impl $crate::retention::RetentionStatements for $backend {
            async fn mark_purged(
                c: &mut $crate::backend::Conn<Self>,
                rule: &$crate::retention::PurgeRule,
                except: &str,
                now: i64,
                limit: i64,
            ) -> $crate::Result<Vec<String>> {
                Ok(
                    sqlx::query_scalar($crate::backend::sql!($dir, "retention/mark"))
                        .bind(now)
                        .bind(rule.status.as_str())
                        .bind(rule.ended_before)
                        .bind(rule.agent.as_deref())
                        .bind(except)
                        .bind(limit)
                        .fetch_all(c)
                        .await?,
                )
            }

            async fn preview_purge(
                c: &mut $crate::backend::Conn<Self>,
                rule: &$crate::retention::PurgeRule,
                except: &str,
            ) -> $crate::Result<$crate::retention::PurgeCounts> {
                let row: (i64, i64, i64, i64, i64) =
                    sqlx::query_as($crate::backend::sql!($dir, "retention/preview"))
                        .bind(rule.status.as_str())
                        .bind(rule.ended_before)
                        .bind(rule.agent.as_deref())
                        .bind(except)
                        .fetch_one(c)
                        .await?;
                Ok($crate::retention::counts(
                    row.0,
                    (row.1, row.2, row.3, row.4),
                ))
            }

            async fn measure_history(
                c: &mut $crate::backend::Conn<Self>,
                runs: &str,
            ) -> $crate::Result<$crate::retention::PurgeCounts> {
                let row: (i64, i64, i64, i64) =
                    sqlx::query_as($crate::backend::sql!($dir, "retention/measure"))
                        .bind(runs)
                        .fetch_one(c)
                        .await?;
                Ok($crate::retention::counts(0, row))
            }

            async fn delete_history(
                c: &mut $crate::backend::Conn<Self>,
                table: $crate::retention::History,
                runs: &str,
            ) -> $crate::Result<u64> {
                use $crate::retention::History as H;
                let sql = match table {
                    H::Events => $crate::backend::sql!($dir, "retention/delete_events"),
                    H::Checkpoints => $crate::backend::sql!($dir, "retention/delete_checkpoints"),
                    H::Blobs => $crate::backend::sql!($dir, "retention/delete_blobs"),
                    H::Notifications => {
                        $crate::backend::sql!($dir, "retention/delete_notifications")
                    }
                    H::Outbox => $crate::backend::sql!($dir, "retention/delete_outbox"),
                    H::Approvals => $crate::backend::sql!($dir, "retention/delete_approvals"),
                    H::CheckRuns => $crate::backend::sql!($dir, "retention/delete_check_runs"),
                    H::Jobs => $crate::backend::sql!($dir, "retention/delete_jobs"),
                };
                let done = sqlx::query(sql).bind(runs).execute(c).await?;
                Ok(done.rows_affected())
            }

            async fn delete_tasks(
                c: &mut $crate::backend::Conn<Self>,
                runs: &str,
            ) -> $crate::Result<Vec<String>> {
                Ok(
                    sqlx::query_scalar($crate::backend::sql!($dir, "retention/delete_tasks"))
                        .bind(runs)
                        .fetch_all(c)
                        .await?,
                )
            }

            async fn keep_forked(
                c: &mut $crate::backend::Conn<Self>,
                runs: &str,
            ) -> $crate::Result<Vec<String>> {
                Ok(
                    sqlx::query_scalar($crate::backend::sql!($dir, "retention/keep_forked"))
                        .bind(runs)
                        .fetch_all(c)
                        .await?,
                )
            }

            async fn delete_runs(
                c: &mut $crate::backend::Conn<Self>,
                runs: &str,
            ) -> $crate::Result<u64> {
                let done = sqlx::query($crate::backend::sql!($dir, "retention/delete_runs"))
                    .bind(runs)
                    .execute(c)
                    .await?;
                Ok(done.rows_affected())
            }

            async fn settled_runs(
                c: &mut $crate::backend::Conn<Self>,
                runs: &str,
            ) -> $crate::Result<Vec<$crate::retention::RunSettlement>> {
                let rows: Vec<(String, String, i64, i64)> =
                    sqlx::query_as($crate::backend::sql!($dir, "retention/settled"))
                        .bind(runs)
                        .fetch_all(c)
                        .await?;
                Ok(rows
                    .into_iter()
                    .map(
                        |(run_id, agent, settled, purged)| $crate::retention::RunSettlement {
                            run_id,
                            agent,
                            settled: settled != 0,
                            purged: purged != 0,
                        },
                    )
                    .collect())
            }

            async fn known_tasks(
                c: &mut $crate::backend::Conn<Self>,
                tasks: &str,
            ) -> $crate::Result<Vec<String>> {
                Ok(
                    sqlx::query_scalar($crate::backend::sql!($dir, "retention/known_tasks"))
                        .bind(tasks)
                        .fetch_all(c)
                        .await?,
                )
            }
        }
    };
}
pub(crate) use retention_statements;

/// Counts from a statement's row: runs, then (events, event bytes, checkpoints, their bytes).
pub(crate) fn counts(
    runs: i64,
    (events, event_bytes, checkpoints, bytes): (i64, i64, i64, i64),
) -> PurgeCounts {
    let n = |v: i64| u64::try_from(v).unwrap_or(0);
    PurgeCounts {
        runs: n(runs),
        events: n(events),
        checkpoints: n(checkpoints),
        bytes: n(event_bytes) + n(bytes),
    }
}

/// The most runs one batch may take.
pub const MAX_BATCH: i64 = 10_000;

fn json(ids: &[String]) -> String {
    serde_json::to_string(ids).unwrap_or_else(|_| "[]".to_string())
}

/// Refuses a rule on a live state: a purge never takes a run that may still change.
fn check(rule: &PurgeRule) -> Result<()> {
    if rule.status.is_terminal() {
        return Ok(());
    }
    Err(Error::Invalid(format!(
        "cannot purge runs that are {}: only ended runs are purged",
        rule.status
    )))
}

/// One batch in one transaction (see the module documentation); `audit` is written in it
/// whatever it purged.
async fn purge<B: RetentionStatements + AuditStatements>(
    b: &B,
    rule: &PurgeRule,
    limit: i64,
    now: Millis,
    audit: Option<&NewAudit<'_>>,
) -> Result<PurgedBatch> {
    let except = json(&rule.except_agents);
    let mut tx = b.begin().await?;
    let mut runs = B::mark_purged(&mut tx, rule, &except, now, limit).await?;
    if !runs.is_empty() {
        // A fork committed while the batch was chosen keeps its parent (forks.rs).
        let kept = B::keep_forked(&mut tx, &json(&runs)).await?;
        runs.retain(|r| !kept.contains(r));
    }
    if runs.is_empty() {
        if audit.is_some() {
            record_in::<B>(&mut tx, audit, now).await?;
            B::commit(tx).await?;
        } else {
            B::rollback(tx).await?;
        }
        return Ok(PurgedBatch::default());
    }
    let ids = json(&runs);
    let measured = B::measure_history(&mut tx, &ids).await?;
    let mut rows = 0;
    for table in History::ALL {
        rows += B::delete_history(&mut tx, *table, &ids).await?;
    }
    let tasks = B::delete_tasks(&mut tx, &ids).await?;
    rows += tasks.len() as u64;
    if !rule.keep_summary {
        rows += B::delete_runs(&mut tx, &ids).await?;
    }
    record_in::<B>(&mut tx, audit, now).await?;
    B::commit(tx).await?;
    let counts = PurgeCounts {
        runs: runs.len() as u64,
        ..measured
    };
    Ok(PurgedBatch {
        runs,
        tasks,
        rows,
        counts,
    })
}

async fn preview<B: RetentionStatements>(b: &B, rule: &PurgeRule) -> Result<PurgeCounts> {
    let except = json(&rule.except_agents);
    B::preview_purge(&mut *b.reader().await?, rule, &except).await
}

async fn settled<B: RetentionStatements>(b: &B, runs: &[String]) -> Result<Vec<RunSettlement>> {
    B::settled_runs(&mut *b.reader().await?, &json(runs)).await
}

async fn known<B: RetentionStatements>(b: &B, tasks: &[String]) -> Result<Vec<String>> {
    B::known_tasks(&mut *b.reader().await?, &json(tasks)).await
}

impl Store {
    /// Purges at most `limit` (1..=[`MAX_BATCH`]) runs `rule` takes, oldest end first, in
    /// one transaction; an empty batch means nothing is left to purge by this rule now.
    pub async fn purge_batch(&self, rule: &PurgeRule, limit: i64) -> Result<PurgedBatch> {
        self.purge_batch_recorded(rule, limit, None).await
    }

    /// [`Store::purge_batch`], with `audit` written in its transaction.
    pub(crate) async fn purge_batch_recorded(
        &self,
        rule: &PurgeRule,
        limit: i64,
        audit: Option<&NewAudit<'_>>,
    ) -> Result<PurgedBatch> {
        check(rule)?;
        let limit = limit.clamp(1, MAX_BATCH);
        let now = self.now();
        dispatch!(self, b => purge(b, rule, limit, now, audit))
    }

    /// What purging by `rule` would remove now, changing nothing.
    pub async fn purge_preview(&self, rule: &PurgeRule) -> Result<PurgeCounts> {
        check(rule)?;
        dispatch!(self, b => preview(b, rule))
    }

    /// Of `runs` (at most a few thousand ids), those that still exist, each settled or not
    /// and purged or not; a run not returned no longer exists.
    pub async fn settled_runs(&self, runs: &[String]) -> Result<Vec<RunSettlement>> {
        if runs.is_empty() {
            return Ok(Vec::new());
        }
        dispatch!(self, b => settled(b, runs))
    }

    /// Of `tasks` (ids), those whose row still exists.
    pub async fn known_tasks(&self, tasks: &[String]) -> Result<Vec<String>> {
        if tasks.is_empty() {
            return Ok(Vec::new());
        }
        dispatch!(self, b => known(b, tasks))
    }
}

/// What an operator's purge removed, with the ids whose files go next.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OperatorPurge {
    pub counts: PurgeCounts,
    /// Rows removed in all.
    pub rows: u64,
    pub runs: Vec<String>,
    pub tasks: Vec<String>,
}

impl crate::AsOperator<'_> {
    /// Purges every run the rules take, batch after batch of `batch` runs, sleeping
    /// `rest(took)` after each batch that purged runs (so the queue's writes go between),
    /// audited once as `purge` of `runs` with `detail` (what was asked): the row is written
    /// in the first batch's transaction, so it exists exactly when something of the purge
    /// committed, or when nothing matched.
    pub async fn purge_runs(
        &self,
        rules: &[PurgeRule],
        batch: i64,
        detail: &str,
        rest: impl Fn(std::time::Duration) -> std::time::Duration,
    ) -> Result<OperatorPurge> {
        for rule in rules {
            check(rule)?;
        }
        let entry = NewAudit {
            actor: self.actor(),
            action: "purge",
            run_id: None,
            target: "runs",
            detail: Some(detail),
        };
        let mut audit = Some(&entry);
        let mut done = OperatorPurge::default();
        for rule in rules {
            loop {
                let started = std::time::Instant::now();
                let purged = self
                    .store()
                    .purge_batch_recorded(rule, batch, audit)
                    .await?;
                let took = started.elapsed();
                audit = None;
                if purged.runs.is_empty() {
                    break;
                }
                done.counts.add(purged.counts);
                done.rows += purged.rows;
                done.runs.extend(purged.runs);
                done.tasks.extend(purged.tasks);
                tokio::time::sleep(rest(took)).await;
            }
        }
        if audit.is_some() {
            // No rules: the request is still the record.
            self.store()
                .purge_batch_recorded(&noop_rule(), 1, audit)
                .await?;
        }
        crate::audit::log_action(&entry);
        Ok(done)
    }
}

/// A rule that takes nothing (no run ends before the epoch), to record an empty request.
fn noop_rule() -> PurgeRule {
    PurgeRule {
        status: RunStatus::Succeeded,
        ended_before: i64::MIN,
        agent: None,
        except_agents: Vec::new(),
        keep_summary: true,
    }
}
