//! Forks: a run that starts from another run's history (migration 0024).
//!
//! A fork names its parent (`runs.forked_from`) and the last of the parent's events it shares
//! (`runs.fork_seq`). Its log is the parent's log up to that seq, read through the parent's
//! rows, then its own events, which start at `fork_seq + 1` with the event the caller gives
//! (the agent's `forked` marker). Nothing of the parent is copied: [`Store::events`] walks the
//! lineage (`events_after.sql`), and a fork's checkpoints refer to its ancestors' blobs
//! (`content/hashes.sql`).
//!
//! What it guarantees:
//! - **One transaction.** The fork's run row with its start job, the link, its first event
//!   and the operator's audit row are written together or not at all.
//! - **The shared history stays.** A fork is made only while its parent's history is kept
//!   (not purged), and retention keeps a run while any fork of it is kept
//!   (`retention/mark.sql`). On PostgreSQL the parent's row is locked for the fork's
//!   transaction, so a purger running at the same time skips it, and a purge batch checks
//!   again after marking (`retention/keep_forked.sql`) for a fork committed while it chose.
//! - **Idempotent.** With an idempotency key already used, the existing run comes back with
//!   `duplicate: true` and nothing is written.
//!
//! Which events a fork shares (`fork_seq`) and what its marker says are the agent's choice
//! (`nightshift_agent::fork`); the store checks only that the parent has them.

use crate::Result;
use crate::audit::{AuditStatements, NewAudit, log_action, record_in};
use crate::backend::{Backend, Conn};
use crate::clock::Millis;
use crate::content::{self, WriterState};
use crate::model::{Enqueued, NewRun};
use crate::operator::AsOperator;
use crate::queue::{self, QueuePaths};
use crate::states::RunStatus;
use crate::store::{Store, dispatch};
use crate::{Error, enqueue::check_new_run};

/// A fork to make: the new run, where it branches off, and its first event.
#[derive(Debug, Clone)]
pub struct NewFork {
    /// The run forked from.
    pub parent: String,
    /// The last of the parent's events the fork shares (0: none).
    pub fork_seq: i64,
    /// The fork's own run (agent, input, context, keys, job options).
    pub run: NewRun,
    /// The fork's first own event, at `fork_seq + 1`: its type and JSON payload.
    pub event_type: String,
    pub event_payload: String,
}

/// A fork of a run, as [`Store::forks_of`] lists them.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow, serde::Serialize)]
pub struct ForkRow {
    pub id: String,
    pub fork_seq: i64,
    #[sqlx(try_from = "String")]
    pub status: RunStatus,
}

/// The statements of forks, one per file in `store/sql/<backend>/forks/`.
pub(crate) trait ForkStatements: Backend {
    /// `forks/hold_parent.sql`: whether the parent is there with its history (and locks it).
    fn hold_parent(c: &mut Conn<Self>, parent: &str) -> impl Future<Output = Result<bool>> + Send;
    /// `forks/link.sql`.
    fn link_fork(
        c: &mut Conn<Self>,
        run_id: &str,
        parent: &str,
        fork_seq: i64,
    ) -> impl Future<Output = Result<()>> + Send;
    /// `forks/insert_event.sql`.
    fn insert_fork_event(
        c: &mut Conn<Self>,
        event: ForkEvent<'_>,
    ) -> impl Future<Output = Result<()>> + Send;
    /// `forks/run_with_key.sql`.
    fn run_with_key(
        c: &mut Conn<Self>,
        key: &str,
    ) -> impl Future<Output = Result<Option<String>>> + Send;
    /// `forks/of_run.sql`.
    fn forks_of(
        c: &mut Conn<Self>,
        run_id: &str,
    ) -> impl Future<Output = Result<Vec<ForkRow>>> + Send;
}

/// A fork's first event row (`forks/insert_event.sql`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ForkEvent<'a> {
    pub run_id: &'a str,
    pub seq: i64,
    pub job_id: i64,
    pub event_type: &'a str,
    pub blob_id: i64,
    pub now: Millis,
}

/// Implements [`ForkStatements`] for a backend from its SQL directory.
macro_rules! fork_statements {
    ($backend:ty, $dir:literal) => {
        impl $crate::forks::ForkStatements for $backend {
            async fn hold_parent(
                c: &mut $crate::backend::Conn<Self>,
                parent: &str,
            ) -> $crate::Result<bool> {
                let held: Option<String> =
                    sqlx::query_scalar($crate::backend::sql!($dir, "forks/hold_parent"))
                        .bind(parent)
                        .fetch_optional(c)
                        .await?;
                Ok(held.is_some())
            }

            async fn link_fork(
                c: &mut $crate::backend::Conn<Self>,
                run_id: &str,
                parent: &str,
                fork_seq: i64,
            ) -> $crate::Result<()> {
                sqlx::query($crate::backend::sql!($dir, "forks/link"))
                    .bind(run_id)
                    .bind(parent)
                    .bind(fork_seq)
                    .execute(c)
                    .await?;
                Ok(())
            }

            async fn insert_fork_event(
                c: &mut $crate::backend::Conn<Self>,
                event: $crate::forks::ForkEvent<'_>,
            ) -> $crate::Result<()> {
                sqlx::query($crate::backend::sql!($dir, "forks/insert_event"))
                    .bind(event.run_id)
                    .bind(event.seq)
                    .bind(event.job_id)
                    .bind($crate::text::Text(event.event_type))
                    .bind(event.blob_id)
                    .bind(event.now)
                    .execute(c)
                    .await?;
                Ok(())
            }

            async fn run_with_key(
                c: &mut $crate::backend::Conn<Self>,
                key: &str,
            ) -> $crate::Result<Option<String>> {
                Ok(
                    sqlx::query_scalar($crate::backend::sql!($dir, "forks/run_with_key"))
                        .bind($crate::text::Text(key))
                        .fetch_optional(c)
                        .await?,
                )
            }

            async fn forks_of(
                c: &mut $crate::backend::Conn<Self>,
                run_id: &str,
            ) -> $crate::Result<Vec<$crate::forks::ForkRow>> {
                Ok(sqlx::query_as($crate::backend::sql!($dir, "forks/of_run"))
                    .bind(run_id)
                    .fetch_all(c)
                    .await?)
            }
        }
    };
}
pub(crate) use fork_statements;

impl AsOperator<'_> {
    /// Makes `fork`, audited as `fork` of the parent's id (the detail names the fork point).
    /// Refused with [`Error::NotFound`] when the parent is gone or its history was purged,
    /// and [`Error::Invalid`] for a run that could never run or a negative fork point.
    pub async fn fork_run(&self, fork: &NewFork) -> Result<Enqueued> {
        check_new_run(&fork.run)?;
        if fork.fork_seq < 0 {
            return Err(Error::Invalid(format!(
                "a fork point is an event's seq (0 or more), not {}",
                fork.fork_seq
            )));
        }
        let store = self.store();
        let run_id = uuid::Uuid::now_v7().to_string();
        let detail = format!("from seq {}", fork.fork_seq);
        let entry = NewAudit {
            actor: self.actor(),
            action: "fork",
            run_id: Some(&run_id),
            target: &fork.parent,
            detail: Some(&detail),
        };
        let row = queue::RunRow {
            id: &run_id,
            new: &fork.run,
            notify: store.notifies(&fork.run.agent),
            now: store.now(),
        };
        let enqueued = dispatch!(store, b => fork_in(b, row, fork, &entry))?;
        if !enqueued.duplicate {
            store.wake();
            log_action(&entry);
        }
        Ok(enqueued)
    }
}

impl Store {
    /// The forks of `run_id`, oldest first.
    pub async fn forks_of(&self, run_id: &str) -> Result<Vec<ForkRow>> {
        dispatch!(self, b => forks_of(b, run_id))
    }

    /// The run holding idempotency key `key`, if any.
    pub async fn run_with_key(&self, key: &str) -> Result<Option<String>> {
        dispatch!(self, b => run_with_key(b, key))
    }
}

async fn run_with_key<B: ForkStatements>(b: &B, key: &str) -> Result<Option<String>> {
    B::run_with_key(&mut *b.reader().await?, key).await
}

async fn forks_of<B: ForkStatements>(b: &B, run_id: &str) -> Result<Vec<ForkRow>> {
    B::forks_of(&mut *b.reader().await?, run_id).await
}

async fn fork_in<B: QueuePaths + ForkStatements + AuditStatements>(
    b: &B,
    row: queue::RunRow<'_>,
    fork: &NewFork,
    entry: &NewAudit<'_>,
) -> Result<Enqueued> {
    let mut tx = b.begin().await?;
    if !B::hold_parent(&mut tx, &fork.parent).await? {
        B::rollback(tx).await?;
        return Err(Error::NotFound {
            what: "run with its history",
            id: fork.parent.clone(),
        });
    }
    let enqueued = queue::enqueue_in::<B>(&mut tx, row).await?;
    if enqueued.duplicate || enqueued.skipped {
        B::rollback(tx).await?;
        return Ok(enqueued);
    }
    B::link_fork(&mut tx, row.id, &fork.parent, fork.fork_seq).await?;
    // The run is new: no lease holder writes its content yet, so a writer of its own.
    let state = WriterState::default();
    let mut draft = state.draft();
    let blob_id = content::put_event::<B>(
        &mut tx,
        row.id,
        (&state, &mut draft),
        &fork.event_payload,
        row.now,
    )
    .await?;
    let event = ForkEvent {
        run_id: row.id,
        seq: fork.fork_seq + 1,
        job_id: enqueued.job_id,
        event_type: &fork.event_type,
        blob_id,
        now: row.now,
    };
    B::insert_fork_event(&mut tx, event).await?;
    record_in::<B>(&mut tx, Some(entry), row.now).await?;
    B::commit(tx).await?;
    Ok(enqueued)
}
