//! `[sandbox]`: how the daemon confines the commands its tools start, and the
//! [`Confinement`] every tool call's context gets.
//!
//! Guarantees: with `mode = "required"` (the default) [`Confinement::start`] probes the kernel
//! through the launcher once and refuses, naming what is missing and the opt-out, when the
//! sandbox cannot be enforced; every command then runs through the launcher with its run's
//! workspace and private temp dir (`<data_dir>/tmp/<run id>`, 0700). [`validate`] refuses any
//! grant (`read`, `write`, and the system directories the sandbox always grants) that
//! contains or lies inside the data directory or the SQLite database, a relative grant, and
//! `network = "off"` for an agent while the sandbox is off. `mode = "off"` is the explicit
//! opt-out: one WARN line at start, and commands run unconfined.
//!
//! Network: an agent's `network = "on"` (the default) gives its commands a network namespace
//! of their own whose one way out is the launcher's egress proxy
//! (`nightshift_sandbox::egress`): public addresses on `[sandbox] ports` (default 80 and
//! 443), and the `[sandbox] connect` grants by `host:port` — never the daemon's loopback
//! (its database, its API), the private network or the metadata endpoint otherwise.
//! `"host"` keeps the host's network with TCP connects limited to those ports (Landlock's
//! TCP rules), and so does `"on"` where no pid namespace can be made (one WARN line at
//! start). `ports = "any"` lifts the port limit.
//!
//! Pid namespace: where the kernel makes one (user+pid+mount+IPC namespaces), every command
//! runs in its own, seeing only its own processes, in a root of its own that holds only its
//! grants (no host UNIX socket can be named), with SysV IPC of its own. With `pid_namespace = "auto"` (the default) a
//! kernel that refuses costs one WARN line at start, and commands share the daemon's pid
//! namespace (still unable to read or signal any process outside, but able to guess pids and
//! without `ps`): the filesystem, signal and network confinement is the same either way, so
//! the missing namespace is not worth refusing to start over. `pid_namespace = "required"`
//! refuses to start instead.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nightshift_agent::SandboxNetwork;
use nightshift_sandbox::policy::{check_exposure, system_read};
use nightshift_sandbox::probe::{Needs, decide, probe};
use nightshift_sandbox::{Network, Policy, Sandbox};
use serde::Deserialize;

use crate::config::{Config, Invalid};

/// The `[sandbox]` settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SandboxConfig {
    /// `required` (default): commands run sandboxed, and `serve` refuses to start where the
    /// kernel cannot enforce it. `off`: commands run unsandboxed, as the daemon's user.
    pub mode: SandboxMode,
    /// Extra absolute paths commands may read and execute beneath. Default none.
    pub read: Vec<PathBuf>,
    /// Extra absolute paths commands may read, write and execute beneath. Default none.
    pub write: Vec<PathBuf>,
    /// Advanced: the program that applies the sandbox (it must be a `nightshift` binary).
    /// Default: the running `nightshift` binary.
    pub launcher: Option<PathBuf>,
    /// `auto` (default): each command in a pid namespace of its own where the kernel allows
    /// it, else (one WARN line at start) in the daemon's. `required`: refuse to start without.
    pub pid_namespace: PidNamespaceMode,
    /// With an agent's network on (or `host`), the TCP ports its commands may connect to:
    /// default [`DEFAULT_PORTS`] (HTTP and HTTPS); `"any"` lifts the limit.
    pub ports: Ports,
    /// `host:port` destinations commands may reach whatever their address (a test database
    /// on loopback, a service on the private network); default none.
    pub connect: Vec<String>,
    /// The directories sandboxed commands find programs in (their PATH), in order: absolute,
    /// readable in the sandbox. Default: `nightshift_tools::SANDBOXED_PATH`'s directories.
    /// See `crate::sandbox_path`.
    pub path: Option<Vec<PathBuf>>,
}

/// The TCP ports commands may connect to with the network on, by default: HTTP and HTTPS.
pub(crate) const DEFAULT_PORTS: [u16; 2] = [80, 443];

/// `[sandbox] ports`: a list of TCP ports, or `"any"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ports {
    Only(Vec<u16>),
    Any,
}

impl Default for Ports {
    fn default() -> Self {
        Ports::Only(DEFAULT_PORTS.to_vec())
    }
}

impl Ports {
    /// What the launcher enforces: `None` for any port.
    fn allowed(&self) -> Option<Vec<u16>> {
        match self {
            Ports::Only(ports) => Some(ports.clone()),
            Ports::Any => None,
        }
    }
}

impl<'de> Deserialize<'de> for Ports {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let wrong = || {
            serde::de::Error::custom(
                "expected a list of TCP ports (1 to 65535), e.g. [80, 443, 5432], or \"any\"",
            )
        };
        match toml::Value::deserialize(d)? {
            toml::Value::String(word) if word == "any" => Ok(Ports::Any),
            toml::Value::Array(items) => items
                .iter()
                .map(|item| {
                    item.as_integer()
                        .and_then(|n| u16::try_from(n).ok())
                        .filter(|n| *n != 0)
                        .ok_or_else(wrong)
                })
                .collect::<Result<Vec<u16>, _>>()
                .map(Ports::Only),
            _ => Err(wrong()),
        }
    }
}

/// `[sandbox] pid_namespace`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PidNamespaceMode {
    #[default]
    Auto,
    Required,
}

/// `[sandbox] mode`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxMode {
    #[default]
    Required,
    Off,
}

/// A path as the kernel sees it: canonical when it exists, else absolute.
pub(crate) fn real(path: &Path) -> PathBuf {
    path.canonicalize()
        .or_else(|_| std::path::absolute(path))
        .unwrap_or_else(|_| path.to_path_buf())
}

/// The checks of `[sandbox]` and `[agents.sandbox]` that need the rest of the config.
pub(crate) fn validate(config: &Config) -> Result<(), Invalid> {
    let sandbox = &config.sandbox;
    if let Some(path) = &sandbox.path {
        crate::sandbox_path::check_form(path)?;
    }
    if sandbox.mode == SandboxMode::Off {
        if let Some(agent) = config
            .agents
            .iter()
            .find(|a| a.sandbox.network == SandboxNetwork::Off)
        {
            return Err(Invalid::value(
                format!("agents.{}.sandbox.network", agent.name),
                "= \"off\" needs the sandbox, and [sandbox] mode is \"off\"; set mode = \
                 \"required\" or the agent's network to \"on\"",
            ));
        }
        return Ok(());
    }
    if let Some(bad) = sandbox
        .connect
        .iter()
        .find(|g| nightshift_sandbox::egress::split_host_port(g).is_none())
    {
        return Err(Invalid::table(
            "sandbox.connect",
            format!(
                "`{bad}` is not host:port (e.g. \"127.0.0.1:5433\", \"db.internal:5432\", \
                 \"[::1]:8080\")"
            ),
        ));
    }
    for (key, paths) in [
        ("sandbox.read", &sandbox.read),
        ("sandbox.write", &sandbox.write),
    ] {
        if let Some(p) = paths.iter().find(|p| !p.is_absolute()) {
            return Err(Invalid::table(
                key,
                format!(
                    "`{}` is not an absolute path; grants are absolute",
                    p.display()
                ),
            ));
        }
    }
    let data = real(&config.resolve_path(&config.runtime.data_dir));
    let db = crate::private::sqlite_file(&config.database.url).map(|f| real(&f));
    let mut protected = vec![("the data directory", data.as_path())];
    if let Some(db) = &db {
        protected.push(("the database", db.as_path()));
    }
    let system: Vec<PathBuf> = system_read().iter().map(|p| real(p)).collect();
    let read: Vec<PathBuf> = sandbox.read.iter().map(|p| real(p)).collect();
    let write: Vec<PathBuf> = sandbox.write.iter().map(|p| real(p)).collect();
    if let Some(path) = &sandbox.path {
        let readable: Vec<&Path> = system
            .iter()
            .chain(&read)
            .chain(&write)
            .map(PathBuf::as_path)
            .collect();
        let path: Vec<PathBuf> = path.iter().map(|p| real(p)).collect();
        crate::sandbox_path::check_readable(&path, &readable)?;
    }
    let grants = system
        .iter()
        .map(|p| ("the sandbox (system directories are readable)", p.as_path()))
        .chain(read.iter().map(|p| ("sandbox.read", p.as_path())))
        .chain(write.iter().map(|p| ("sandbox.write", p.as_path())));
    Ok(check_exposure(grants, &protected)?)
}

/// What every sandboxed command of this daemon shares: the launcher, the enforced ABI, the
/// grants and where temp dirs go.
#[derive(Debug, Clone)]
pub(crate) struct Confinement {
    launcher: PathBuf,
    abi: u32,
    read: Vec<PathBuf>,
    write: Vec<PathBuf>,
    temp_root: PathBuf,
    pid_namespace: bool,
    /// With the network on, the TCP ports commands may connect to (`None`: any).
    tcp_ports: Option<Vec<u16>>,
    /// `host:port` destinations reachable whatever their address.
    connect: Vec<String>,
    /// PATH of sandboxed commands.
    command_path: String,
}

/// The program that confines a command: `[sandbox] launcher`, else this binary.
fn launcher(config: &Config) -> anyhow::Result<PathBuf> {
    match &config.sandbox.launcher {
        Some(p) => Ok(config.resolve_path(p)),
        None => std::env::current_exe()
            .map_err(|e| anyhow::anyhow!("cannot find the nightshift binary to launch sandboxed commands: {e}; set [sandbox] launcher")),
    }
}

/// Every path `[sandbox] read` and `write` grant exists (a missing one is a typo, refused).
fn grants_exist(sandbox: &SandboxConfig) -> anyhow::Result<()> {
    for (key, p) in sandbox
        .read
        .iter()
        .map(|p| ("sandbox.read", p))
        .chain(sandbox.write.iter().map(|p| ("sandbox.write", p)))
    {
        if !p.exists() {
            anyhow::bail!(
                "invalid config: {key}: `{}` does not exist; create it or remove the grant",
                p.display()
            );
        }
    }
    Ok(())
}

impl Confinement {
    /// Probes the kernel and decides, for `config`: `Ok(None)` with `mode = "off"` (logged
    /// once as a warning), the confinement, or an error saying what is missing.
    pub(crate) fn start(config: &Config) -> anyhow::Result<Option<Confinement>> {
        let sandbox = &config.sandbox;
        if sandbox.mode == SandboxMode::Off {
            tracing::warn!(
                "[sandbox] mode = \"off\": commands run unsandboxed, as the daemon's user, and \
                 can read what it can (its environment, the API token, the database)"
            );
            return Ok(None);
        }
        let launcher = launcher(config)?;
        grants_exist(sandbox)?;
        let support = probe(&launcher).map_err(|e| anyhow::anyhow!("{e}"))?;
        let needs = Needs {
            network_off: config
                .agents
                .iter()
                .filter(|a| a.sandbox.network == SandboxNetwork::Off)
                .map(|a| a.name.clone())
                .collect(),
            pid_namespace_required: sandbox.pid_namespace == PidNamespaceMode::Required,
        };
        let enforcement = decide(&support, &needs).map_err(|r| anyhow::anyhow!("{r}"))?;
        if let Some(why) = &enforcement.pid_namespace_missing {
            tracing::warn!(
                "commands share the daemon's pid, mount and IPC namespaces: this kernel \
                 refuses to make them ({why}); they still cannot read or signal processes \
                 outside the sandbox, but can guess their pids, connect to pathname UNIX \
                 sockets they can name (a database's in /var/run, an agent's in /tmp) and use \
                 the host's SysV IPC. Set [sandbox] pid_namespace = \"required\" to refuse \
                 to start instead"
            );
        }
        tracing::info!(
            landlock_abi = enforcement.abi,
            pid_namespace = enforcement.pid_namespace,
            launcher = %launcher.display(),
            "commands run sandboxed"
        );
        let confinement = Confinement {
            launcher,
            abi: enforcement.abi,
            read: sandbox.read.iter().map(|p| real(p)).collect(),
            write: sandbox.write.iter().map(|p| real(p)).collect(),
            temp_root: config.resolve_path(&config.runtime.data_dir).join("tmp"),
            pid_namespace: enforcement.pid_namespace,
            tcp_ports: sandbox.ports.allowed(),
            connect: sandbox.connect.clone(),
            command_path: crate::sandbox_path::command_path(sandbox.path.as_deref()),
        };
        if !confinement.pid_namespace
            && let Some(agent) = config
                .agents
                .iter()
                .find(|a| a.sandbox.network == SandboxNetwork::On)
        {
            tracing::warn!(
                agent = %agent.name,
                "without a pid namespace there is no egress proxy: commands of agents whose \
                 network is \"on\" use the host's network, TCP connects limited to \
                 [sandbox] ports and [sandbox] connect's ports, so a local service on one of \
                 those ports (or the metadata endpoint on 80) is reachable"
            );
        }
        // A grant the launcher would refuse (beneath /proc) fails here, not at every command.
        confinement
            .policy(Path::new("/workspace"), Path::new("/tmp-dir"), Network::On)
            .validate()
            .map_err(|e| anyhow::anyhow!("invalid config: [sandbox] grants: {e}"))?;
        Ok(Some(confinement))
    }

    /// The policy of a command in `workspace` with its temp dir `temp`.
    fn policy(&self, workspace: &Path, temp: &Path, network: Network) -> Policy {
        // The proxy runs beside the pid namespace; without one, the host's network with the
        // ports (and the grants' ports) as Landlock TCP rules.
        let network = match network {
            Network::Proxied if !self.pid_namespace => Network::On,
            other => other,
        };
        let policy = Policy::standard(workspace, temp, &self.read, &self.write, network, self.abi)
            .with_tcp_ports(self.tcp_ports.clone())
            .with_connect(self.connect.clone());
        if self.pid_namespace {
            policy.in_pid_namespace()
        } else {
            policy
        }
    }

    /// The PATH sandboxed commands get (`[sandbox] path`, or the default).
    pub(crate) fn command_path(&self) -> &str {
        &self.command_path
    }

    /// Where run `run_id`'s private temp dir is (HOME and TMPDIR of its commands).
    pub(crate) fn temp_dir(&self, run_id: &str) -> PathBuf {
        self.temp_root.join(run_id)
    }

    /// The sandbox of a command of run `run_id` in `workspace`, with `network`; creates the
    /// run's private temp dir (0700) when it is missing.
    pub(crate) fn for_run(
        &self,
        run_id: &str,
        workspace: &Path,
        network: SandboxNetwork,
    ) -> std::io::Result<Arc<Sandbox>> {
        let temp = self.temp_dir(run_id);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&temp)?;
        let network = match network {
            SandboxNetwork::On => Network::Proxied,
            SandboxNetwork::Off => Network::Off,
            SandboxNetwork::Host => Network::On,
        };
        let policy = self.policy(&real(workspace), &real(&temp), network);
        Ok(Arc::new(Sandbox::new(&self.launcher, policy)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: &str) -> Config {
        let text = format!(
            "[database]\nurl = \"sqlite:///srv/state/nightshift.db\"\n\
             [runtime]\ndata_dir = \"/var/lib/nightshift\"\n\
             [providers.p]\nkind = \"scripted\"\nscript = \"s.json\"\n\
             [[agents]]\nname = \"reviewer\"\nprovider = \"p\"\nmodel = \"m\"\n{extra}"
        );
        Config::parse(&text, "x.toml").unwrap()
    }

    #[test]
    fn grants_that_expose_the_data_or_the_database_are_refused() {
        let ok = config("[sandbox]\nread = [\"/opt/tools\"]\nwrite = [\"/srv/cache\"]\n");
        ok.validate().unwrap();
        for (extra, expect) in [
            (
                "[sandbox]\nread = [\"/var\"]\n",
                "sandbox.read grants sandboxed commands `/var`, which contains the data directory `/var/lib/nightshift`",
            ),
            (
                "[sandbox]\nwrite = [\"/var/lib/nightshift/workspaces\"]\n",
                "is inside the data directory",
            ),
            (
                "[sandbox]\nread = [\"/srv/state\"]\n",
                "contains the database `/srv/state/nightshift.db`",
            ),
            (
                "[sandbox]\nread = [\"opt\"]\n",
                "sandbox.read: `opt` is not an absolute path",
            ),
            (
                "[sandbox]\nconnect = [\"127.0.0.1:5433\", \"db.internal\"]\n",
                "sandbox.connect: `db.internal` is not host:port",
            ),
            (
                "[sandbox]\npath = [\"/usr/bin\", \"/root/.pyenv/shims\"]\n",
                "sandbox.path: `/root/.pyenv/shims` is not readable inside the sandbox",
            ),
            (
                "[sandbox]\nmode = \"off\"\npath = [\"bin\"]\n",
                "sandbox.path: `bin` is not an absolute directory",
            ),
            (
                "[sandbox]\nmode = \"off\"\n[agents.sandbox]\nnetwork = \"off\"\n",
                "agents.reviewer.sandbox.network = \"off\" needs the sandbox",
            ),
        ] {
            let err = config(extra).validate().unwrap_err().to_string();
            assert!(err.contains(expect), "{expect}: {err}");
        }
        let err = Config::parse("[sandbox]\nmode = \"maybe\"\n", "x")
            .unwrap_err()
            .to_string();
        assert!(err.contains("`required`") && err.contains("`off`"), "{err}");
        let err = Config::parse("[sandbox]\npid_namespace = \"maybe\"\n", "x")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`auto`") && err.contains("`required`"),
            "{err}"
        );
        let err = Config::parse("[sandbox]\nreads = []\n", "x")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown field `reads`"), "{err}");
        // With the sandbox off, grants are not checked (nothing is granted).
        config("[sandbox]\nmode = \"off\"\nread = [\"/var\"]\n")
            .validate()
            .unwrap();
    }

    #[test]
    fn ports_are_a_list_of_tcp_ports_or_any() {
        let ports = |extra: &str| config(extra).sandbox.ports;
        assert_eq!(ports(""), Ports::Only(DEFAULT_PORTS.to_vec()));
        assert_eq!(
            ports("[sandbox]\nports = [443, 5433]\n"),
            Ports::Only(vec![443, 5433])
        );
        assert_eq!(ports("[sandbox]\nports = []\n"), Ports::Only(vec![]));
        assert_eq!(ports("[sandbox]\nports = \"any\"\n"), Ports::Any);
        for bad in ["[0]", "[70000]", "[-1]", "\"all\"", "[\"443\"]", "443"] {
            let err = Config::parse(&format!("[sandbox]\nports = {bad}\n"), "x.toml")
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("sandbox.ports") && err.contains("a list of TCP ports"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn a_data_directory_under_a_system_directory_is_refused() {
        let text = "[runtime]\ndata_dir = \"/usr/nightshift-data\"\n";
        let err = Config::parse(text, "x")
            .unwrap()
            .validate()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`/usr`, which contains the data directory `/usr/nightshift-data`"),
            "{err}"
        );
    }
}
