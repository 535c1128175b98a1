//! Private by default: what the daemon writes — the SQLite database with its WAL and journal,
//! the data directory with its workspaces, artifacts, task logs and API token — is readable by
//! its own user only, whatever umask it was started with.
//!
//! [`restrict_umask`] makes every file and directory the process (and any command it starts)
//! creates from then on `0600`/`0700`; `tighten` narrows what an earlier version or a wider
//! umask already left: the data directory and the entries directly in it (deeper entries sit
//! behind the `0700` directory), and the database files.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use nix::sys::stat::{Mode, umask};

/// Sets the process umask to `077`; children inherit it.
pub fn restrict_umask() {
    umask(Mode::from_bits_truncate(0o077));
}

/// The SQLite database file a `database.url` names, if it names one.
pub fn sqlite_file(url: &str) -> Option<PathBuf> {
    let rest = url.trim().strip_prefix("sqlite:")?;
    let path = rest.strip_prefix("//").unwrap_or(rest);
    let path = path.split('?').next().unwrap_or_default();
    (!path.is_empty() && path != ":memory:").then(|| PathBuf::from(path))
}

/// Takes the group's and others' permissions away from `data_dir`, the entries directly in
/// it, and `database` with its `-wal`, `-shm` and `-journal` files (the owner's are kept, so
/// a `0644` file becomes `0600` and a `0755` directory or program `0700`). Missing paths are
/// skipped.
pub(crate) fn tighten(data_dir: &Path, database: Option<&Path>) -> std::io::Result<()> {
    if data_dir.is_dir() {
        owner_only(data_dir)?;
        for entry in std::fs::read_dir(data_dir)? {
            let entry = entry?;
            let kind = entry.file_type()?;
            if kind.is_dir() || kind.is_file() {
                owner_only(&entry.path())?;
            }
        }
    }
    if let Some(db) = database {
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut name = db.as_os_str().to_owned();
            name.push(suffix);
            let path = PathBuf::from(name);
            if path.is_file() {
                owner_only(&path)?;
            }
        }
    }
    Ok(())
}

fn owner_only(path: &Path) -> std::io::Result<()> {
    let mode = std::fs::metadata(path)?.permissions().mode();
    if mode & 0o077 != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & !0o077))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set_mode(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn what_an_older_version_left_is_narrowed() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir_all(data.join("workspaces")).unwrap();
        std::fs::write(data.join("api-token"), "t").unwrap();
        let db = dir.path().join("nightshift.db");
        std::fs::write(&db, "").unwrap();
        std::fs::write(dir.path().join("nightshift.db-wal"), "").unwrap();
        std::fs::write(data.join("tool.sh"), "").unwrap();
        for p in [&data, &data.join("workspaces"), &data.join("tool.sh")] {
            set_mode(p, 0o755);
        }
        for p in [&data.join("api-token"), &db] {
            set_mode(p, 0o644);
        }
        tighten(&data, Some(&db)).unwrap();
        assert_eq!(mode(&data), 0o700);
        assert_eq!(mode(&data.join("workspaces")), 0o700);
        assert_eq!(mode(&data.join("api-token")), 0o600);
        assert_eq!(
            mode(&data.join("tool.sh")),
            0o700,
            "the owner keeps the exec bit"
        );
        assert_eq!(mode(&db), 0o600);
        assert_eq!(mode(&dir.path().join("nightshift.db-wal")), 0o600);
        // Missing paths are fine.
        tighten(&dir.path().join("none"), Some(&dir.path().join("none.db"))).unwrap();
    }

    #[test]
    fn the_database_file_is_read_from_the_url() {
        assert_eq!(
            sqlite_file("sqlite://nightshift.db"),
            Some("nightshift.db".into())
        );
        assert_eq!(
            sqlite_file("sqlite:///var/lib/n.db?mode=rwc"),
            Some("/var/lib/n.db".into())
        );
        assert_eq!(sqlite_file("sqlite::memory:"), None);
        assert_eq!(sqlite_file("postgres://u@h/db"), None);
    }
}
