//! What this kernel enforces, and whether that is enough: [`Support`], [`probe`] and the pure
//! [`decide`].
//!
//! Guarantees: [`probe`] asks the launcher itself (`<launcher> sandbox-exec --probe`, a fresh
//! single-threaded process that tries exactly what a sandboxed command needs: the Landlock
//! ABI, a network namespace and a pid namespace with its fresh `/proc`, each made the way the
//! launcher makes it), so a launcher that is missing or is not a Nightshift binary fails the
//! probe. [`assume_from_env`] applies `NIGHTSHIFT_SANDBOX_ASSUME_ABI`,
//! `NIGHTSHIFT_SANDBOX_ASSUME_NO_NETNS` and `NIGHTSHIFT_SANDBOX_ASSUME_NO_PIDNS`, which can
//! only lower what the probe found (to test refusals and fallbacks); nothing can raise it.
//! [`decide`] either returns what to enforce or a [`Refusal`] naming everything missing and
//! the setting that accepts running unsandboxed: never a weaker sandbox than asked for. The
//! pid namespace is the one part that may be missing without a refusal, when the config says
//! `pid_namespace = "auto"`: the [`Enforcement`] then says so, for one warning at start.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};

use serde::{Deserialize, Serialize};

use crate::policy::{MAX_ABI, MIN_ABI};

/// Lowers the Landlock ABI the probe reports to at most this value (`0`: no Landlock).
pub const ASSUME_ABI_ENV: &str = "NIGHTSHIFT_SANDBOX_ASSUME_ABI";
/// `1`: the probe reports that network namespaces cannot be made.
pub const ASSUME_NO_NETNS_ENV: &str = "NIGHTSHIFT_SANDBOX_ASSUME_NO_NETNS";
/// `1`: the probe reports that pid namespaces cannot be made.
pub const ASSUME_NO_PIDNS_ENV: &str = "NIGHTSHIFT_SANDBOX_ASSUME_NO_PIDNS";

/// What the kernel offers the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Support {
    /// The Landlock ABI (0: none), capped at [`MAX_ABI`].
    pub landlock_abi: u32,
    /// Why Landlock is missing, when it is.
    pub landlock_note: Option<String>,
    /// Whether a network namespace can be made for a command.
    pub netns: bool,
    /// Why not, when it cannot.
    pub netns_note: Option<String>,
    /// Whether a user+pid+mount namespace with a fresh `/proc` can be made for a command.
    #[serde(default)]
    pub pidns: bool,
    /// Why not, when it cannot.
    #[serde(default)]
    pub pidns_note: Option<String>,
}

/// What the configuration asks of the sandbox.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Needs {
    /// Agents whose commands run without network (`[agents.sandbox] network = "off"`).
    pub network_off: Vec<String>,
    /// `[sandbox] pid_namespace = "required"`: no start without one.
    pub pid_namespace_required: bool,
}

/// What the launcher enforces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enforcement {
    /// The Landlock ABI every policy is enforced at, in full.
    pub abi: u32,
    /// Commands run in a pid namespace of their own.
    pub pid_namespace: bool,
    /// Without one (`pid_namespace = "auto"` on a kernel that refuses): why, for a warning.
    pub pid_namespace_missing: Option<String>,
}

/// Why `serve` must not start with the sandbox required.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Each missing feature, in words.
    pub missing: Vec<String>,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the command sandbox cannot be enforced on this machine: {}. Commands \
             (run_command, background tasks, command tools) are not started unsandboxed. To run \
             them anyway, without the sandbox (a command can then read everything the daemon's \
             user can, the daemon's environment and secrets included), set `[sandbox] mode = \
             \"off\"` in the config",
            self.missing.join("; ")
        )
    }
}

impl std::error::Error for Refusal {}

/// What to enforce for `needs` on a kernel with `support`, or why it cannot be done.
pub fn decide(support: &Support, needs: &Needs) -> Result<Enforcement, Refusal> {
    let mut missing = Vec::new();
    if support.landlock_abi < MIN_ABI {
        let found = match support.landlock_abi {
            0 => format!(
                "this kernel has no Landlock ({})",
                support
                    .landlock_note
                    .as_deref()
                    .unwrap_or("not built in or not enabled")
            ),
            n => format!("this kernel has Landlock ABI {n}"),
        };
        missing.push(format!(
            "Landlock ABI {MIN_ABI} or newer (Linux 6.12+, with `landlock` in the `lsm=` boot \
             list) is needed for the filesystem rules and to scope signals, and {found}"
        ));
    }
    if !needs.network_off.is_empty() && !support.netns {
        missing.push(format!(
            "agent(s) {} set `[agents.sandbox] network = \"off\"`, which needs a network \
             namespace, and this kernel refuses to make one ({}); allow unprivileged user \
             namespaces (e.g. sysctl kernel.unprivileged_userns_clone=1 or \
             user.max_user_namespaces > 0) or set their network to \"on\"",
            needs.network_off.join(", "),
            support.netns_note.as_deref().unwrap_or("no reason given")
        ));
    }
    let pidns_note = support
        .pidns_note
        .clone()
        .unwrap_or_else(|| "no reason given".into());
    if needs.pid_namespace_required && !support.pidns {
        missing.push(format!(
            "`[sandbox] pid_namespace = \"required\"` needs a user and pid namespace with a \
             fresh /proc, and this kernel refuses ({pidns_note}); allow unprivileged user \
             namespaces or set pid_namespace = \"auto\""
        ));
    }
    if missing.is_empty() {
        Ok(Enforcement {
            abi: support.landlock_abi.min(MAX_ABI),
            pid_namespace: support.pidns,
            pid_namespace_missing: (!support.pidns).then_some(pidns_note),
        })
    } else {
        Err(Refusal { missing })
    }
}

/// `support` lowered by the assume variables (read through `var`). They can only take
/// support away: an ABI above the probed one, or any other value, changes nothing.
pub fn assume_from_env(mut support: Support, var: impl Fn(&str) -> Option<String>) -> Support {
    if let Some(abi) = var(ASSUME_ABI_ENV).and_then(|v| v.trim().parse::<u32>().ok())
        && abi < support.landlock_abi
    {
        support.landlock_abi = abi;
        support.landlock_note = Some(format!("{ASSUME_ABI_ENV}={abi} says so"));
    }
    if var(ASSUME_NO_NETNS_ENV).is_some_and(|v| v.trim() == "1") && support.netns {
        support.netns = false;
        support.netns_note = Some(format!("{ASSUME_NO_NETNS_ENV}=1 says so"));
    }
    if var(ASSUME_NO_PIDNS_ENV).is_some_and(|v| v.trim() == "1") && support.pidns {
        support.pidns = false;
        support.pidns_note = Some(format!("{ASSUME_NO_PIDNS_ENV}=1 says so"));
    }
    support
}

/// Why the launcher could not be asked what this kernel supports; `Display` names the
/// launcher and says to set `[sandbox] launcher`.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The launcher could not be run at all.
    #[error(
        "cannot run the sandbox launcher `{}`: {source}; set `[sandbox] launcher` to the \
         nightshift binary",
        .launcher.display()
    )]
    CannotRun {
        launcher: PathBuf,
        source: std::io::Error,
    },
    /// It ran, but its answer was not a probe's (`stderr` is its first 300 characters).
    #[error(
        "the sandbox launcher `{}` did not answer the probe ({status}; stderr: {stderr}); set \
         `[sandbox] launcher` to the nightshift binary",
        .launcher.display()
    )]
    NoAnswer {
        launcher: PathBuf,
        status: ExitStatus,
        stderr: String,
    },
}

/// Asks `launcher` what this kernel supports (it runs `launcher sandbox-exec --probe`), then
/// applies the assume variables of this process's environment.
pub fn probe(launcher: &Path) -> Result<Support, ProbeError> {
    let out = Command::new(launcher)
        .args([crate::launch::SUBCOMMAND, crate::launch::PROBE_FLAG])
        .env_clear()
        .stdin(Stdio::null())
        .output()
        .map_err(|source| ProbeError::CannotRun {
            launcher: launcher.to_path_buf(),
            source,
        })?;
    let parsed = serde_json::from_slice::<Support>(&out.stdout);
    match parsed {
        Ok(support) if out.status.success() => {
            Ok(assume_from_env(support, |name| std::env::var(name).ok()))
        }
        _ => Err(ProbeError::NoAnswer {
            launcher: launcher.to_path_buf(),
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr)
                .trim()
                .chars()
                .take(300)
                .collect(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full() -> Support {
        Support {
            landlock_abi: 7,
            landlock_note: None,
            netns: true,
            netns_note: None,
            pidns: true,
            pidns_note: None,
        }
    }

    fn off(agents: &[&str]) -> Needs {
        Needs {
            network_off: agents.iter().map(|a| a.to_string()).collect(),
            pid_namespace_required: false,
        }
    }

    fn enforced(abi: u32) -> Enforcement {
        Enforcement {
            abi,
            pid_namespace: true,
            pid_namespace_missing: None,
        }
    }

    #[test]
    fn a_capable_kernel_is_enforced_at_its_abi() {
        assert_eq!(decide(&full(), &off(&["bot"])), Ok(enforced(7)));
        let newer = Support {
            landlock_abi: 42,
            ..full()
        };
        assert_eq!(decide(&newer, &Needs::default()), Ok(enforced(MAX_ABI)));
        let no_netns = Support {
            netns: false,
            ..full()
        };
        assert!(
            decide(&no_netns, &Needs::default()).is_ok(),
            "nobody asks for network off"
        );
    }

    #[test]
    fn without_pid_namespaces_auto_falls_back_with_a_reason_and_required_refuses() {
        let no_pidns = Support {
            pidns: false,
            pidns_note: Some("EPERM".into()),
            ..full()
        };
        let fallback = decide(&no_pidns, &Needs::default()).unwrap();
        assert!(!fallback.pid_namespace);
        assert_eq!(fallback.pid_namespace_missing.as_deref(), Some("EPERM"));
        let required = Needs {
            pid_namespace_required: true,
            ..Needs::default()
        };
        let text = decide(&no_pidns, &required).unwrap_err().to_string();
        assert!(
            text.contains("pid_namespace = \"required\"") && text.contains("(EPERM)"),
            "{text}"
        );
        assert_eq!(decide(&full(), &required), Ok(enforced(7)));
    }

    #[test]
    fn missing_features_are_all_named_with_the_opt_out() {
        let old = Support {
            landlock_abi: 5,
            landlock_note: None,
            netns: false,
            netns_note: Some("EPERM".into()),
            pidns: true,
            pidns_note: None,
        };
        let refusal = decide(&old, &off(&["reviewer"])).unwrap_err();
        assert_eq!(refusal.missing.len(), 2);
        let text = refusal.to_string();
        assert!(text.contains("Landlock ABI 6 or newer"), "{text}");
        assert!(text.contains("this kernel has Landlock ABI 5"), "{text}");
        assert!(
            text.contains("reviewer")
                && text.contains("network namespace")
                && text.contains("EPERM"),
            "{text}"
        );
        assert!(text.contains("`[sandbox] mode = \"off\"`"), "{text}");
        let none = Support {
            landlock_abi: 0,
            landlock_note: Some("not enabled at boot".into()),
            ..full()
        };
        let text = decide(&none, &Needs::default()).unwrap_err().to_string();
        assert!(text.contains("no Landlock (not enabled at boot)"), "{text}");
    }

    #[test]
    fn assume_variables_only_lower_support() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        let lowered = assume_from_env(
            full(),
            env(&[
                (ASSUME_ABI_ENV, "0"),
                (ASSUME_NO_NETNS_ENV, "1"),
                (ASSUME_NO_PIDNS_ENV, "1"),
            ]),
        );
        assert_eq!(
            (lowered.landlock_abi, lowered.netns, lowered.pidns),
            (0, false, false)
        );
        assert!(lowered.pidns_note.unwrap().contains(ASSUME_NO_PIDNS_ENV));
        assert!(lowered.landlock_note.unwrap().contains(ASSUME_ABI_ENV));
        let weak = Support {
            landlock_abi: 3,
            netns: false,
            pidns: false,
            ..full()
        };
        let same = assume_from_env(
            weak.clone(),
            env(&[
                (ASSUME_ABI_ENV, "9"),
                (ASSUME_NO_NETNS_ENV, "0"),
                (ASSUME_NO_PIDNS_ENV, "0"),
            ]),
        );
        assert_eq!(same, weak, "nothing is raised");
        assert_eq!(
            assume_from_env(full(), env(&[(ASSUME_ABI_ENV, "lots")])),
            full()
        );
    }
}
