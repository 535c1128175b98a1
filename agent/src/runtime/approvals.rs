//! The loop's side of approvals: a call that needs a human's decision is recorded once (with
//! its input hash) and parks the run as `awaiting_approval`; the decision, read back from the
//! store when the run resumes, is logged once as `approval_decided` (a timeout counts as a
//! denial) and then applies to exactly that call.

use nightshift_store::{ApprovalStatus, ResumeReason};
use nightshift_worker::JobOutcome;

use super::{Session, Stop};
use crate::approval;
use crate::events::RunEvent;

impl Session<'_> {
    /// Records that `call` waits for approval (once) and returns when it times out.
    pub(super) async fn request_approval(
        &mut self,
        call: &crate::state::PendingCall,
    ) -> Result<i64, Stop> {
        if let Some(a) = &self.state.awaiting_approval
            && a.call_id == call.call_id
        {
            return Ok(a.expires_at);
        }
        let store = self.ctx.lease.store();
        let timeout_ms =
            i64::try_from(self.agent.config.approvals.timeout_seconds * 1000).unwrap_or(i64::MAX);
        // The call's input comes from redacted events; redacted again as it is stored apart.
        let input = self.redactor.redact(&call.input.to_string());
        let hash = approval::input_hash(&call.input);
        store
            .request_approval(&nightshift_store::NewApproval {
                run_id: &self.run_id,
                call_id: &call.call_id,
                tool: &call.name,
                input: &input,
                input_hash: &hash,
                expires_at: store.now().saturating_add(timeout_ms),
            })
            .await?;
        // The row decides the expiry (a crash may have written it before this attempt).
        let row = store
            .approval(&self.run_id, &call.call_id)
            .await?
            .ok_or_else(|| Stop::Corrupt(format!("run {}: approval row vanished", self.run_id)))?;
        self.log(RunEvent::ApprovalRequested {
            call_id: call.call_id.clone(),
            name: call.name.clone(),
            input_hash: hash,
            expires_at: row.expires_at,
        })
        .await?;
        Ok(row.expires_at)
    }

    /// Parks the run until the call is decided or times out.
    pub(super) async fn await_approval(
        &mut self,
        call_id: String,
        until: i64,
    ) -> Result<JobOutcome, Stop> {
        self.checkpoint().await?;
        Ok(JobOutcome::AwaitApproval {
            payload: ResumeReason::Approval {
                call_id: call_id.clone(),
            }
            .to_payload(),
            call_id,
            until,
        })
    }

    /// When a call awaits approval and its row is decided (or past its timeout), logs the
    /// decision once, bound to the call's exact input.
    pub(super) async fn apply_decision(&mut self) -> Result<(), Stop> {
        let Some(waiting) = self.state.awaiting_approval.clone() else {
            return Ok(());
        };
        let store = self.ctx.lease.store();
        let Some(mut row) = store.approval(&self.run_id, &waiting.call_id).await? else {
            return Ok(());
        };
        let mut timed_out = false;
        if row.status == ApprovalStatus::Pending && store.now() >= row.expires_at {
            store
                .expire_approval(&self.run_id, &waiting.call_id)
                .await?;
            timed_out = true;
            row = store
                .approval(&self.run_id, &waiting.call_id)
                .await?
                .unwrap_or(row);
        }
        if row.status == ApprovalStatus::Pending {
            return Ok(());
        }
        let by = if timed_out || row.status == ApprovalStatus::Expired {
            "timeout".to_string()
        } else {
            // Who decided, as the audit trail names them (`token:…`, `dashboard:…`, `cli:…`).
            row.decided_by
                .clone()
                .unwrap_or_else(|| "operator".to_string())
        };
        let input = self
            .state
            .pending
            .iter()
            .find(|c| c.call_id == waiting.call_id)
            .map(|c| approval::input_hash(&c.input));
        let (approved, reason) = if input.as_deref() != Some(row.input_hash.as_str()) {
            (
                false,
                Some("the decision was made for a different input of this call".to_string()),
            )
        } else {
            (row.status == ApprovalStatus::Approved, row.reason)
        };
        self.log(RunEvent::ApprovalDecided {
            call_id: waiting.call_id,
            approved,
            reason,
            by,
        })
        .await
    }
}
