//! Approvals: tool calls that wait for a human's decision.
//!
//! Guarantees:
//! - **Bound to one call.** A row is keyed by run and call id and records the tool and a hash
//!   of the call's input; the runtime checks the hash before acting on a decision.
//! - **Decided once.** pending → approved | denied | expired, each a guarded update; a second
//!   decision, or one after the timeout, is a `Conflict` that changes nothing.
//! - **No lost wake-up.** Deciding and parking the run for approval serialise on a per-run
//!   lock: a decision made before the run finished parking makes its resume job due at once,
//!   one made after moves the armed job to now. Either way the run resumes promptly, on any
//!   worker, and a crash between the steps changes nothing (the decision is a row).

use crate::clock::Millis;
use crate::store::{Store, dispatch};
use crate::{Error, Result};

/// One call's approval, as stored.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow, serde::Serialize)]
pub struct Approval {
    pub run_id: String,
    #[sqlx(try_from = "crate::text::DbText")]
    pub call_id: String,
    #[sqlx(try_from = "crate::text::DbText")]
    pub tool: String,
    /// The call's input, as JSON.
    #[sqlx(try_from = "crate::text::DbText")]
    pub input: String,
    pub input_hash: String,
    /// `pending`, `approved`, `denied` or `expired`.
    pub status: String,
    #[sqlx(try_from = "crate::text::DbOptText")]
    pub reason: Option<String>,
    pub requested_at: Millis,
    pub expires_at: Millis,
    pub decided_at: Option<Millis>,
}

/// A request to approve one call.
#[derive(Debug, Clone, PartialEq)]
pub struct NewApproval<'a> {
    pub run_id: &'a str,
    pub call_id: &'a str,
    pub tool: &'a str,
    pub input: &'a str,
    pub input_hash: &'a str,
    pub expires_at: Millis,
}

macro_rules! approval_operations {
    ($backend:ty, $dir:literal) => {
        macro_rules! approval_sql {
            ($name:literal) => {
                include_str!(concat!("../sql/", $dir, "/approvals/", $name, ".sql"))
            };
        }

        impl $backend {
            pub(crate) async fn request_approval(
                &self,
                new: &$crate::approvals::NewApproval<'_>,
                now: i64,
            ) -> $crate::Result<()> {
                sqlx::query(approval_sql!("request"))
                    .bind(new.run_id)
                    .bind($crate::text::Text(new.call_id))
                    .bind($crate::text::Text(new.tool))
                    .bind($crate::text::Text(new.input))
                    .bind(new.input_hash)
                    .bind(now)
                    .bind(new.expires_at)
                    .execute(&mut *self.writer().await?)
                    .await?;
                Ok(())
            }

            pub(crate) async fn approval(
                &self,
                run_id: &str,
                call_id: &str,
            ) -> $crate::Result<Option<$crate::approvals::Approval>> {
                Ok(sqlx::query_as(approval_sql!("get"))
                    .bind(run_id)
                    .bind($crate::text::Text(call_id))
                    .fetch_optional(&mut *self.writer().await?)
                    .await?)
            }

            pub(crate) async fn pending_approvals(
                &self,
                limit: i64,
            ) -> $crate::Result<Vec<$crate::approvals::Approval>> {
                Ok(sqlx::query_as(approval_sql!("pending"))
                    .bind(limit)
                    .fetch_all(&mut *self.reader().await?)
                    .await?)
            }

            /// Returns whether the pending approval was decided by this call.
            pub(crate) async fn decide_approval(
                &self,
                run_id: &str,
                call_id: &str,
                status: &str,
                reason: Option<&str>,
                now: i64,
            ) -> $crate::Result<bool> {
                let mut tx = self.begin().await?;
                sqlx::query(include_str!(concat!("../sql/", $dir, "/lock_key.sql")))
                    .bind($crate::text::Text(&format!("approval:{run_id}")))
                    .execute(&mut *tx)
                    .await?;
                let decided: Option<String> = sqlx::query_scalar(approval_sql!("decide"))
                    .bind(run_id)
                    .bind($crate::text::Text(call_id))
                    .bind(status)
                    .bind($crate::text::Text::opt(reason))
                    .bind(now)
                    .fetch_optional(&mut *tx)
                    .await?;
                if decided.is_none() {
                    tx.rollback().await?;
                    return Ok(false);
                }
                sqlx::query_scalar::<_, i64>(approval_sql!("resume_now"))
                    .bind(run_id)
                    .bind(now)
                    .fetch_all(&mut *tx)
                    .await?;
                self.notify_enqueued(&mut tx, "").await?;
                tx.commit().await?;
                Ok(true)
            }

            pub(crate) async fn expire_approval(
                &self,
                run_id: &str,
                call_id: &str,
                now: i64,
            ) -> $crate::Result<bool> {
                let expired: Option<String> = sqlx::query_scalar(approval_sql!("expire"))
                    .bind(run_id)
                    .bind($crate::text::Text(call_id))
                    .bind(now)
                    .fetch_optional(&mut *self.writer().await?)
                    .await?;
                Ok(expired.is_some())
            }
        }
    };
}

pub(crate) use approval_operations;

impl Store {
    /// Records that a call waits for a decision (idempotent).
    pub async fn request_approval(&self, new: &NewApproval<'_>) -> Result<()> {
        let now = self.now();
        dispatch!(self, b => b.request_approval(new, now))
    }

    /// The approval of one call.
    pub async fn approval(&self, run_id: &str, call_id: &str) -> Result<Option<Approval>> {
        dispatch!(self, b => b.approval(run_id, call_id))
    }

    /// Pending approvals, oldest first.
    pub async fn pending_approvals(&self, limit: i64) -> Result<Vec<Approval>> {
        dispatch!(self, b => b.pending_approvals(limit.clamp(1, 10_000)))
    }

    /// Approves or denies a pending call; the run resumes on any worker. A call decided
    /// before, expired, or unknown is an error that changes nothing.
    pub async fn decide_approval(
        &self,
        run_id: &str,
        call_id: &str,
        approve: bool,
        reason: Option<&str>,
    ) -> Result<()> {
        let now = self.now();
        let status = if approve { "approved" } else { "denied" };
        if dispatch!(self, b => b.decide_approval(run_id, call_id, status, reason, now))? {
            self.wake();
            return Ok(());
        }
        let run = self.run(run_id).await?;
        if let Some(run) = run.filter(|r| r.status.is_terminal()) {
            return Err(Error::Conflict(format!(
                "run {run_id} already finished as {}; there is nothing to decide",
                run.status
            )));
        }
        match self.approval(run_id, call_id).await? {
            None => Err(Error::NotFound {
                what: "approval",
                id: format!("{run_id}/{call_id}"),
            }),
            Some(a) if a.status == "pending" => Err(Error::Conflict(format!(
                "the approval of call {call_id} of run {run_id} timed out; the call is denied"
            ))),
            Some(a) => Err(Error::Conflict(format!(
                "call {call_id} of run {run_id} was already {}; a decision is made once",
                a.status
            ))),
        }
    }

    /// Expires a pending approval past its timeout; true when this call expired it.
    pub async fn expire_approval(&self, run_id: &str, call_id: &str) -> Result<bool> {
        let now = self.now();
        dispatch!(self, b => b.expire_approval(run_id, call_id, now))
    }
}
