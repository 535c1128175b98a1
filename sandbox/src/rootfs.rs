//! The command's filesystem in a pid namespace: a root of its own that holds only what its
//! policy grants, so nothing else on the host can even be named from inside.
//!
//! Landlock decides what a command may open, but not every way of reaching a file goes
//! through an open: connecting to a pathname UNIX socket (PostgreSQL's in
//! `/var/run/postgresql`, a Docker or D-Bus socket, an agent's in `/tmp`) is not a right
//! Landlock ABI 7 handles. So pid 1 of the command's namespaces, in its private mount
//! namespace, builds a new root and moves into it before the command starts:
//!
//! - a fresh tmpfs (read-only once built) as `/`, holding only mount points;
//! - each path of the policy (workspace, temp dir, `read` and `write` grants, the devices
//!   that exist, and the namespace's fresh `/proc`) bind-mounted at its own path, parents
//!   before children, so every path a command is given means what it means outside; a grant
//!   that is a symbolic link shows what it points to;
//! - `/dev/fd`, `/dev/stdin`, `/dev/stdout` and `/dev/stderr` as the usual links into
//!   `/proc/self/fd`;
//! - `pivot_root` into it, the host's root detached, and the working directory taken again
//!   inside the new root (never left pointing outside it).
//!
//! Guarantees: every source is opened (`O_PATH`) before anything is mounted over the place
//! the root is assembled, and bound through its descriptor; a mount point is only ever made
//! on the new tmpfs, never in a bound host directory; any failure is an error naming the
//! step and path, and the command does not run. Landlock still applies inside, unchanged.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use nix::fcntl::{OFlag, open};
use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sys::stat::Mode;

use crate::error::{SetupError, doing};
use crate::policy::{PROC, Policy};

/// Where the new root is assembled: a fresh tmpfs is mounted over it in the command's mount
/// namespace (the host's directory is not touched).
const BASE: &str = "/tmp";

/// The links of `/dev` programs expect (bash's process substitution uses `/dev/fd`).
const DEV_LINKS: [(&str, &str); 4] = [
    ("dev/fd", "/proc/self/fd"),
    ("dev/stdin", "/proc/self/fd/0"),
    ("dev/stdout", "/proc/self/fd/1"),
    ("dev/stderr", "/proc/self/fd/2"),
];

/// One path shown in the new root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Shown {
    pub path: PathBuf,
    /// A missing path is an error (else it is left out: a device this machine lacks).
    pub required: bool,
}

/// The paths the policy shows, each once, parents before children (so a grant inside
/// another is mounted over it). Pure.
pub(crate) fn shown(policy: &Policy) -> Vec<Shown> {
    let required = [policy.workspace.as_path(), policy.temp_dir.as_path()]
        .into_iter()
        .chain(policy.read.iter().map(PathBuf::as_path))
        .chain(policy.write.iter().map(PathBuf::as_path))
        .chain([Path::new(PROC)])
        .map(|p| (p, true));
    let optional = policy.devices.iter().map(|p| (p.as_path(), false));
    let mut all: Vec<Shown> = Vec::new();
    for (path, required) in required.chain(optional) {
        match all.iter_mut().find(|s| s.path == path) {
            Some(seen) => seen.required |= required,
            None => all.push(Shown {
                path: path.to_path_buf(),
                required,
            }),
        }
    }
    all.sort_by_key(|s| s.path.components().count());
    all
}

/// A source opened before the tmpfs covers anything.
struct Source {
    path: PathBuf,
    fd: OwnedFd,
    is_dir: bool,
}

fn open_sources(shown: &[Shown]) -> Result<Vec<Source>, SetupError> {
    let mut sources = Vec::new();
    for Shown { path, required } in shown {
        let opened = open(path, OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty());
        let fd = match opened {
            Ok(fd) => fd,
            Err(_) if !required => continue,
            Err(e) => return Err(doing(format!("cannot open `{}`", path.display()))(e)),
        };
        let is_dir = std::fs::metadata(format!("/proc/self/fd/{}", fd.as_raw_fd()))
            .map_err(doing(format!("cannot stat `{}`", path.display())))?
            .is_dir();
        sources.push(Source {
            path: path.clone(),
            fd,
            is_dir,
        });
    }
    Ok(sources)
}

/// Builds a new root showing `shown` (see [`shown`]) and moves this process (pid 1 of the
/// namespaces, in its private mount namespace, with the fresh `/proc` mounted) into it; the
/// working directory is then `/` (the caller takes its own again).
pub(crate) fn enter(shown: &[Shown]) -> Result<(), SetupError> {
    let sources = open_sources(shown)?;
    mount(
        Some("tmpfs"),
        BASE,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("mode=0755,size=1m"),
    )
    .map_err(doing(format!(
        "cannot mount the new root's tmpfs on {BASE}"
    )))?;
    let root = Path::new(BASE);
    let root_dev = std::fs::metadata(root)
        .map_err(doing("cannot stat the new root"))?
        .dev();
    for source in &sources {
        let target = beneath(root, &source.path);
        make_mount_point(root_dev, &target, source.is_dir)?;
        let from = format!("/proc/self/fd/{}", source.fd.as_raw_fd());
        mount(
            Some(from.as_str()),
            &target,
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            None::<&str>,
        )
        .map_err(doing(format!(
            "cannot show `{}` in the new root",
            source.path.display()
        )))?;
    }
    drop(sources);
    if root.join("dev").is_dir() {
        for (link, to) in DEV_LINKS {
            let link = root.join(link);
            if std::fs::symlink_metadata(&link).is_err() {
                std::os::unix::fs::symlink(to, &link)
                    .map_err(doing(format!("cannot link {}", link.display())))?;
            }
        }
    }
    mount(
        None::<&str>,
        BASE,
        None::<&str>,
        MsFlags::MS_REMOUNT
            | MsFlags::MS_BIND
            | MsFlags::MS_RDONLY
            | MsFlags::MS_NOSUID
            | MsFlags::MS_NODEV,
        None::<&str>,
    )
    .map_err(doing("cannot make the new root read-only"))?;
    pivot(root)
}

/// `path` (absolute) beneath `root`.
fn beneath(root: &Path, path: &Path) -> PathBuf {
    let relative: PathBuf = path
        .components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .collect();
    root.join(relative)
}

/// Makes `target` (and its missing parents) as a directory, or an empty file when `!is_dir`,
/// only ever on the new root's tmpfs (`root_dev`): a mount point missing inside a bound host
/// directory is an error, never made on the host.
fn make_mount_point(root_dev: u64, target: &Path, is_dir: bool) -> Result<(), SetupError> {
    if std::fs::metadata(target).is_ok() {
        return Ok(());
    }
    let parent = target.parent().unwrap_or(Path::new("/"));
    make_mount_point(root_dev, parent, true)?;
    let on_tmpfs = std::fs::metadata(parent).is_ok_and(|m| m.dev() == root_dev);
    if !on_tmpfs {
        return Err(SetupError::MountPointOnHost(target.to_path_buf()));
    }
    let made = if is_dir {
        std::fs::create_dir(target)
    } else {
        std::fs::File::create(target).map(drop)
    };
    made.map_err(doing(format!(
        "cannot make the mount point {}",
        target.display()
    )))
}

/// `pivot_root` into `root`, then the old root detached (the `pivot_root(".", ".")` way: no
/// directory for the old root is needed).
fn pivot(root: &Path) -> Result<(), SetupError> {
    std::env::set_current_dir(root).map_err(doing("cannot enter the new root"))?;
    nix::unistd::pivot_root(".", ".").map_err(doing("pivot_root"))?;
    umount2(".", MntFlags::MNT_DETACH).map_err(doing("cannot detach the old root"))?;
    std::env::set_current_dir("/").map_err(doing("cannot enter the new root"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Network;

    #[test]
    fn every_grant_is_shown_once_parents_first_devices_optional() {
        let policy = Policy {
            workspace: "/data/workspaces/run-1".into(),
            temp_dir: "/data/tmp/run-1".into(),
            read: vec![
                "/usr".into(),
                "/usr/local/share/x".into(),
                "/etc/hosts".into(),
            ],
            write: vec!["/usr".into()],
            devices: vec!["/dev/null".into()],
            network: Network::Off,
            abi: 6,
            pid_namespace: true,
            tcp_ports: None,
            connect: vec![],
        };
        let shown = shown(&policy);
        let paths: Vec<&Path> = shown.iter().map(|s| s.path.as_path()).collect();
        assert_eq!(
            paths,
            [
                "/usr",
                "/proc",
                "/etc/hosts",
                "/dev/null",
                "/data/workspaces/run-1",
                "/data/tmp/run-1",
                "/usr/local/share/x",
            ]
            .map(Path::new)
        );
        let required = |p: &str| {
            shown
                .iter()
                .find(|s| s.path == Path::new(p))
                .unwrap()
                .required
        };
        assert!(required("/usr") && required("/proc") && required("/data/tmp/run-1"));
        assert!(!required("/dev/null"));
    }

    #[test]
    fn a_path_beneath_the_root_keeps_its_components() {
        let root = Path::new("/tmp");
        assert_eq!(
            beneath(root, Path::new("/usr/bin")),
            Path::new("/tmp/usr/bin")
        );
        assert_eq!(beneath(root, Path::new("/")), Path::new("/tmp"));
    }
}
