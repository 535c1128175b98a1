//! Group commit of enqueues and webhook deliveries: writes made at the same time share one
//! transaction and one commit.
//!
//! Every commit waits for the disk (SQLite with `synchronous=FULL`; PostgreSQL's WAL flush),
//! and SQLite commits one transaction at a time, so an enqueue that commits alone costs one
//! flush: producers together could never enqueue faster than the commit rate, and a pool
//! settling the same jobs competes for the same flushes. Here single enqueues (and, on
//! SQLite, webhook deliveries) are handed to the store's group writers, tasks that take turns
//! at the queue of waiting writes: the one whose turn it is takes all the writes waiting at
//! that moment (on the callers' runtime, yielding a few turns of the scheduler first, so
//! producers just woken by the last commit join it), writes them in one transaction (runs
//! alone: the same code as [`Store::enqueue_many`](crate::Store::enqueue_many): one statement
//! when every run decides nothing), then answers each. Nothing waits for a batch to fill or for a timer: a write
//! made while nothing else is being written goes alone, at once, from its caller's task
//! ([`Group::writer`]), and writes that arrive while others are under way form the next batch.
//!
//! Where the writers run: on the runtime that opened the store, except SQLite's writer of
//! webhook deliveries, a group of its own on a thread of its own
//! ([`Group::start_on_own_thread`], which says why).
//!
//! What goes through it ([`Takes`]): on SQLite, everything (one writer, one transaction at a
//! time); on PostgreSQL, runs that decide nothing (no concurrency key, or the `queue` policy:
//! `queue::decides_nothing`), which a batch writes in one statement, with one writer unless
//! the pool is large ([`postgres_writers`]). A run whose policy reads its key's other runs,
//! or a delivery, takes several round trips, and PostgreSQL runs such
//! transactions side by side, so there each is written by its caller in a transaction of its
//! own.
//!
//! What it guarantees:
//! - **Each answer is its own.** A run is answered `Ok` only once the transaction holding it
//!   committed. When a batch fails, each of its items is written again alone, so one item's
//!   failure (or a failing commit) never becomes another item's error; each gets the error
//!   its own write met.
//! - **Same semantics as alone.** Runs in one batch are enqueued in arrival order, each as it
//!   would be alone (idempotency keys and concurrency-key policies see the earlier ones);
//!   batches of different writers meet as concurrent transactions do (the unique index and
//!   the key's lock order them).
//! - **A dropped caller changes nothing else.** An enqueue handed to the writers is still
//!   written when its caller goes away (as an enqueue dropped after its statement was sent
//!   always could be); one written alone by its caller is written whole or not at all.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{Mutex, mpsc, oneshot};
use tokio::task::AbortHandle;

use crate::clock::Millis;
use crate::model::{Enqueued, NewRun};
use crate::queue::{self, RunRow};
use crate::webhooks::take::{self, DeliveryTaken, Taking};
use crate::webhooks::together::{self, TakeTogether};
use crate::writes::{ForcedWrites, WritePath, WriteSeam};
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

/// How many group-commit writers a PostgreSQL store runs with `max_connections`: one per 16
/// connections, from 1 to 4 — one for any pool up to 31 (the default is 10).
///
/// One writer makes each batch as large as the writes waiting when its turn comes, and fewer,
/// larger statements did more with the same server: on the 2-core bench machine (PostgreSQL
/// on the same host), 8 producers enqueued 0.54–0.76× the single-row INSERT ceiling with one
/// writer (five runs), 0.56–0.70× with two, 0.51–0.55× with three (five runs) and 0.43–0.49×
/// with four, and 32 producers did best with one or two (`bench/MEASUREMENTS.md`). A pool of
/// 32 connections or more says the server was sized for more work side by side, so it gets a
/// second writer (not measured here).
pub(crate) fn postgres_writers(max_connections: u32) -> usize {
    (max_connections as usize / 16).clamp(1, 4)
}

/// How many times a writer on its callers' runtime that found few writes waiting yields to
/// the scheduler before it writes them, so producers about to send (woken by the last
/// commit) join this batch instead of paying for a commit of their own right after it.
/// Microseconds, no timer.
const LINGER_TURNS: usize = 4;

/// What a store's group writes; the rest is written by its caller, alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Takes {
    /// Every single enqueue and delivery (SQLite: one writer, so each commit saved is a
    /// commit's wait saved for everyone).
    Everything,
    /// Runs that decide nothing, which a batch writes in one statement (PostgreSQL:
    /// transactions run side by side, so a delivery's or a deciding run's several round trips
    /// go faster in a transaction of their own than queued behind a batch).
    PlainRuns,
}

/// The group-commit writers of one store.
#[derive(Debug)]
pub(crate) struct Group {
    tx: mpsc::UnboundedSender<Pending>,
    takes: Takes,
    tasks: Vec<AbortHandle>,
    /// The writers' own thread, if they have one (it ends once they are aborted).
    #[cfg_attr(not(test), allow(dead_code))]
    thread: Option<std::thread::JoinHandle<()>>,
    /// Writes under way: handed to the writers and not yet answered, or written alone.
    busy: Arc<AtomicUsize>,
    /// The store's write seam: the forced choice of writer, the paths taken.
    seam: Arc<WriteSeam>,
}

/// Who writes a write ([`Group::writer`]).
pub(crate) enum Via<'a> {
    /// The group's writers ([`Group::enqueue`], [`Group::intake`]).
    Group,
    /// The caller, in a transaction of its own; with a [`Lone`] to hold while it writes
    /// when the group would have taken it.
    Caller(Option<Lone<'a>>),
}

/// A write made alone, at once, because nothing else was being written; other writes
/// meanwhile go to the writers.
pub(crate) struct Lone<'a>(&'a AtomicUsize);

impl Drop for Lone<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Group {
    /// Starts `writers` tasks writing through `backend` on the current runtime, beside its
    /// other tasks (PostgreSQL: a connection's I/O is driven by that runtime's reactor, and
    /// waiting for it is what a writer mostly does). They take turns at the queue of waiting
    /// writes: while one commits, the next gathers what arrived meanwhile.
    pub(crate) fn start<B>(backend: B, writers: usize, takes: Takes, seam: Arc<WriteSeam>) -> Self
    where
        B: TakeTogether + Clone + Send + Sync + 'static,
    {
        let (tx, rx, busy) = queue();
        let tasks = (0..writers.max(1))
            .map(|_| {
                let turn = Turn {
                    rx: rx.clone(),
                    busy: busy.clone(),
                    seam: seam.clone(),
                    linger_turns: LINGER_TURNS,
                };
                tokio::spawn(write_batches(backend.clone(), turn)).abort_handle()
            })
            .collect();
        Self {
            tx,
            takes,
            tasks,
            thread: None,
            busy,
            seam,
        }
    }

    /// Starts one writer through `backend` on a thread of its own, with a single-threaded
    /// runtime that runs nothing else; the thread ends with the group. Fails only when the
    /// thread cannot be started. SQLite's webhook deliveries go through such a writer.
    ///
    /// Each SQLite statement is answered from sqlx's connection thread, and a task on a
    /// multi-threaded runtime woken from there runs only once a worker thread is free, after
    /// the poll it is in: with webhook senders verifying and parsing 22 KB bodies in one poll
    /// each, a round trip that costs ~150 µs alone took ~300 µs, three times per batch of
    /// deliveries (a shorter global-queue interval did not help: the polls are long, not the
    /// queue). On a thread of its own the writer runs as soon as an answer comes. It does not
    /// linger (a yield on its own runtime runs nothing, and a webhook sender's next delivery
    /// is a whole request away). Enqueues stay with a writer on the callers' runtime
    /// ([`Group::start`]): their producers send again in the very poll that gets the answer,
    /// so yielding there gathers them, and on the thread batches of runs were smaller and
    /// enqueues with 8 and 32 producers 5–25% slower (`bench/MEASUREMENTS.md`, "Ninth pass").
    pub(crate) fn start_on_own_thread<B>(
        backend: B,
        takes: Takes,
        seam: Arc<WriteSeam>,
    ) -> std::io::Result<Self>
    where
        B: TakeTogether + Clone + Send + Sync + 'static,
    {
        let (tx, rx, busy) = queue();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        // No lingering: a yield on a runtime of its own runs nothing.
        let turn = Turn {
            rx,
            busy: busy.clone(),
            seam: seam.clone(),
            linger_turns: 0,
        };
        let writer = runtime.spawn(write_batches(backend, turn));
        let tasks = vec![writer.abort_handle()];
        let thread = std::thread::Builder::new()
            .name(WRITER_THREAD.into())
            .spawn(move || {
                let _ = runtime.block_on(writer);
            })?;
        Ok(Self {
            tx,
            takes,
            tasks,
            thread: Some(thread),
            busy,
            seam,
        })
    }

    /// Who writes a write (`takes`: one this group takes, [`Group::takes_run`],
    /// [`Group::takes_deliveries`]): the writers, or, when this group does not take it or
    /// nothing else is being written, its caller, alone and at once. A lone write has
    /// nothing to share a commit with, and handing it to a writer would only add two task
    /// switches to its latency.
    pub(crate) fn writer(&self, takes: bool) -> Via<'_> {
        if !takes {
            return Via::Caller(None);
        }
        match self.seam.forced() {
            ForcedWrites::Natural => {}
            ForcedWrites::Alone => return Via::Caller(None),
            ForcedWrites::Grouped | ForcedWrites::Batches(_) => return Via::Group,
        }
        match self
            .busy
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => Via::Caller(Some(Lone(&self.busy))),
            Err(_) => Via::Group,
        }
    }

    /// Whether this group writes `new` (else its caller writes it alone).
    pub(crate) fn takes_run(&self, new: &NewRun) -> bool {
        self.takes == Takes::Everything || queue::decides_nothing(new)
    }

    /// Whether this group writes webhook deliveries (else each caller takes its own).
    pub(crate) fn takes_deliveries(&self) -> bool {
        self.takes == Takes::Everything
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
        self.hand_over(Pending::Run(Box::new(item), reply))?;
        answer.await.map_err(|_| closed())?
    }

    /// Takes a webhook delivery in the next batch (see `webhooks/take.rs`).
    pub(crate) async fn intake(&self, taking: Taking) -> Result<DeliveryTaken> {
        let (reply, answer) = oneshot::channel();
        self.hand_over(Pending::Delivery(Box::new(taking), reply))?;
        answer.await.map_err(|_| closed())?
    }

    /// Queues `pending` for the writers, counted as under way until a writer answers it.
    fn hand_over(&self, pending: Pending) -> Result<()> {
        self.busy.fetch_add(1, Ordering::AcqRel);
        self.tx.send(pending).map_err(|_| {
            self.busy.fetch_sub(1, Ordering::AcqRel);
            closed()
        })
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

fn closed() -> Error {
    Error::Database(sqlx::Error::PoolClosed)
}

/// The name of a writer's own thread (as `top -H` and `ps -L` show it).
const WRITER_THREAD: &str = "sqlite-writer";

/// The queue of waiting writes: where callers hand them over, where writers take them, and
/// how many are under way.
fn queue() -> (mpsc::UnboundedSender<Pending>, Waiting, Arc<AtomicUsize>) {
    let (tx, rx) = mpsc::unbounded_channel();
    (tx, Arc::new(Mutex::new(rx)), Arc::new(AtomicUsize::new(0)))
}

/// The writes waiting for a writer; one writer at a time gathers its batch.
type Waiting = Arc<Mutex<mpsc::UnboundedReceiver<Pending>>>;

/// What one writer takes its turns with.
struct Turn {
    rx: Waiting,
    busy: Arc<AtomicUsize>,
    seam: Arc<WriteSeam>,
    /// How many times it yields to gather more before writing (see [`LINGER_TURNS`]).
    linger_turns: usize,
}

async fn write_batches<B: TakeTogether>(backend: B, turn: Turn) {
    let Turn {
        rx,
        busy,
        seam,
        linger_turns,
    } = turn;
    let mut batch = Vec::with_capacity(MAX_BATCH);
    loop {
        {
            let mut waiting = rx.lock().await;
            if waiting.recv_many(&mut batch, MAX_BATCH).await == 0 {
                return;
            }
            // A forced batch size (tests only): wait until the batch holds that many.
            let fill = seam.batch_fill().min(MAX_BATCH);
            while batch.len() < fill {
                match waiting.recv().await {
                    Some(pending) => batch.push(pending),
                    None => break,
                }
            }
            for _ in 0..linger_turns {
                if batch.len() >= MAX_BATCH {
                    break;
                }
                tokio::task::yield_now().await;
                while batch.len() < MAX_BATCH
                    && let Ok(pending) = waiting.try_recv()
                {
                    batch.push(pending);
                }
            }
        }
        let outcomes = match write(&backend, &batch, &seam).await {
            Ok(outcomes) => outcomes,
            Err(e) if batch.len() == 1 => vec![failed(&batch[0], e)],
            Err(e) => {
                tracing::debug!(error = %e, items = batch.len(), "a group commit failed; writing each alone");
                seam.took_n(WritePath::GroupRetriedAlone, batch.len());
                let mut outcomes = Vec::with_capacity(batch.len());
                for one in batch.chunks(1) {
                    outcomes.push(match write(&backend, one, &seam).await {
                        Ok(mut o) => o.pop().unwrap_or_else(|| failed(&one[0], mismatch())),
                        Err(e) => failed(&one[0], e),
                    });
                }
                outcomes
            }
        };
        let written = batch.len();
        for (pending, outcome) in batch.drain(..).zip(outcomes) {
            pending.answer(outcome);
        }
        busy.fetch_sub(written, Ordering::AcqRel);
    }
}

fn failed(pending: &Pending, e: Error) -> Outcome {
    match pending {
        Pending::Run(..) => Outcome::Run(Err(e)),
        Pending::Delivery(..) => Outcome::Delivery(Err(e)),
    }
}

/// Writes `batch` in one transaction, in order. Any error, or a delivery that must not keep
/// what it wrote (a copy finished first), fails the whole batch and nothing of it is
/// committed; the caller then writes each item alone, where the item's own transaction
/// undoes it (a savepoint per item would cost two more round trips each, every time, for
/// what is rare).
async fn write<B: TakeTogether>(
    backend: &B,
    batch: &[Pending],
    seam: &WriteSeam,
) -> Result<Vec<Outcome>> {
    if let [Pending::Delivery(taking, _)] = batch {
        // Alone: its own transaction undoes it.
        seam.took(WritePath::GroupLoneDelivery);
        return Ok(vec![Outcome::Delivery(take::take(backend, taking).await)]);
    }
    let runs: Vec<RunRow<'_>> = batch
        .iter()
        .filter_map(|p| match p {
            Pending::Run(item, _) => Some(item.row()),
            Pending::Delivery(..) => None,
        })
        .collect();
    if runs.len() == batch.len() {
        // Runs only: `enqueue_runs` (one statement when every run decides nothing).
        seam.took(WritePath::GroupRuns);
        let done = queue::enqueue_runs(backend, &runs).await?;
        return Ok(done.into_iter().map(|e| Outcome::Run(Ok(e))).collect());
    }
    let deliveries: Vec<&Taking> = batch
        .iter()
        .filter_map(|p| match p {
            Pending::Delivery(taking, _) => Some(&**taking),
            Pending::Run(..) => None,
        })
        .collect();
    if deliveries.len() == batch.len()
        && let Some(taken) = together::take_together(backend, &deliveries).await?
    {
        seam.took(WritePath::GroupDeliveriesTogether);
        return Ok(taken
            .into_iter()
            .map(|t| Outcome::Delivery(Ok(t)))
            .collect());
    }
    seam.took(WritePath::GroupOneTransaction);
    let mut tx = backend.begin().await?;
    let mut outcomes = Vec::with_capacity(batch.len());
    for pending in batch {
        outcomes.push(match pending {
            Pending::Run(item, _) => {
                Outcome::Run(Ok(queue::enqueue_in::<B>(&mut tx, item.row()).await?))
            }
            Pending::Delivery(taking, _) => match take::take_in::<B>(&mut tx, taking).await? {
                (taken, true) => Outcome::Delivery(Ok(taken)),
                (_, false) => return Err(Error::Conflict(CONFLICT.into())),
            },
        });
    }
    B::commit(tx).await?;
    Ok(outcomes)
}

/// Why a batch was given up when a delivery in it found a copy finished first.
const CONFLICT: &str = "a copy of a delivery in the batch finished first";

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::backend::Backend;

    /// A group started on its own thread (SQLite's deliveries') runs its writer on a thread
    /// named so, writes what is handed to it (eight writes at once, each answered with its
    /// own run and job), and its thread ends once the group is dropped.
    #[tokio::test]
    async fn the_own_thread_writes_and_ends_with_its_group() {
        let (b, dir) = crate::sqlite::tests::migrated("group-thread").await;
        let mut group =
            Group::start_on_own_thread(b.clone(), Takes::Everything, Arc::default()).unwrap();
        let thread = group.thread.take().expect("a writer on its own thread");
        assert_eq!(thread.thread().name(), Some(WRITER_THREAD));
        let runs: Vec<NewRun> = (0..8)
            .map(|i| NewRun::new("a", format!("run {i}")))
            .collect();
        let answers = futures::future::join_all(
            runs.iter()
                .map(|new| group.enqueue(uuid::Uuid::now_v7().to_string(), new, false, 1_000)),
        )
        .await;
        let mut jobs: Vec<i64> = answers.into_iter().map(|a| a.unwrap().job_id).collect();
        jobs.sort_unstable();
        jobs.dedup();
        assert_eq!(jobs.len(), 8, "each enqueue has its own job");
        let written: i64 = sqlx::query_scalar("SELECT count(*) FROM runs")
            .fetch_one(&mut *b.writer().await.unwrap())
            .await
            .unwrap();
        assert_eq!(written, 8);
        drop(group);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !thread.is_finished() {
            assert!(
                Instant::now() < deadline,
                "the writer's thread outlived its group"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        thread.join().unwrap();
        b.close().await;
        let _ = std::fs::remove_dir_all(dir);
    }
}
