//! The launcher on the real kernel: each forbidden thing gets a permission error (with a
//! control showing the same thing works unsandboxed, so the test proves the sandbox did it),
//! and what a command needs still works. Runs as root in CI: Landlock holds for root too.
//!
//! By what the command tries to reach: [`files`], [`processes`], [`ipc`], [`network`], and
//! [`enforcement`] for the probe and a launch that cannot be enforced; the layout and the
//! launch helpers they share are here.

mod enforcement;
mod files;
mod ipc;
mod network;
mod processes;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use nightshift_sandbox::probe::{Needs, decide, probe};
use nightshift_sandbox::{Network, Policy, Sandbox};

const LAUNCHER: &str = env!("CARGO_BIN_EXE_nightshift-sandbox-exec");
const SECRET: &str = "sandbox-test-secret-4c1d2f";

/// A data directory like the daemon's: two runs' workspaces, a temp dir, an API token, and a
/// directory outside it all.
struct Layout {
    _root: tempfile::TempDir,
    data: PathBuf,
    workspace: PathBuf,
    sibling: PathBuf,
    temp: PathBuf,
    outside: PathBuf,
}

fn layout() -> Layout {
    let root = tempfile::tempdir().unwrap();
    let base = root.path().canonicalize().unwrap();
    let data = base.join("data");
    let workspace = data.join("workspaces/run-a");
    let sibling = data.join("workspaces/run-b");
    let temp = data.join("tmp/run-a");
    let outside = base.join("outside");
    for dir in [&workspace, &sibling, &temp, &outside] {
        std::fs::create_dir_all(dir).unwrap();
    }
    std::fs::write(data.join("api-token"), SECRET).unwrap();
    std::fs::write(sibling.join("notes.txt"), SECRET).unwrap();
    std::fs::write(outside.join("file.txt"), SECRET).unwrap();
    Layout {
        _root: root,
        data,
        workspace,
        sibling,
        temp,
        outside,
    }
}

fn abi() -> u32 {
    let support = probe(Path::new(LAUNCHER)).expect("the launcher answers the probe");
    decide(&support, &Needs::default())
        .unwrap_or_else(|r| panic!("this machine must support the sandbox: {r}"))
        .abi
}

/// The sandbox as `serve` makes it on this machine: in a pid namespace of its own.
fn sandbox(l: &Layout, network: Network, write: &[PathBuf]) -> Sandbox {
    Sandbox::new(
        LAUNCHER,
        Policy::standard(&l.workspace, &l.temp, &[], write, network, abi()).in_pid_namespace(),
    )
}

/// The fallback where the kernel refuses pid namespaces: the daemon's pid namespace.
fn shared_pids(l: &Layout) -> Sandbox {
    Sandbox::new(
        LAUNCHER,
        Policy::standard(&l.workspace, &l.temp, &[], &[], Network::On, abi()),
    )
}

/// Runs `script` with `shell` under `sandbox` in the workspace, as the tools do.
fn run_in(sandbox: &Sandbox, l: &Layout, shell: &str, script: &str) -> Output {
    let (program, args) = sandbox
        .command(&l.workspace, shell, &["-c".into(), script.into()])
        .unwrap();
    Command::new(program)
        .args(args)
        .current_dir(&l.workspace)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .envs(sandbox.env())
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn sandboxed(l: &Layout, script: &str) -> Output {
    run_in(&sandbox(l, Network::On, &[]), l, "sh", script)
}

/// The same script without the sandbox (the control).
fn unsandboxed(l: &Layout, script: &str) -> Output {
    Command::new("sh")
        .args(["-c", script])
        .current_dir(&l.workspace)
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Fails with a permission error or, in a root of the command's own (a pid namespace),
/// because the path is not there at all; never shows the secret.
fn assert_denied(out: &Output, what: &str) {
    let t = text(out);
    assert!(!out.status.success(), "{what} must fail: {t}");
    assert!(
        t.contains("Permission denied")
            || t.contains("Operation not permitted")
            || t.contains("No such file or directory")
            || t.contains("Directory nonexistent")
            || t.contains("Read-only file system"),
        "{what}: a permission error: {t}"
    );
    assert!(!t.contains(SECRET), "{what}: the secret stays out: {t}");
}

/// Fails because it is forbidden or, in a pid namespace, because the process outside does
/// not exist there; never shows the secret.
fn assert_unreachable(out: &Output, what: &str) {
    let t = text(out);
    assert!(!out.status.success(), "{what} must fail: {t}");
    assert!(
        [
            "Permission denied",
            "Operation not permitted",
            "No such file",
            "No such process"
        ]
        .iter()
        .any(|e| t.contains(e)),
        "{what}: a permission or not-found error: {t}"
    );
    assert!(!t.contains(SECRET), "{what}: the secret stays out: {t}");
}

fn nix_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
}
