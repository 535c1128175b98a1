//! The launcher on the real kernel: each forbidden thing gets a permission error (with a
//! control showing the same thing works unsandboxed, so the test proves the sandbox did it),
//! and what a command needs still works. Runs as root in CI: Landlock holds for root too.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

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

/// A process outside the sandbox holding the secret in its environment (like the daemon).
struct Holder(Child);

impl Holder {
    fn start() -> Holder {
        Holder(
            Command::new("sleep")
                .arg("60")
                .env("HOLDER_SECRET", SECRET)
                .spawn()
                .unwrap(),
        )
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }

    fn alive(&mut self) -> bool {
        self.0.try_wait().unwrap().is_none()
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn what_a_command_needs_still_works() {
    let l = layout();
    let out = sandboxed(
        &l,
        "set -e; echo made > made.txt; cat made.txt; mkdir -p sub && mv made.txt sub/; \
         ls /usr/bin >/dev/null; cat /etc/passwd >/dev/null; echo t > \"$TMPDIR/t\"; \
         cat \"$TMPDIR/t\"; test \"$HOME\" = \"$TMPDIR\"; head -c 4 /dev/urandom | wc -c; \
         read -r status < /proc/self/status; cat /proc/cpuinfo /proc/sys/kernel/osrelease >/dev/null; \
         sh -c 'echo child-ok'; kill -0 $$ && echo self-ok",
    );
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    for expect in ["made", "t\n", "4", "child-ok", "self-ok"] {
        assert!(t.contains(expect), "{expect}: {t}");
    }
    assert!(l.workspace.join("sub/made.txt").exists());
    assert!(l.temp.join("t").exists());
}

#[test]
fn files_outside_the_workspace_are_closed() {
    let l = layout();
    let outside = l.outside.join("file.txt");
    let cases = [
        (format!("cat {}", outside.display()), "read outside"),
        (
            "cat ../run-b/notes.txt".to_string(),
            "read a sibling workspace",
        ),
        ("cat ../../api-token".to_string(), "read the API token"),
        (
            format!("ls {}", l.data.display()),
            "list the data directory",
        ),
        ("ls /tmp".to_string(), "list /tmp"),
        ("ls /root".to_string(), "list /root"),
    ];
    for (script, what) in &cases {
        let control = unsandboxed(&l, script);
        assert!(
            control.status.success(),
            "control for {what}: {}",
            text(&control)
        );
        assert_denied(&sandboxed(&l, script), what);
    }
    let writes = [
        (l.outside.join("new.txt"), "write outside"),
        (l.sibling.join("planted.txt"), "write a sibling workspace"),
        (l.data.join("planted.txt"), "write the data directory"),
        (
            PathBuf::from("/etc/nightshift-sandbox-planted"),
            "write /etc",
        ),
    ];
    for (path, what) in &writes {
        let out = sandboxed(&l, &format!("echo x > {}", path.display()));
        assert_denied(&out, what);
        assert!(!path.exists(), "{what}: nothing was written");
    }
}

#[test]
fn other_processes_cannot_be_read_traced_or_signalled() {
    let l = layout();
    let pid_namespace = sandbox(&l, Network::On, &[]);
    other_processes_are_closed_to(&l, &|script| run_in(&pid_namespace, &l, "sh", script));
    let shared = shared_pids(&l);
    other_processes_are_closed_to(&l, &|script| run_in(&shared, &l, "sh", script));
    // Without a pid namespace, /proc lists every process and so is closed but for a few files.
    let control = unsandboxed(&l, "ls /proc");
    assert!(control.status.success(), "control: {}", text(&control));
    assert_denied(
        &run_in(&shared, &l, "sh", "ls /proc"),
        "list the processes without a pid namespace",
    );
}

fn other_processes_are_closed_to(l: &Layout, sandboxed: &dyn Fn(&str) -> Output) {
    let mut holder = Holder::start();
    let pid = holder.pid();
    let environ = format!("tr '\\0' '\\n' < /proc/{pid}/environ");
    let control = unsandboxed(l, &environ);
    assert!(
        String::from_utf8_lossy(&control.stdout).contains(SECRET),
        "control: unsandboxed, the environment is readable: {}",
        text(&control)
    );
    assert_unreachable(&sandboxed(&environ), "read another process's environ");
    // The parent of the sandboxed shell: this test process, or in a pid namespace its init.
    assert_denied(
        &sandboxed("tr '\\0' '\\n' < /proc/$PPID/environ"),
        "read the parent's environ",
    );
    for (script, what) in [
        (
            format!("cat /proc/{pid}/cmdline"),
            "read another process's command line",
        ),
        (
            format!("ls /proc/{pid}/fd"),
            "list another process's open files",
        ),
    ] {
        let control = unsandboxed(l, &script);
        assert!(
            control.status.success(),
            "control for {what}: {}",
            text(&control)
        );
        assert_unreachable(&sandboxed(&script), what);
    }
    if Path::new("/usr/bin/strace").exists() {
        let out = sandboxed(&format!("strace -p {pid} -e trace=none & sleep 1; kill $!"));
        assert_unreachable(&out, "ptrace another process");
    }
    let mem = format!("exec 3< /proc/{pid}/mem && echo opened");
    if nix_is_root() {
        let control = unsandboxed(l, &mem);
        assert!(control.status.success(), "control: {}", text(&control));
    }
    assert_unreachable(&sandboxed(&mem), "open another process's memory");
    assert_denied(
        &sandboxed("exec 3< /proc/$PPID/mem && echo opened"),
        "open the parent's memory",
    );
    let control = unsandboxed(l, &format!("kill -0 {pid}"));
    assert!(control.status.success(), "control: {}", text(&control));
    assert_unreachable(&sandboxed(&format!("kill -0 {pid}")), "signal a process");
    assert_unreachable(&sandboxed(&format!("kill -9 {pid}")), "kill a process");
    assert_denied(&sandboxed("kill -0 $PPID"), "signal the parent");
    assert!(holder.alive(), "the other process survived");
}

fn nix_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
}

#[test]
fn network_off_reaches_nothing_and_on_reaches_the_host() {
    let l = layout();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let connect = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected");
    let on = run_in(&sandbox(&l, Network::On, &[]), &l, "bash", &connect);
    assert!(
        String::from_utf8_lossy(&on.stdout).contains("connected"),
        "network on: {}",
        text(&on)
    );
    let off = run_in(&sandbox(&l, Network::Off, &[]), &l, "bash", &connect);
    let t = text(&off);
    assert!(!off.status.success() && !t.contains("connected"), "{t}");
    assert!(
        t.contains("Network is unreachable")
            || t.contains("Permission denied")
            || t.contains("Connection refused"),
        "a network error: {t}"
    );
    // Files still work with the network off (the user namespace keeps the uid).
    let files = run_in(
        &sandbox(&l, Network::Off, &[]),
        &l,
        "sh",
        "echo x > f && cat f && id -u",
    );
    assert!(files.status.success(), "{}", text(&files));
    let uid = String::from_utf8_lossy(&unsandboxed(&l, "id -u").stdout).to_string();
    assert!(
        String::from_utf8_lossy(&files.stdout).ends_with(&uid),
        "same uid inside: {}",
        text(&files)
    );
}

#[test]
fn granted_paths_are_reachable_and_nothing_more() {
    let l = layout();
    let extra = l.outside.join("cache");
    std::fs::create_dir_all(&extra).unwrap();
    let sb = sandbox(&l, Network::On, std::slice::from_ref(&extra));
    let ok = run_in(
        &sb,
        &l,
        "sh",
        &format!("echo c > {}/c && cat {0}/c", extra.display()),
    );
    assert!(ok.status.success(), "{}", text(&ok));
    let denied = run_in(
        &sb,
        &l,
        "sh",
        &format!("cat {}", l.outside.join("file.txt").display()),
    );
    assert_denied(&denied, "a sibling of the grant");
}

#[test]
fn a_launch_that_cannot_be_enforced_runs_nothing() {
    let l = layout();
    let marker = l.workspace.join("ran");
    let script = format!("touch {}", marker.display());
    let launch = |policy: &str| {
        Command::new(LAUNCHER)
            .args(["sandbox-exec", policy, "--", "sh", "-c", &script])
            .output()
            .unwrap()
    };
    let good = Policy::standard(&l.workspace, &l.temp, &[], &[], Network::On, abi());
    let json = |p: &Policy| serde_json::to_string(p).unwrap();
    let missing = Policy {
        write: vec![l.outside.join("no-such-dir")],
        ..good.clone()
    };
    let old = Policy {
        abi: 5,
        ..good.clone()
    };
    let wide = Policy {
        read: vec!["/".into()],
        ..good.clone()
    };
    let missing_in_pid_namespace = missing.clone().in_pid_namespace();
    for (policy, expect) in [
        ("{not json".to_string(), "the policy is malformed"),
        (json(&missing), "cannot open"),
        (json(&missing_in_pid_namespace), "cannot open"),
        (json(&old), "ABI 5"),
        (json(&wide), "whole filesystem"),
    ] {
        let out = launch(&policy);
        let t = text(&out);
        assert_eq!(out.status.code(), Some(126), "{t}");
        assert!(
            t.contains("nightshift sandbox: ") && t.contains(expect),
            "{expect}: {t}"
        );
        assert!(!marker.exists(), "{expect}: nothing ran");
    }
    let out = Command::new(LAUNCHER)
        .args(["sandbox-exec", &json(&good), "--", "/no/such/program"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127), "{}", text(&out));
    assert!(text(&out).contains("cannot run `/no/such/program`"));
    let out = Command::new(LAUNCHER)
        .args(["sandbox-exec", &json(&good)])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(126));
    assert!(text(&out).contains("usage: nightshift sandbox-exec"));
}

#[test]
fn the_probe_reports_this_kernel() {
    let support = probe(Path::new(LAUNCHER)).unwrap();
    assert!(support.landlock_abi >= 6, "{support:?}");
    assert!(support.netns, "{support:?}");
    assert!(support.pidns, "{support:?}");
    let err = probe(Path::new("/bin/true")).unwrap_err().to_string();
    assert!(
        err.contains("did not answer the probe") && err.contains("[sandbox] launcher"),
        "{err}"
    );
}

/// The numeric entries of the command's `/proc` with their names, and what it sees of itself.
#[test]
fn a_command_sees_only_its_own_processes() {
    let l = layout();
    let holder = Holder::start();
    let outside = [holder.pid(), std::process::id()];
    let script = format!(
        "echo me=$$ parent=$PPID; for p in /proc/[0-9]*; do echo \"pid ${{p#/proc/}} $(cat $p/comm)\"; done; \
         for o in {} {}; do test -e /proc/$o && echo visible-$o; done; \
         sh -c 'read -r line < /proc/self/status && echo child-self-ok'",
        outside[0], outside[1]
    );
    let out = sandboxed(&l, &script);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(
        t.contains("me=2 parent=1"),
        "the command is pid 1's child: {t}"
    );
    assert!(
        t.contains("child-self-ok"),
        "/proc/self works for a child: {t}"
    );
    let listed: Vec<(u32, String)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| line.strip_prefix("pid "))
        .filter_map(|rest| rest.split_once(' '))
        .map(|(pid, comm)| (pid.parse().unwrap(), comm.to_string()))
        .collect();
    let pids: Vec<u32> = listed.iter().map(|(p, _)| *p).collect();
    assert!(pids.contains(&1) && pids.contains(&2), "{listed:?}");
    for (pid, comm) in &listed {
        assert!(
            ["nightshift-init", "sh", "cat"].contains(&comm.as_str()),
            "only the namespace's processes are listed, not {pid} {comm}: {listed:?}"
        );
    }
    for pid in outside {
        if !pids.contains(&pid) {
            assert!(
                !t.contains(&format!("visible-{pid}")),
                "{pid} is absent: {t}"
            );
        }
    }
    if Path::new("/usr/bin/ps").exists() || Path::new("/bin/ps").exists() {
        let ps = sandboxed(&l, "ps -e -o pid=,comm=");
        let shown = String::from_utf8_lossy(&ps.stdout).to_string();
        assert!(ps.status.success(), "{}", text(&ps));
        assert!(
            !shown.contains("sleep") && shown.contains("ps"),
            "ps lists the namespace only: {shown}"
        );
    }
}

#[test]
fn exit_codes_and_signals_are_forwarded_exactly() {
    use std::os::unix::process::ExitStatusExt;
    let l = layout();
    for (script, code, signal) in [
        ("exit 0", Some(0), None),
        ("exit 3", Some(3), None),
        ("exit 143", Some(143), None),
        ("kill -TERM $$", None, Some(15)),
        ("kill -INT $$", None, Some(2)),
        ("kill -KILL $$", None, Some(9)),
        ("kill -SEGV $$", None, Some(11)),
    ] {
        let out = sandboxed(&l, script);
        assert_eq!(
            (out.status.code(), out.status.signal()),
            (code, signal),
            "{script}: {}",
            text(&out)
        );
        assert!(!out.status.core_dumped(), "{script}: no core dump");
        let control = unsandboxed(&l, script);
        assert_eq!(
            (control.status.code(), control.status.signal()),
            (code, signal),
            "control for {script}"
        );
    }
    assert!(
        std::fs::read_dir(&l.workspace).unwrap().next().is_none(),
        "no core file left in the workspace"
    );
}

/// Starts `script` sandboxed as the tools do (its own process group, stdout piped) and waits
/// until it printed `ready`.
fn start_ready(l: &Layout, script: &str) -> (Child, std::io::BufReader<std::process::ChildStdout>) {
    start_ready_from(l, script, "")
}

/// As [`start_ready`], with the launcher started by a shell that ignores `ignored` (as
/// `nohup` ignores HUP, or a shell's background job INT) and then executes it in place.
fn start_ready_from(
    l: &Layout,
    script: &str,
    ignored: &str,
) -> (Child, std::io::BufReader<std::process::ChildStdout>) {
    use std::io::BufRead;
    use std::os::unix::process::CommandExt;
    let sb = sandbox(l, Network::On, &[]);
    let (program, args) = sb
        .command(&l.workspace, "sh", &["-c".into(), script.into()])
        .unwrap();
    let ignore = if ignored.is_empty() {
        String::new()
    } else {
        format!("trap '' {ignored}; ")
    };
    let mut command = Command::new("/bin/sh");
    command
        .arg("-c")
        .arg(format!("{ignore}exec \"$0\" \"$@\""))
        .arg(program)
        .args(args);
    let mut child = command
        .current_dir(&l.workspace)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .envs(sb.env())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    (child, stdout)
}

fn pid_of(child: &Child) -> nix::unistd::Pid {
    nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap())
}

#[test]
fn signals_to_the_launcher_or_its_group_reach_the_command() {
    use nix::sys::signal::{Signal, kill, killpg};
    use std::io::Read;
    let l = layout();
    // "TERM INT HUP": started where those are ignored (`nohup`, a background job); the
    // command still gets them, and a shell in it can trap them.
    for (signal, name, ignored) in [
        (Signal::SIGTERM, "TERM", ""),
        (Signal::SIGINT, "INT", ""),
        (Signal::SIGHUP, "HUP", ""),
        (Signal::SIGTERM, "TERM", "TERM INT HUP"),
        (Signal::SIGINT, "INT", "TERM INT HUP"),
        (Signal::SIGHUP, "HUP", "TERM INT HUP"),
    ] {
        for to_group in [false, true] {
            let script =
                format!("trap 'echo got-{name}; exit 7' {name}; echo ready; sleep 1000 & wait");
            let (mut child, mut stdout) = start_ready_from(&l, &script, ignored);
            if to_group {
                killpg(pid_of(&child), signal).unwrap();
            } else {
                kill(pid_of(&child), signal).unwrap();
            }
            let case = format!("{name}, group {to_group}, ignored [{ignored}]");
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let mut rest = String::new();
                let _ = tx.send(stdout.read_to_string(&mut rest).map(|_| rest));
            });
            // Bounded only so a regression fails instead of hanging the suite.
            let Ok(rest) = rx.recv_timeout(std::time::Duration::from_secs(60)) else {
                let _ = killpg(pid_of(&child), Signal::SIGKILL);
                panic!("{case}: the command never got the signal");
            };
            let rest = rest.unwrap();
            let status = child.wait().unwrap();
            assert_eq!(rest, format!("got-{name}\n"), "{case}");
            assert_eq!(status.code(), Some(7), "{case}");
        }
    }
}

#[test]
fn killing_the_launcher_or_its_group_kills_every_process_of_the_command() {
    use nix::sys::signal::{Signal, kill, killpg};
    use std::io::Read;
    use std::os::unix::process::ExitStatusExt;
    let l = layout();
    for to_group in [true, false] {
        // A child in the group, one that left it with setsid, one ignoring SIGTERM: each holds
        // stdout open, so its end comes only when all of them are gone.
        let (mut child, mut stdout) = start_ready(
            &l,
            "sleep 1000 & setsid sleep 1000 & (trap '' TERM; sleep 1000) & echo ready; wait",
        );
        if to_group {
            killpg(pid_of(&child), Signal::SIGKILL).unwrap();
        } else {
            kill(pid_of(&child), Signal::SIGKILL).unwrap();
        }
        assert_eq!(child.wait().unwrap().signal(), Some(9));
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut rest = Vec::new();
            let _ = tx.send(stdout.read_to_end(&mut rest).map(|_| rest));
        });
        // Bounded only so a regression fails instead of hanging the suite.
        let rest = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("a process of the command survived (group {to_group})"))
            .unwrap();
        assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
    }
}

#[test]
fn etc_is_readable_only_where_programs_need_it() {
    let l = layout();
    for secret in ["/etc/shadow", "/etc/gshadow"] {
        if !Path::new(secret).exists() {
            continue;
        }
        let script = format!("cat {secret} >/dev/null && echo read");
        if nix_is_root() {
            let control = unsandboxed(&l, &script);
            assert!(control.status.success(), "control: {}", text(&control));
        }
        assert_denied(&sandboxed(&l, &script), secret);
        assert_denied(&run_in(&shared_pids(&l), &l, "sh", &script), secret);
    }
    assert_denied(&sandboxed(&l, "ls /etc"), "list /etc");
    let mut needs = vec![
        ("sh -c 'echo shell-ok'", "shell-ok"),
        ("ls -l /usr/bin >/dev/null && ls -la && echo ls-ok", "ls-ok"),
        ("id -un", ""),
        ("getent hosts localhost", "localhost"),
        ("date +%Y >/dev/null && echo date-ok", "date-ok"),
    ];
    if Path::new("/usr/bin/git").exists() {
        needs.push(("git --version", "git version"));
        needs.push((
            "git init -q repo && git -C repo -c user.name=t -c user.email=t@t commit -q --allow-empty -m m && git -C repo log --oneline | wc -l",
            "1",
        ));
    }
    if Path::new("/usr/bin/python3").exists() {
        needs.push((
            "python3 -c 'import ssl, json, socket, platform; ssl.create_default_context(); print(\"py-ok\")'",
            "py-ok",
        ));
    }
    for (script, expect) in needs {
        let out = sandboxed(&l, script);
        let t = text(&out);
        assert!(out.status.success() && t.contains(expect), "{script}: {t}");
    }
}

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

/// With the network on and a port list, TCP connects go to the listed ports only: a listener
/// on loopback (as the daemon's database or API would be) is refused with a permission
/// error until its port is listed. Binding and listening stay allowed.
#[test]
fn with_the_network_on_tcp_reaches_only_the_listed_ports() {
    let l = layout();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let connect = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected");
    let limited = |ports: Vec<u16>| {
        let policy = Policy::standard(&l.workspace, &l.temp, &[], &[], Network::On, abi())
            .in_pid_namespace()
            .with_tcp_ports(Some(ports));
        Sandbox::new(LAUNCHER, policy)
    };
    let refused = run_in(&limited(vec![443]), &l, "bash", &connect);
    let t = text(&refused);
    assert!(!refused.status.success() && !t.contains("connected"), "{t}");
    assert!(t.contains("Permission denied"), "{t}");
    let allowed = run_in(&limited(vec![443, port]), &l, "bash", &connect);
    assert!(
        String::from_utf8_lossy(&allowed.stdout).contains("connected"),
        "{}",
        text(&allowed)
    );
    // A `connect` grant's port is allowed too (Landlock knows ports, not addresses).
    let granted = Policy::standard(&l.workspace, &l.temp, &[], &[], Network::On, abi())
        .in_pid_namespace()
        .with_tcp_ports(Some(vec![443]))
        .with_connect(vec![format!("127.0.0.1:{port}")]);
    let out = run_in(&Sandbox::new(LAUNCHER, granted), &l, "bash", &connect);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("connected"),
        "{}",
        text(&out)
    );
    let listens = run_in(
        &limited(vec![]),
        &l,
        "sh",
        "perl -MIO::Socket::INET -e 'IO::Socket::INET->new(LocalAddr => \"127.0.0.1\", \
         Listen => 1) or die \"listen: $!\"; print \"listening\\n\"'",
    );
    assert!(
        String::from_utf8_lossy(&listens.stdout).contains("listening"),
        "{}",
        text(&listens)
    );
}

/// An HTTP server on the host's loopback answering every request `200 host-secret`, as the
/// daemon's API or a local service would.
fn host_http_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                use std::io::{Read, Write};
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
                    head.push(byte[0]);
                }
                let _ = stream.write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-length: 11\r\nconnection: close\r\n\r\nhost-secret",
                );
            });
        }
    });
    port
}

fn proxied(l: &Layout, ports: Option<Vec<u16>>, connect: Vec<String>) -> Sandbox {
    let policy = Policy::standard(&l.workspace, &l.temp, &[], &[], Network::Proxied, abi())
        .in_pid_namespace()
        .with_tcp_ports(ports)
        .with_connect(connect);
    Sandbox::new(LAUNCHER, policy)
}

/// The default network (`on`): a namespace of the command's own whose one way out is the
/// launcher's proxy. The host's loopback is not reachable directly (its own is empty), the
/// proxy refuses loopback, private and link-local destinations with a reason, and a
/// `host:port` the config grants is reached through it, by `curl` reading the standard
/// proxy variables. The control: the server answers outside the sandbox.
#[test]
fn a_proxied_network_reaches_no_local_service_unless_granted() {
    let l = layout();
    let port = host_http_server();
    let url = format!("http://127.0.0.1:{port}/");
    let control = unsandboxed(&l, &format!("curl -sS --noproxy '*' {url}"));
    assert!(
        String::from_utf8_lossy(&control.stdout).contains("host-secret"),
        "{}",
        text(&control)
    );
    let sb = proxied(&l, Some(vec![80, 443]), vec![]);
    // Directly: the command's own loopback has nothing on that port; no other route.
    let direct = run_in(
        &sb,
        &l,
        "bash",
        &format!(
            "exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected; exec 3<>/dev/tcp/10.0.0.1/80 && echo routed"
        ),
    );
    let t = text(&direct);
    assert!(!t.contains("connected") && !t.contains("routed"), "{t}");
    // Through the proxy (curl sends loopback to it only when told: NO_PROXY keeps the
    // command's own loopback direct), and every non-public class is refused by name.
    for (target, says) in [
        (url.clone(), "loopback"),
        (format!("http://localhost:{port}/"), "loopback"),
        (
            "http://169.254.169.254/latest/meta-data/".to_string(),
            "link-local",
        ),
        ("http://10.1.2.3/".to_string(), "private"),
        ("http://[::1]:80/".to_string(), "loopback"),
    ] {
        let out = run_in(
            &sb,
            &l,
            "sh",
            &format!("curl -sS --noproxy '' -w ' status=%{{http_code}}' {target}"),
        );
        let t = text(&out);
        assert!(!t.contains("host-secret"), "{target}: {t}");
        assert!(
            t.contains("not allowed") && t.contains(says),
            "{target}: {t}"
        );
    }
    let https = run_in(
        &sb,
        &l,
        "sh",
        &format!("curl -sS --noproxy '' https://127.0.0.1:{port}/"),
    );
    let t = text(&https);
    assert!(
        !https.status.success() && t.contains("403"),
        "CONNECT refused: {t}"
    );
    // Granted by name: reached, through the proxy, with the standard variables only.
    let granted = proxied(&l, Some(vec![443]), vec![format!("127.0.0.1:{port}")]);
    let out = run_in(&granted, &l, "sh", &format!("curl -sS --noproxy '' {url}"));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("host-secret"),
        "{}",
        text(&out)
    );
    // A tunnel (CONNECT, as for HTTPS or any TCP a client tunnels) to the grant works too.
    let tunnel = run_in(
        &granted,
        &l,
        "sh",
        &format!("curl -sS --noproxy '' --proxytunnel {url}"),
    );
    assert!(
        String::from_utf8_lossy(&tunnel.stdout).contains("host-secret"),
        "{}",
        text(&tunnel)
    );
    // The proxy's process ends with its command: none of this test's is left.
    let workspace = l.workspace.display().to_string();
    let left = || {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
            .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
            .filter(|c| c.contains("--egress") && c.contains(&workspace))
            .count()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while left() > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(left(), 0, "an egress proxy outlived its command");
    let env = run_in(&granted, &l, "sh", "echo $HTTPS_PROXY $NO_PROXY");
    assert_eq!(
        String::from_utf8_lossy(&env.stdout).trim(),
        "http://127.0.0.1:3128 localhost,127.0.0.1,::1"
    );
}
