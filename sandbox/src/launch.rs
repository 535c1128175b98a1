//! The launcher: `nightshift sandbox-exec <policy JSON> -- <program> <args…>` confines itself
//! with the policy, then executes the program, which inherits the confinement (as does every
//! process it starts). `nightshift sandbox-exec --probe` prints what the kernel supports.
//!
//! Guarantees: the program is executed only after the whole policy is in force; any failure
//! (a malformed or too-wide policy, a path that cannot be opened, a kernel that cannot enforce
//! every requested right, a network namespace that cannot be made) prints
//! `nightshift sandbox: …` on stderr and exits 126 without running anything. Steps, in this
//! single-threaded process: (1) with network off, a new network namespace (as root directly,
//! otherwise inside a new user namespace that maps the caller's uid and gid to themselves);
//! (2) a Landlock ruleset, built with `CompatLevel::HardRequirement`, handling every
//! filesystem right of the policy's ABI (and TCP bind/connect with network off), scoping
//! signals and abstract UNIX sockets, with rules only for the policy's paths, then
//! `no_new_privs` and `restrict_self`; a ruleset reported anything but fully enforced is an
//! error; (3) `exec` of the program in place, so its pid (and process group) is the
//! launcher's. A program that cannot be executed exits 127 (not found) or 126.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::Path;

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, LandlockStatus,
    PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
};
use nix::sched::{CloneFlags, unshare};
use nix::unistd::{Gid, Uid};

use crate::policy::{MAX_ABI, Network, Policy};
use crate::probe::Support;

/// The hidden first argument of the `nightshift` binary that runs the launcher.
pub const SUBCOMMAND: &str = "sandbox-exec";
/// `sandbox-exec --probe`: print [`Support`] as JSON and exit.
pub const PROBE_FLAG: &str = "--probe";
/// The exit code of a launch that failed before the program ran.
pub const EXIT_FAILED: i32 = 126;
/// The exit code when the program does not exist (as in a shell).
pub const EXIT_NOT_FOUND: i32 = 127;

/// Handles `argv` when its first argument is [`SUBCOMMAND`]: returns the exit code of a
/// failed launch or of the probe (a successful launch never returns). `None`: not ours.
pub fn dispatch(argv: Vec<OsString>) -> Option<i32> {
    if argv.get(1).map(|a| a.as_os_str()) != Some(SUBCOMMAND.as_ref()) {
        return None;
    }
    let rest = &argv[2..];
    Some(match rest.first().and_then(|a| a.to_str()) {
        Some(PROBE_FLAG) => probe_here(),
        _ => match launch(rest) {
            Ok(never) => match never {},
            Err((code, message)) => {
                eprintln!("nightshift sandbox: {message}");
                code
            }
        },
    })
}

/// `<policy JSON> -- <program> <args…>`: confine this process, then become the program.
fn launch(rest: &[OsString]) -> Result<std::convert::Infallible, (i32, String)> {
    let usage = "usage: nightshift sandbox-exec <policy JSON> -- <program> [args…]";
    let fail = |m: String| (EXIT_FAILED, m);
    let (json, program, args) = match rest {
        [json, dashes, program, args @ ..] if dashes == "--" => (json, program, args),
        _ => return Err(fail(usage.to_string())),
    };
    let json = json
        .to_str()
        .ok_or_else(|| fail("the policy is not UTF-8".into()))?;
    let policy: Policy =
        serde_json::from_str(json).map_err(|e| fail(format!("the policy is malformed: {e}")))?;
    policy
        .validate()
        .map_err(|e| fail(format!("refused policy: {e}")))?;
    if policy.network == Network::Off {
        isolate_network().map_err(|e| fail(format!("cannot turn the network off: {e}")))?;
    }
    restrict(&policy).map_err(|e| fail(format!("cannot apply Landlock: {e}")))?;
    let error = std::process::Command::new(program).args(args).exec();
    let code = if error.kind() == std::io::ErrorKind::NotFound {
        EXIT_NOT_FOUND
    } else {
        EXIT_FAILED
    };
    Err((
        code,
        format!("cannot run `{}`: {error}", program.to_string_lossy()),
    ))
}

/// A network namespace of this process's own (loopback only, down).
fn isolate_network() -> Result<(), String> {
    let (uid, gid) = (Uid::current(), Gid::current());
    if Uid::effective().is_root() {
        match unshare(CloneFlags::CLONE_NEWNET) {
            Ok(()) => return Ok(()),
            // Root without CAP_SYS_ADMIN (a container): try as an unprivileged user would.
            Err(nix::errno::Errno::EPERM) => {}
            Err(e) => return Err(format!("unshare(CLONE_NEWNET): {e}")),
        }
    }
    unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNET)
        .map_err(|e| format!("unshare(CLONE_NEWUSER | CLONE_NEWNET): {e}"))?;
    // The same uid and gid inside as outside, so files keep their owners.
    let write = |file: &str, text: String| {
        std::fs::write(file, text).map_err(|e| format!("cannot write {file}: {e}"))
    };
    write("/proc/self/setgroups", "deny".into())?;
    write("/proc/self/uid_map", format!("{uid} {uid} 1\n"))?;
    write("/proc/self/gid_map", format!("{gid} {gid} 1\n"))?;
    Ok(())
}

/// The Landlock ABI value `n` (capped at what this build knows).
fn abi(n: u32) -> ABI {
    ABI::from(i32::try_from(n.min(MAX_ABI)).unwrap_or(0))
}

/// Applies the policy's Landlock ruleset to this process, in full or not at all.
fn restrict(policy: &Policy) -> Result<(), String> {
    let abi_n = policy.abi;
    let abi = abi(abi_n);
    let all = AccessFs::from_all(abi);
    let read = AccessFs::from_read(abi);
    let device = AccessFs::from_file(abi) & !BitFlags::from(AccessFs::Execute);
    let err = |e: landlock::RulesetError| e.to_string();
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(all)
        .map_err(err)?;
    if policy.network == Network::Off && abi_n >= 4 {
        // Defence in depth: no TCP rule is added, so no TCP bind or connect is allowed.
        ruleset = ruleset
            .handle_access(AccessNet::from_all(abi))
            .map_err(err)?;
    }
    if abi_n >= 6 {
        ruleset = ruleset.scope(Scope::from_all(abi)).map_err(err)?;
    }
    let mut created = ruleset.create().map_err(err)?;
    let rules = [
        (policy.workspace.as_path(), all, true),
        (policy.temp_dir.as_path(), all, true),
    ]
    .into_iter()
    .chain(policy.read.iter().map(|p| (p.as_path(), read, true)))
    .chain(policy.write.iter().map(|p| (p.as_path(), all, true)))
    .chain(policy.devices.iter().map(|p| (p.as_path(), device, false)));
    for (path, access, required) in rules {
        let Some(rule) = rule(path, access, abi, required)? else {
            continue;
        };
        created = created.add_rule(rule).map_err(err)?;
    }
    let status = created.restrict_self().map_err(err)?;
    if status.ruleset != RulesetStatus::FullyEnforced {
        return Err(format!(
            "the kernel enforces the ruleset only {:?} (Landlock: {:?})",
            status.ruleset, status.landlock
        ));
    }
    if !status.no_new_privs {
        return Err("no_new_privs could not be set".into());
    }
    Ok(())
}

/// A rule granting `access` beneath `path` (only the file rights when it is a file); `None`
/// for a missing optional path.
fn rule(
    path: &Path,
    access: BitFlags<AccessFs>,
    abi: ABI,
    required: bool,
) -> Result<Option<PathBeneath<PathFd>>, String> {
    let fd = match PathFd::new(path) {
        Ok(fd) => fd,
        Err(_) if !required => return Ok(None),
        Err(e) => return Err(format!("cannot open `{}`: {e}", path.display())),
    };
    let access = match std::fs::metadata(path) {
        Ok(meta) if !meta.is_dir() => access & AccessFs::from_file(abi),
        Ok(_) => access,
        Err(e) => return Err(format!("cannot stat `{}`: {e}", path.display())),
    };
    Ok(Some(PathBeneath::new(fd, access)))
}

/// `--probe`: what this kernel supports, as JSON on stdout. Tries a network namespace first
/// (as [`isolate_network`] makes it), then applies a minimal Landlock ruleset to learn the ABI.
/// This process does nothing else afterwards.
fn probe_here() -> i32 {
    let (netns, netns_note) = match isolate_network() {
        Ok(()) => (true, None),
        Err(e) => (false, Some(e)),
    };
    let status = Ruleset::default()
        .handle_access(AccessFs::Execute)
        .and_then(|r| r.create())
        .and_then(|r| r.restrict_self());
    let (landlock_abi, landlock_note) = match status.map(|s| s.landlock) {
        Ok(LandlockStatus::Available { effective_abi, .. }) => (abi_number(effective_abi), None),
        Ok(LandlockStatus::NotEnabled) => (0, Some("not enabled at boot".to_string())),
        Ok(LandlockStatus::NotImplemented) => (0, Some("not built into the kernel".to_string())),
        Err(e) => (0, Some(e.to_string())),
    };
    let support = Support {
        landlock_abi,
        landlock_note,
        netns,
        netns_note,
    };
    match serde_json::to_string(&support) {
        Ok(json) => {
            println!("{json}");
            0
        }
        Err(e) => {
            eprintln!("nightshift sandbox: {e}");
            EXIT_FAILED
        }
    }
}

/// The number of a known ABI.
fn abi_number(known: ABI) -> u32 {
    (1..=MAX_ABI).rev().find(|n| abi(*n) == known).unwrap_or(0)
}
