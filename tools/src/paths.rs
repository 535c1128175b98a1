//! Confinement of file tools to the run's workspace, enforced by the kernel at open time.
//!
//! Guarantees: every file or directory a file tool reads, writes, creates or lists is opened
//! through a handle on the workspace directory with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_MAGICLINKS)`, so the kernel resolves the whole path — symlinks included —
//! beneath the workspace in the same step that opens it. There is no check-then-open gap: a
//! process swapping a directory for a symlink to outside at any moment makes the open fail
//! (the tool says the path leads outside), never succeed outside. Parent directories for a
//! new file are made one level at a time with `mkdirat` in a directory opened beneath the
//! workspace; walks open each directory beneath the workspace and never follow a symlinked
//! directory. Symlinks that stay inside the workspace keep working (an absolute one that
//! points into the workspace too: the path is rewritten without it and opened beneath the
//! workspace again); ones that lead out (absolute targets elsewhere, `..` above the
//! workspace, `/proc` magic links) are refused.
//!
//! Refused before touching the disk ([`lexical`]): empty paths, NUL bytes, absolute paths and
//! `..` that climbs above the workspace. A kernel without `openat2` (Linux before 5.6, or a
//! seccomp filter that hides it) makes every file tool fail with a message saying so: there
//! is no unconfined fallback.

use std::fs::{File, Metadata};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag, openat2, readlinkat};
use nix::sys::stat::{Mode, SFlag, fstat, mkdirat};

/// How often an open that the kernel aborted because of a concurrent rename (`EAGAIN`) is
/// tried again before giving up.
const EAGAIN_RETRIES: usize = 32;

/// Why a file tool could not open a path beneath the workspace. `Display` is the message the
/// model gets (each names the path as the model wrote it, and what to do where there is
/// something to do).
#[derive(Debug, thiserror::Error)]
pub(crate) enum PathError {
    #[error("path is empty; give a path relative to the workspace")]
    Empty,
    #[error("path contains a NUL byte")]
    Nul,
    #[error("absolute paths are not allowed (`{0}`); use a path relative to the workspace")]
    Absolute(String),
    /// A root or prefix component after the path was found relative (not on Linux).
    #[error("absolute paths are not allowed (`{0}`)")]
    Rooted(String),
    #[error("`{0}` escapes the workspace through `..`; stay inside the workspace")]
    ClimbsOut(String),
    #[error("cannot open the workspace: {}", .0.desc())]
    NoWorkspace(Errno),
    #[error("cannot inspect `{path}`: {source}")]
    Inspect {
        path: String,
        source: std::io::Error,
    },
    #[error("`{0}` is not a regular file; cannot edit it")]
    NotEditable(String),
    #[error("`{0}` is the workspace itself, not a file")]
    IsWorkspace(String),
    #[error("`{0}` is not a regular file; refusing to write to it")]
    NotWritable(String),
    #[error("cannot create the directory `{dir}` for `{path}`: {}", .errno.desc())]
    MakeDir {
        dir: String,
        path: String,
        errno: Errno,
    },
    #[error("`{0}` resolves outside the workspace (through a symlink); refusing to follow it")]
    LeadsOutside(String),
    #[error("`{0}` goes through a symlink that loops or points into /proc; refusing to follow it")]
    Loops(String),
    #[error("`{0}` goes through a symlink to a missing target; refusing to write through it")]
    WriteThroughDangling(String),
    #[error("`{0}` is a symlink to a missing target")]
    Dangling(String),
    #[error("`{0}` does not exist; use list_files to see what is there")]
    Missing(String),
    #[error("`{path}`: `{part}` is not a directory")]
    PartNotDir { path: String, part: String },
    #[error("`{0}`: a part of the path before the last is not a directory")]
    PrefixNotDir(String),
    #[error("`{0}` is a directory, not a file")]
    IsDir(String),
    #[error("`{0}` is not a regular file (a FIFO or socket); refusing to open it")]
    Special(String),
    #[error(
        "file tools need the openat2 system call (Linux 5.6 or later) to keep paths inside the \
         workspace, and this kernel refused it; no file was opened"
    )]
    NoOpenat2,
    #[error("`{0}` kept changing while it was opened (a concurrent rename); try again")]
    KeptChanging(String),
    #[error("cannot {verb} `{path}`: {}", .errno.desc())]
    Refused {
        verb: &'static str,
        path: String,
        errno: Errno,
    },
}

/// `user_path` as a plain relative path below the workspace (empty for the workspace itself),
/// with `.` dropped and `..` applied lexically.
pub(crate) fn lexical(user_path: &str) -> Result<PathBuf, PathError> {
    if user_path.is_empty() {
        return Err(PathError::Empty);
    }
    if user_path.contains('\0') {
        return Err(PathError::Nul);
    }
    let raw = Path::new(user_path);
    if raw.is_absolute() {
        return Err(PathError::Absolute(user_path.to_string()));
    }
    let mut normal = PathBuf::new();
    for component in raw.components() {
        match component {
            Component::CurDir => {}
            Component::Normal(name) => normal.push(name),
            Component::ParentDir => {
                if !normal.pop() {
                    return Err(PathError::ClimbsOut(user_path.to_string()));
                }
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(PathError::Rooted(user_path.to_string()));
            }
        }
    }
    Ok(normal)
}

/// A relative path for messages and listings (`.` for the workspace itself).
pub(crate) fn shown(rel: &Path) -> String {
    if rel.as_os_str().is_empty() {
        ".".to_string()
    } else {
        rel.to_string_lossy().into_owned()
    }
}

/// What an open is for; decides the flags and the wording of errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Purpose {
    /// Read a file or list a directory that must exist.
    Read,
    /// Read and rewrite an existing file in place.
    Edit,
    /// Create or truncate a file for writing.
    Write,
    /// A directory on the way to a file being written.
    Parent,
}

/// A file or directory opened beneath the workspace.
#[derive(Debug)]
pub(crate) struct Opened {
    pub file: File,
    pub metadata: Metadata,
    /// The path below the workspace it was opened by (lexically normalised).
    pub rel: PathBuf,
}

/// A handle on the workspace directory; every open goes through it.
#[derive(Debug)]
pub(crate) struct Workspace {
    dir: OwnedFd,
    /// The canonical path the handle was opened at, to recognise absolute symlinks that
    /// point back inside.
    root: PathBuf,
}

impl Workspace {
    /// Opens the workspace directory itself (a canonical path from the context).
    pub(crate) fn open(root: &Path) -> Result<Workspace, PathError> {
        nix::fcntl::open(
            root,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map(|dir| Workspace {
            dir,
            root: root.to_path_buf(),
        })
        .map_err(PathError::NoWorkspace)
    }

    /// `openat2` beneath the workspace, retried while a concurrent rename aborts it. The
    /// kernel refuses every absolute symlink under `RESOLVE_BENEATH`; when one on the way
    /// points back inside the workspace, the path is rewritten without it
    /// ([`Self::without_absolute_links`]) and opened again, still beneath the workspace.
    fn raw(&self, rel: &Path, flags: OFlag, mode: Mode) -> Result<OwnedFd, Errno> {
        match self.beneath(rel, flags, mode) {
            Err(Errno::EXDEV) => {
                let follow_last = !flags.contains(OFlag::O_NOFOLLOW);
                let rewritten = self.without_absolute_links(rel, follow_last)?;
                self.beneath(&rewritten, flags, mode)
            }
            other => other,
        }
    }

    fn beneath(&self, rel: &Path, flags: OFlag, mode: Mode) -> Result<OwnedFd, Errno> {
        let path: &Path = if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rel
        };
        let how = OpenHow::new()
            .flags(flags | OFlag::O_CLOEXEC)
            .mode(mode)
            .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS);
        let mut tries = 0;
        loop {
            match openat2(self.dir.as_fd(), path, how) {
                Err(Errno::EAGAIN | Errno::EINTR) if tries < EAGAIN_RETRIES => tries += 1,
                other => return other,
            }
        }
    }

    /// `rel` with its symlinks resolved one by one (each looked at beneath the workspace,
    /// never followed by this step), an absolute target inside the workspace taken as the
    /// path below it. `EXDEV` if a symlink leads outside, `ELOOP` after 40 symlinks. The
    /// result is only a better path to open beneath the workspace, never trusted by itself:
    /// if something is swapped meanwhile, that open fails instead of leading out.
    fn without_absolute_links(&self, rel: &Path, follow_last: bool) -> Result<PathBuf, Errno> {
        const MAX_LINKS: usize = 40;
        let mut resolved = PathBuf::new();
        let mut rest: Vec<std::ffi::OsString> =
            rel.iter().rev().map(|c| c.to_os_string()).collect();
        let mut links = 0;
        while let Some(name) = rest.pop() {
            if name == "." {
                continue;
            }
            if name == ".." {
                if !resolved.pop() {
                    return Err(Errno::EXDEV);
                }
                continue;
            }
            let candidate = resolved.join(&name);
            if rest.is_empty() && !follow_last {
                resolved = candidate;
                break;
            }
            let fd =
                match self.beneath(&candidate, OFlag::O_PATH | OFlag::O_NOFOLLOW, Mode::empty()) {
                    Ok(fd) => fd,
                    // Missing from here on: the real open reports (or creates) it.
                    Err(Errno::ENOENT) => {
                        resolved = candidate;
                        resolved.extend(rest.iter().rev());
                        break;
                    }
                    Err(e) => return Err(e),
                };
            let kind = SFlag::from_bits_truncate(fstat(fd.as_fd())?.st_mode) & SFlag::S_IFMT;
            let is_link = kind == SFlag::S_IFLNK;
            if !is_link {
                resolved = candidate;
                continue;
            }
            links += 1;
            if links > MAX_LINKS {
                return Err(Errno::ELOOP);
            }
            let target = PathBuf::from(readlinkat(fd.as_fd(), "")?);
            let below = if target.is_absolute() {
                resolved = PathBuf::new();
                target
                    .strip_prefix(&self.root)
                    .map_err(|_| Errno::EXDEV)?
                    .to_path_buf()
            } else {
                target
            };
            rest.extend(below.iter().rev().map(|c| c.to_os_string()));
        }
        Ok(resolved)
    }

    fn opened(fd: OwnedFd, rel: &Path, user_path: &str) -> Result<Opened, PathError> {
        let file = File::from(fd);
        let metadata = file.metadata().map_err(|source| PathError::Inspect {
            path: user_path.to_string(),
            source,
        })?;
        Ok(Opened {
            file,
            metadata,
            rel: rel.to_path_buf(),
        })
    }

    /// Opens an existing file or directory for reading (never blocks on a FIFO).
    pub(crate) fn open_existing(&self, user_path: &str) -> Result<Opened, PathError> {
        let rel = lexical(user_path)?;
        let flags = OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOCTTY;
        let fd = self
            .raw(&rel, flags, Mode::empty())
            .map_err(|e| self.explain(e, &rel, user_path, Purpose::Read))?;
        Self::opened(fd, &rel, user_path)
    }

    /// Opens an existing regular file for reading and writing in place.
    pub(crate) fn open_for_edit(&self, user_path: &str) -> Result<Opened, PathError> {
        let rel = lexical(user_path)?;
        let flags = OFlag::O_RDWR | OFlag::O_NONBLOCK | OFlag::O_NOCTTY;
        let fd = self
            .raw(&rel, flags, Mode::empty())
            .map_err(|e| self.explain(e, &rel, user_path, Purpose::Edit))?;
        let opened = Self::opened(fd, &rel, user_path)?;
        if !opened.metadata.is_file() {
            return Err(PathError::NotEditable(user_path.to_string()));
        }
        Ok(opened)
    }

    /// Creates (or truncates) a regular file for writing, making its parent directories
    /// beneath the workspace first.
    pub(crate) fn create_file(&self, user_path: &str) -> Result<Opened, PathError> {
        let rel = lexical(user_path)?;
        if rel.as_os_str().is_empty() {
            return Err(PathError::IsWorkspace(user_path.to_string()));
        }
        if let Some(parent) = rel.parent() {
            self.make_dirs(parent, user_path)?;
        }
        let flags =
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_TRUNC | OFlag::O_NONBLOCK | OFlag::O_NOCTTY;
        let fd = self
            .raw(&rel, flags, Mode::from_bits_truncate(0o666))
            .map_err(|e| self.explain(e, &rel, user_path, Purpose::Write))?;
        let opened = Self::opened(fd, &rel, user_path)?;
        if !opened.metadata.is_file() {
            return Err(PathError::NotWritable(user_path.to_string()));
        }
        Ok(opened)
    }

    /// Makes every missing directory of `dirs` (relative, plain names), each with `mkdirat`
    /// in its parent opened beneath the workspace.
    fn make_dirs(&self, dirs: &Path, user_path: &str) -> Result<(), PathError> {
        let dir_flags = OFlag::O_PATH | OFlag::O_DIRECTORY;
        let mut current = PathBuf::new();
        let mut parent = self
            .raw(&current, dir_flags, Mode::empty())
            .map_err(|e| self.explain(e, &current, user_path, Purpose::Parent))?;
        for name in dirs.iter() {
            current.push(name);
            let fd = match self.raw(&current, dir_flags, Mode::empty()) {
                Err(Errno::ENOENT) => {
                    match mkdirat(parent.as_fd(), name, Mode::from_bits_truncate(0o777)) {
                        Ok(()) | Err(Errno::EEXIST) => {}
                        Err(errno) => {
                            return Err(PathError::MakeDir {
                                dir: shown(&current),
                                path: user_path.to_string(),
                                errno,
                            });
                        }
                    }
                    self.raw(&current, dir_flags, Mode::empty())
                }
                other => other,
            }
            .map_err(|e| self.explain(e, &current, user_path, Purpose::Parent))?;
            parent = fd;
        }
        Ok(())
    }

    /// Opens the directory `rel` (found by a walk) without following a symlink in its last
    /// component; `None` if it is gone, swapped for something else, or not allowed.
    pub(crate) fn open_walk_dir(&self, rel: &Path) -> Option<OwnedFd> {
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW;
        self.raw(rel, flags, Mode::empty()).ok()
    }

    /// Opens the file `rel` (found by a walk) for reading: a symlink inside the workspace is
    /// followed, one leading out is not; `None` if it cannot be opened beneath the workspace
    /// or is not a regular file.
    pub(crate) fn open_walk_file(&self, rel: &Path) -> Option<Opened> {
        let flags = OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOCTTY;
        let fd = self.raw(rel, flags, Mode::empty()).ok()?;
        let opened = Self::opened(fd, rel, "").ok()?;
        opened.metadata.is_file().then_some(opened)
    }

    /// Whether `rel` is itself a symlink (looked at beneath the workspace, not followed).
    fn is_symlink(&self, rel: &Path) -> bool {
        self.raw(rel, OFlag::O_PATH | OFlag::O_NOFOLLOW, Mode::empty())
            .ok()
            .and_then(|fd| File::from(fd).metadata().ok())
            .is_some_and(|m| m.file_type().is_symlink())
    }

    /// Why opening `rel` failed, for the model.
    fn explain(&self, errno: Errno, rel: &Path, user_path: &str, purpose: Purpose) -> PathError {
        let writing = matches!(purpose, Purpose::Write | Purpose::Parent);
        let path = user_path.to_string();
        match errno {
            Errno::EXDEV => PathError::LeadsOutside(path),
            Errno::ELOOP => PathError::Loops(path),
            Errno::ENOENT if self.is_symlink(rel) => {
                if writing {
                    PathError::WriteThroughDangling(path)
                } else {
                    PathError::Dangling(path)
                }
            }
            Errno::ENOENT => PathError::Missing(path),
            Errno::ENOTDIR if purpose == Purpose::Parent => PathError::PartNotDir {
                path,
                part: shown(rel),
            },
            Errno::ENOTDIR => PathError::PrefixNotDir(path),
            Errno::EISDIR => PathError::IsDir(path),
            Errno::ENXIO => PathError::Special(path),
            Errno::ENOSYS => PathError::NoOpenat2,
            Errno::EAGAIN => PathError::KeptChanging(path),
            errno => {
                let verb = match purpose {
                    Purpose::Read => "open",
                    Purpose::Edit => "open for editing",
                    Purpose::Write => "write",
                    Purpose::Parent => "create the directory for",
                };
                PathError::Refused { verb, path, errno }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexical_checks_happen_before_touching_the_disk() {
        for bad in ["/etc/passwd", "../x", "a/../../x", "", "a\0b"] {
            assert!(lexical(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(lexical("./a/../b/c").unwrap(), PathBuf::from("b/c"));
        assert_eq!(lexical(".").unwrap(), PathBuf::new());
        assert_eq!(shown(&lexical("a/..").unwrap()), ".");
    }

    #[test]
    fn refusals_read_as_the_model_is_told_them() {
        assert_eq!(
            lexical("../x").unwrap_err().to_string(),
            "`../x` escapes the workspace through `..`; stay inside the workspace"
        );
        assert_eq!(
            lexical("/etc").unwrap_err().to_string(),
            "absolute paths are not allowed (`/etc`); use a path relative to the workspace"
        );
        assert_eq!(
            PathError::NoOpenat2.to_string(),
            "file tools need the openat2 system call (Linux 5.6 or later) to keep paths inside \
             the workspace, and this kernel refused it; no file was opened"
        );
        let refused = PathError::Refused {
            verb: "open for editing",
            path: "a".into(),
            errno: Errno::EACCES,
        };
        assert_eq!(
            refused.to_string(),
            "cannot open for editing `a`: Permission denied"
        );
        let dir = PathError::MakeDir {
            dir: "a/b".into(),
            path: "a/b/c".into(),
            errno: Errno::EROFS,
        };
        assert_eq!(
            dir.to_string(),
            "cannot create the directory `a/b` for `a/b/c`: Read-only file system"
        );
    }
}
