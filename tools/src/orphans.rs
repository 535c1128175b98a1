//! Tool processes that outlive a crashed daemon.
//!
//! A tool's process group is killed on timeout, cancellation and when its call is dropped,
//! but none of that runs when the daemon itself is SIGKILLed: the group is orphaned and keeps
//! running. A [`ProcessRegistry`] records each running group as a file
//! (`<dir>/<pgid>` holding the leader's start time) for as long as its call runs; a daemon
//! starting on the same data directory calls [`ProcessRegistry::reap`] before it resumes any
//! run, so a recovered call never runs beside its first attempt. The start time guards
//! against a recycled pid: a group is killed only if its leader is the process recorded.

use std::path::{Path, PathBuf};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// Where running tool process groups are recorded.
#[derive(Debug, Clone)]
pub struct ProcessRegistry {
    dir: PathBuf,
}

/// A recorded group; the record is removed when this is dropped (the call ended).
#[derive(Debug)]
pub(crate) struct Registered {
    path: PathBuf,
}

impl Drop for Registered {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl ProcessRegistry {
    /// A registry keeping its records in `dir` (created on first use).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The directory holding the records.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Records the group led by `pgid`. Failing to record is logged, not fatal.
    pub(crate) fn register(&self, pgid: i32) -> Option<Registered> {
        let start = start_time(pgid)?;
        let path = self.dir.join(pgid.to_string());
        let written = std::fs::create_dir_all(&self.dir)
            .and_then(|()| std::fs::write(&path, start.to_string()));
        match written {
            Ok(()) => Some(Registered { path }),
            Err(e) => {
                tracing::warn!(error = %e, dir = %self.dir.display(), "cannot record a tool process");
                None
            }
        }
    }

    /// Kills every recorded group whose leader is still the recorded process, and clears the
    /// records. Returns how many groups were killed. Call it before resuming runs.
    pub fn reap(&self) -> std::io::Result<usize> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(e),
        };
        let mut killed = 0;
        for entry in entries.flatten() {
            let path = entry.path();
            let pgid = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.parse::<i32>().ok());
            let recorded = std::fs::read_to_string(&path)
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok());
            if let (Some(pgid), Some(recorded)) = (pgid, recorded)
                && start_time(pgid) == Some(recorded)
                && killpg(Pid::from_raw(pgid), Signal::SIGKILL).is_ok()
            {
                tracing::warn!(
                    pgid,
                    "killed a tool process group left running by a previous daemon"
                );
                killed += 1;
            }
            let _ = std::fs::remove_file(&path);
        }
        Ok(killed)
    }
}

/// The start time of process `pid` (field 22 of `/proc/<pid>/stat`, in clock ticks since boot).
fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses; fields after it follow the
    // last ')'. Field 3 is the first of those, so field 22 is the 20th.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_group_that_outlived_its_daemon_is_killed_and_a_recycled_pid_is_not() {
        let dir = tempfile_dir();
        let registry = ProcessRegistry::new(&dir);
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap();
        let pgid = i32::try_from(child.id()).unwrap();
        let record = registry.register(pgid).expect("recorded");
        std::mem::forget(record); // the daemon "crashed": the record stays
        // A record whose start time does not match is not killed.
        std::fs::write(dir.join("1"), "12345").unwrap();
        assert_eq!(registry.reap().unwrap(), 1);
        let status = child.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9)
        );
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            0,
            "records cleared"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn tempfile_dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!("ns-orphans-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    use std::os::unix::process::CommandExt;
}
