//! Deliveries of one group batch taken together: three statements for the whole batch
//! (claim all, enqueue all, finish all) instead of three per delivery, in three round trips
//! to the connection's thread with the transaction's `BEGIN` sent beside the claim and its
//! `COMMIT` beside the finish.
//!
//! Under load a SQLite statement costs more in waiting for its connection's thread to be
//! scheduled than in the work itself (`bench/MEASUREMENTS.md`, "Webhook intake: where the
//! time goes"), so a batch of deliveries wakes that thread three times instead of three times
//! per delivery, plus twice for `BEGIN` and `COMMIT`. PostgreSQL takes each delivery in a
//! transaction of its own (`group.rs`) and has no such statements.
//!
//! What it guarantees: exactly what taking each delivery in turn with `intake::take_in`
//! would, in one transaction. It takes only batches where that is plain to see — every
//! delivery starts a run that decides nothing (`queue::decides_nothing`) and no two are the
//! same delivery — and answers `None` for any other batch before writing anything, so the
//! caller takes them one by one. A delivery that turns out to be done before
//! is answered from its row; a run whose idempotency key was taken (by an earlier run, or an
//! earlier one of the batch) is answered as that run's duplicate. The transaction holds the
//! store's write lock from its `BEGIN IMMEDIATE` to its `COMMIT`, so a delivery claimed in it
//! is still `claimed` at its finish (the race a copy can win in `take_in`, between two
//! transactions side by side, cannot happen here); were one not, the batch is committed and
//! answered with `Error::Corrupt`, and each delivery's retry alone answers from its row.

use std::collections::{HashMap, HashSet};
use std::future::Future;

use crate::backend::{Backend, Conn};
use crate::model::Enqueued;
use crate::queue::{self, QueuePaths, RunRow};
use crate::webhooks::take::{DeliveryTaken, DeliveryWork, Taking};
use crate::webhooks::{WebhookDelivery, WebhookDeliveryStatus, WebhookStatements};
use crate::{Error, Result};

/// The statements of a batch taken together (SQLite: `webhooks/claim_many.sql`,
/// `enqueue_plain_in.sql`, `webhooks/finish_many.sql`), each one round trip with the
/// transaction's `BEGIN` or `COMMIT` beside it: a capability a backend has or has not
/// ([`TakeTogether::together`]), never a method that answers "not here".
pub(crate) trait BatchIntake<B: Backend>: Sync {
    /// Begins a transaction that holds the store's write lock until it ends, and claims every
    /// delivery of `takings` (all different) in it; every row, in any order.
    fn begin_claiming_many(
        &self,
        takings: &[&Taking],
    ) -> impl Future<Output = Result<(B::Tx, Vec<WebhookDelivery>)>> + Send;

    /// Enqueues `rows` (runs that decide nothing), in order: the start job of each run
    /// inserted, by run id; a run missing lost its idempotency key.
    fn enqueue_plain_in(
        &self,
        c: &mut Conn<B>,
        rows: &[RunRow<'_>],
    ) -> impl Future<Output = Result<HashMap<String, i64>>> + Send;

    /// Marks each `(taking, runs)` done with its record, and commits `tx`; the
    /// `(hook, delivery_id)` of those that were still `claimed`.
    fn finish_many_and_commit(
        &self,
        tx: B::Tx,
        done: &[(&Taking, String)],
    ) -> impl Future<Output = Result<HashSet<(String, String)>>> + Send;
}

/// Whether a backend takes a group batch of deliveries together, and with what.
pub(crate) trait TakeTogether: QueuePaths + WebhookStatements {
    /// Its batch statements ([`NoBatchIntake`] when it has none).
    type Together: BatchIntake<Self>;

    /// Its batch statements, when it has them.
    fn together(&self) -> Option<&Self::Together>;
}

/// The batch statements of a backend that has none (PostgreSQL takes each delivery in a
/// transaction of its own): a type with no value, so none of them can ever be called.
#[derive(Debug)]
pub(crate) enum NoBatchIntake {}

impl<B: Backend> BatchIntake<B> for NoBatchIntake {
    async fn begin_claiming_many(
        &self,
        _takings: &[&Taking],
    ) -> Result<(B::Tx, Vec<WebhookDelivery>)> {
        match *self {}
    }

    async fn enqueue_plain_in(
        &self,
        _c: &mut Conn<B>,
        _rows: &[RunRow<'_>],
    ) -> Result<HashMap<String, i64>> {
        match *self {}
    }

    async fn finish_many_and_commit(
        &self,
        _tx: B::Tx,
        _done: &[(&Taking, String)],
    ) -> Result<HashSet<(String, String)>> {
        match *self {}
    }
}

/// Whether `takings` can be taken together (see the module doc).
fn can_take_together(takings: &[&Taking]) -> bool {
    let mut seen = HashSet::new();
    takings.iter().all(|t| {
        let DeliveryWork::Start(new) = &t.work else {
            return false;
        };
        queue::decides_nothing(new) && seen.insert((t.hook.as_str(), t.delivery_id.as_str()))
    })
}

/// Takes `takings` together, in a transaction of their own that it commits; `None` (nothing
/// written) when the backend cannot or the batch is not one it takes (see the module doc).
pub(crate) async fn take_together<B: TakeTogether>(
    backend: &B,
    takings: &[&Taking],
) -> Result<Option<Vec<DeliveryTaken>>> {
    let Some(together) = backend.together() else {
        return Ok(None);
    };
    if !can_take_together(takings) {
        return Ok(None);
    }
    let (mut tx, claimed) = together.begin_claiming_many(takings).await?;
    let mut rows: HashMap<(String, String), WebhookDelivery> = claimed
        .into_iter()
        .map(|row| ((row.hook.clone(), row.delivery_id.clone()), row))
        .collect();
    let mut answers: Vec<Option<DeliveryTaken>> = Vec::with_capacity(takings.len());
    let mut to_start = Vec::new();
    for (i, t) in takings.iter().enumerate() {
        let key = (t.hook.clone(), t.delivery_id.clone());
        let row = rows.remove(&key).ok_or_else(|| {
            Error::Corrupt(format!(
                "webhook delivery {}/{} was not claimed",
                key.0, key.1
            ))
        })?;
        if row.status == WebhookDeliveryStatus::Done {
            answers.push(Some(DeliveryTaken::Done(row)));
            continue;
        }
        answers.push(None);
        if let DeliveryWork::Start(new) = &t.work {
            to_start.push((
                i,
                RunRow {
                    id: &t.run_id,
                    new,
                    notify: t.notify,
                    now: t.now,
                },
            ));
        }
    }
    let runs: Vec<RunRow<'_>> = to_start.iter().map(|(_, row)| *row).collect();
    let jobs = if runs.is_empty() {
        HashMap::new()
    } else {
        together.enqueue_plain_in(&mut tx, &runs).await?
    };
    let mut done = Vec::with_capacity(to_start.len());
    for (i, row) in &to_start {
        let enqueued = match jobs.get(row.id) {
            Some(&job_id) => Enqueued::created(row.id, job_id, Vec::new()),
            None => queue::duplicate_run::<B>(&mut tx, row.new).await?,
        };
        let taking = takings[*i];
        done.push((taking, crate::webhooks::take::record(taking, &enqueued)?));
        answers[*i] = Some(DeliveryTaken::Enqueued(enqueued));
    }
    if done.is_empty() {
        B::commit(tx).await?;
    } else {
        // Every row of `done` was claimed in this transaction, which has held the store's
        // write lock since it began, so each is still `claimed` at its finish (module doc).
        let finished = together.finish_many_and_commit(tx, &done).await?;
        if finished.len() != done.len() {
            return Err(Error::Corrupt(format!(
                "{} of {} deliveries taken together were not claimed any more at their finish",
                done.len() - finished.len(),
                done.len()
            )));
        }
    }
    Ok(Some(answers.into_iter().flatten().collect()))
}

/// One entry of `webhooks/finish_many.sql`'s list.
pub(crate) fn finish_entry(taking: &Taking, runs: &str) -> serde_json::Value {
    serde_json::json!([taking.hook, taking.delivery_id, runs, taking.now])
}

/// One entry of `webhooks/claim_many.sql`'s list.
pub(crate) fn claim_entry(taking: &Taking) -> serde_json::Value {
    serde_json::json!([taking.hook, taking.delivery_id, taking.event, taking.now])
}

/// One entry of `enqueue_plain_in.sql`'s list.
pub(crate) fn run_entry(row: &RunRow<'_>) -> serde_json::Value {
    let new = row.new;
    serde_json::json!([
        row.id,
        new.agent,
        new.trigger.as_str(),
        new.input,
        new.idempotency_key,
        row.now,
        new.job.lane,
        new.job.priority,
        new.job.run_at.unwrap_or(row.now),
        new.job.max_attempts,
        row.notify,
        new.trace_parent,
        new.context,
        new.concurrency_key,
    ])
}

#[cfg(test)]
#[path = "together_tests.rs"]
mod tests;
