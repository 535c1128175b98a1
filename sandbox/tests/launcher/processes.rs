//! Processes: other processes cannot be read, traced or signalled, a command sees only its
//! own, exit codes and signals are forwarded exactly, and signals to the launcher or its group
//! reach (or kill) every process of the command.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

use nightshift_sandbox::Network;

use super::{
    Layout, SECRET, assert_denied, assert_unreachable, layout, nix_is_root, run_in, sandbox,
    sandboxed, shared_pids, text, unsandboxed,
};

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
