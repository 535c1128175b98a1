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
//! A reload (SIGHUP) replaces the [`LiveRetention`] every part reads at each round.

pub mod config;
pub mod files;
pub mod operator;
pub mod purger;
pub(crate) mod sweep;

use std::sync::{Arc, RwLock};

pub use config::RetentionConfig;

/// The `[retention]` in force, replaced by a reload.
#[derive(Debug, Clone, Default)]
pub struct LiveRetention {
    current: Arc<RwLock<Arc<RetentionConfig>>>,
}

impl LiveRetention {
    pub fn new(config: RetentionConfig) -> Self {
        Self {
            current: Arc::new(RwLock::new(Arc::new(config))),
        }
    }

    /// The config in force now.
    pub fn get(&self) -> Arc<RetentionConfig> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Puts `config` in force from the next round on.
    pub fn set(&self, config: RetentionConfig) {
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(config);
    }
}

/// The daemon's retention: the purger (acting while it holds the lease) and the sweep of
/// this daemon's data directory, side by side until stopped.
pub(crate) struct Retention {
    purger: purger::Purger,
    sweeper: sweep::Sweeper,
}

impl Retention {
    /// The retention of daemon `holder` over `store`, its files under `data_dir`.
    pub(crate) fn new(
        store: &nightshift_store::Store,
        holder: &str,
        live: &LiveRetention,
        data_dir: &std::path::Path,
    ) -> Self {
        let files = files::RunFiles::new(data_dir);
        Self {
            purger: purger::Purger::new(
                store.clone(),
                holder.to_string(),
                live.clone(),
                files.clone(),
            ),
            sweeper: sweep::Sweeper::new(store.clone(), live.clone(), files),
        }
    }

    /// Purges and sweeps until `stop`, then gives up the purger's lease.
    pub(crate) async fn run(self, stop: tokio_util::sync::CancellationToken) {
        tokio::join!(self.purger.run(stop.clone()), self.sweeper.run(stop));
    }
}
