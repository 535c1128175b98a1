//! What a sandboxed command may reach: a [`Policy`], pure data handed to the launcher as JSON.
//!
//! Guarantees: a policy is an allowlist. Its command may read, write and execute beneath its
//! workspace, its private temp dir and the `write` grants; read and execute beneath the
//! `read` grants (the system directories and a few `/proc` files by default: see
//! [`SYSTEM_READ`], the [`ETC_READ`] entries of `/etc` and [`PROC_READ`], or, in a pid namespace, the whole fresh `/proc`); read
//! and write the device files in `devices`; nothing else on the filesystem.
//! [`Policy::validate`] refuses relative paths, `..`, NUL bytes, a grant of `/`, an ABI below
//! [`MIN_ABI`] and any grant beneath `/proc` that could show another process (outside a pid
//! namespace, only the [`PROC_READ`] files; never a write or device grant there), so a
//! malformed policy never becomes a wide one. [`check_exposure`] tells whether granted paths would
//! expose something the daemon must keep (the data directory, the database): a grant that
//! contains such a path, or lies inside it, is refused.

use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

mod exposure;

pub use exposure::{Exposure, check_exposure};

/// The lowest Landlock ABI the sandbox accepts: 6 (Linux 6.12), the first that scopes signals
/// and abstract UNIX sockets, so a command can neither signal the daemon nor reach its
/// abstract sockets. Filesystem rules and the ptrace restriction are older (ABI 1).
pub const MIN_ABI: u32 = 6;

/// The highest Landlock ABI this build knows. A newer kernel is used at this ABI.
pub const MAX_ABI: u32 = 10;

/// System directories a command may read and execute from, when they exist. Not granted:
/// `/tmp`, `/home`, `/root`, `/var`, `/opt`, `/srv`, `/mnt`, `/run`, `/sys`, `/proc` and `/dev`
/// (but the files of [`PROC_READ`] and [`DEVICES`]), and `/etc` but the [`ETC_READ`] entries.
pub const SYSTEM_READ: [&str; 6] = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64"];

/// What a command may read of `/etc`, when it exists: what programs read to run, never a
/// credential. The dynamic linker (`ld.so.*`); users, groups and name resolution for `id`,
/// `git`, `ssh` and `getaddrinfo` (`passwd`, `group`, `nsswitch.conf`, `hosts`, `host.conf`,
/// `resolv.conf`, `gai.conf`, `services`, `protocols`, `networks`, `hostname`); time and
/// locale; the trusted CA certificates (`ssl/certs`, `ca-certificates*`, `pki/ca-trust`,
/// `pki/tls/certs`) and OpenSSL's configuration, but not `ssl/private` or `pki/tls/private`;
/// `alternatives/` (Debian's links to `/usr/bin` programs); shells' and git's system
/// configuration; `ssh_config` and the system's known hosts, but not the host keys; language
/// runtimes' system configuration (`python3*`, `perl`); file-type data (`magic`,
/// `mime.types`), terminal data and fonts. Not granted, among others: `shadow`, `gshadow`,
/// `sudoers`, `ssh/ssh_host_*_key`, `ssl/private`, `machine-id`, and files that often hold
/// credentials (`npmrc`, `pip.conf`, `wgetrc`, `environment`, `apt/auth.conf.d`); a command
/// that needs one gets it through `[sandbox] read`.
pub const ETC_READ: [&str; 54] = [
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/ld.so.preload",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/hosts",
    "/etc/host.conf",
    "/etc/resolv.conf",
    "/etc/gai.conf",
    "/etc/services",
    "/etc/protocols",
    "/etc/networks",
    "/etc/rpc",
    "/etc/hostname",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/locale.alias",
    "/etc/locale.conf",
    "/etc/os-release",
    "/etc/lsb-release",
    "/etc/debian_version",
    "/etc/redhat-release",
    "/etc/system-release",
    "/etc/alpine-release",
    "/etc/ssl/certs",
    "/etc/ssl/openssl.cnf",
    "/etc/ca-certificates",
    "/etc/ca-certificates.conf",
    "/etc/pki/ca-trust",
    "/etc/pki/tls/certs",
    "/etc/pki/tls/openssl.cnf",
    "/etc/crypto-policies",
    "/etc/alternatives",
    "/etc/shells",
    "/etc/profile",
    "/etc/profile.d",
    "/etc/bash.bashrc",
    "/etc/inputrc",
    "/etc/gitconfig",
    "/etc/gitattributes",
    "/etc/ssh/ssh_config",
    "/etc/ssh/ssh_config.d",
    "/etc/ssh/ssh_known_hosts",
    "/etc/python3",
    "/etc/perl",
    "/etc/magic",
    "/etc/magic.mime",
    "/etc/mime.types",
    "/etc/terminfo",
    "/etc/fonts",
    "/etc/xml",
    "/etc/sgml",
];

/// Entries of `/etc` whose name starts with one of these are granted too, when they exist
/// (`/etc/python3.11` and the like: versioned, so not listable ahead).
pub const ETC_READ_PREFIXES: [&str; 1] = ["python3."];

/// Every system path the standard policy grants read (and execute) beneath, that exists:
/// [`SYSTEM_READ`], [`ETC_READ`] and the `/etc` entries named by [`ETC_READ_PREFIXES`].
pub fn system_read() -> Vec<PathBuf> {
    let versioned = std::fs::read_dir("/etc")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            ETC_READ_PREFIXES.iter().any(|p| name.starts_with(p))
        })
        .map(|e| e.path());
    SYSTEM_READ
        .iter()
        .chain(ETC_READ.iter())
        .map(PathBuf::from)
        .chain(versioned)
        .filter(|p| p.exists())
        .collect()
}

/// What a command may read of `/proc`: machine-wide facts, the kernel's settings, and
/// `/proc/self` as the launcher resolves it (the directory of the launched program's own
/// process). Not the rest of `/proc`: Landlock's ptrace restriction closes another process's
/// `mem` but (kernel 6.18) not its `environ`, `cmdline` or `fd`, so `/proc/<pid>` stays closed.
pub const PROC_READ: [&str; 9] = [
    "/proc/self",
    "/proc/cpuinfo",
    "/proc/meminfo",
    "/proc/stat",
    "/proc/loadavg",
    "/proc/uptime",
    "/proc/version",
    "/proc/filesystems",
    "/proc/sys",
];

/// In a pid namespace (see [`Policy::in_pid_namespace`]) the launcher mounts a fresh `/proc`
/// for that namespace before the ruleset is made, and this is granted read instead of
/// [`PROC_READ`]: it lists only the namespace's processes (the command, its descendants and
/// the launcher's init, pid 1), so `/proc/self` works for every child and `ps` works, while
/// the daemon's pid, or any process outside, has no entry there at all.
pub const PROC: &str = "/proc";

/// Device files a command may read and write, when they exist.
pub const DEVICES: [&str; 6] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
];

/// Whether a command may use the network.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Network {
    /// The daemon's network, as it is (TCP connects limited to [`Policy::tcp_ports`] and the
    /// ports of [`Policy::connect`]).
    #[default]
    On,
    /// A network namespace of its own: only a loopback interface, down. Nothing is reachable,
    /// not even the host's loopback.
    Off,
    /// A network namespace of its own whose one way out is the launcher's egress proxy on
    /// its loopback ([`crate::egress`]): public addresses on [`Policy::tcp_ports`], and the
    /// [`Policy::connect`] grants. Needs a pid namespace (the proxy's process is started by
    /// the launcher before it makes one).
    Proxied,
}

/// What one command may reach.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Read, write and execute beneath it; the command starts here.
    pub workspace: PathBuf,
    /// Read, write and execute beneath it; HOME and TMPDIR point here.
    pub temp_dir: PathBuf,
    /// Read and execute beneath each (each must exist).
    pub read: Vec<PathBuf>,
    /// Read, write and execute beneath each (each must exist).
    pub write: Vec<PathBuf>,
    /// Device files to read and write (missing ones are skipped).
    pub devices: Vec<PathBuf>,
    pub network: Network,
    /// The Landlock ABI the launcher enforces in full (an error if the kernel has less).
    pub abi: u32,
    /// Run the command in a user+pid+mount namespace of its own, with a fresh `/proc` (an
    /// error if the kernel refuses). Default `false`: the command shares the daemon's.
    #[serde(default)]
    pub pid_namespace: bool,
    /// With the network on, the TCP ports the command may connect to (Landlock's TCP
    /// connect rules; proxied: the ports of public destinations); `None`: any. With the
    /// network off, none (no TCP at all).
    #[serde(default)]
    pub tcp_ports: Option<Vec<u16>>,
    /// Proxied: `host:port` destinations reachable whatever their address (a test database
    /// on loopback, a service on the private network). On the host's network: their ports
    /// are allowed besides [`Policy::tcp_ports`].
    #[serde(default)]
    pub connect: Vec<String>,
}

impl Policy {
    /// The standard policy: `workspace` and `temp_dir`, the system directories that exist
    /// plus `read`, `write`, the standard devices, `network`, enforced at `abi`.
    pub fn standard(
        workspace: impl Into<PathBuf>,
        temp_dir: impl Into<PathBuf>,
        read: &[PathBuf],
        write: &[PathBuf],
        network: Network,
        abi: u32,
    ) -> Policy {
        let system = system_read();
        let procs = PROC_READ.iter().map(PathBuf::from).filter(|p| p.exists());
        // `/etc/resolv.conf` is often a link into `/run` (systemd-resolved): name resolution
        // needs the one file it points to, and nothing else there.
        let resolver = Path::new("/etc/resolv.conf")
            .canonicalize()
            .ok()
            .filter(|p| !system.iter().any(|dir| p.starts_with(dir)));
        let system = system.clone().into_iter().chain(procs).chain(resolver);
        Policy {
            workspace: workspace.into(),
            temp_dir: temp_dir.into(),
            read: system.chain(read.iter().cloned()).collect(),
            write: write.to_vec(),
            devices: DEVICES.iter().map(PathBuf::from).collect(),
            network,
            abi,
            pid_namespace: false,
            tcp_ports: None,
            connect: Vec::new(),
        }
    }

    /// The same policy in a pid namespace of its own: the fresh [`PROC`] is readable instead
    /// of the [`PROC_READ`] files.
    pub fn in_pid_namespace(mut self) -> Policy {
        self.read
            .retain(|p| !PROC_READ.iter().any(|proc| p == Path::new(proc)));
        self.read.push(PathBuf::from(PROC));
        self.pid_namespace = true;
        self
    }

    /// The same policy, connecting over TCP only to `ports` when the network is on (`None`:
    /// any port).
    pub fn with_tcp_ports(mut self, ports: Option<Vec<u16>>) -> Policy {
        self.tcp_ports = ports;
        self
    }

    /// The same policy, reaching the `granted` `host:port` destinations through the proxy.
    pub fn with_connect(mut self, granted: Vec<String>) -> Policy {
        self.connect = granted;
        self
    }

    /// The same policy for another workspace.
    pub fn with_workspace(&self, workspace: impl Into<PathBuf>) -> Policy {
        Policy {
            workspace: workspace.into(),
            ..self.clone()
        }
    }

    /// Every path with its role, for checks and messages.
    pub fn grants(&self) -> impl Iterator<Item = (&'static str, &Path)> {
        [
            ("workspace", self.workspace.as_path()),
            ("temp dir", self.temp_dir.as_path()),
        ]
        .into_iter()
        .chain(self.read.iter().map(|p| ("read", p.as_path())))
        .chain(self.write.iter().map(|p| ("write", p.as_path())))
        .chain(self.devices.iter().map(|p| ("device", p.as_path())))
    }

    /// Refuses a policy that is malformed or wider than the sandbox allows.
    pub fn validate(&self) -> Result<(), PolicyError> {
        if !(MIN_ABI..=MAX_ABI).contains(&self.abi) {
            return Err(PolicyError::Abi(self.abi));
        }
        for (role, path) in self.grants() {
            check_path(role, path)?;
            self.check_proc(role, path)?;
        }
        if self.tcp_ports.as_ref().is_some_and(|p| p.contains(&0)) {
            return Err(PolicyError::PortZero);
        }
        if self.network == Network::Proxied && !self.pid_namespace {
            return Err(PolicyError::ProxyWithoutPidNamespace);
        }
        if let Some(bad) = self
            .connect
            .iter()
            .find(|g| crate::egress::split_host_port(g).is_none())
        {
            return Err(PolicyError::BadConnectGrant(bad.clone()));
        }
        Ok(())
    }

    /// A grant beneath `/proc` is read-only, and outside a pid namespace one of the
    /// [`PROC_READ`] files: the host's `/proc` shows every process, the daemon's included.
    fn check_proc(&self, role: &'static str, path: &Path) -> Result<(), PolicyError> {
        if !path.starts_with(PROC) {
            return Ok(());
        }
        if role != "read" {
            return Err(PolicyError::ProcWritable {
                role,
                path: path.to_path_buf(),
            });
        }
        if !self.pid_namespace && !PROC_READ.iter().any(|p| path == Path::new(p)) {
            return Err(PolicyError::ProcShowsOthers(path.to_path_buf()));
        }
        Ok(())
    }
}

/// Why [`Policy::validate`] refused a policy: malformed, or wider than the sandbox allows.
/// `Display` names the grant's role (`workspace`, `temp dir`, `read`, `write`, `device`) and
/// path, and what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error(
        "the policy asks for Landlock ABI {0}; the sandbox enforces ABI {min} to {max}",
        min = MIN_ABI,
        max = MAX_ABI
    )]
    Abi(u32),
    #[error("{role} path `{}` is not absolute", .path.display())]
    NotAbsolute { role: &'static str, path: PathBuf },
    #[error("{role} path `{}` contains `.` or `..`; give it without them", .path.display())]
    NotNormal { role: &'static str, path: PathBuf },
    #[error("{role} path `/` would grant the whole filesystem; grant narrower directories")]
    WholeFilesystem { role: &'static str },
    #[error("{role} path `{}` contains a NUL byte", .path.display())]
    Nul { role: &'static str, path: PathBuf },
    #[error("{role} path `{}` is beneath /proc, which is never writable", .path.display())]
    ProcWritable { role: &'static str, path: PathBuf },
    #[error(
        "read path `{}` would show other processes (the daemon's among them): outside a pid \
         namespace only {} are readable beneath /proc",
        .0.display(),
        PROC_READ.join(", ")
    )]
    ProcShowsOthers(PathBuf),
    #[error("TCP port 0 is not a port a command can connect to")]
    PortZero,
    #[error("a proxied network needs a pid namespace (its proxy runs in the launcher outside it)")]
    ProxyWithoutPidNamespace,
    #[error("connect grant `{0}` is not host:port")]
    BadConnectGrant(String),
}

/// A granted path must be absolute, normal (no `..`), not `/`, without NUL bytes.
fn check_path(role: &'static str, path: &Path) -> Result<(), PolicyError> {
    let owned = || path.to_path_buf();
    if !path.is_absolute() {
        return Err(PolicyError::NotAbsolute {
            role,
            path: owned(),
        });
    }
    if path
        .components()
        .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
    {
        return Err(PolicyError::NotNormal {
            role,
            path: owned(),
        });
    }
    if path.components().count() < 2 {
        return Err(PolicyError::WholeFilesystem { role });
    }
    if path.as_os_str().as_encoded_bytes().contains(&0) {
        return Err(PolicyError::Nul {
            role,
            path: owned(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Policy {
        Policy::standard(
            "/data/workspaces/run-1",
            "/data/tmp/run-1",
            &[PathBuf::from("/opt/tools")],
            &[PathBuf::from("/srv/cache")],
            Network::Off,
            MIN_ABI,
        )
    }

    #[test]
    fn the_standard_policy_grants_existing_system_dirs_and_the_extras() {
        let p = policy();
        assert!(p.read.contains(&PathBuf::from("/usr")));
        assert!(p.read.contains(&PathBuf::from("/proc/self")));
        assert!(p.read.contains(&PathBuf::from("/etc/passwd")));
        for secret in ["/etc", "/etc/shadow", "/etc/gshadow", "/etc/ssl"] {
            assert!(
                p.read.iter().all(|r| r != Path::new(secret)),
                "{secret} is not granted"
            );
        }
        assert!(p.read.contains(&PathBuf::from("/opt/tools")));
        assert!(
            p.read
                .iter()
                .all(|r| r.exists() || r == Path::new("/opt/tools"))
        );
        for never in ["/tmp", "/home", "/root", "/var", "/proc", "/"] {
            assert!(
                p.grants().all(|(_, g)| g != Path::new(never)),
                "{never} is not granted"
            );
        }
        assert_eq!(p.write, vec![PathBuf::from("/srv/cache")]);
        assert!(p.devices.contains(&PathBuf::from("/dev/null")));
        p.validate().unwrap();
        let json = serde_json::to_string(&p).unwrap();
        assert!(json.contains(r#""network":"off""#), "{json}");
        assert_eq!(serde_json::from_str::<Policy>(&json).unwrap(), p);
    }

    #[test]
    fn malformed_or_wide_policies_are_refused() {
        let with = |f: &dyn Fn(&mut Policy)| {
            let mut p = policy();
            f(&mut p);
            p.validate().unwrap_err().to_string()
        };
        assert!(with(&|p| p.abi = 5).contains("ABI 5"));
        assert!(with(&|p| p.abi = 11).contains("ABI 11"));
        assert!(with(&|p| p.workspace = "ws".into()).contains("not absolute"));
        assert!(with(&|p| p.write.push("/srv/../etc".into())).contains("`..`"));
        assert!(with(&|p| p.read.push("/".into())).contains("whole filesystem"));
        assert!(with(&|p| p.temp_dir = "/".into()).contains("temp dir path `/`"));
        assert!(with(&|p| p.read.push("/proc".into())).contains("would show other processes"));
        assert!(with(&|p| p.read.push("/proc/1".into())).contains("would show other processes"));
        assert!(with(&|p| p.write.push("/proc/sys".into())).contains("never writable"));
        let json = r#"{"workspace":"/w","temp_dir":"/t","read":[],"write":[],"devices":[],"network":"on","abi":6,"extra":1}"#;
        let old = json.replace(r#","extra":1"#, "");
        let parsed: Policy = serde_json::from_str(&old).unwrap();
        assert!(
            !parsed.pid_namespace,
            "a policy without the field shares the pid namespace"
        );
        assert!(
            serde_json::from_str::<Policy>(json).is_err(),
            "unknown fields"
        );
    }

    #[test]
    fn in_a_pid_namespace_the_fresh_proc_replaces_the_proc_files() {
        let p = policy().in_pid_namespace();
        assert!(p.pid_namespace);
        assert!(p.read.contains(&PathBuf::from("/proc")));
        assert!(
            !p.read.contains(&PathBuf::from("/proc/self")),
            "the whole fresh /proc covers it"
        );
        assert!(p.read.contains(&PathBuf::from("/usr")));
        p.validate().unwrap();
        let mut wider = p.clone();
        wider.write.push("/proc/self".into());
        assert_eq!(
            wider.validate().unwrap_err().to_string(),
            "write path `/proc/self` is beneath /proc, which is never writable"
        );
    }
}
