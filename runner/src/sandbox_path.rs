//! `[sandbox] path`: the PATH sandboxed commands get, never the daemon's.
//!
//! Guarantees: a sandboxed command's PATH is `[sandbox] path` joined with `:` when set, else
//! [`nightshift_tools::SANDBOXED_PATH`] (the system's `sbin` and `bin` directories, which the
//! sandbox lets every command read). The daemon's own PATH is never passed into the sandbox:
//! it may name directories the sandbox cannot read (a user's pyenv or nvm under `/root`),
//! where a program found first aborts instead of the system's copy running. [`check_form`]
//! refuses an empty list and any entry that is not an absolute directory path usable in PATH
//! (relative, `..`, `:` or a NUL byte); [`check_readable`] refuses an entry the sandbox would
//! not let commands read, naming the grant to add. With `[sandbox] mode = "off"` the key is
//! only checked for its form: unsandboxed commands keep the daemon's PATH.

use std::path::{Component, Path, PathBuf};

use crate::config::Invalid;

/// The PATH of sandboxed commands for the configured directories (`None`: the default).
pub(crate) fn command_path(configured: Option<&[PathBuf]>) -> String {
    match configured {
        Some(dirs) => dirs
            .iter()
            .map(|d| d.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(":"),
        None => nightshift_tools::SANDBOXED_PATH.to_string(),
    }
}

/// Each entry is an absolute directory path that PATH can hold; the list is not empty.
pub(crate) fn check_form(dirs: &[PathBuf]) -> Result<(), Invalid> {
    let at = "sandbox.path";
    if dirs.is_empty() {
        return Err(Invalid::value(
            at,
            format!(
                "is empty: commands would find no program by its name; remove the key for the \
                 default ({}) or list directories",
                nightshift_tools::SANDBOXED_PATH
            ),
        ));
    }
    for dir in dirs {
        let text = dir.to_string_lossy();
        if !dir.is_absolute() {
            return Err(Invalid::table(
                at,
                format!(
                    "`{text}` is not an absolute directory; PATH entries are absolute (e.g. \
                     \"/opt/tools/bin\")"
                ),
            ));
        }
        if dir.components().any(|c| c == Component::ParentDir) {
            return Err(Invalid::table(
                at,
                format!("`{text}` contains `..`; write the directory without it"),
            ));
        }
        if text.contains(':') || text.contains('\0') {
            return Err(Invalid::table(
                at,
                format!(
                    "`{text}` contains `:` or a NUL byte, which PATH cannot hold; list each \
                     directory as its own entry"
                ),
            ));
        }
    }
    Ok(())
}

/// Each entry (made real by the caller) lies beneath a directory the sandbox lets commands
/// read (`readable`: the system directories and the `read` and `write` grants).
pub(crate) fn check_readable(dirs: &[PathBuf], readable: &[&Path]) -> Result<(), Invalid> {
    match dirs
        .iter()
        .find(|d| !readable.iter().any(|r| d.starts_with(r)))
    {
        Some(dir) => Err(Invalid::table(
            "sandbox.path",
            format!(
                "`{}` is not readable inside the sandbox, so commands could not run programs \
                 from it; add it (or a directory above it) to sandbox.read, or remove it",
                dir.display()
            ),
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(list: &[&str]) -> Vec<PathBuf> {
        list.iter().map(PathBuf::from).collect()
    }

    #[test]
    fn the_default_is_the_system_directories_and_a_list_is_joined_in_order() {
        assert_eq!(
            command_path(None),
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        );
        assert_eq!(
            command_path(Some(&paths(&["/opt/tools/bin", "/usr/bin"]))),
            "/opt/tools/bin:/usr/bin"
        );
    }

    #[test]
    fn entries_pathless_or_unreadable_in_the_sandbox_are_refused_with_what_to_do() {
        check_form(&paths(&["/opt/tools/bin", "/usr/bin"])).unwrap();
        for (list, expect) in [
            (vec![], "sandbox.path is empty"),
            (vec!["bin"], "`bin` is not an absolute directory"),
            (vec!["/usr/../root/bin"], "contains `..`"),
            (
                vec!["/usr/bin:/bin"],
                "list each directory as its own entry",
            ),
        ] {
            let err = check_form(&paths(&list)).unwrap_err().to_string();
            assert!(err.contains(expect), "{list:?}: {err}");
        }
        let readable = [Path::new("/usr"), Path::new("/opt/tools")];
        check_readable(&paths(&["/usr/local/bin", "/opt/tools/bin"]), &readable).unwrap();
        let err = check_readable(&paths(&["/usr/bin", "/root/.pyenv/shims"]), &readable)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`/root/.pyenv/shims` is not readable inside the sandbox")
                && err.contains("add it (or a directory above it) to sandbox.read"),
            "{err}"
        );
    }
}
