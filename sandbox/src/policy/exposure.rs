//! Whether granted paths would expose what the daemon must keep (its data directory, its
//! database): [`check_exposure`] refuses a grant that contains such a path (granting `/var`
//! exposes `/var/lib/nightshift`) or lies inside it (granting `<data dir>/workspaces` exposes
//! every run's workspace), naming the config key, the grant and what it exposes. Pure: it
//! compares the canonical paths it is given and does no I/O.

use std::path::{Path, PathBuf};

/// A grant that would let a command reach a protected path ([`check_exposure`]); `Display`
/// names the config key, the grant, and what it exposes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Exposure {
    /// The grant contains the protected path.
    #[error(
        "{key} grants sandboxed commands `{}`, which contains {what} `{}`: a command could \
         read it. Grant narrower paths (or move {what})",
        .grant.display(),
        .path.display()
    )]
    Contains {
        key: String,
        grant: PathBuf,
        what: String,
        path: PathBuf,
    },
    /// The grant lies inside the protected path.
    #[error(
        "{key} grants sandboxed commands `{}`, which is inside {what} `{}`: a command could \
         read what the daemon keeps there. Grant a path outside it",
        .grant.display(),
        .path.display()
    )]
    Inside {
        key: String,
        grant: PathBuf,
        what: String,
        path: PathBuf,
    },
}

/// Refuses any grant that would let a command reach a protected path: a grant that contains
/// it (granting `/var` exposes `/var/lib/nightshift`) or lies inside it (granting
/// `<data dir>/workspaces` exposes every run's workspace). `grants` are (config key, path);
/// `protected` are (what it is, path). Compare canonical paths: this function does no I/O.
pub fn check_exposure<'a>(
    grants: impl IntoIterator<Item = (&'a str, &'a Path)>,
    protected: &[(&str, &Path)],
) -> Result<(), Exposure> {
    for (key, grant) in grants {
        for (what, path) in protected {
            let contains = path.starts_with(grant);
            if !contains && !grant.starts_with(path) {
                continue;
            }
            let (key, what) = (key.to_string(), what.to_string());
            let (grant, path) = (grant.to_path_buf(), path.to_path_buf());
            return Err(if contains {
                Exposure::Contains {
                    key,
                    grant,
                    what,
                    path,
                }
            } else {
                Exposure::Inside {
                    key,
                    grant,
                    what,
                    path,
                }
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_containing_or_inside_protected_paths_are_refused() {
        let data = Path::new("/var/lib/nightshift");
        let db = Path::new("/srv/db/nightshift.db");
        let protected = [("the data directory", data), ("the database", db)];
        let err = check_exposure([("sandbox.read", Path::new("/var"))], &protected)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "sandbox.read grants sandboxed commands `/var`, which contains the data directory \
             `/var/lib/nightshift`: a command could read it. Grant narrower paths (or move the \
             data directory)"
        );
        assert!(
            err.contains("sandbox.read grants sandboxed commands `/var`")
                && err.contains("contains the data directory `/var/lib/nightshift`"),
            "{err}"
        );
        let err = check_exposure(
            [("sandbox.write", Path::new("/var/lib/nightshift/workspaces"))],
            &protected,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("is inside the data directory"), "{err}");
        let err = check_exposure([("sandbox.read", Path::new("/srv/db"))], &protected)
            .unwrap_err()
            .to_string();
        assert!(err.contains("the database"), "{err}");
        // A sibling with a common prefix is not inside.
        check_exposure(
            [
                ("sandbox.read", Path::new("/var/lib/nightshift-cache")),
                ("sandbox.write", Path::new("/srv/dbx")),
            ],
            &protected,
        )
        .unwrap();
    }
}
