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
//! Pid namespace: where the kernel makes one (user+pid+mount namespaces), every command runs
//! in its own, seeing only its own processes. With `pid_namespace = "auto"` (the default) a
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

use crate::config::Config;

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
    /// The directories sandboxed commands find programs in (their PATH), in order: absolute,
    /// readable in the sandbox. Default: `nightshift_tools::SANDBOXED_PATH`'s directories.
    /// See `crate::sandbox_path`.
    pub path: Option<Vec<PathBuf>>,
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
fn real(path: &Path) -> PathBuf {
    path.canonicalize()
        .or_else(|_| std::path::absolute(path))
        .unwrap_or_else(|_| path.to_path_buf())
}

/// The checks of `[sandbox]` and `[agents.sandbox]` that need the rest of the config.
pub fn validate(config: &Config) -> Result<(), String> {
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
            return Err(format!(
                "agents.{}.sandbox.network = \"off\" needs the sandbox, and [sandbox] mode is \
                 \"off\"; set mode = \"required\" or the agent's network to \"on\"",
                agent.name
            ));
        }
        return Ok(());
    }
    for (key, paths) in [
        ("sandbox.read", &sandbox.read),
        ("sandbox.write", &sandbox.write),
    ] {
        if let Some(p) = paths.iter().find(|p| !p.is_absolute()) {
            return Err(format!(
                "{key}: `{}` is not an absolute path; grants are absolute",
                p.display()
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
    check_exposure(grants, &protected)
}

/// What every sandboxed command of this daemon shares: the launcher, the enforced ABI, the
/// grants and where temp dirs go.
#[derive(Debug, Clone)]
pub struct Confinement {
    launcher: PathBuf,
    abi: u32,
    read: Vec<PathBuf>,
    write: Vec<PathBuf>,
    temp_root: PathBuf,
    pid_namespace: bool,
    /// PATH of sandboxed commands.
    command_path: String,
}

impl Confinement {
    /// Probes the kernel and decides, for `config`: `Ok(None)` with `mode = "off"` (logged
    /// once as a warning), the confinement, or an error saying what is missing.
    pub fn start(config: &Config) -> anyhow::Result<Option<Confinement>> {
        let sandbox = &config.sandbox;
        if sandbox.mode == SandboxMode::Off {
            tracing::warn!(
                "[sandbox] mode = \"off\": commands run unsandboxed, as the daemon's user, and \
                 can read what it can (its environment, the API token, the database)"
            );
            return Ok(None);
        }
        let launcher = match &sandbox.launcher {
            Some(p) => config.resolve_path(p),
            None => std::env::current_exe()
                .map_err(|e| anyhow::anyhow!("cannot find the nightshift binary to launch sandboxed commands: {e}; set [sandbox] launcher"))?,
        };
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
                "commands share the daemon's pid namespace: this kernel refuses to make one \
                 ({why}); they still cannot read or signal processes outside the sandbox, but \
                 can guess their pids. Set [sandbox] pid_namespace = \"required\" to refuse \
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
            command_path: crate::sandbox_path::command_path(sandbox.path.as_deref()),
        };
        // A grant the launcher would refuse (beneath /proc) fails here, not at every command.
        confinement
            .policy(Path::new("/workspace"), Path::new("/tmp-dir"), Network::On)
            .validate()
            .map_err(|e| anyhow::anyhow!("invalid config: [sandbox] grants: {e}"))?;
        Ok(Some(confinement))
    }

    /// The policy of a command in `workspace` with its temp dir `temp`.
    fn policy(&self, workspace: &Path, temp: &Path, network: Network) -> Policy {
        let policy = Policy::standard(workspace, temp, &self.read, &self.write, network, self.abi);
        if self.pid_namespace {
            policy.in_pid_namespace()
        } else {
            policy
        }
    }

    /// The PATH sandboxed commands get (`[sandbox] path`, or the default).
    pub fn command_path(&self) -> &str {
        &self.command_path
    }

    /// Where run `run_id`'s private temp dir is (HOME and TMPDIR of its commands).
    pub fn temp_dir(&self, run_id: &str) -> PathBuf {
        self.temp_root.join(run_id)
    }

    /// The sandbox of a command of run `run_id` in `workspace`, with `network`; creates the
    /// run's private temp dir (0700) when it is missing.
    pub fn for_run(
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
            SandboxNetwork::On => Network::On,
            SandboxNetwork::Off => Network::Off,
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
