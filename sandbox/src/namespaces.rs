//! The kernel steps of the namespaces a sandboxed command runs in; each either succeeds in
//! full or returns what failed, in words.
//!
//! - [`isolate_network`]: a network namespace alone (the launcher without a pid namespace).
//! - [`enter`]: the launcher's own step with a pid namespace: one new user namespace owning
//!   new pid, mount, IPC (SysV message queues, semaphores and shared memory of its own, none
//!   of the host's) and (network off) network namespaces, the caller's uid and gid mapped to
//!   0 inside, so the init the launcher starts next keeps the capabilities it needs to mount
//!   `/proc` across its `exec`. The caller itself stays in the daemon's pid namespace; its
//!   first child is pid 1 of the new one.
//! - [`prepare_init`]: pid 1's step: mounts private from here on, a fresh `/proc` showing
//!   only the new pid namespace, a root of the command's own holding only what its policy
//!   shows ([`crate::rootfs`]), then a nested user namespace that maps the caller's real uid
//!   and gid back (the command sees the ids it has outside, and holds no capability over the
//!   pid, mount and network namespaces, so it cannot unmount `/proc` or reconfigure the
//!   network even as root).

use nix::mount::{MsFlags, mount};
use nix::sched::{CloneFlags, unshare};
use nix::unistd::{Gid, Uid};

use crate::policy::Network;
use crate::rootfs::{self, Shown};

/// Writes this process's id maps (after `unshare(CLONE_NEWUSER)`): `inside` ↔ `outside`, one
/// id each, and `setgroups` denied (needed to map a gid without privileges).
fn map_self(inside: (u32, u32), outside: (u32, u32)) -> Result<(), String> {
    let write = |file: &str, text: String| {
        std::fs::write(file, text).map_err(|e| format!("cannot write {file}: {e}"))
    };
    write("/proc/self/setgroups", "deny".into())?;
    write(
        "/proc/self/uid_map",
        format!("{} {} 1\n", inside.0, outside.0),
    )?;
    write(
        "/proc/self/gid_map",
        format!("{} {} 1\n", inside.1, outside.1),
    )?;
    Ok(())
}

fn ids() -> (u32, u32) {
    (Uid::current().as_raw(), Gid::current().as_raw())
}

/// A network namespace of this process's own (loopback only, down): as root directly,
/// otherwise inside a new user namespace that maps the caller's uid and gid to themselves.
pub(crate) fn isolate_network() -> Result<(), String> {
    if Uid::effective().is_root() {
        match unshare(CloneFlags::CLONE_NEWNET) {
            Ok(()) => return Ok(()),
            // Root without CAP_SYS_ADMIN (a container): try as an unprivileged user would.
            Err(nix::errno::Errno::EPERM) => {}
            Err(e) => return Err(format!("unshare(CLONE_NEWNET): {e}")),
        }
    }
    let own = ids();
    unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNET)
        .map_err(|e| format!("unshare(CLONE_NEWUSER | CLONE_NEWNET): {e}"))?;
    // The same uid and gid inside as outside, so files keep their owners.
    map_self(own, own)
}

/// New user, pid, mount and IPC namespaces (and network, with `network` off) for this
/// process's next child; this process becomes uid and gid 0 inside the new user namespace.
pub(crate) fn enter(network: Network) -> Result<(), String> {
    let own = ids();
    let mut flags = CloneFlags::CLONE_NEWUSER
        | CloneFlags::CLONE_NEWPID
        | CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWIPC;
    if network == Network::Off {
        flags |= CloneFlags::CLONE_NEWNET;
    }
    unshare(flags).map_err(|e| format!("unshare({flags:?}): {e}"))?;
    map_self((0, 0), own)
}

/// In pid 1 of the namespaces [`enter`] made: a fresh `/proc`, the new root showing `shown`
/// (the working directory is then `/`), then the nested user namespace that gives back the
/// real uid and gid (read from this namespace's own maps).
pub(crate) fn prepare_init(shown: &[Shown]) -> Result<(), String> {
    let real = (
        outside_id("/proc/self/uid_map")?,
        outside_id("/proc/self/gid_map")?,
    );
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| format!("cannot make the mounts private: {e}"))?;
    mount(
        Some("proc"),
        "/proc",
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .map_err(|e| format!("cannot mount a fresh /proc for the pid namespace: {e}"))?;
    rootfs::enter(shown)?;
    unshare(CloneFlags::CLONE_NEWUSER)
        .map_err(|e| format!("unshare(CLONE_NEWUSER) for the command: {e}"))?;
    map_self(real, (0, 0))
}

/// The outside id that id 0 of this user namespace maps to (the second field of the
/// single line [`enter`] wrote).
fn outside_id(file: &str) -> Result<u32, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("cannot read {file}: {e}"))?;
    parse_outside_of_root(&text).ok_or_else(|| format!("{file} does not map id 0: `{text}`"))
}

fn parse_outside_of_root(map: &str) -> Option<u32> {
    map.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            ["0", outside, _count] => outside.parse().ok(),
            _ => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_outside_id_of_root_is_read_from_a_map() {
        assert_eq!(
            parse_outside_of_root("         0       1000          1\n"),
            Some(1000)
        );
        assert_eq!(parse_outside_of_root("0 0 1\n"), Some(0));
        assert_eq!(parse_outside_of_root("1000 1000 1\n"), None);
        assert_eq!(parse_outside_of_root(""), None);
    }
}
