//! Operator actions, each with its row in the audit trail: [`Store::as_operator`] names who
//! acts (`token:NAME`, `dashboard:NAME`, `cli:USER`), and every action taken through the
//! handle writes its `audit_log` row in the same transaction as the change it records.
//!
//! So the trail and the state never disagree: an action that committed has its row, and a
//! row names an action that committed. A refused action (a finished run cancelled, a run
//! that is not sleeping woken, a schedule name taken) changes nothing and records nothing.
//! After the commit the action is also one log line (`operator action`). The same actions on
//! [`Store`] itself (`Store::cancel_run`, …) are the daemon's own and are not audited.

use crate::Result;
use crate::audit::{NewAudit, log_action};
use crate::model::{CancelOutcome, Enqueued, NewRun};
use crate::schedules::{ScheduleDef, ScheduleRow};
use crate::store::Store;

/// A [`Store`] acting for one operator; see the module documentation.
#[derive(Clone, Copy)]
pub struct AsOperator<'a> {
    store: &'a Store,
    actor: &'a str,
}

impl Store {
    /// This store acting for `actor`: each action on the handle is stored in the audit trail
    /// with it, in the action's own transaction.
    pub fn as_operator<'a>(&'a self, actor: &'a str) -> AsOperator<'a> {
        AsOperator { store: self, actor }
    }
}

impl AsOperator<'_> {
    /// The store it acts on (for reads that go with an action).
    pub fn store(&self) -> &Store {
        self.store
    }

    /// Who acts, as the trail names them.
    pub fn actor(&self) -> &str {
        self.actor
    }

    /// [`Store::cancel_run`], audited as `cancel`.
    pub async fn cancel_run(&self, run_id: &str) -> Result<CancelOutcome> {
        let entry = self.entry("cancel", Some(run_id), run_id, None);
        let outcome = self.store.cancel_run_recorded(run_id, Some(&entry)).await?;
        log_action(&entry);
        Ok(outcome)
    }

    /// [`Store::wake_now`], audited as `wake`.
    pub async fn wake_now(&self, run_id: &str) -> Result<()> {
        let entry = self.entry("wake", Some(run_id), run_id, None);
        self.store.wake_now_recorded(run_id, Some(&entry)).await?;
        log_action(&entry);
        Ok(())
    }

    /// [`Store::decide_approval`], recorded on the approval as decided by this operator and
    /// audited as `approve` or `deny` of `RUN/CALL`, with the reason as the detail.
    pub async fn decide_approval(
        &self,
        run_id: &str,
        call_id: &str,
        approve: bool,
        reason: Option<&str>,
    ) -> Result<()> {
        let target = format!("{run_id}/{call_id}");
        let action = if approve { "approve" } else { "deny" };
        let entry = self.entry(action, Some(run_id), &target, reason);
        self.store
            .decide(run_id, call_id, approve, reason, Some(&entry))
            .await?;
        log_action(&entry);
        Ok(())
    }

    /// [`Store::redeliver`], audited as `redeliver` of the delivery id.
    pub async fn redeliver(&self, delivery_id: &str) -> Result<()> {
        let entry = self.entry("redeliver", None, delivery_id, None);
        self.store
            .redeliver_recorded(delivery_id, Some(&entry))
            .await?;
        log_action(&entry);
        Ok(())
    }

    /// [`Store::create_schedule`], audited as `schedule_create` of its name.
    pub async fn create_schedule(&self, def: &ScheduleDef) -> Result<ScheduleRow> {
        let entry = self.entry("schedule_create", None, &def.name, None);
        let row = self
            .store
            .create_schedule_recorded(def, Some(&entry))
            .await?;
        log_action(&entry);
        Ok(row)
    }

    /// [`Store::update_schedule`], audited as `schedule_update` of its name; `detail` says
    /// what the change set (its keys).
    pub async fn update_schedule(
        &self,
        def: &ScheduleDef,
        rearm: bool,
        detail: Option<&str>,
    ) -> Result<ScheduleRow> {
        let entry = self.entry("schedule_update", None, &def.name, detail);
        let row = self
            .store
            .update_schedule_recorded(def, rearm, Some(&entry))
            .await?;
        log_action(&entry);
        Ok(row)
    }

    /// [`Store::delete_schedule`], audited as `schedule_delete` of its name.
    pub async fn delete_schedule(&self, name: &str) -> Result<()> {
        let entry = self.entry("schedule_delete", None, name, None);
        self.store
            .delete_schedule_recorded(name, Some(&entry))
            .await?;
        log_action(&entry);
        Ok(())
    }

    /// [`Store::enqueue`] as this operator's `action` on `target` (a manual schedule trigger:
    /// `schedule_trigger` of the schedule's name), always in a transaction of its own with its
    /// audit row, which names the run enqueued (detail `enqueued`; a duplicate's existing run
    /// too) or the active run that held it back (`skipped`).
    pub async fn enqueue(&self, new: &NewRun, action: &str, target: &str) -> Result<Enqueued> {
        let enqueued = self
            .store
            .enqueue_recorded(new, self.actor, action, target)
            .await?;
        log_action(&enqueue_entry(self.actor, action, target, &enqueued));
        Ok(enqueued)
    }

    fn entry<'a>(
        &'a self,
        action: &'a str,
        run_id: Option<&'a str>,
        target: &'a str,
        detail: Option<&'a str>,
    ) -> NewAudit<'a> {
        NewAudit {
            actor: self.actor,
            action,
            run_id,
            target,
            detail,
        }
    }
}

/// The audit row of an operator's enqueue (see [`AsOperator::enqueue`]).
pub(crate) fn enqueue_entry<'a>(
    actor: &'a str,
    action: &'a str,
    target: &'a str,
    enqueued: &'a Enqueued,
) -> NewAudit<'a> {
    NewAudit {
        actor,
        action,
        run_id: Some(&enqueued.run_id),
        target,
        detail: Some(if enqueued.skipped {
            "skipped"
        } else {
            "enqueued"
        }),
    }
}
