//! The kernel steps of the namespaces a sandboxed command runs in; each either succeeds in
//! full or returns what failed, in words.
//!
//! - [`isolate_network`]: a network namespace alone (the launcher without a pid namespace).
//! - [`enter`]: the launcher's own step with a pid namespace: one new user namespace owning
//!   a new pid namespace, the caller's uid and gid mapped to 0 inside, so the init the
//!   launcher starts next keeps the capabilities it needs across its `exec`. The caller
//!   itself stays in the daemon's pid, mount and network namespaces (the egress proxy
//!   connects out from there); its first child is pid 1 of the new one.
//! - [`prepare_init`]: pid 1's step: mount and IPC namespaces of its own (SysV message
//!   queues, semaphores and shared memory of its own, none of the host's) and, unless the
//!   network is the host's, a network namespace; mounts private from here on, a fresh
//!   `/proc` showing only the new pid namespace; for a proxied network, loopback up and the
//!   egress proxy's listening sockets handed to the proxy's process ([`take_over`]); a root of the
//!   command's own holding only what its policy shows ([`crate::rootfs`]); then a nested
//!   user namespace that maps the caller's real uid and gid back (the command sees the ids
//!   it has outside, and holds no capability over the pid, mount and network namespaces, so
//!   it cannot unmount `/proc` or reconfigure the network even as root).
//!
//! The `unsafe` calls live here, each with its reason: the `ioctl`s that bring loopback up,
//! adopting the socket received from the init and the channel a process inherited.

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;

use nix::mount::{MsFlags, mount};
use nix::sched::{CloneFlags, unshare};
use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};
use nix::unistd::{Gid, Uid};

use crate::error::{SetupError, doing};
use crate::policy::Network;
use crate::rootfs::{self, Shown};

/// Writes this process's id maps (after `unshare(CLONE_NEWUSER)`): `inside` ↔ `outside`, one
/// id each, and `setgroups` denied (needed to map a gid without privileges).
fn map_self(inside: (u32, u32), outside: (u32, u32)) -> Result<(), SetupError> {
    let write = |file: &str, text: String| {
        std::fs::write(file, text).map_err(doing(format!("cannot write {file}")))
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
pub(crate) fn isolate_network() -> Result<(), SetupError> {
    if Uid::effective().is_root() {
        match unshare(CloneFlags::CLONE_NEWNET) {
            Ok(()) => return Ok(()),
            // Root without CAP_SYS_ADMIN (a container): try as an unprivileged user would.
            Err(nix::errno::Errno::EPERM) => {}
            Err(e) => return Err(doing("unshare(CLONE_NEWNET)")(e)),
        }
    }
    let own = ids();
    unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNET)
        .map_err(doing("unshare(CLONE_NEWUSER | CLONE_NEWNET)"))?;
    // The same uid and gid inside as outside, so files keep their owners.
    map_self(own, own)
}

/// New user and pid namespaces for this process's next child; this process becomes uid and
/// gid 0 inside the new user namespace, and stays in the daemon's mount and network
/// namespaces (where the egress proxy connects out and resolves names).
pub(crate) fn enter() -> Result<(), SetupError> {
    let own = ids();
    let flags = CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWPID;
    unshare(flags).map_err(doing(format!("unshare({flags:?})")))?;
    map_self((0, 0), own)
}

/// In pid 1 of the namespaces [`enter`] made: mount and IPC namespaces of its own (and a
/// network namespace, unless `network` is the host's), a fresh `/proc`; with a proxied
/// network, its loopback up and the proxy's listening sockets made there and handed to the
/// proxy's process on `egress` (kept when there is none: the probe); the new root showing `shown`
/// (the working directory is then `/`); then the nested user namespace that gives back the
/// real uid and gid (read from this namespace's own maps).
pub(crate) fn prepare_init(
    shown: &[Shown],
    network: Network,
    forwards: &[SocketAddr],
    egress: Option<&UnixStream>,
) -> Result<(), SetupError> {
    let real = (
        outside_id("/proc/self/uid_map")?,
        outside_id("/proc/self/gid_map")?,
    );
    let mut flags = CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWIPC;
    if network != Network::On {
        flags |= CloneFlags::CLONE_NEWNET;
    }
    unshare(flags).map_err(doing(format!("unshare({flags:?})")))?;
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(doing("cannot make the mounts private"))?;
    mount(
        Some("proc"),
        "/proc",
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .map_err(doing("cannot mount a fresh /proc for the pid namespace"))?;
    if network == Network::Proxied {
        loopback_up()?;
        let proxy = SocketAddr::from(([127, 0, 0, 1], crate::egress::PROXY_PORT));
        let mut listeners = Vec::new();
        for at in std::iter::once(proxy).chain(forwards.iter().copied()) {
            let listener = std::net::TcpListener::bind(at).map_err(doing(format!(
                "cannot listen on {at} in the command's network namespace"
            )))?;
            listeners.push(listener);
        }
        if let Some(channel) = egress {
            hand_over(channel, &listeners)?;
        }
    }
    rootfs::enter(shown)?;
    unshare(CloneFlags::CLONE_NEWUSER).map_err(doing("unshare(CLONE_NEWUSER) for the command"))?;
    map_self(real, (0, 0))
}

/// Brings up the loopback interface of this process's (new) network namespace.
#[allow(unsafe_code)] // See SAFETY below.
fn loopback_up() -> Result<(), SetupError> {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0")
        .map_err(doing("cannot open a socket to bring loopback up"))?;
    let fd = socket.as_raw_fd();
    // SAFETY: `ifreq` is plain old data for which all zeroes is a valid value; the name is
    // NUL-terminated within its 16 bytes; both ioctls read or write only that struct, which
    // lives across the calls, on a socket descriptor we own.
    let result = unsafe {
        let mut request: nix::libc::ifreq = std::mem::zeroed();
        for (to, from) in request.ifr_name.iter_mut().zip(b"lo\0") {
            *to = *from as nix::libc::c_char;
        }
        let got = nix::libc::ioctl(fd, nix::libc::SIOCGIFFLAGS, &mut request);
        if got < 0 {
            got
        } else {
            request.ifr_ifru.ifru_flags |= nix::libc::IFF_UP as nix::libc::c_short;
            nix::libc::ioctl(fd, nix::libc::SIOCSIFFLAGS, &request)
        }
    };
    if result < 0 {
        let error = std::io::Error::last_os_error();
        return Err(doing("cannot bring the loopback interface up")(error));
    }
    Ok(())
}

/// Sends `listeners` to the proxy's process over `channel` (`SCM_RIGHTS`).
fn hand_over(channel: &UnixStream, listeners: &[std::net::TcpListener]) -> Result<(), SetupError> {
    let fds: Vec<i32> = listeners.iter().map(AsRawFd::as_raw_fd).collect();
    let message = [std::io::IoSlice::new(b"L")];
    sendmsg::<()>(
        channel.as_raw_fd(),
        &message,
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::empty(),
        None,
    )
    .map_err(doing(
        "cannot hand the egress proxy's socket to the launcher",
    ))?;
    Ok(())
}

/// The egress process's side of [`hand_over`]: the proxy's listening socket, then one per
/// loopback forward, once the init sent them; `None` when the init ended without sending.
pub(crate) fn take_over(channel: &UnixStream) -> Option<Vec<std::net::TcpListener>> {
    let mut byte = [0u8; 1];
    let mut slices = [std::io::IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!([std::os::fd::RawFd; 1 + crate::egress::MAX_FORWARDS]);
    let got = recvmsg::<()>(
        channel.as_raw_fd(),
        &mut slices,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .ok()?;
    let fds = got.cmsgs().ok()?.find_map(|c| match c {
        ControlMessageOwned::ScmRights(fds) => Some(fds),
        _ => None,
    })?;
    let listeners: Vec<std::net::TcpListener> = fds.into_iter().map(adopt).collect();
    (!listeners.is_empty()).then_some(listeners)
}

/// Owns a descriptor just received with `SCM_RIGHTS`.
#[allow(unsafe_code)] // See SAFETY below.
fn adopt(fd: std::os::fd::RawFd) -> std::net::TcpListener {
    use std::os::fd::FromRawFd;
    // SAFETY: the kernel installed `fd` in this process for this message alone; nothing else
    // holds or closes it, and the init sent a listening TCP socket.
    unsafe { std::net::TcpListener::from_raw_fd(fd) }
}

/// The outside id that id 0 of this user namespace maps to (the second field of the
/// single line [`enter`] wrote).
fn outside_id(file: &'static str) -> Result<u32, SetupError> {
    let text = std::fs::read_to_string(file).map_err(doing(format!("cannot read {file}")))?;
    parse_outside_of_root(&text).ok_or(SetupError::NoRootMapping { file, map: text })
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

/// Owns a UNIX stream descriptor this process inherited for one channel; close-on-exec from
/// here on, so nothing this process starts holds it.
#[allow(unsafe_code)] // See SAFETY below.
pub(crate) fn adopt_stream(fd: std::os::fd::RawFd) -> UnixStream {
    use std::os::fd::FromRawFd;
    // SAFETY: the launcher passed this descriptor to this process for this channel alone;
    // nothing else here uses or closes it.
    let channel = unsafe { UnixStream::from_raw_fd(fd) };
    let _ = nix::fcntl::fcntl(
        &channel,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
    );
    channel
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
