//! Confinement of file tools to the run's workspace.
//!
//! Guarantees: a path returned by [`resolve`] lies inside the (canonical) workspace after all
//! symlinks are resolved. Refused: absolute paths, `..` that climbs above the workspace, paths
//! whose existing part resolves outside through a symlink, and dangling symlinks (writing
//! through one could create a file anywhere). For a file that does not exist yet the nearest
//! existing ancestor is checked, and the remaining components are plain names, so creating
//! them stays inside. (A concurrent process swapping a directory for a symlink between check
//! and use is outside this model: the workspace belongs to the run.)

use std::io;
use std::path::{Component, Path, PathBuf};

/// What the caller is about to do with the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Read or list something that must already exist.
    Existing,
    /// Write a file that may or may not exist yet.
    Create,
}

/// Resolve `user_path` (relative to `workspace`, which must be canonical) for `access`.
/// The error is a message for the model.
pub(crate) fn resolve(
    workspace: &Path,
    user_path: &str,
    access: Access,
) -> Result<PathBuf, String> {
    if user_path.is_empty() {
        return Err("path is empty; give a path relative to the workspace".to_string());
    }
    if user_path.contains('\0') {
        return Err("path contains a NUL byte".to_string());
    }
    let raw = Path::new(user_path);
    if raw.is_absolute() {
        return Err(format!(
            "absolute paths are not allowed (`{user_path}`); use a path relative to the workspace"
        ));
    }
    let mut normal = PathBuf::new();
    for component in raw.components() {
        match component {
            Component::CurDir => {}
            Component::Normal(name) => normal.push(name),
            Component::ParentDir => {
                if !normal.pop() {
                    return Err(format!(
                        "`{user_path}` escapes the workspace through `..`; stay inside the workspace"
                    ));
                }
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(format!("absolute paths are not allowed (`{user_path}`)"));
            }
        }
    }
    let joined = workspace.join(&normal);
    match access {
        Access::Existing => {
            let canonical = joined.canonicalize().map_err(|e| match e.kind() {
                io::ErrorKind::NotFound => {
                    if joined.symlink_metadata().is_ok() {
                        format!("`{user_path}` is a symlink to a missing target")
                    } else {
                        format!("`{user_path}` does not exist; use list_files to see what is there")
                    }
                }
                _ => format!("`{user_path}`: {e}"),
            })?;
            inside(workspace, &canonical, user_path)?;
            Ok(canonical)
        }
        Access::Create => resolve_for_create(workspace, &joined, user_path),
    }
}

fn resolve_for_create(workspace: &Path, joined: &Path, user_path: &str) -> Result<PathBuf, String> {
    if joined.symlink_metadata().is_ok() {
        let canonical = joined.canonicalize().map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => format!(
                "`{user_path}` is a symlink to a missing target; refusing to write through it"
            ),
            _ => format!("`{user_path}`: {e}"),
        })?;
        inside(workspace, &canonical, user_path)?;
        if canonical.is_dir() {
            return Err(format!("`{user_path}` is a directory, not a file"));
        }
        return Ok(canonical);
    }
    // Walk up to the nearest ancestor that exists; everything below it is plain names.
    let mut missing: Vec<&std::ffi::OsStr> = Vec::new();
    let mut current = joined;
    loop {
        match current.file_name() {
            Some(name) => missing.push(name),
            None => return Err(format!("`{user_path}` has no file name")),
        }
        current = match current.parent() {
            Some(parent) => parent,
            None => return Err(format!("`{user_path}` has no existing ancestor")),
        };
        if current.symlink_metadata().is_ok() {
            break;
        }
    }
    let base = current.canonicalize().map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => format!(
            "`{user_path}` goes through a symlink to a missing target; refusing to write through it"
        ),
        _ => format!("`{user_path}`: {e}"),
    })?;
    inside(workspace, &base, user_path)?;
    if !base.is_dir() {
        return Err(format!(
            "`{user_path}`: `{}` is not a directory",
            relative(workspace, &base)
        ));
    }
    let mut out = base;
    for name in missing.iter().rev() {
        out.push(name);
    }
    Ok(out)
}

fn inside(workspace: &Path, canonical: &Path, user_path: &str) -> Result<(), String> {
    if canonical.starts_with(workspace) {
        Ok(())
    } else {
        Err(format!(
            "`{user_path}` resolves outside the workspace (through a symlink); refusing to follow it"
        ))
    }
}

/// `path` relative to the workspace, for messages (`.` for the workspace itself).
pub(crate) fn relative(workspace: &Path, path: &Path) -> String {
    match path.strip_prefix(workspace) {
        Ok(rel) if rel.as_os_str().is_empty() => ".".to_string(),
        Ok(rel) => rel.to_string_lossy().into_owned(),
        Err(_) => path.to_string_lossy().into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexical_checks_happen_before_touching_the_disk() {
        let ws = Path::new("/nonexistent-workspace");
        for bad in ["/etc/passwd", "../x", "a/../../x", ""] {
            assert!(resolve(ws, bad, Access::Create).is_err(), "{bad} accepted");
        }
    }
}
