//! A run's files in one daemon's data directory, and their removal.
//!
//! A run's files are `workspaces/RUN`, `artifacts/RUN`, `tmp/RUN` (its commands' HOME and
//! TMPDIR), `checkouts/RUN` with `checkouts/RUN.record` (the staging of its checkout), and
//! the logs of its background tasks, `tasks/TASK.log`. What it guarantees:
//! - **Only run directories.** Only entries named by a run id (a UUID) are listed or
//!   removed; anything else in the data directory is left alone.
//! - **Idempotent.** Removing what is already gone succeeds, so a removal cut short by a
//!   crash is finished by the next sweep. A removal that fails (permissions) is logged and
//!   counted as not done; the sweep tries again.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// What of a run is removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    /// The run ended and its agent does not keep workspaces: its workspace, temp dir and
    /// checkout staging.
    Ended,
    /// The run was purged (or no longer exists): everything of it.
    Purged,
}

/// The run directories of one data directory.
#[derive(Debug, Clone)]
pub struct RunFiles {
    data_dir: PathBuf,
}

/// (subdirectory, metric kind) of the per-run directories, and which removal takes each.
const DIRS: &[(&str, &str, bool)] = &[
    ("workspaces", "workspace", true),
    ("tmp", "temp", true),
    ("checkouts", "checkout", true),
    ("artifacts", "artifacts", false),
];

/// A task log is removed only when unchanged this long: a task's log may exist a moment
/// before its row does.
pub const TASK_LOG_GRACE: Duration = Duration::from_secs(600);

fn is_run_id(name: &str) -> bool {
    uuid::Uuid::parse_str(name).is_ok()
}

/// Removes `path` (a directory or a file); whether something was removed.
fn remove(path: &Path) -> bool {
    let done = match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return false,
        Err(e) => Err(e),
        Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
    };
    match done {
        Ok(()) => true,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot remove a run's files; the next sweep tries again");
            false
        }
    }
}

impl RunFiles {
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            data_dir: data_dir.into(),
        }
    }

    /// The ids of every run with a directory here, in order.
    pub fn runs(&self) -> Vec<String> {
        let mut ids = BTreeSet::new();
        for (dir, _, _) in DIRS {
            let Ok(entries) = std::fs::read_dir(self.data_dir.join(dir)) else {
                continue;
            };
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                let name = name.strip_suffix(".record").unwrap_or(&name);
                if is_run_id(name) {
                    ids.insert(name.to_string());
                }
            }
        }
        ids.into_iter().collect()
    }

    /// The ids of task logs unchanged for [`TASK_LOG_GRACE`] as of `now`.
    pub fn idle_task_logs(&self, now: SystemTime) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(self.data_dir.join("tasks")) else {
            return Vec::new();
        };
        let mut ids = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(id) = name.strip_suffix(".log") else {
                continue;
            };
            let idle = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|m| now.duration_since(m).ok())
                .is_some_and(|age| age >= TASK_LOG_GRACE);
            if idle {
                ids.push(id.to_string());
            }
        }
        ids.sort();
        ids
    }

    /// Removes what `removal` takes of run `run_id`; counted per kind.
    pub fn remove_run(&self, run_id: &str, removal: Removal) -> u64 {
        if !is_run_id(run_id) {
            return 0;
        }
        let mut removed = 0;
        for (dir, kind, at_end) in DIRS {
            if removal == Removal::Ended && !at_end {
                continue;
            }
            let mut n = u64::from(remove(&self.data_dir.join(dir).join(run_id)));
            if *dir == "checkouts" {
                n += u64::from(remove(
                    &self.data_dir.join(dir).join(format!("{run_id}.record")),
                ));
            }
            nightshift_telemetry::record::retention_files_removed(kind, n);
            removed += n;
        }
        removed
    }

    /// Removes the logs of tasks `ids`; how many were removed.
    pub fn remove_task_logs(&self, ids: &[String]) -> u64 {
        let mut removed = 0;
        for id in ids {
            if id.is_empty() || id.contains('/') || id.starts_with('.') {
                continue;
            }
            removed += u64::from(remove(
                &self.data_dir.join("tasks").join(format!("{id}.log")),
            ));
        }
        nightshift_telemetry::record::retention_files_removed("task_log", removed);
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ended_run_loses_its_workspace_and_a_purged_one_everything_and_strays_stay() {
        let dir = tempfile::tempdir().unwrap();
        let files = RunFiles::new(dir.path());
        let (a, b) = (
            uuid::Uuid::now_v7().to_string(),
            uuid::Uuid::now_v7().to_string(),
        );
        for run in [&a, &b] {
            for sub in ["workspaces", "tmp", "checkouts", "artifacts"] {
                std::fs::create_dir_all(dir.path().join(sub).join(run).join("x")).unwrap();
            }
            std::fs::write(dir.path().join(format!("checkouts/{run}.record")), "r").unwrap();
        }
        std::fs::create_dir_all(dir.path().join("workspaces/not-a-run")).unwrap();
        std::fs::create_dir_all(dir.path().join("tasks")).unwrap();
        std::fs::write(dir.path().join("tasks/t1.log"), "log").unwrap();
        assert_eq!(files.runs(), {
            let mut v = vec![a.clone(), b.clone()];
            v.sort();
            v
        });
        assert_eq!(files.remove_run(&a, Removal::Ended), 4);
        assert!(dir.path().join("artifacts").join(&a).exists());
        assert!(!dir.path().join("workspaces").join(&a).exists());
        assert_eq!(files.remove_run(&b, Removal::Purged), 5);
        assert_eq!(files.remove_run(&b, Removal::Purged), 0, "idempotent");
        assert_eq!(files.remove_run("not-a-run", Removal::Purged), 0);
        assert!(dir.path().join("workspaces/not-a-run").exists());
        assert!(
            files.idle_task_logs(SystemTime::now()).is_empty(),
            "fresh logs wait"
        );
        let later = SystemTime::now() + TASK_LOG_GRACE;
        assert_eq!(files.idle_task_logs(later), ["t1"]);
        assert_eq!(files.remove_task_logs(&["t1".into(), "../x".into()]), 1);
    }
}
