//! The purger: among the daemons sharing a store, the one holding the lease
//! [`PURGER_LEASE`] purges finished runs past their retention, batch after batch.
//!
//! What it guarantees:
//! - **One purger.** Only the lease holder purges; a standby takes over once the lease
//!   expires or is given up at shutdown. Leadership saves work, it is not what makes a purge
//!   safe: two purgers at once (a lease that expired under a slow batch) purge each run once
//!   (`Store::purge_batch`).
//! - **Never blocks the queue.** Each batch is one short transaction of at most
//!   `retention.batch_size` runs, followed by a rest of at least `retention.pause_ms` and at
//!   least [`REST_FACTOR`] times what the batch took ([`rest_after`]): the purger holds the
//!   store's writer (SQLite's one writer, PostgreSQL's row locks) at most a tenth of the
//!   time, and the pool's writes go in between.
//! - **Visible.** One log line per batch that removed runs (`purged a batch of finished
//!   runs`, with `status`, `agent`, `runs`, `rows`, `bytes`, `duration_ms`) and the
//!   `nightshift_retention_*` metrics.
//! - **Files follow.** After a batch commits, the purged runs' files and task logs in this
//!   daemon's data directory are removed; other daemons' sweeps remove theirs.
//! - **Reload.** Each round reads the current `[retention]`; a reload (SIGHUP) ends the wait
//!   for the next round, so its changes apply at once.

use std::time::{Duration, Instant};

use nightshift_store::{PurgeRule, PurgedBatch, Store};
use tokio_util::sync::CancellationToken;

use tokio::sync::watch;

use super::files::{Removal, RunFiles};
use super::{LiveRetention, RetentionConfig};

/// The name of the purger's leader lease (the schedule timer's is `schedules`).
pub const PURGER_LEASE: &str = "retention";
/// How long the purger's lease lasts without renewal; it is renewed every round.
const LEASE_TTL: Duration = Duration::from_secs(60);
/// After a batch the purger rests at least this many times what the batch took.
pub const REST_FACTOR: u32 = 9;

/// The rest after a batch that took `took`: `pause`, or [`REST_FACTOR`] × `took` when longer.
pub fn rest_after(took: Duration, pause: Duration) -> Duration {
    pause.max(took * REST_FACTOR)
}

/// The purger of one daemon.
pub(crate) struct Purger {
    store: Store,
    holder: String,
    /// The config in force, each replacement seen once.
    live: watch::Receiver<std::sync::Arc<RetentionConfig>>,
    /// Holds the sender, so that waiting for a replacement never fails.
    _source: LiveRetention,
    files: RunFiles,
    leading: bool,
}

impl Purger {
    pub(crate) fn new(store: Store, holder: String, live: LiveRetention, files: RunFiles) -> Self {
        Self {
            store,
            holder,
            live: live.subscribe(),
            _source: live,
            files,
            leading: false,
        }
    }

    /// Takes or renews the lease; whether this daemon purges now.
    async fn lead(&mut self) -> bool {
        let lease = self
            .store
            .acquire_leadership(PURGER_LEASE, &self.holder, LEASE_TTL)
            .await;
        let leading = match lease {
            Ok(lease) => lease.is_some(),
            Err(e) => {
                tracing::warn!(error = %e, "cannot take or renew the purger lease; retrying");
                false
            }
        };
        if leading != self.leading {
            tracing::info!(holder = %self.holder, leading, "purger leadership changed");
        }
        self.leading = leading;
        leading
    }

    /// One round: a batch of each rule, with a rest after each batch that removed runs.
    /// Whether any batch was full (more may be left).
    async fn round(&mut self, stop: &CancellationToken) -> bool {
        let config = self.live.borrow_and_update().clone();
        let batch = i64::from(config.batch_size);
        let pause = Duration::from_millis(config.pause_ms);
        let mut more = false;
        for rule in config.rules(self.store.now()) {
            if stop.is_cancelled() {
                return false;
            }
            let started = Instant::now();
            let rest = match self.store.purge_batch(&rule, batch).await {
                Ok(purged) => {
                    let took = started.elapsed();
                    let n = purged.runs.len() as i64;
                    self.after_batch(&rule, purged, took);
                    if n == 0 {
                        continue;
                    }
                    more |= n >= batch;
                    rest_after(took, pause)
                }
                Err(e) => {
                    tracing::warn!(error = %e, status = %rule.status, "purge batch failed; retrying next round");
                    continue;
                }
            };
            tokio::select! {
                () = stop.cancelled() => return false,
                () = tokio::time::sleep(rest) => {}
            }
        }
        more
    }

    /// Logs, counts and removes the files of a committed batch.
    fn after_batch(&self, rule: &PurgeRule, purged: PurgedBatch, took: Duration) {
        record(rule, &purged, took);
        if purged.runs.is_empty() {
            return;
        }
        for run in &purged.runs {
            self.files.remove_run(run, Removal::Purged);
        }
        self.files.remove_task_logs(&purged.tasks);
    }

    /// Purges until `stop`, then gives up the lease.
    pub(crate) async fn run(mut self, stop: CancellationToken) {
        while !stop.is_cancelled() {
            let more = self.lead().await && self.round(&stop).await;
            if more {
                continue;
            }
            let interval = Duration::from_secs(self.live.borrow().interval_seconds);
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep(interval) => {}
                _ = self.live.changed() => {}
            }
        }
        if self.leading {
            match self
                .store
                .release_leadership(PURGER_LEASE, &self.holder)
                .await
            {
                Ok(_) => tracing::info!(holder = %self.holder, "released the purger lease"),
                Err(e) => tracing::warn!(error = %e, "could not release the purger lease"),
            }
        }
    }
}

/// The log line and metrics of one batch (an empty one only times its duration).
pub(crate) fn record(rule: &PurgeRule, purged: &PurgedBatch, took: Duration) {
    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let c = purged.counts;
    nightshift_telemetry::record::retention_batch(
        rule.status.as_str(),
        c.runs,
        purged.rows,
        c.bytes,
        took,
        at,
    );
    if c.runs > 0 {
        tracing::info!(
            status = %rule.status,
            agent = rule.agent.as_deref().unwrap_or("*"),
            runs = c.runs,
            rows = purged.rows,
            bytes = c.bytes,
            events = c.events,
            checkpoints = c.checkpoints,
            tasks = purged.tasks.len(),
            keep_summary = rule.keep_summary,
            duration_ms = took.as_millis() as u64,
            "purged a batch of finished runs"
        );
    }
}
