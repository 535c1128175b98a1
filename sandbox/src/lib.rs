//! # nightshift-sandbox
//!
//! The command sandbox: a tool's process (`run_command`, a background task, a command tool)
//! reaches only its workspace, a private temp dir, the system directories (read-only) and the
//! paths the config grants; it cannot read or trace another process (`/proc/<pid>/environ`,
//! `/proc/<pid>/mem`, ptrace), cannot signal processes outside its sandbox, and, with network
//! off, has no network at all. In a pid namespace it also has a root of its own holding only
//! its grants (no host UNIX socket can be named), SysV IPC of its own, and a network of its
//! own whose one way out (network on) is the egress proxy: public addresses on the allowed
//! ports and the `host:port` grants, never the daemon's loopback, the private network or the
//! metadata endpoint. It holds for root too: Landlock restricts regardless of capabilities.
//!
//! - [`policy`]: what a command may reach, as data (validated, an allowlist).
//! - [`probe`]: what this kernel enforces, and the pure decision whether that is enough.
//! - [`launch`]: the launcher process (`nightshift sandbox-exec`) that applies a policy to
//!   itself and then executes the command; no `pre_exec`. The crate's few `unsafe` calls each
//!   say why: giving the forwarded signals their default action, the `ioctl`s that bring a
//!   namespace's loopback up, and adopting descriptors passed between the launcher's
//!   processes.
//! - [`egress`]: the proxy of a proxied network: the pure decision of where a command may
//!   connect, and the process that serves it.
//! - `namespaces` and `supervise` (internal): with a pid namespace, the command runs as pid
//!   2 of a user+pid+mount namespace of its own with a fresh `/proc` (it sees only its own
//!   processes); the launcher supervises it from outside, forwarding signals and its exit
//!   status, and the whole namespace dies with the launcher; `rootfs` gives the command a
//!   root of its own there.
//!
//! How it fails: a launch that cannot enforce its whole policy runs nothing and exits 126
//! with a message on stderr (the step that failed, `error::SetupError`); a kernel without what the config needs makes [`probe::decide`]
//! a [`probe::Refusal`] that names what is missing and the opt-out setting. Nothing here ever
//! falls back to a weaker sandbox.

pub mod egress;
mod error;
pub mod launch;
mod namespaces;
pub mod policy;
pub mod probe;
mod rootfs;
mod supervise;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

pub use policy::{Network, Policy};

/// How the tools start a sandboxed command: the launcher program and the policy for one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    launcher: PathBuf,
    policy: Policy,
}

impl Sandbox {
    /// Commands run through `launcher` (the `nightshift` binary) under `policy`.
    pub fn new(launcher: impl Into<PathBuf>, policy: Policy) -> Self {
        Sandbox {
            launcher: launcher.into(),
            policy,
        }
    }

    pub fn launcher(&self) -> &Path {
        &self.launcher
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The program and arguments that run `program args` in `workspace` under this sandbox:
    /// `launcher sandbox-exec <policy> -- program args…`. `Err` when the policy cannot be
    /// written (a path that is not UTF-8).
    pub fn command(
        &self,
        workspace: &Path,
        program: &str,
        args: &[String],
    ) -> Result<(PathBuf, Vec<OsString>), EncodeError> {
        let policy = self.policy.with_workspace(workspace);
        let json = serde_json::to_string(&policy).map_err(EncodeError)?;
        let mut argv: Vec<OsString> = vec![launch::SUBCOMMAND.into(), json.into(), "--".into()];
        argv.push(program.into());
        argv.extend(args.iter().map(OsString::from));
        Ok((self.launcher.clone(), argv))
    }

    /// Variables a sandboxed command gets: HOME and TMPDIR are its private temp dir (the
    /// daemon's HOME is not readable inside).
    pub fn env(&self) -> Vec<(String, String)> {
        let dir = self.policy.temp_dir.display().to_string();
        vec![("HOME".into(), dir.clone()), ("TMPDIR".into(), dir)]
    }
}

/// A command's policy could not be written for the launcher (a path that is not UTF-8).
#[derive(Debug, thiserror::Error)]
#[error("cannot encode the sandbox policy: {0}")]
pub struct EncodeError(#[source] serde_json::Error);

/// The daemon could not make itself undumpable.
#[derive(Debug, thiserror::Error)]
#[error("prctl(PR_SET_DUMPABLE, 0): {0}")]
pub struct HardenError(#[source] nix::errno::Errno);

/// Hardens the daemon itself: not dumpable, so its memory and `/proc` files are closed to
/// processes of the same user that are not sandboxed (root is kept out by Landlock).
pub fn harden_daemon() -> Result<(), HardenError> {
    nix::sys::prctl::set_dumpable(false).map_err(HardenError)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_is_the_launcher_with_the_policy_for_its_workspace() {
        let policy = Policy::standard(
            "/template",
            "/data/tmp/run-1",
            &[],
            &[],
            Network::On,
            policy::MIN_ABI,
        );
        let sandbox = Sandbox::new("/usr/bin/nightshift", policy);
        let (program, args) = sandbox
            .command(
                Path::new("/data/workspaces/run-1"),
                "sh",
                &["-c".into(), "ls".into()],
            )
            .unwrap();
        assert_eq!(program, PathBuf::from("/usr/bin/nightshift"));
        assert_eq!(args[0], "sandbox-exec");
        let sent: Policy = serde_json::from_str(args[1].to_str().unwrap()).unwrap();
        assert_eq!(sent.workspace, PathBuf::from("/data/workspaces/run-1"));
        assert_eq!(&args[2..], ["--", "sh", "-c", "ls"]);
        assert_eq!(
            sandbox.env(),
            [
                ("HOME".to_string(), "/data/tmp/run-1".to_string()),
                ("TMPDIR".to_string(), "/data/tmp/run-1".to_string())
            ]
        );
    }
}
