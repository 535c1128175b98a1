//! Webhook intake in one commit: claiming a delivery, enqueueing what it starts or resumes,
//! and recording that on the delivery's row, all in one transaction
//! ([`Store::take_webhook_delivery`]).
//!
//! What it guarantees (on top of `webhooks.rs`):
//! - **All or nothing.** A delivery is either recorded `done` together with the run or resume
//!   it enqueued, or not recorded at all: a refused enqueue (a finished run, a busy one, a bad
//!   option) or any failure leaves no row and no job, so a retry of the delivery starts
//!   afresh. A crash can no longer leave a delivery `claimed`.
//! - **Copies wait for each other.** Two copies of one delivery arriving at once meet at the
//!   claim (`INSERT … ON CONFLICT` locks the row): the second proceeds once the first
//!   committed, sees it `done` and answers with its record, counted as an arrival.
//! - **Shared commits.** On SQLite, deliveries taken at the same time share one transaction
//!   and its commit (`group.rs`; their writer runs on a thread of its own), a batch of plain
//!   starts in three statements (`webhooks/together.rs`); a batch in which one delivery is
//!   refused is written again item by item, so one delivery's refusal never undoes
//!   another's. On PostgreSQL each delivery is a transaction of its own, side by side.

use crate::Result;
use crate::backend::Conn;
use crate::clock::Millis;
use crate::group::Via;
use crate::model::{Enqueued, NewResume, NewRun};
use crate::queue::{self, QueuePaths, RunRow};
use crate::webhooks::{Arrival, WebhookDelivery, WebhookDeliveryStatus, WebhookStatements};

/// What a webhook delivery enqueues.
#[derive(Debug, Clone, PartialEq)]
pub enum DeliveryWork {
    /// A new run.
    Start(NewRun),
    /// A resume job for a run found before (by its concurrency key).
    Resume(NewResume),
    /// Cancels every unfinished run whose concurrency key is this one (none: nothing).
    Cancel { key: String },
}

impl DeliveryWork {
    /// What the work does, as its record names it: `start`, `resume` or `cancel`.
    pub fn kind(&self) -> &'static str {
        match self {
            DeliveryWork::Start(_) => "start",
            DeliveryWork::Resume(_) => "resume",
            DeliveryWork::Cancel { .. } => "cancel",
        }
    }
}

/// One run a webhook delivery made or found: what its row records (the `runs` column, a JSON
/// list of these) and what the intake answers the delivery and its redeliveries with.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeliveryRun {
    /// The route that took the delivery.
    pub route: String,
    /// `start`, `resume` or `cancel` ([`DeliveryWork::kind`]).
    pub kind: String,
    pub run_id: String,
    /// The run's start or resume job (0 for a cancelled run).
    pub job_id: i64,
    /// The idempotency key was used before: these are the existing ids.
    pub duplicate: bool,
    /// The `skip` policy dropped the new run: `run_id` is the run holding the key.
    pub skipped: bool,
    /// Runs this delivery ended as superseded.
    #[serde(default)]
    pub superseded: Vec<String>,
}

/// The runs a delivery of `route` whose work was of `kind` ([`DeliveryWork::kind`]) made:
/// the one it enqueued, or, for a cancel, one entry per run it cancelled (none when none was
/// unfinished).
pub fn delivery_runs(route: &str, kind: &str, enqueued: &Enqueued) -> Vec<DeliveryRun> {
    if kind != "cancel" {
        return vec![DeliveryRun {
            route: route.to_string(),
            kind: kind.to_string(),
            run_id: enqueued.run_id.clone(),
            job_id: enqueued.job_id,
            duplicate: enqueued.duplicate,
            skipped: enqueued.skipped,
            superseded: enqueued.superseded.clone(),
        }];
    }
    enqueued
        .cancelled
        .iter()
        .map(|run_id| DeliveryRun {
            route: route.to_string(),
            kind: kind.to_string(),
            run_id: run_id.clone(),
            job_id: 0,
            duplicate: false,
            skipped: false,
            superseded: Vec::new(),
        })
        .collect()
}

/// The record `taking`'s row keeps once its work was enqueued as `enqueued`.
pub(crate) fn record(taking: &Taking, enqueued: &Enqueued) -> Result<String> {
    let runs = delivery_runs(&taking.route, taking.work.kind(), enqueued);
    serde_json::to_string(&runs)
        .map_err(|e| crate::Error::Corrupt(format!("a delivery's record: {e}")))
}

/// The answer of [`Store::take_webhook_delivery`](crate::Store::take_webhook_delivery).
#[derive(Debug, Clone, PartialEq)]
pub enum DeliveryTaken {
    /// The delivery was done before (a redelivery, or a copy that finished first): this
    /// arrival was counted and nothing was enqueued. The row, with its record.
    Done(WebhookDelivery),
    /// Its work was enqueued and recorded on its row, in this call's commit.
    Enqueued(Enqueued),
}

/// One delivery to take, with the run id its start would get.
#[derive(Clone)]
pub(crate) struct Taking {
    pub hook: String,
    pub delivery_id: String,
    pub event: String,
    pub work: DeliveryWork,
    /// The id of the run a `Start` creates.
    pub run_id: String,
    /// Whether a run it starts notifies (see `Store::set_notifying_agents`).
    pub notify: bool,
    /// The route that took it, named in its record.
    pub route: String,
    pub now: Millis,
}

impl std::fmt::Debug for Taking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Taking")
            .field("hook", &self.hook)
            .field("delivery_id", &self.delivery_id)
            .field("work", &self.work)
            .finish_non_exhaustive()
    }
}

/// Takes one delivery in `tx`. Returns what it did, and whether the transaction may keep
/// what it wrote (`false`: a copy finished first, and this call's enqueue must be rolled
/// back). On an error the caller rolls back.
pub(crate) async fn take_in<B: QueuePaths + WebhookStatements>(
    tx: &mut Conn<B>,
    taking: &Taking,
) -> Result<(DeliveryTaken, bool)> {
    let arrival = Arrival {
        hook: &taking.hook,
        delivery_id: &taking.delivery_id,
        event: &taking.event,
        now: taking.now,
    };
    let claimed = B::claim_webhook_delivery(tx, arrival).await?;
    if claimed.status == WebhookDeliveryStatus::Done {
        return Ok((DeliveryTaken::Done(claimed), true));
    }
    let enqueued = match &taking.work {
        DeliveryWork::Start(new) => {
            let row = RunRow {
                id: &taking.run_id,
                new,
                notify: taking.notify,
                now: taking.now,
            };
            queue::enqueue_in::<B>(tx, row).await?
        }
        DeliveryWork::Resume(new) => queue::resume_in::<B>(tx, new, taking.now).await?,
        DeliveryWork::Cancel { key } => queue::cancel_key_in::<B>(tx, key, taking.now).await?,
    };
    let record = record(taking, &enqueued)?;
    let hook = &taking.hook;
    let id = &taking.delivery_id;
    if B::finish_webhook_delivery(tx, hook, id, &record, taking.now).await? {
        return Ok((DeliveryTaken::Enqueued(enqueued), true));
    }
    // Only a row claimed by an older version that crashed can be done here without us.
    match B::get_webhook_delivery(tx, hook, id).await? {
        Some(row) => Ok((DeliveryTaken::Done(row), false)),
        None => Err(crate::Error::Corrupt(format!(
            "webhook delivery {hook}/{id} vanished while it was taken"
        ))),
    }
}

/// Takes one delivery in a transaction of its own (a group commit's lone delivery, and every
/// delivery on PostgreSQL).
pub(crate) async fn take<B: QueuePaths + WebhookStatements>(
    b: &B,
    taking: &Taking,
) -> Result<DeliveryTaken> {
    let mut tx = b.begin().await?;
    match take_in::<B>(&mut tx, taking).await {
        Ok((taken, true)) => {
            B::commit(tx).await?;
            Ok(taken)
        }
        Ok((taken, false)) => {
            B::rollback(tx).await?;
            Ok(taken)
        }
        Err(e) => {
            B::rollback(tx).await?;
            Err(e)
        }
    }
}

impl crate::Store {
    /// Takes webhook delivery `(hook, delivery_id)` in one transaction: claims it, enqueues
    /// `work` and records the runs it made for `route` on its row ([`DeliveryRun`]s; see the
    /// module doc). When the
    /// delivery was done before, counts this arrival and returns its row, enqueueing
    /// nothing. An enqueue refused (a finished or busy run, a bad option) returns its error
    /// and leaves nothing behind. Deliveries and enqueues made at the same time share
    /// commits (`group.rs`).
    pub async fn take_webhook_delivery(
        &self,
        hook: &str,
        delivery_id: &str,
        event: &str,
        work: DeliveryWork,
        route: &str,
    ) -> Result<DeliveryTaken> {
        crate::webhooks::check_ids(hook, delivery_id)?;
        let notify = match &work {
            DeliveryWork::Start(new) => {
                crate::enqueue::check_new_run(new)?;
                self.notifies(&new.agent)
            }
            DeliveryWork::Resume(new) => {
                crate::enqueue::validate_job_options(&new.job)?;
                false
            }
            DeliveryWork::Cancel { key } => {
                if key.is_empty() || key.len() > 255 {
                    return Err(crate::Error::Invalid(
                        "the key of the runs to cancel must be 1-255 bytes".into(),
                    ));
                }
                false
            }
        };
        let taking = Taking {
            hook: hook.to_string(),
            delivery_id: delivery_id.to_string(),
            event: event.to_string(),
            work,
            run_id: uuid::Uuid::now_v7().to_string(),
            notify,
            route: route.to_string(),
            now: self.now(),
        };
        let group = self.delivery_group();
        let taken = match group.writer(group.takes_deliveries()) {
            Via::Group => group.intake(taking).await,
            Via::Caller(_lone) => {
                self.inner
                    .writes
                    .took(crate::writes::WritePath::DeliveryAlone);
                crate::store::dispatch!(self, b => take(b, &taking))
            }
        }?;
        if let DeliveryTaken::Enqueued(e) = &taken {
            if !e.duplicate && !e.skipped {
                self.wake();
            }
            self.tell_ended(&e.superseded_idle).await;
            self.tell_ended(&e.cancelled_idle).await;
        }
        Ok(taken)
    }
}
