//! The daemon's own record of what it checked out into a workspace.
//!
//! A run's commands can write anything beneath its workspace, `.git` included: a planted
//! `.git/config` (`core.askPass`, a promisor remote with lazy fetch, `core.fsmonitor`, hooks,
//! filters, credential helpers) turns any git the daemon runs there into code of the model's
//! choosing, run as the daemon, outside the sandbox. So the daemon never runs git in a
//! workspace and never reads what a command could have written there to decide anything.
//! Whether a workspace still holds the run's checkout is answered from this record instead:
//! a file beside the daemon's staging directory (`<staging>.record`, out of every sandbox's
//! reach) saying which commit was moved into which workspace directory: its device, inode
//! and creation time, so a workspace deleted and made again is not taken for the checkout
//! even when the file system hands out the same inode again (commands cannot replace the
//! workspace directory itself, nor change its creation time). Where the file system keeps no
//! creation time, the device and inode alone.
//!
//! Guarantees: a record is written (atomically: a temporary file, then a rename) only after a
//! checkout's tree is wholly in the workspace, and removed before the daemon starts to
//! replace a workspace's contents, so a crash in between leaves no record and the next job
//! fetches again. A record that is missing, unreadable or malformed means "not held".

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The record kept for the checkout staged in `staging`.
pub(super) fn path_for(staging: &Path) -> PathBuf {
    let mut name = staging.as_os_str().to_os_string();
    name.push(".record");
    PathBuf::from(name)
}

/// A workspace directory's identity: device, inode, creation time in nanoseconds (0 where
/// the file system keeps none).
type Identity = (u64, u64, u128);

fn identity(dest: &Path) -> Option<Identity> {
    let meta = std::fs::symlink_metadata(dest).ok()?;
    let born = meta
        .created()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    meta.is_dir().then(|| (meta.dev(), meta.ino(), born))
}

/// The record's text: the commit and the workspace's identity.
fn render(commit: &str, (dev, ino, born): Identity) -> String {
    format!("commit {commit}\nworkspace {dev}:{ino}:{born}\n")
}

/// The commit a record's text names for the workspace `identity`; `None` when it names
/// another directory or is malformed.
fn parse(text: &str, workspace: Identity) -> Option<String> {
    let mut commit = None;
    let mut held = None;
    for line in text.lines() {
        match line.split_once(' ') {
            Some(("commit", sha)) if crate::is_commit_sha(sha) => {
                commit = Some(sha.to_ascii_lowercase())
            }
            Some(("workspace", id)) => {
                let mut parts = id.split(':');
                let (Some(dev), Some(ino), Some(born), None) =
                    (parts.next(), parts.next(), parts.next(), parts.next())
                else {
                    return None;
                };
                held = Some((dev.parse().ok()?, ino.parse().ok()?, born.parse().ok()?));
            }
            _ => return None,
        }
    }
    (held? == workspace).then_some(commit?)
}

/// Whether the record for `staging` says `dest` holds `commit` (as checked out by the daemon
/// into this very directory).
pub(super) fn holds(staging: &Path, dest: &Path, commit: &str) -> bool {
    let Some(workspace) = identity(dest) else {
        return false;
    };
    let Ok(text) = std::fs::read_to_string(path_for(staging)) else {
        return false;
    };
    parse(&text, workspace).is_some_and(|held| held.eq_ignore_ascii_case(commit))
}

/// Records that `dest` now holds `commit`.
pub(super) fn write(staging: &Path, dest: &Path, commit: &str) -> std::io::Result<()> {
    let workspace = identity(dest).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "the workspace is not a directory",
        )
    })?;
    let record = path_for(staging);
    let mut temp = record.as_os_str().to_os_string();
    temp.push(".tmp");
    std::fs::write(&temp, render(commit, workspace))?;
    std::fs::rename(&temp, &record)
}

/// Forgets what `dest` held (before its contents are replaced). A record that is already
/// gone is no error.
pub(super) fn forget(staging: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path_for(staging)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA: &str = "6dcb09b5b57875f334f61aebed695e2e4193db5e";

    #[test]
    fn a_record_names_its_commit_for_its_workspace_only() {
        let text = render(SHA, (7, 42, 9));
        assert_eq!(parse(&text, (7, 42, 9)).as_deref(), Some(SHA));
        assert_eq!(parse(&text, (7, 43, 9)), None, "another directory");
        assert_eq!(parse(&text, (7, 42, 10)), None, "the same inode made again");
        assert_eq!(
            parse(&text.to_uppercase(), (7, 42, 9)),
            None,
            "malformed keys"
        );
        assert_eq!(parse("commit main\nworkspace 7:42:9\n", (7, 42, 9)), None);
        assert_eq!(parse("workspace 7:42:9\n", (7, 42, 9)), None, "no commit");
        assert_eq!(
            parse(&format!("commit {SHA}\nworkspace 7:42\n"), (7, 42, 9)),
            None
        );
        assert_eq!(parse(&format!("commit {SHA}\n"), (7, 42, 9)), None);
        assert_eq!(parse(&format!("{text}extra line\n"), (7, 42, 9)), None);
    }

    #[test]
    fn a_workspace_made_again_is_not_the_recorded_one() {
        let root = tempfile::tempdir().unwrap();
        let dest = root.path().join("ws");
        let staging = root.path().join("staging");
        std::fs::create_dir(&dest).unwrap();
        assert!(!holds(&staging, &dest, SHA), "no record yet");
        write(&staging, &dest, SHA).unwrap();
        assert!(holds(&staging, &dest, SHA));
        assert!(holds(&staging, &dest, &SHA.to_uppercase()));
        assert!(!holds(&staging, &dest, &"0".repeat(40)));
        // Deleted and made again: not the checkout any more, also when the file system
        // reuses the inode (as ext4 does at once) — its creation time differs.
        std::fs::remove_dir(&dest).unwrap();
        std::fs::create_dir(&dest).unwrap();
        assert!(!holds(&staging, &dest, SHA));
        write(&staging, &dest, SHA).unwrap();
        for _ in 0..20 {
            std::fs::remove_dir(&dest).unwrap();
            std::fs::create_dir(&dest).unwrap();
            assert!(!holds(&staging, &dest, SHA), "made again");
        }
        write(&staging, &dest, SHA).unwrap();
        forget(&staging).unwrap();
        assert!(!holds(&staging, &dest, SHA), "forgotten");
        forget(&staging).unwrap();
    }
}
