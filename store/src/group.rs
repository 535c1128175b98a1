//! Group commit of enqueues and webhook deliveries: writes made at the same time share one
//! transaction and one commit, on both backends.
//!
//! Every commit waits for the disk (SQLite with `synchronous=FULL`; PostgreSQL's WAL flush),
//! and SQLite commits one transaction at a time, so an enqueue that commits alone costs one
//! flush: producers together could never enqueue faster than the commit rate, and a pool
//! settling the same jobs competes for the same flushes. Here every single enqueue and
//! webhook delivery is handed to one task per store, which takes all the writes waiting at
//! that moment and writes them in one transaction (runs alone: the same code as
//! [`Store::enqueue_many`](crate::Store::enqueue_many), on PostgreSQL one statement), then
//! answers each. Nothing waits for a batch to fill: a lone enqueue goes at once, and writes
//! that arrive while a commit is under way form the next batch.
//!
//! What it guarantees:
//! - **Each answer is its own.** A run is answered `Ok` only once the transaction holding it
//!   committed. When a batch fails, each of its items is written again alone, so one item's
//!   failure (or a failing commit) never becomes another item's error; each gets the error
//!   its own write met.
//! - **Same semantics as alone.** Runs in one batch are enqueued in arrival order, each as it
//!   would be alone (idempotency keys and concurrency-key policies see the earlier ones).
//! - **A dropped caller changes nothing else.** An enqueue whose caller went away is still
//!   written (as an enqueue dropped after its statement was sent always could be).

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::clock::Millis;
use crate::intake::{self, DeliveryTaken, Taking};
use crate::model::{Enqueued, NewRun};
use crate::queue::{self, QueuePaths, RunRow, Savepoint};
use crate::webhooks::WebhookStatements;
use crate::{Error, Result};

/// The most writes one transaction takes; more wait for the next.
const MAX_BATCH: usize = 256;

/// One enqueue of a run waiting for its batch.
struct RunItem {
    run_id: String,
    new: NewRun,
    notify: bool,
    now: Millis,
}

impl RunItem {
    fn row(&self) -> RunRow<'_> {
        RunRow {
            id: &self.run_id,
            new: &self.new,
            notify: self.notify,
            now: self.now,
        }
    }
}

/// A write waiting for its batch, and where its answer goes.
enum Pending {
    Run(Box<RunItem>, oneshot::Sender<Result<Enqueued>>),
    Delivery(Box<Taking>, oneshot::Sender<Result<DeliveryTaken>>),
}

/// What one write of a batch came to.
enum Outcome {
    Run(Result<Enqueued>),
    Delivery(Result<DeliveryTaken>),
}

impl Pending {
    fn answer(self, outcome: Outcome) {
        match (self, outcome) {
            (Pending::Run(_, reply), Outcome::Run(r)) => {
                let _ = reply.send(r);
            }
            (Pending::Delivery(_, reply), Outcome::Delivery(r)) => {
                let _ = reply.send(r);
            }
            (Pending::Run(_, reply), Outcome::Delivery(_)) => {
                let _ = reply.send(Err(mismatch()));
            }
            (Pending::Delivery(_, reply), Outcome::Run(_)) => {
                let _ = reply.send(Err(mismatch()));
            }
        }
    }
}

fn mismatch() -> Error {
    Error::Corrupt("a group commit answered a write with another's outcome".into())
}

/// The group-commit task of one SQLite store.
#[derive(Debug)]
pub(crate) struct Group {
    tx: mpsc::UnboundedSender<Pending>,
    task: JoinHandle<()>,
}

impl Group {
    /// Starts the task writing through `backend`.
    pub(crate) fn start<B: QueuePaths + WebhookStatements + Clone>(backend: B) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(write_batches(backend, rx));
        Self { tx, task }
    }

    /// Enqueues run `run_id` in the next batch; returns once that batch committed.
    pub(crate) async fn enqueue(
        &self,
        run_id: String,
        new: &NewRun,
        notify: bool,
        now: Millis,
    ) -> Result<Enqueued> {
        let (reply, answer) = oneshot::channel();
        let item = RunItem {
            run_id,
            new: new.clone(),
            notify,
            now,
        };
        self.tx
            .send(Pending::Run(Box::new(item), reply))
            .map_err(|_| closed())?;
        answer.await.map_err(|_| closed())?
    }

    /// Takes a webhook delivery in the next batch (see `intake.rs`).
    pub(crate) async fn intake(&self, taking: Taking) -> Result<DeliveryTaken> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Pending::Delivery(Box::new(taking), reply))
            .map_err(|_| closed())?;
        answer.await.map_err(|_| closed())?
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn closed() -> Error {
    Error::Database(sqlx::Error::PoolClosed)
}

async fn write_batches<B: QueuePaths + WebhookStatements>(
    backend: B,
    mut rx: mpsc::UnboundedReceiver<Pending>,
) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while rx.recv_many(&mut batch, MAX_BATCH).await > 0 {
        let outcomes = match write(&backend, &batch).await {
            Ok(outcomes) => outcomes,
            Err(e) if batch.len() == 1 => vec![failed(&batch[0], e)],
            Err(e) => {
                tracing::debug!(error = %e, items = batch.len(), "a group commit failed; writing each alone");
                let mut outcomes = Vec::with_capacity(batch.len());
                for one in batch.chunks(1) {
                    outcomes.push(match write(&backend, one).await {
                        Ok(mut o) => o.pop().unwrap_or_else(|| failed(&one[0], mismatch())),
                        Err(e) => failed(&one[0], e),
                    });
                }
                outcomes
            }
        };
        for (pending, outcome) in batch.drain(..).zip(outcomes) {
            pending.answer(outcome);
        }
    }
}

fn failed(pending: &Pending, e: Error) -> Outcome {
    match pending {
        Pending::Run(..) => Outcome::Run(Err(e)),
        Pending::Delivery(..) => Outcome::Delivery(Err(e)),
    }
}

/// Writes `batch` in one transaction, in order. A delivery is taken in a savepoint of its
/// own, so its refusal (or a copy found done) undoes only it; any other error fails the
/// whole batch, and nothing of it is committed.
async fn write<B: QueuePaths + WebhookStatements>(
    backend: &B,
    batch: &[Pending],
) -> Result<Vec<Outcome>> {
    let runs: Vec<RunRow<'_>> = batch
        .iter()
        .filter_map(|p| match p {
            Pending::Run(item, _) => Some(item.row()),
            Pending::Delivery(..) => None,
        })
        .collect();
    if runs.len() == batch.len() {
        // Runs only: `enqueue_runs` (on PostgreSQL one statement when none has a key).
        let done = queue::enqueue_runs(backend, &runs).await?;
        return Ok(done.into_iter().map(|e| Outcome::Run(Ok(e))).collect());
    }
    let mut tx = backend.begin().await?;
    let mut outcomes = Vec::with_capacity(batch.len());
    for pending in batch {
        outcomes.push(match pending {
            Pending::Run(item, _) => {
                Outcome::Run(Ok(queue::enqueue_in::<B>(&mut tx, item.row()).await?))
            }
            Pending::Delivery(taking, _) => {
                B::savepoint(&mut tx, Savepoint::Set).await?;
                let taken = intake::take_in::<B>(&mut tx, taking).await;
                if !matches!(taken, Ok((_, true))) {
                    B::savepoint(&mut tx, Savepoint::RollBack).await?;
                }
                B::savepoint(&mut tx, Savepoint::Release).await?;
                Outcome::Delivery(taken.map(|(t, _)| t))
            }
        });
    }
    B::commit(tx).await?;
    Ok(outcomes)
}
