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
//! Between sweeps it also watches the runs this daemon's runtime saw end ([`RunEnds`]): each
//! is asked about every [`WATCH_TICK`] until its end is written and nothing runs in it, and
//! its workspace goes then — as the run ends, not an interval later. A run still busy after
//! one interval (a background task running on) is left to the sweeps. So a workspace goes as
//! its run ends, or within one interval on the daemon that holds it; whatever a crash left
//! between a purge's commit and its file removal goes at the next sweep. A store error skips
//! the sweep or the check (logged) and removes nothing.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use nightshift_store::{RunSettlement, Store};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::files::{Removal, RunFiles};
use super::{LiveRetention, RetentionConfig};

/// Runs asked about per statement.
const CHUNK: usize = 500;

/// How often a run seen ending is asked about until its end is written.
pub(crate) const WATCH_TICK: Duration = Duration::from_millis(250);

/// Where the runtime tells this daemon's sweep that a run ended here (its loop returned the
/// end; the pool writes it next), so that the run's workspace goes as soon as the end is
/// written. Telling is never blocking and never fails: with the sweep gone, it is dropped.
#[derive(Debug, Clone)]
pub struct RunEnds(mpsc::UnboundedSender<String>);

impl RunEnds {
    /// A teller and the receiver the sweep takes ([`super::Retention::new`]).
    pub fn channel() -> (RunEnds, mpsc::UnboundedReceiver<String>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (RunEnds(tx), rx)
    }

    /// Run `run_id` ended in this daemon's loop.
    pub fn tell(&self, run_id: &str) {
        let _ = self.0.send(run_id.to_string());
    }
}

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
    /// The runs the runtime saw end here, none when nobody tells (a test's sweep alone).
    ends: Option<mpsc::UnboundedReceiver<String>>,
    /// Runs seen ending whose end is not written yet, each until when it is watched.
    watching: BTreeMap<String, Instant>,
}

impl Sweeper {
    pub(crate) fn new(
        store: Store,
        live: LiveRetention,
        files: RunFiles,
        ends: Option<mpsc::UnboundedReceiver<String>>,
    ) -> Self {
        Self {
            store,
            live: live.subscribe(),
            _source: live,
            files,
            ends,
            watching: BTreeMap::new(),
        }
    }

    /// One sweep (see the module documentation).
    pub(crate) async fn sweep(&mut self) -> nightshift_store::Result<Swept> {
        let config = self.live.borrow_and_update().clone();
        let mut swept = Swept::default();
        for chunk in self.files.runs().chunks(CHUNK) {
            let known = self.store.settled_runs(chunk).await?;
            for run in chunk {
                let removal = removal(known.iter().find(|k| &k.run_id == run), &config);
                self.remove(run, removal, &mut swept);
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

    /// Removes `run`'s files as `removal` says, counting it in `swept`.
    fn remove(&self, run: &str, removal: Option<Removal>, swept: &mut Swept) {
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

    /// Asks about the runs seen ending: removes the files of those whose end is written (as
    /// a sweep would), stops watching them and those watched past their time.
    pub(crate) async fn check_watched(&mut self) -> nightshift_store::Result<Swept> {
        let config = self.live.borrow().clone();
        let runs: Vec<String> = self.watching.keys().take(CHUNK).cloned().collect();
        let known = self.store.settled_runs(&runs).await?;
        let mut swept = Swept::default();
        let now = Instant::now();
        for run in runs {
            let settlement = known.iter().find(|k| k.run_id == run);
            let done = settlement.is_none_or(|k| k.settled || k.purged);
            self.remove(&run, removal(settlement, &config), &mut swept);
            if done || self.watching.get(&run).is_some_and(|until| *until <= now) {
                self.watching.remove(&run);
            }
        }
        Ok(swept)
    }

    /// Sweeps at start and every `retention.interval_seconds` until `stop`, and between
    /// sweeps removes the workspaces of the runs seen ending as their ends are written.
    pub(crate) async fn run(mut self, stop: CancellationToken) {
        while !stop.is_cancelled() {
            match self.sweep().await {
                Ok(s) => log(s, "swept the files of ended runs"),
                Err(e) => tracing::warn!(error = %e, "sweep of run files failed; retrying"),
            }
            let interval = Duration::from_secs(self.live.borrow().interval_seconds);
            let next_sweep = Instant::now() + interval;
            loop {
                let wake = match self.watching.is_empty() {
                    true => next_sweep,
                    false => next_sweep.min(Instant::now() + WATCH_TICK),
                };
                tokio::select! {
                    () = stop.cancelled() => return,
                    _ = self.live.changed() => break,
                    () = tokio::time::sleep_until(wake) => {
                        if Instant::now() >= next_sweep {
                            break;
                        }
                        match self.check_watched().await {
                            Ok(s) => log(s, "removed the files of runs as they ended"),
                            Err(e) => tracing::warn!(error = %e,
                                "cannot ask about the runs that ended; retrying"),
                        }
                    }
                    ended = next_end(&mut self.ends) => match ended {
                        Some(run) => {
                            self.watching.insert(run, Instant::now() + interval);
                        }
                        None => self.ends = None,
                    },
                }
            }
        }
    }
}

/// The next run the runtime saw end; never, when nobody tells.
async fn next_end(ends: &mut Option<mpsc::UnboundedReceiver<String>>) -> Option<String> {
    match ends {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// What goes of a run's files, from what the store says of it (`None`: the run is gone).
fn removal(known: Option<&RunSettlement>, config: &RetentionConfig) -> Option<Removal> {
    match known {
        None => Some(Removal::Purged),
        Some(k) if k.purged => Some(Removal::Purged),
        Some(k) if k.settled && !config.keeps_workspace(&k.agent) => Some(Removal::Ended),
        Some(_) => None,
    }
}

/// One INFO line when anything was removed.
fn log(s: Swept, what: &str) {
    if s != Swept::default() {
        tracing::info!(
            ended = s.ended,
            purged = s.purged,
            task_logs = s.task_logs,
            "{what}"
        );
    }
}
