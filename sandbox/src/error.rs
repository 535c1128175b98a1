//! What the launcher says when it cannot make a command's sandbox: [`SetupError`], the one
//! step that failed. A launch that fails this way runs nothing: its `Display` is the reason
//! the launcher writes to stderr (after `nightshift sandbox: `) before it exits 126, worded
//! as `<what was being done>: <the system's error>` or, for a check of the sandbox's own, as
//! one sentence.

use std::path::PathBuf;

use landlock::{LandlockStatus, RulesetError, RulesetStatus};

/// A step of making a sandbox that failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SetupError {
    /// A call the system refused: what was being done, and its error.
    #[error("{doing}: {source}")]
    Call {
        doing: String,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Landlock refused a ruleset or a rule.
    #[error(transparent)]
    Landlock(#[from] RulesetError),
    /// The kernel would enforce the Landlock ruleset only in part.
    #[error("the kernel enforces the ruleset only {ruleset:?} (Landlock: {landlock:?})")]
    PartlyEnforced {
        ruleset: RulesetStatus,
        landlock: LandlockStatus,
    },
    /// `no_new_privs` was not set with the ruleset.
    #[error("no_new_privs could not be set")]
    NoNewPrivs,
    /// A user namespace's id map does not map id 0.
    #[error("{file} does not map id 0: `{map}`")]
    NoRootMapping { file: &'static str, map: String },
    /// A shown path would need a mount point made inside a bound host directory.
    #[error("no mount point for `{}` inside a bound directory", .0.display())]
    MountPointOnHost(PathBuf),
    /// The policy on the command line is not UTF-8.
    #[error("the policy is not UTF-8")]
    PolicyNotUtf8,
    /// The probe's init does not see itself as pid 1 in its fresh `/proc`.
    #[error("the fresh /proc shows this init as `{}`, not pid 1", .0.display())]
    NotPidOne(PathBuf),
}

/// The error of a call, named by what was being done:
/// `.map_err(doing("cannot make the mounts private"))`.
pub(crate) fn doing<E>(what: impl Into<String>) -> impl FnOnce(E) -> SetupError
where
    E: std::error::Error + Send + Sync + 'static,
{
    let doing = what.into();
    move |e| SetupError::Call {
        doing,
        source: Box::new(e),
    }
}
