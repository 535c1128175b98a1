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
//!
//! A backend supplies the statements (`ApprovalStatements`, one method per file of
//! `store/sql/<backend>/approvals/`, bound by `approval_statements!`), and the run's lock
//! through the queue's `QueueStatements::lock_key`; the transaction of a decision and why
//! a refused one was refused (`refusal`, a pure function) are written once here.

use std::future::Future;

use crate::audit::{AuditStatements, NewAudit, record_in};
use crate::backend::Conn;
use crate::clock::Millis;
use crate::queue::QueueStatements;
use crate::states::RunStatus;
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
    #[sqlx(try_from = "String")]
    pub status: ApprovalStatus,
    #[sqlx(try_from = "crate::text::DbOptText")]
    pub reason: Option<String>,
    pub requested_at: Millis,
    pub expires_at: Millis,
    pub decided_at: Option<Millis>,
    /// Who decided it (`token:NAME`, `dashboard:NAME`, `cli:USER`), when recorded; `None`
    /// for an expiry, or a decision made before it was recorded.
    #[sqlx(try_from = "crate::text::DbOptText")]
    pub decided_by: Option<String>,
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

crate::states::string_enum! {
    /// Where an approval stands; the names of the schema's `CHECK` on `approvals.status`.
    ApprovalStatus("approval status") {
        /// Waiting for a decision until `expires_at`.
        Pending => "pending",
        Approved => "approved",
        Denied => "denied",
        /// Timed out undecided; the call is denied.
        Expired => "expired",
    }
}

impl ApprovalStatus {
    /// The decision of an operator.
    pub fn decided(approve: bool) -> Self {
        if approve {
            ApprovalStatus::Approved
        } else {
            ApprovalStatus::Denied
        }
    }
}

/// An operator's decision on a pending call (`approvals/decide.sql`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Decision<'a> {
    pub run_id: &'a str,
    pub call_id: &'a str,
    pub status: ApprovalStatus,
    pub reason: Option<&'a str>,
    pub now: Millis,
    /// Who decided (the audit trail's actor), when known.
    pub by: Option<&'a str>,
}

/// The statements of approvals (`store/sql/<backend>/approvals/`). Deciding also takes the
/// run's approval lock through [`QueueStatements::lock_key`], which parking takes too.
pub(crate) trait ApprovalStatements: QueueStatements {
    /// `approvals/request.sql`: records a pending approval (idempotent).
    fn request_approval(
        c: &mut Conn<Self>,
        new: &NewApproval<'_>,
        now: Millis,
    ) -> impl Future<Output = Result<()>> + Send;
    /// `approvals/get.sql`.
    fn get_approval(
        c: &mut Conn<Self>,
        run_id: &str,
        call_id: &str,
    ) -> impl Future<Output = Result<Option<Approval>>> + Send;
    /// `approvals/pending.sql`: oldest first.
    fn pending_approvals(
        c: &mut Conn<Self>,
        limit: i64,
    ) -> impl Future<Output = Result<Vec<Approval>>> + Send;
    /// `approvals/decide.sql`: whether the pending, unexpired approval of an unfinished run
    /// was decided now.
    fn decide_approval(
        c: &mut Conn<Self>,
        decision: Decision<'_>,
    ) -> impl Future<Output = Result<bool>> + Send;
    /// `approvals/resume_now.sql`: makes the run's armed approval job due now; the jobs moved.
    fn resume_now(
        c: &mut Conn<Self>,
        run_id: &str,
        now: Millis,
    ) -> impl Future<Output = Result<Vec<i64>>> + Send;
    /// `approvals/expire.sql`: whether the pending approval past its timeout expired now.
    fn expire_approval(
        c: &mut Conn<Self>,
        run_id: &str,
        call_id: &str,
        now: Millis,
    ) -> impl Future<Output = Result<bool>> + Send;
}

/// Implements [`ApprovalStatements`] for a backend from its SQL directory.
macro_rules! approval_statements {
    ($backend:ty, $dir:literal) => {
        impl $crate::approvals::ApprovalStatements for $backend {
            async fn request_approval(
                c: &mut $crate::backend::Conn<Self>,
                new: &$crate::approvals::NewApproval<'_>,
                now: i64,
            ) -> $crate::Result<()> {
                sqlx::query($crate::backend::sql!($dir, "approvals/request"))
                    .bind(new.run_id)
                    .bind($crate::text::Text(new.call_id))
                    .bind($crate::text::Text(new.tool))
                    .bind($crate::text::Text(new.input))
                    .bind(new.input_hash)
                    .bind(now)
                    .bind(new.expires_at)
                    .execute(c)
                    .await?;
                Ok(())
            }

            async fn get_approval(
                c: &mut $crate::backend::Conn<Self>,
                run_id: &str,
                call_id: &str,
            ) -> $crate::Result<Option<$crate::approvals::Approval>> {
                Ok(sqlx::query_as($crate::backend::sql!($dir, "approvals/get"))
                    .bind(run_id)
                    .bind($crate::text::Text(call_id))
                    .fetch_optional(c)
                    .await?)
            }

            async fn pending_approvals(
                c: &mut $crate::backend::Conn<Self>,
                limit: i64,
            ) -> $crate::Result<Vec<$crate::approvals::Approval>> {
                Ok(
                    sqlx::query_as($crate::backend::sql!($dir, "approvals/pending"))
                        .bind(limit)
                        .fetch_all(c)
                        .await?,
                )
            }

            async fn decide_approval(
                c: &mut $crate::backend::Conn<Self>,
                decision: $crate::approvals::Decision<'_>,
            ) -> $crate::Result<bool> {
                let decided: Option<String> =
                    sqlx::query_scalar($crate::backend::sql!($dir, "approvals/decide"))
                        .bind(decision.run_id)
                        .bind($crate::text::Text(decision.call_id))
                        .bind(decision.status.as_str())
                        .bind($crate::text::Text::opt(decision.reason))
                        .bind(decision.now)
                        .bind(decision.by.map($crate::text::Text))
                        .fetch_optional(c)
                        .await?;
                Ok(decided.is_some())
            }

            async fn resume_now(
                c: &mut $crate::backend::Conn<Self>,
                run_id: &str,
                now: i64,
            ) -> $crate::Result<Vec<i64>> {
                Ok(
                    sqlx::query_scalar($crate::backend::sql!($dir, "approvals/resume_now"))
                        .bind(run_id)
                        .bind(now)
                        .fetch_all(c)
                        .await?,
                )
            }

            async fn expire_approval(
                c: &mut $crate::backend::Conn<Self>,
                run_id: &str,
                call_id: &str,
                now: i64,
            ) -> $crate::Result<bool> {
                let expired: Option<String> =
                    sqlx::query_scalar($crate::backend::sql!($dir, "approvals/expire"))
                        .bind(run_id)
                        .bind($crate::text::Text(call_id))
                        .bind(now)
                        .fetch_optional(c)
                        .await?;
                Ok(expired.is_some())
            }
        }
    };
}
pub(crate) use approval_statements;

/// The lock that serialises deciding a run's approval with parking the run for it.
fn approval_lock(run_id: &str) -> String {
    format!("approval:{run_id}")
}

/// Decides a pending approval and makes the run's armed resume job due now, under the run's
/// approval lock; whether this call decided it (nothing changes when it did not).
async fn decide<B: ApprovalStatements + AuditStatements>(
    b: &B,
    decision: Decision<'_>,
    audit: Option<&NewAudit<'_>>,
) -> Result<bool> {
    let mut tx = b.begin().await?;
    B::lock_key(&mut tx, &approval_lock(decision.run_id)).await?;
    if !B::decide_approval(&mut tx, decision).await? {
        B::rollback(tx).await?;
        return Ok(false);
    }
    B::resume_now(&mut tx, decision.run_id, decision.now).await?;
    record_in::<B>(&mut tx, audit, decision.now).await?;
    B::commit(tx).await?;
    Ok(true)
}

/// Why a decision changed nothing, from what the run and its approval are now (`run`:
/// the run's status, `approval`: the call's approval's, `None` when there is none).
fn refusal(
    run_id: &str,
    call_id: &str,
    run: Option<RunStatus>,
    approval: Option<ApprovalStatus>,
) -> Error {
    if let Some(status) = run.filter(|s| s.is_terminal()) {
        return Error::Conflict(format!(
            "run {run_id} already finished as {status}; there is nothing to decide"
        ));
    }
    match approval {
        None => Error::NotFound {
            what: "approval",
            id: format!("{run_id}/{call_id}"),
        },
        Some(ApprovalStatus::Pending) => Error::Conflict(format!(
            "the approval of call {call_id} of run {run_id} timed out; the call is denied"
        )),
        Some(status) => Error::Conflict(format!(
            "call {call_id} of run {run_id} was already {status}; a decision is made once"
        )),
    }
}

async fn request<B: ApprovalStatements>(b: &B, new: &NewApproval<'_>, now: Millis) -> Result<()> {
    B::request_approval(&mut *b.writer().await?, new, now).await
}

async fn get<B: ApprovalStatements>(
    b: &B,
    run_id: &str,
    call_id: &str,
) -> Result<Option<Approval>> {
    B::get_approval(&mut *b.writer().await?, run_id, call_id).await
}

async fn pending<B: ApprovalStatements>(b: &B, limit: i64) -> Result<Vec<Approval>> {
    B::pending_approvals(&mut *b.reader().await?, limit).await
}

async fn expire<B: ApprovalStatements>(
    b: &B,
    run_id: &str,
    call_id: &str,
    now: Millis,
) -> Result<bool> {
    B::expire_approval(&mut *b.writer().await?, run_id, call_id, now).await
}

impl Store {
    /// Records that a call waits for a decision (idempotent).
    pub async fn request_approval(&self, new: &NewApproval<'_>) -> Result<()> {
        let now = self.now();
        dispatch!(self, b => request(b, new, now))
    }

    /// The approval of one call.
    pub async fn approval(&self, run_id: &str, call_id: &str) -> Result<Option<Approval>> {
        dispatch!(self, b => get(b, run_id, call_id))
    }

    /// Pending approvals, oldest first.
    pub async fn pending_approvals(&self, limit: i64) -> Result<Vec<Approval>> {
        dispatch!(self, b => pending(b, limit.clamp(1, 10_000)))
    }

    /// Approves or denies a pending call; the run resumes on any worker. A call decided
    /// before, expired, or unknown is an error that changes nothing. Who decided is not
    /// recorded: operators decide through [`Store::as_operator`].
    pub async fn decide_approval(
        &self,
        run_id: &str,
        call_id: &str,
        approve: bool,
        reason: Option<&str>,
    ) -> Result<()> {
        self.decide(run_id, call_id, approve, reason, None).await
    }

    /// [`Store::decide_approval`] by `audit.actor`, recorded on the approval and, in the same
    /// transaction, in the audit trail (`audit`, when given).
    pub(crate) async fn decide(
        &self,
        run_id: &str,
        call_id: &str,
        approve: bool,
        reason: Option<&str>,
        audit: Option<&NewAudit<'_>>,
    ) -> Result<()> {
        let by = audit.map(|a| a.actor);
        let decision = Decision {
            run_id,
            call_id,
            status: ApprovalStatus::decided(approve),
            reason,
            now: self.now(),
            by,
        };
        if dispatch!(self, b => decide(b, decision, audit))? {
            self.wake();
            return Ok(());
        }
        let run = self.run(run_id).await?.map(|r| r.status);
        let approval = match self.approval(run_id, call_id).await? {
            Some(a) => Some(a.status),
            None => None,
        };
        Err(refusal(run_id, call_id, run, approval))
    }

    /// Expires a pending approval past its timeout; true when this call expired it.
    pub async fn expire_approval(&self, run_id: &str, call_id: &str) -> Result<bool> {
        let now = self.now();
        dispatch!(self, b => expire(b, run_id, call_id, now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_finished_run_is_the_reason_whatever_its_approval_says() {
        let e = refusal(
            "r",
            "c",
            Some(RunStatus::Cancelled),
            Some(ApprovalStatus::Pending),
        );
        assert!(matches!(&e, Error::Conflict(m) if m.contains("already finished as cancelled")));
    }

    #[test]
    fn an_unknown_call_is_not_found() {
        let e = refusal("r", "c", Some(RunStatus::AwaitingApproval), None);
        assert!(matches!(e, Error::NotFound { what: "approval", id } if id == "r/c"));
        assert!(matches!(
            refusal("r", "c", None, None),
            Error::NotFound { .. }
        ));
    }

    #[test]
    fn a_pending_approval_that_refused_a_decision_has_timed_out() {
        let e = refusal(
            "r",
            "c",
            Some(RunStatus::AwaitingApproval),
            Some(ApprovalStatus::Pending),
        );
        assert!(matches!(&e, Error::Conflict(m) if m.contains("timed out")));
    }

    #[test]
    fn a_decided_approval_names_its_decision() {
        for status in [
            ApprovalStatus::Approved,
            ApprovalStatus::Denied,
            ApprovalStatus::Expired,
        ] {
            let e = refusal("r", "c", Some(RunStatus::Queued), Some(status));
            assert!(
                matches!(&e, Error::Conflict(m) if m.contains(&format!("was already {status}"))),
                "{e}"
            );
        }
    }

    #[test]
    fn statuses_round_trip_through_their_stored_names() {
        for status in [
            ApprovalStatus::Pending,
            ApprovalStatus::Approved,
            ApprovalStatus::Denied,
            ApprovalStatus::Expired,
        ] {
            assert_eq!(status.as_str().parse::<ApprovalStatus>(), Ok(status));
        }
        assert!("maybe".parse::<ApprovalStatus>().is_err());
        assert_eq!(ApprovalStatus::decided(true), ApprovalStatus::Approved);
        assert_eq!(ApprovalStatus::decided(false), ApprovalStatus::Denied);
    }
}
