//! The pool: a fixed number of slots, claiming only when a slot is free, one task per job,
//! and a graceful drain on shutdown (stop claiming; let running jobs finish until the grace
//! period ends; then release their leases so another worker takes them at once).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use nightshift_store::{LeasedJob, Store};
use tokio::task::{Id, JoinSet};
use tokio_util::sync::CancellationToken;

use crate::config::PoolConfig;
use crate::handler::{Handler, Outcome};
use crate::job::{Finished, JobTimings, run_job};
use crate::slots::{Slot, Slots};

/// Counts of what happened to the jobs a pool ran, returned when it stops.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PoolReport {
    /// Jobs whose handler's outcome was written.
    pub recorded: usize,
    /// Jobs released at shutdown.
    pub released: usize,
    /// Jobs whose lease was lost.
    pub lease_lost: usize,
    /// Jobs whose outcome could not be written, or whose handler panicked.
    pub failed_writes: usize,
}

/// A worker pool over one store.
#[derive(Debug)]
pub struct Pool<H> {
    store: Store,
    handler: Arc<H>,
    config: PoolConfig,
    worker_id: String,
}

impl<H: Handler> Pool<H> {
    /// A pool running `handler` with `config` (validated by the caller).
    pub fn new(store: Store, handler: H, config: PoolConfig) -> Self {
        let host = hostname();
        let worker_id = format!("{host}:{}:{}", std::process::id(), &unique_suffix());
        Self {
            store,
            handler: Arc::new(handler),
            config,
            worker_id,
        }
    }

    /// The id this pool claims under (recorded as each job's `lease_owner`).
    pub fn worker_id(&self) -> &str {
        &self.worker_id
    }

    /// Runs until `shutdown` fires, then drains. Returns what happened to its jobs.
    pub async fn run(self, shutdown: CancellationToken) -> nightshift_store::Result<PoolReport> {
        let host = hostname();
        self.store
            .register_worker(&self.worker_id, &host, std::process::id())
            .await?;
        tracing::info!(worker = %self.worker_id, slots = self.config.slots, "worker pool started");
        let timings = JobTimings {
            lease: self.config.lease(),
            heartbeat: self.config.heartbeat(),
            backoff: self.config.backoff(),
        };
        let hard_stop = CancellationToken::new();
        let mut slots = Slots::new(self.config.slots, &self.config.lanes);
        let mut running: HashMap<Id, Slot> = HashMap::new();
        let mut tasks: JoinSet<Finished> = JoinSet::new();
        let mut report = PoolReport::default();
        let mut signal = self.store.subscribe();
        let mut beat = tokio::time::interval(self.config.heartbeat());
        beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

        while !shutdown.is_cancelled() {
            let (claimed_all, wait) = match self.claim_free_slots(&mut slots).await {
                Ok((leases, claimed_all)) => {
                    for (lease, slot) in leases {
                        let handle = tasks.spawn(run_job(
                            self.handler.clone(),
                            lease,
                            timings.clone(),
                            hard_stop.clone(),
                        ));
                        running.insert(handle.id(), slot);
                    }
                    // Only a pool about to go idle needs to know when the next job is due.
                    let wait = if claimed_all {
                        Duration::ZERO
                    } else {
                        self.idle_wait().await
                    };
                    (claimed_all, wait)
                }
                Err(e) => {
                    tracing::warn!(error = %e, "claiming failed; trying again after the poll interval");
                    (false, self.config.poll_interval())
                }
            };
            if claimed_all && slots.busy() < self.config.slots {
                continue; // there may be more due work right now
            }
            let free = slots.busy() < self.config.slots;
            tokio::select! {
                () = shutdown.cancelled() => break,
                Some(joined) = tasks.join_next_with_id(), if !tasks.is_empty() => {
                    finish(joined, &mut running, &mut slots, &mut report);
                }
                () = signal.wait(wait), if free => {}
                _ = beat.tick() => {
                    if let Err(e) = self.store.register_worker(&self.worker_id, &host, std::process::id()).await {
                        tracing::warn!(error = %e, "worker heartbeat failed");
                    }
                }
            }
        }

        tracing::info!(
            running = tasks.len(),
            grace_ms = self.config.shutdown_grace_ms,
            "draining"
        );
        let deadline = tokio::time::sleep(self.config.shutdown_grace());
        tokio::pin!(deadline);
        while !tasks.is_empty() {
            tokio::select! {
                Some(joined) = tasks.join_next_with_id() => {
                    finish(joined, &mut running, &mut slots, &mut report);
                }
                () = &mut deadline, if !hard_stop.is_cancelled() => {
                    tracing::warn!(running = tasks.len(), "grace period over; releasing leases");
                    hard_stop.cancel();
                }
            }
        }
        if let Err(e) = self.store.remove_worker(&self.worker_id).await {
            tracing::warn!(error = %e, "could not deregister worker");
        }
        tracing::info!(?report, "worker pool stopped");
        Ok(report)
    }

    /// Claims jobs for every free slot: reserved lanes first, then shared slots from any lane.
    /// Returns the leases with the slot each takes, and whether every claim filled up (so
    /// more work may be waiting).
    async fn claim_free_slots(
        &self,
        slots: &mut Slots,
    ) -> nightshift_store::Result<(Vec<(LeasedJob, Slot)>, bool)> {
        let wanted = slots.wanted();
        let mut leases = Vec::new();
        let mut claimed_all = false;
        let lease = self.config.lease();
        for (lane, n) in wanted.reserved {
            let got = self
                .store
                .claim(&self.worker_id, Some(std::slice::from_ref(&lane)), n, lease)
                .await?;
            claimed_all |= got.len() == n;
            leases.extend(got);
        }
        if wanted.shared > 0 {
            let got = self
                .store
                .claim(&self.worker_id, None, wanted.shared, lease)
                .await?;
            claimed_all |= got.len() == wanted.shared;
            leases.extend(got);
        }
        let mut placed = Vec::with_capacity(leases.len());
        for lease in leases {
            match slots.take(&lease.job().lane) {
                Some(slot) => placed.push((lease, slot)),
                None => {
                    // Cannot happen while claims ask for at most the free slots; give the job
                    // back rather than run it over capacity.
                    if let Err(e) = lease.release("released: no free slot").await {
                        tracing::warn!(error = %e, "could not release an over-claimed job");
                    }
                }
            }
        }
        Ok((placed, claimed_all))
    }

    /// How long to wait for a signal before claiming again: the poll interval, or less when a
    /// scheduled job comes due sooner.
    async fn idle_wait(&self) -> Duration {
        let poll = self.config.poll_interval();
        match self.store.next_due().await {
            Ok(Some(due)) => {
                let until = due.saturating_sub(self.store.now());
                let until = Duration::from_millis(u64::try_from(until).unwrap_or(0));
                poll.min(until.max(Duration::from_millis(1)))
            }
            _ => poll,
        }
    }
}

fn finish(
    joined: Result<(Id, Finished), tokio::task::JoinError>,
    running: &mut HashMap<Id, Slot>,
    slots: &mut Slots,
    report: &mut PoolReport,
) {
    let id = match &joined {
        Ok((id, _)) => *id,
        Err(e) => e.id(),
    };
    if let Some(slot) = running.remove(&id) {
        slots.free(&slot);
    }
    match joined {
        Ok((_, Finished::Recorded(outcome))) => {
            report.recorded += 1;
            if let Outcome::Retry { error, .. } = &outcome {
                tracing::info!(%error, "job will be retried");
            }
        }
        Ok((_, Finished::Released)) => report.released += 1,
        Ok((_, Finished::LeaseLost)) => report.lease_lost += 1,
        Ok((_, Finished::WriteFailed(_))) => report.failed_writes += 1,
        Err(e) => {
            tracing::error!(error = %e, "a job task panicked; its lease will expire and the job will be retried");
            report.failed_writes += 1;
        }
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".to_string())
}

fn unique_suffix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{nanos:08x}")
}
