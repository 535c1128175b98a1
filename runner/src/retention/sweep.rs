//! The sweep of one daemon's data directory: every daemon runs its own, since workspaces,
//! artifacts and task logs live on the daemon that ran the run's jobs.
//!
//! Every `retention.interval_seconds` (and once at start) it lists the run directories
//! ([`RunFiles::runs`]), asks the store about those runs, and removes:
//! - the workspace, temp dir and checkout staging of a run that ended and has nothing left
//!   running in it (no job queued or running, no background task running), unless its agent
//!   keeps workspaces (`keep_workspace`);
//! - everything of a run that was purged, or that no longer exists;
//! - the log of a task whose row is gone, once unchanged for [`super::files::TASK_LOG_GRACE`].
//!
//! So a workspace goes within one interval of its run's end, on the daemon that holds it,
//! and whatever a crash left between a purge's commit and its file removal goes at the next
//! sweep. A store error skips the sweep (logged) and removes nothing.

use std::time::{Duration, SystemTime};

use nightshift_store::Store;
use tokio_util::sync::CancellationToken;

use tokio::sync::watch;

use super::files::{Removal, RunFiles};
use super::{LiveRetention, RetentionConfig};

/// Runs asked about per statement.
const CHUNK: usize = 500;

/// What one sweep removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Swept {
    /// Runs whose workspace went because they ended.
    pub ended: u64,
    /// Runs whose files all went because they were purged or are gone.
    pub purged: u64,
    /// Task logs removed.
    pub task_logs: u64,
}

/// The sweep of one daemon.
pub(crate) struct Sweeper {
    store: Store,
    /// The config in force, each replacement seen once.
    live: watch::Receiver<std::sync::Arc<RetentionConfig>>,
    /// Holds the sender, so that waiting for a replacement never fails.
    _source: LiveRetention,
    files: RunFiles,
}

impl Sweeper {
    pub(crate) fn new(store: Store, live: LiveRetention, files: RunFiles) -> Self {
        Self {
            store,
            live: live.subscribe(),
            _source: live,
            files,
        }
    }

    /// One sweep (see the module documentation).
    pub(crate) async fn sweep(&mut self) -> nightshift_store::Result<Swept> {
        let config = self.live.borrow_and_update().clone();
        let mut swept = Swept::default();
        for chunk in self.files.runs().chunks(CHUNK) {
            let known = self.store.settled_runs(chunk).await?;
            for run in chunk {
                let removal = match known.iter().find(|k| &k.run_id == run) {
                    None => Some(Removal::Purged),
                    Some(k) if k.purged => Some(Removal::Purged),
                    Some(k) if k.settled && !config.keeps_workspace(&k.agent) => {
                        Some(Removal::Ended)
                    }
                    Some(_) => None,
                };
                match removal {
                    Some(Removal::Purged) => {
                        self.files.remove_run(run, Removal::Purged);
                        swept.purged += 1;
                    }
                    Some(Removal::Ended) => {
                        let removed = self.files.remove_run(run, Removal::Ended);
                        swept.ended += u64::from(removed > 0);
                    }
                    None => {}
                }
            }
        }
        for chunk in self.files.idle_task_logs(SystemTime::now()).chunks(CHUNK) {
            let known = self.store.known_tasks(chunk).await?;
            let gone: Vec<String> = chunk
                .iter()
                .filter(|t| !known.contains(t))
                .cloned()
                .collect();
            swept.task_logs += self.files.remove_task_logs(&gone);
        }
        Ok(swept)
    }

    /// Sweeps at start and every `retention.interval_seconds` until `stop`.
    pub(crate) async fn run(mut self, stop: CancellationToken) {
        while !stop.is_cancelled() {
            match self.sweep().await {
                Ok(s) if s != Swept::default() => tracing::info!(
                    ended = s.ended,
                    purged = s.purged,
                    task_logs = s.task_logs,
                    "swept the files of ended runs"
                ),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "sweep of run files failed; retrying"),
            }
            let interval = Duration::from_secs(self.live.borrow().interval_seconds);
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep(interval) => {}
                _ = self.live.changed() => {}
            }
        }
    }
}
