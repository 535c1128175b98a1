//! The launcher: `nightshift sandbox-exec <policy JSON> -- <program> <args…>` confines the
//! program with the policy: every process it starts inherits the confinement.
//! `nightshift sandbox-exec --probe` prints what the kernel supports.
//!
//! Guarantees: the program is executed only after the whole policy is in force; any failure
//! (a malformed or too-wide policy, a path that cannot be opened, a kernel that cannot enforce
//! every requested right, a namespace that cannot be made) prints `nightshift sandbox: …` on
//! stderr and exits 126 without running anything. A program that cannot be executed exits
//! 127 (not found) or 126.
//!
//! Without a pid namespace (`pid_namespace = false`), in this single-threaded process:
//! (1) with network off, a new network namespace ([`namespaces::isolate_network`]);
//! (2) the Landlock ruleset ([`restrict`]); (3) `exec` of the program in place, so its pid
//! and process group are the launcher's.
//!
//! With a pid namespace, three processes (see [`crate::supervise`]): this launcher enters a
//! new user+pid+mount namespace (and network, when off) and stays outside as the supervisor;
//! its child is pid 1 of the namespace, which mounts a fresh `/proc` and starts, as pid 2,
//! `sandbox-exec --confine`, which applies Landlock and executes the program in place. The
//! program then sees only its own processes, its parent is pid 1, and the supervisor ends
//! as it ends (exit code or signal) and forwards SIGTERM, SIGINT and SIGHUP to it.
//!
//! The Landlock ruleset ([`restrict`]) is built with `CompatLevel::HardRequirement`,
//! handling every filesystem right of the policy's ABI (and TCP bind/connect with network
//! off), scoping signals and abstract UNIX sockets, with rules only for the policy's paths
//! (opened after the fresh `/proc` is mounted, so a `/proc` grant is the namespace's); then
//! `no_new_privs` and `restrict_self`; a ruleset reported anything but fully enforced is an
//! error.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::Path;

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, LandlockStatus, NetPort,
    PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
};

use nix::sys::signal::SigSet;

use crate::error::{SetupError, doing};
use crate::namespaces::{self, isolate_network};
use crate::policy::{MAX_ABI, Network, PROC, Policy};
use crate::probe::Support;
use crate::supervise::{self, CONFINE_FLAG, EGRESS_FLAG, INIT_FLAG};

/// The hidden first argument of the `nightshift` binary that runs the launcher.
pub const SUBCOMMAND: &str = "sandbox-exec";
/// `sandbox-exec --probe`: print [`Support`] as JSON and exit.
pub const PROBE_FLAG: &str = "--probe";
/// The exit code of a launch that failed before the program ran.
pub const EXIT_FAILED: i32 = 126;
/// The exit code when the program does not exist (as in a shell).
pub const EXIT_NOT_FOUND: i32 = 127;
/// `sandbox-exec --probe-pidns`: the namespace step of the probe (internal).
const PROBE_PIDNS_FLAG: &str = "--probe-pidns";
/// `sandbox-exec --probe-init`: pid 1's step of the probe (internal).
const PROBE_INIT_FLAG: &str = "--probe-init";

/// How far a launch goes before the program runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// The launcher the daemon starts.
    Launch,
    /// Pid 2 in a pid namespace: Landlock and `exec` only (the namespaces exist already).
    Confine,
}

/// Handles `argv` when its first argument is [`SUBCOMMAND`]: returns the exit code of a
/// failed launch or of the probe (a successful launch never returns). `None`: not ours.
pub fn dispatch(argv: Vec<OsString>) -> Option<i32> {
    if argv.get(1).map(|a| a.as_os_str()) != Some(SUBCOMMAND.as_ref()) {
        return None;
    }
    let rest = &argv[2..];
    let launched = |result: Result<std::convert::Infallible, (i32, String)>| match result {
        Ok(never) => match never {},
        Err((code, message)) => {
            eprintln!("nightshift sandbox: {message}");
            code
        }
    };
    Some(match rest.first().and_then(|a| a.to_str()) {
        Some(PROBE_FLAG) => probe_here(),
        Some(PROBE_PIDNS_FLAG) => probe_pidns_outer(),
        Some(PROBE_INIT_FLAG) => probe_pidns_init(),
        Some(INIT_FLAG) => supervise::init(&rest[1..]),
        Some(EGRESS_FLAG) => crate::egress::run(&rest[1..]),
        Some(CONFINE_FLAG) => launched(launch(&rest[1..], Stage::Confine)),
        _ => launched(launch(rest, Stage::Launch)),
    })
}

/// `<policy JSON> -- <program> <args…>`: confine this process, then become the program (or,
/// with a pid namespace, supervise the namespace that runs it).
fn launch(rest: &[OsString], stage: Stage) -> Result<std::convert::Infallible, (i32, String)> {
    let usage = "usage: nightshift sandbox-exec <policy JSON> -- <program> [args…]";
    let fail = |m: String| (EXIT_FAILED, m);
    if stage == Stage::Launch {
        supervise::default_forwarded_actions().map_err(|e| fail(e.to_string()))?;
    }
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
    if stage == Stage::Launch && policy.pid_namespace {
        return supervise::supervise(&policy, json.as_ref(), program, args)
            .map_err(|e| fail(format!("cannot make the pid namespace: {e}")));
    }
    if stage == Stage::Launch && policy.network == Network::Off {
        isolate_network().map_err(|e| fail(format!("cannot turn the network off: {e}")))?;
    }
    restrict(&policy).map_err(|e| fail(format!("cannot apply Landlock: {e}")))?;
    if stage == Stage::Confine {
        // The init blocks the signals it forwards, and `exec` keeps a mask: the program
        // starts with none blocked, as it would outside.
        SigSet::empty()
            .thread_set_mask()
            .map_err(|e| fail(format!("cannot unblock signals: {e}")))?;
    }
    let mut command = std::process::Command::new(program);
    command.args(args);
    if policy.network == Network::Proxied {
        command.envs(crate::egress::proxy_env());
    }
    let error = command.exec();
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

/// The Landlock ABI value `n` (capped at what this build knows).
fn abi(n: u32) -> ABI {
    ABI::from(i32::try_from(n.min(MAX_ABI)).unwrap_or(0))
}

/// Applies the policy's Landlock ruleset to this process, in full or not at all.
fn restrict(policy: &Policy) -> Result<(), SetupError> {
    let abi_n = policy.abi;
    let abi = abi(abi_n);
    let all = AccessFs::from_all(abi);
    let read = AccessFs::from_read(abi);
    let device = AccessFs::from_file(abi) & !BitFlags::from(AccessFs::Execute);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(all)?;
    let tcp_ports: &[u16] = match (policy.network, &policy.tcp_ports) {
        (Network::Off, _) if abi_n >= 4 => {
            // Defence in depth: no TCP rule is added, so no TCP bind or connect is allowed.
            ruleset = ruleset.handle_access(AccessNet::from_all(abi))?;
            &[]
        }
        (Network::On, Some(ports)) => {
            // Connecting is allowed to the listed ports and the grants' ports only (Landlock
            // knows no addresses); binding stays allowed.
            ruleset = ruleset.handle_access(AccessNet::ConnectTcp)?;
            ports
        }
        _ => &[],
    };
    let granted_ports: Vec<u16> = match (policy.network, &policy.tcp_ports) {
        (Network::On, Some(_)) => policy
            .connect
            .iter()
            .filter_map(|g| crate::egress::split_host_port(g))
            .map(|(_, port)| port)
            .collect(),
        _ => Vec::new(),
    };
    if abi_n >= 6 {
        ruleset = ruleset.scope(Scope::from_all(abi))?;
    }
    let mut created = ruleset.create()?;
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
        created = created.add_rule(rule)?;
    }
    for port in tcp_ports.iter().chain(&granted_ports) {
        created = created.add_rule(NetPort::new(*port, AccessNet::ConnectTcp))?;
    }
    let status = created.restrict_self()?;
    if status.ruleset != RulesetStatus::FullyEnforced {
        return Err(SetupError::PartlyEnforced {
            ruleset: status.ruleset,
            landlock: status.landlock,
        });
    }
    if !status.no_new_privs {
        return Err(SetupError::NoNewPrivs);
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
) -> Result<Option<PathBeneath<PathFd>>, SetupError> {
    let fd = match PathFd::new(path) {
        Ok(fd) => fd,
        Err(_) if !required => return Ok(None),
        Err(e) => return Err(doing(format!("cannot open `{}`", path.display()))(e)),
    };
    let access = match std::fs::metadata(path) {
        Ok(meta) if !meta.is_dir() => access & AccessFs::from_file(abi),
        Ok(_) => access,
        Err(e) => return Err(doing(format!("cannot stat `{}`", path.display()))(e)),
    };
    Ok(Some(PathBeneath::new(fd, access)))
}

/// `--probe`: what this kernel supports, as JSON on stdout. Tries a pid namespace (in a
/// child, exactly as a launch makes it), a network namespace (as [`isolate_network`] makes
/// it), then applies a minimal Landlock ruleset to learn the ABI. This process does nothing
/// else afterwards.
fn probe_here() -> i32 {
    let (pidns, pidns_note) = probe_pidns();
    let (netns, netns_note) = match isolate_network() {
        Ok(()) => (true, None),
        Err(e) => (false, Some(e.to_string())),
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
        pidns,
        pidns_note,
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

/// Whether a pid namespace can be made as a launch makes it: `--probe-pidns` in a child.
fn probe_pidns() -> (bool, Option<String>) {
    let out = std::process::Command::new("/proc/self/exe")
        .args([SUBCOMMAND, PROBE_PIDNS_FLAG])
        .stdin(std::process::Stdio::null())
        .output();
    match out {
        Ok(out) if out.status.success() => (true, None),
        Ok(out) => {
            let said = String::from_utf8_lossy(&out.stderr);
            let said = said.trim().trim_start_matches("nightshift sandbox: ");
            (false, Some(said.chars().take(300).collect()))
        }
        Err(e) => (false, Some(format!("cannot run the probe: {e}"))),
    }
}

/// `--probe-pidns`: the supervisor's step, then pid 1's in a child (`--probe-init`).
fn probe_pidns_outer() -> i32 {
    if let Err(e) = namespaces::enter() {
        eprintln!("nightshift sandbox: {e}");
        return EXIT_FAILED;
    }
    match std::process::Command::new("/proc/self/exe")
        .args([SUBCOMMAND, PROBE_INIT_FLAG])
        .status()
    {
        Ok(status) => status.code().unwrap_or(EXIT_FAILED),
        Err(e) => {
            eprintln!("nightshift sandbox: cannot start pid 1 of the namespace: {e}");
            EXIT_FAILED
        }
    }
}

/// `--probe-init`: pid 1 mounts its `/proc`, moves into a root of its own showing it (as a
/// launch does), and finds itself there as pid 1.
fn probe_pidns_init() -> i32 {
    let shown = [crate::rootfs::Shown {
        path: PROC.into(),
        required: true,
    }];
    // Proxied, as the default network is: loopback up and the proxy's socket made too.
    let checked = namespaces::prepare_init(&shown, Network::Proxied, &[], None).and_then(|()| {
        let seen = std::fs::read_link("/proc/self").map_err(doing("/proc/self"))?;
        if std::process::id() == 1 && seen == Path::new("1") {
            Ok(())
        } else {
            Err(SetupError::NotPidOne(seen))
        }
    });
    match checked {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("nightshift sandbox: {e}");
            EXIT_FAILED
        }
    }
}
