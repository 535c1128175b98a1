//! Retention: finished runs are kept `[retention]`'s number of days by end state, then
//! purged — events, checkpoints, jobs, approvals, tasks and their logs, outbox rows,
//! notifications, check-run claims, workspaces and artifacts — keeping the run row as a
//! summary unless told not to. Workspaces go as soon as their run ended unless the agent
//! keeps them.
//!
//! The parts, each with its guarantees in its module:
//! - [`config`]: the `[retention]` table, checked at load, turned into purge rules;
//! - `purger`: the one purger among the daemons (a leader lease), purging in bounded
//!   batches with a pause between them, one log line and the metrics per batch;
//! - `sweep`: every daemon's sweep of its own data directory (workspaces of ended runs,
//!   files of purged runs, orphaned task logs);
//! - [`files`]: a run's files and their idempotent removal;
//! - [`operator`]: `nightshift runs purge` / `POST /v1/runs/purge`, parsed and answered.
//!
//! A reload (SIGHUP) replaces the [`LiveRetention`] every part reads at each round, and starts
//! a round at once.

pub mod config;
pub mod files;
pub mod operator;
pub mod purger;
pub(crate) mod sweep;

use std::sync::Arc;

use tokio::sync::watch;

pub use config::RetentionConfig;
pub use sweep::RunEnds;

/// The `[retention]` in force, replaced by a reload. The purger and the sweep each hold a
/// [`LiveRetention::subscribe`]d receiver: a replacement ends their wait for the next round,
/// also when it came while a round was going on.
#[derive(Debug, Clone)]
pub struct LiveRetention {
    tx: Arc<watch::Sender<Arc<RetentionConfig>>>,
}

impl Default for LiveRetention {
    fn default() -> Self {
        Self::new(RetentionConfig::default())
    }
}

impl LiveRetention {
    pub fn new(config: RetentionConfig) -> Self {
        let (tx, _) = watch::channel(Arc::new(config));
        Self { tx: Arc::new(tx) }
    }

    /// The config in force now.
    pub fn get(&self) -> Arc<RetentionConfig> {
        self.tx.borrow().clone()
    }

    /// A receiver of every replacement from now on.
    pub fn subscribe(&self) -> watch::Receiver<Arc<RetentionConfig>> {
        self.tx.subscribe()
    }

    /// Puts `config` in force from the next round on, and starts that round now.
    pub fn set(&self, config: RetentionConfig) {
        self.tx.send_replace(Arc::new(config));
    }
}

/// The daemon's retention: the purger (acting while it holds the lease) and the sweep of
/// this daemon's data directory, side by side until stopped.
pub(crate) struct Retention {
    purger: purger::Purger,
    sweeper: sweep::Sweeper,
}

impl Retention {
    /// The retention of daemon `holder` over `store`, its files under `data_dir`; `ends` is
    /// where its runtime tells of the runs that ended here ([`RunEnds::channel`]).
    pub(crate) fn new(
        store: &nightshift_store::Store,
        holder: &str,
        live: &LiveRetention,
        data_dir: &std::path::Path,
        ends: tokio::sync::mpsc::UnboundedReceiver<String>,
    ) -> Self {
        let files = files::RunFiles::new(data_dir);
        Self {
            purger: purger::Purger::new(
                store.clone(),
                holder.to_string(),
                live.clone(),
                files.clone(),
            ),
            sweeper: sweep::Sweeper::new(store.clone(), live.clone(), files, Some(ends)),
        }
    }

    /// Purges and sweeps until `stop`, then gives up the purger's lease.
    pub(crate) async fn run(self, stop: tokio_util::sync::CancellationToken) {
        tokio::join!(self.purger.run(stop.clone()), self.sweeper.run(stop));
    }
}
