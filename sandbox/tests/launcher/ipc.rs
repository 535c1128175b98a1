//! Other ways out of the sandbox besides files and the network: the host's UNIX sockets
//! cannot be reached, and SysV IPC is the command's own.

use std::path::Path;
use std::process::{Command, Output};

use nightshift_sandbox::Network;

use super::{layout, run_in, sandbox, text, unsandboxed};

/// A pathname UNIX socket listening outside the sandbox (as PostgreSQL's in
/// `/var/run/postgresql`, or an agent's in `/tmp`): Landlock does not govern `connect` to one,
/// so it must not be there to name. In a pid namespace, the command's root holds only its
/// grants: the socket is not found, with the network on or off; a socket made inside the
/// workspace still works. The control: the same connect outside the sandbox succeeds.
#[test]
fn host_unix_sockets_cannot_be_reached() {
    let l = layout();
    let path = l.outside.join("service.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    listener.set_nonblocking(true).unwrap();
    let connect = |p: &Path| {
        format!(
            "perl -MIO::Socket::UNIX -e 'IO::Socket::UNIX->new(Peer => \"{}\") \
             or die \"connect: $!\\n\"; print \"connected\\n\"'",
            p.display()
        )
    };
    let outside = unsandboxed(&l, &connect(&path));
    assert!(outside.status.success(), "the control: {}", text(&outside));
    for network in [Network::On, Network::Off] {
        let out = run_in(&sandbox(&l, network, &[]), &l, "sh", &connect(&path));
        let t = text(&out);
        assert!(
            !out.status.success() && !t.contains("connected"),
            "{network:?}: {t}"
        );
        assert!(t.contains("No such file or directory"), "{network:?}: {t}");
    }
    let postgres = Path::new("/var/run/postgresql/.s.PGSQL.5432");
    if postgres.exists() {
        let out = run_in(
            &sandbox(&l, Network::Off, &[]),
            &l,
            "sh",
            &connect(postgres),
        );
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("connected"),
            "{}",
            text(&out)
        );
    }
    let own = run_in(
        &sandbox(&l, Network::Off, &[]),
        &l,
        "sh",
        "perl -MIO::Socket::UNIX -e '$l = IO::Socket::UNIX->new(Local => \"own.sock\", \
         Listen => 1) or die \"listen: $!\"; IO::Socket::UNIX->new(Peer => \"own.sock\") \
         or die \"connect: $!\"; print \"own works\\n\"'",
    );
    assert!(
        String::from_utf8_lossy(&own.stdout).contains("own works"),
        "{}",
        text(&own)
    );
}

/// SysV IPC is the host's without an IPC namespace: a message queue made outside (with
/// `ipcmk`) is listed by `ipcs` outside, and not inside the sandbox, where the command's own
/// queue works.
#[test]
fn sysv_ipc_is_the_commands_own() {
    let l = layout();
    let made = Command::new("ipcmk")
        .args(["-Q", "-p", "0600"])
        .output()
        .unwrap();
    assert!(made.status.success(), "ipcmk: {}", text(&made));
    let id: String = String::from_utf8_lossy(&made.stdout)
        .chars()
        .filter(char::is_ascii_digit)
        .collect();
    struct Remove(String);
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = Command::new("ipcrm").args(["-q", &self.0]).output();
        }
    }
    let _remove = Remove(id.clone());
    // Ids restart at 0 in a new namespace: the queue is told by its (random) key.
    let host = unsandboxed(&l, "ipcs -q");
    let key = String::from_utf8_lossy(&host.stdout)
        .lines()
        .find(|line| line.split_whitespace().nth(1) == Some(id.as_str()))
        .and_then(|line| line.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| panic!("the control lists queue {id}: {}", text(&host)));
    let listed = |out: &Output| {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|line| line.split_whitespace().next() == Some(key.as_str()))
    };
    for network in [Network::On, Network::Off] {
        let inside = run_in(
            &sandbox(&l, network, &[]),
            &l,
            "sh",
            "ipcs -q; ipcmk -Q && ipcs -q",
        );
        assert!(inside.status.success(), "{}", text(&inside));
        assert!(
            !listed(&inside),
            "{network:?}: the host's queue is visible: {}",
            text(&inside)
        );
        assert!(
            String::from_utf8_lossy(&inside.stdout).contains("Message queue id"),
            "its own queue: {}",
            text(&inside)
        );
    }
}
