//! The two processes that run a command in a pid namespace: the launcher as supervisor
//! (outside, the process the daemon started and whose process group it kills) and the init
//! (pid 1 inside), whose first child, pid 2, is the confined command.
//!
//! Guarantees:
//! - **Exit status, exactly.** The init reports how the command ended on a pipe to the
//!   supervisor (`exit <code>` or `signal <n>`: a pid 1 cannot die by a signal it raises),
//!   and the supervisor ends the same way: the same exit code, or death by the same signal
//!   (core dumps suppressed). Only a signal the supervisor cannot re-raise (SIGPIPE, which
//!   the Rust runtime ignores, or a real-time signal) becomes exit code 128 + n. A launch
//!   that fails before the command runs exits 126 with its reason on stderr.
//! - **Signals forwarded, once.** SIGTERM, SIGINT and SIGHUP sent to the supervisor go to
//!   the init (only once it reports ready, so none is lost in the window where a fresh pid 1
//!   ignores them), and from the init to the command's process group, so the command and its
//!   descendants get each signal exactly once, as they would without the namespace. The init
//!   runs in a process group of its own for that reason. The launcher first gives those
//!   signals their default action, so one ignored where the daemon was started (`nohup`)
//!   is not ignored by the command.
//! - **Nothing outlives the supervisor.** The init has the parent-death signal SIGKILL (and
//!   checks, after setting it, that the supervisor is still there); when the init dies the
//!   kernel kills every process of the namespace, those that left the process group or
//!   called `setsid` included. So `killpg` of the supervisor's group (timeout, cancel, the
//!   orphan reaper after a daemon crash) still ends everything, and more surely than before.
//! - The init reaps every orphan of the namespace, is not dumpable (the command cannot read
//!   its memory or environment), is outside the command's Landlock domain (the command cannot
//!   signal or trace it), and exits as soon as the command has ended.

use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus};

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, FdFlag, OFlag, fcntl};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigHandler, SigSet, Signal, kill, killpg};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid, waitpid};
use nix::unistd::Pid;

use crate::error::{SetupError, doing};
use crate::launch::{EXIT_FAILED, SUBCOMMAND};
use crate::namespaces;
use crate::policy::{Network, Policy};
use crate::rootfs;

/// `sandbox-exec --init <fd> <policy> -- <program> <args…>`: pid 1 (internal).
pub(crate) const INIT_FLAG: &str = "--init";
/// `sandbox-exec --egress <fd> <policy>`: the egress proxy's process (internal).
pub(crate) const EGRESS_FLAG: &str = "--egress";
/// `sandbox-exec --confine <policy> -- <program> <args…>`: Landlock, then `exec` (internal).
pub(crate) const CONFINE_FLAG: &str = "--confine";

/// The signals forwarded to the command.
const FORWARDED: [Signal; 3] = [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP];

/// This very binary, whatever happens to its path meanwhile.
const SELF_EXE: &str = "/proc/self/exe";

/// One line the init writes to the supervisor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Line {
    /// Signals are blocked in the init; forwarding them is safe.
    Ready,
    /// How the command ended.
    Ended(Ending),
}

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    Exit(i32),
    Signal(i32),
}

impl Ending {
    fn of(status: ExitStatus) -> Ending {
        match (status.code(), status.signal()) {
            (Some(code), _) => Ending::Exit(code),
            (None, Some(signal)) => Ending::Signal(signal),
            (None, None) => Ending::Exit(EXIT_FAILED),
        }
    }

    fn line(self) -> String {
        match self {
            Ending::Exit(code) => format!("exit {code}\n"),
            Ending::Signal(n) => format!("signal {n}\n"),
        }
    }
}

pub(crate) fn parse_line(line: &str) -> Option<Line> {
    let number = |s: &str| s.trim().parse::<i32>().ok();
    match line.trim().split_once(' ') {
        None if line.trim() == "ready" => Some(Line::Ready),
        Some(("exit", n)) => number(n).map(|n| Line::Ended(Ending::Exit(n))),
        Some(("signal", n)) => number(n).map(|n| Line::Ended(Ending::Signal(n))),
        _ => None,
    }
}

/// How the supervisor ends: as the init reported, else as the init itself ended (killed
/// from outside, or failed before it could report).
pub(crate) fn mirror(reported: Option<Ending>, init: ExitStatus) -> Ending {
    reported.unwrap_or_else(|| Ending::of(init))
}

/// Gives the forwarded signals their default action in this process, and so in the init and
/// the command, which inherit it across `fork` and `exec`. A daemon started under `nohup`
/// (SIGHUP ignored) or from a shell's background job (SIGINT ignored) passes those on to
/// every process it starts, and an ignored disposition survives `exec`: a forwarded signal
/// would then reach a command that discards it, and a shell could not even `trap` it. The
/// daemon chooses which signals to send, so the command must receive them as it would when
/// started from a terminal.
#[allow(unsafe_code)] // The crate's one `unsafe`: see SAFETY below.
pub(crate) fn default_forwarded_actions() -> Result<(), SetupError> {
    for signal in FORWARDED {
        // SAFETY: installing the default action runs no handler of ours, so nothing here
        // has to be async-signal-safe; `signal` is unsafe only for custom handlers.
        unsafe { nix::sys::signal::signal(signal, SigHandler::SigDfl) }
            .map_err(doing(format!("cannot reset the action of {signal}")))?;
    }
    Ok(())
}

fn forwarded_and_child() -> SigSet {
    let mut set = SigSet::empty();
    for signal in FORWARDED {
        set.add(signal);
    }
    set.add(Signal::SIGCHLD);
    set
}

/// Ends this process the way `ending` says. Never returns.
fn end_as(ending: Ending) -> ! {
    if let Ending::Signal(n) = ending
        && let Ok(signal) = Signal::try_from(n)
    {
        // No core file of the launcher in the workspace.
        let _ = nix::sys::prctl::set_dumpable(false);
        let mut one = SigSet::empty();
        one.add(signal);
        let _ = one.thread_unblock();
        // Twice: the Rust runtime's SIGSEGV and SIGBUS handler resets the default action
        // and returns the first time.
        let _ = nix::sys::signal::raise(signal);
        let _ = nix::sys::signal::raise(signal);
    }
    std::process::exit(match ending {
        Ending::Exit(code) => code,
        Ending::Signal(n) => 128 + n,
    })
}

/// The supervisor: enters the namespaces, starts the init, forwards signals to it and ends
/// as the command did. Returns only an error from before the init started.
pub(crate) fn supervise(
    policy: &Policy,
    json: &OsStr,
    program: &OsStr,
    args: &[OsString],
) -> Result<std::convert::Infallible, SetupError> {
    // With a proxied network, the init hands the proxy's listening socket over this pair to
    // the proxy's own process, started now: once this process has made a pid namespace it
    // can start no threads, and the proxy belongs in the daemon's namespaces anyway.
    let egress = match policy.network {
        Network::Proxied => Some(start_egress(json)?),
        _ => None,
    };
    namespaces::enter()?;
    let signals = forwarded_and_child();
    signals
        .thread_block()
        .map_err(doing("cannot block signals"))?;
    let sfd = SignalFd::with_flags(&signals, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
        .map_err(doing("signalfd"))?;
    let (mut reader, writer) = std::io::pipe().map_err(doing("cannot make the status pipe"))?;
    // The init's copy of the write end: inherited on purpose (it reopens and closes it).
    fcntl(&writer, FcntlArg::F_SETFD(FdFlag::empty()))
        .map_err(doing("cannot pass the status pipe"))?;
    let egress_arg = egress
        .as_ref()
        .map_or("-".to_string(), |theirs| theirs.as_raw_fd().to_string());
    let spawned = Command::new(SELF_EXE)
        .arg(SUBCOMMAND)
        .arg(INIT_FLAG)
        .arg(writer.as_raw_fd().to_string())
        .arg(egress_arg)
        .arg(json)
        .arg("--")
        .arg(program)
        .args(args)
        .process_group(0)
        .spawn();
    drop(writer);
    let mut init = spawned.map_err(doing("cannot start the namespace's init"))?;
    drop(egress);
    let mut relay = Relay::to(&init);
    let status = relay.until_exit(&mut init, &sfd, &mut reader);
    end_as(mirror(relay.last_report(&mut reader), status))
}

/// What the supervisor knows of the init while it runs: whether it is ready for signals,
/// the signals that came before it was, how it reported the command ended, and the part of
/// its report not yet ended by a newline.
struct Relay {
    pid: Pid,
    ready: bool,
    pending: Vec<Signal>,
    reported: Option<Ending>,
    text: Vec<u8>,
    pipe_open: bool,
}

impl Relay {
    fn to(init: &Child) -> Relay {
        Relay {
            pid: Pid::from_raw(i32::try_from(init.id()).unwrap_or(i32::MAX)),
            ready: false,
            pending: Vec::new(),
            reported: None,
            text: Vec::new(),
            pipe_open: true,
        }
    }

    /// Reads the init's reports and forwards signals to it until it exits; its status.
    fn until_exit(
        &mut self,
        init: &mut Child,
        sfd: &SignalFd,
        reader: &mut std::io::PipeReader,
    ) -> ExitStatus {
        loop {
            let (signal_in, pipe_in) = wait_for_input(sfd, reader, self.pipe_open);
            if pipe_in {
                self.read_reports(reader);
            }
            if !signal_in {
                continue;
            }
            if let Some(status) = self.take_signals(init, sfd) {
                return status;
            }
        }
    }

    /// Takes what the pipe holds: `ready` sends the signals held back until then.
    fn read_reports(&mut self, reader: &mut std::io::PipeReader) {
        let mut chunk = [0u8; 256];
        match reader.read(&mut chunk) {
            Ok(0) | Err(_) => self.pipe_open = false,
            Ok(n) => self.text.extend_from_slice(&chunk[..n]),
        }
        for line in take_lines(&mut self.text) {
            match parse_line(&line) {
                Some(Line::Ready) => {
                    self.ready = true;
                    for signal in self.pending.drain(..) {
                        let _ = kill(self.pid, signal);
                    }
                }
                Some(Line::Ended(ending)) => self.reported = Some(ending),
                None => {}
            }
        }
    }

    /// Takes the signals that came: forwards each (or holds it until the init is ready), and
    /// returns the init's status once it has exited.
    fn take_signals(&mut self, init: &mut Child, sfd: &SignalFd) -> Option<ExitStatus> {
        let mut exited = None;
        while let Ok(Some(info)) = sfd.read_signal() {
            match Signal::try_from(info.ssi_signo as i32) {
                Ok(Signal::SIGCHLD) => {
                    if let Ok(Some(status)) = init.try_wait() {
                        exited = Some(status);
                    }
                }
                Ok(signal) if self.ready => {
                    let _ = kill(self.pid, signal);
                }
                Ok(signal) => self.pending.push(signal),
                Err(_) => {}
            }
        }
        exited
    }

    /// How the init reported the command ended, once the init is gone (and with it every
    /// writer of the pipe): what is left in the pipe is read first.
    fn last_report(mut self, reader: &mut std::io::PipeReader) -> Option<Ending> {
        let _ = reader.read_to_end(&mut self.text);
        self.text.push(b'\n');
        for line in take_lines(&mut self.text) {
            if let Some(Line::Ended(ending)) = parse_line(&line) {
                self.reported = Some(ending);
            }
        }
        self.reported
    }
}

/// Waits until the signalfd (or the pipe, while open) has something; `(signals, pipe)`.
fn wait_for_input(sfd: &SignalFd, reader: &std::io::PipeReader, pipe_open: bool) -> (bool, bool) {
    let mut fds = vec![PollFd::new(sfd.as_fd(), PollFlags::POLLIN)];
    if pipe_open {
        fds.push(PollFd::new(reader.as_fd(), PollFlags::POLLIN));
    }
    match poll(&mut fds, PollTimeout::NONE) {
        Ok(_) => {}
        Err(Errno::EINTR) => return (false, false),
        // Not expected; reading the signalfd (non-blocking) keeps the loop going.
        Err(_) => return (true, false),
    }
    let any = |fd: &PollFd| fd.revents().is_some_and(|r| !r.is_empty());
    (any(&fds[0]), fds.get(1).is_some_and(any))
}

/// Removes and returns the complete lines at the start of `text`.
fn take_lines(text: &mut Vec<u8>) -> Vec<String> {
    let Some(end) = text.iter().rposition(|b| *b == b'\n') else {
        return Vec::new();
    };
    let done: Vec<u8> = text.drain(..=end).collect();
    String::from_utf8_lossy(&done)
        .lines()
        .map(str::to_string)
        .collect()
}

/// The init (pid 1): `rest` is `<status fd> <proxy channel fd or -> <policy> -- <program>
/// <args…>`. Never returns.
pub(crate) fn init(rest: &[OsString]) -> ! {
    let (fd, egress, json, program, args) = match rest {
        [fd, egress, json, dashes, program, args @ ..] if dashes == "--" => {
            (fd, egress, json, program, args)
        }
        _ => fail("usage: sandbox-exec --init <fd> <fd|-> <policy> -- <program> [args…]".into()),
    };
    let egress = proxy_channel(egress);
    // First: if the supervisor dies, so does this init, and with it the whole namespace.
    if let Err(e) = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL) {
        fail(format!("prctl(PR_SET_PDEATHSIG): {e}"));
    }
    let mut status = status_pipe(fd);
    let signals = forwarded_and_child();
    let sfd = match signals
        .thread_block()
        .and_then(|()| SignalFd::with_flags(&signals, SfdFlags::SFD_CLOEXEC))
    {
        Ok(sfd) => sfd,
        Err(e) => fail(format!("cannot take the signals: {e}")),
    };
    if status.write_all(b"ready\n").is_err() {
        fail("the launcher is gone".into());
    }
    if let Err(e) = prepare(json, egress) {
        eprintln!("nightshift sandbox: {e}");
        report(&mut status, Ending::Exit(EXIT_FAILED));
    }
    let _ = nix::sys::prctl::set_dumpable(false);
    // What `ps` shows for pid 1 (rather than `exe`).
    let _ = nix::sys::prctl::set_name(c"nightshift-init");
    let spawned = Command::new(SELF_EXE)
        .arg(SUBCOMMAND)
        .arg(CONFINE_FLAG)
        .arg(json)
        .arg("--")
        .arg(program)
        .args(args)
        .process_group(0)
        .spawn();
    let command = match spawned {
        Ok(child) => child,
        Err(e) => {
            eprintln!("nightshift sandbox: cannot start the confined command: {e}");
            report(&mut status, Ending::Exit(EXIT_FAILED))
        }
    };
    serve_as_pid_one(command, &sfd, status)
}

/// The init's end of the proxy's channel (`-`: none), or the init fails.
fn proxy_channel(arg: &OsStr) -> Option<UnixStream> {
    match arg.to_str() {
        Some("-") => None,
        Some(n) => match n.parse::<i32>() {
            Ok(n) => Some(namespaces::adopt_stream(n)),
            Err(_) => fail("the proxy's channel is not a descriptor number".into()),
        },
        None => fail("the proxy's channel is not a descriptor number".into()),
    }
}

/// The status pipe to the supervisor, from its inherited descriptor `fd` (closed here), or
/// the init fails.
fn status_pipe(fd: &OsStr) -> std::fs::File {
    let Some(fd) = fd.to_str().and_then(|f| f.parse::<i32>().ok()) else {
        fail("the status descriptor is not a number".into())
    };
    // Reopened (close-on-exec) rather than adopted; non-blocking so a supervisor already
    // gone (no reader) is an error here instead of a hang.
    let status = match std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(OFlag::O_NONBLOCK.bits())
        .open(format!("/proc/self/fd/{fd}"))
    {
        Ok(file) => file,
        Err(e) => fail(format!("the launcher is gone ({e})")),
    };
    let _ = nix::unistd::close(fd);
    status
}

/// Pid 1's namespaces, root and working directory, made as the policy `json` says (see
/// [`namespaces::prepare_init`]); the proxy's channel is closed once it was used.
fn prepare(json: &OsStr, egress: Option<UnixStream>) -> Result<(), SetupError> {
    let json = json.to_str().ok_or(SetupError::PolicyNotUtf8)?;
    let policy = serde_json::from_str::<Policy>(json).map_err(doing("the policy is malformed"))?;
    let cwd = std::env::current_dir().map_err(doing("no working directory"))?;
    let forwards = crate::egress::loopback_forwards(&policy.connect);
    namespaces::prepare_init(
        &rootfs::shown(&policy),
        policy.network,
        &forwards,
        egress.as_ref(),
    )?;
    drop(egress);
    // Taken again inside the new root, never left pointing outside it.
    std::env::set_current_dir(&cwd).map_err(doing(format!(
        "the working directory `{}` is not in the sandbox",
        cwd.display()
    )))
}

/// Pid 1 while the command runs: reaps every process of the namespace, passes the forwarded
/// signals on to the command's process group, and reports how the command ended (exiting).
fn serve_as_pid_one(mut command: Child, sfd: &SignalFd, mut status: std::fs::File) -> ! {
    let group = Pid::from_raw(i32::try_from(command.id()).unwrap_or(i32::MAX));
    loop {
        let signal = match sfd.read_signal() {
            Ok(Some(info)) => Signal::try_from(info.ssi_signo as i32).ok(),
            _ => None,
        };
        match signal {
            Some(Signal::SIGCHLD) => {
                if let Some(ended) = reap(&mut command) {
                    report(&mut status, Ending::of(ended));
                }
            }
            Some(signal) => {
                let _ = killpg(group, signal);
            }
            None => {}
        }
    }
}

/// Starts the egress proxy's process (`--egress`) with one end of a new channel; the other
/// end, inheritable, is for the init.
fn start_egress(json: &OsStr) -> Result<UnixStream, SetupError> {
    let (ours, theirs) = UnixStream::pair().map_err(doing("cannot make the proxy's channel"))?;
    let pass = |end: &UnixStream| {
        fcntl(end, FcntlArg::F_SETFD(FdFlag::empty()))
            .map_err(doing("cannot pass the proxy's channel"))
    };
    // Only the proxy's end goes to the proxy (so an init that ends without sending closes
    // the channel for good); the init's end is made inheritable after.
    pass(&ours)?;
    let spawned = Command::new(SELF_EXE)
        .arg(SUBCOMMAND)
        .arg(EGRESS_FLAG)
        .arg(ours.as_raw_fd().to_string())
        .arg(json)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .spawn();
    drop(ours);
    spawned.map_err(doing("cannot start the egress proxy"))?;
    pass(&theirs)?;
    Ok(theirs)
}

fn fail(message: String) -> ! {
    eprintln!("nightshift sandbox: {message}");
    std::process::exit(EXIT_FAILED)
}

/// Tells the supervisor how the command ended, and exits (pid 1 cannot die by a signal of
/// its own, so a signal becomes 128 + n here; the supervisor re-raises it).
fn report(status: &mut std::fs::File, ending: Ending) -> ! {
    let _ = status.write_all(ending.line().as_bytes());
    std::process::exit(match ending {
        Ending::Exit(code) => code,
        Ending::Signal(n) => 128 + n,
    })
}

/// Reaps every exited process of the namespace; returns the command's status once it has
/// ended. Peeks first (`WNOWAIT`) so the command itself is reaped by `std`, with its status
/// in full.
fn reap(command: &mut Child) -> Option<ExitStatus> {
    let own = Pid::from_raw(i32::try_from(command.id()).unwrap_or(i32::MAX));
    loop {
        let peek = waitid(
            Id::All,
            WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT,
        );
        match peek {
            Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => return None,
            Ok(status) => match status.pid() {
                Some(pid) if pid == own => return command.try_wait().ok().flatten(),
                Some(pid) => {
                    let _ = waitpid(pid, Some(WaitPidFlag::WNOHANG));
                }
                None => return None,
            },
            // A status nix cannot name (a real-time signal): maybe the command's.
            Err(_) => return command.try_wait().ok().flatten(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_lines_round_trip_and_junk_is_ignored() {
        assert_eq!(parse_line("ready"), Some(Line::Ready));
        for ending in [Ending::Exit(0), Ending::Exit(130), Ending::Signal(9)] {
            assert_eq!(parse_line(&ending.line()), Some(Line::Ended(ending)));
        }
        assert_eq!(parse_line("exit x"), None);
        assert_eq!(parse_line("hello"), None);
    }

    #[test]
    fn the_report_wins_over_the_inits_own_status() {
        let exited = |code: i32| ExitStatus::from_raw(code << 8);
        let killed = |signal: i32| ExitStatus::from_raw(signal);
        // The command died by SIGTERM; the init, being pid 1, could only exit 143.
        assert_eq!(
            mirror(Some(Ending::Signal(15)), exited(143)),
            Ending::Signal(15)
        );
        // A command exiting 143 itself stays an exit code.
        assert_eq!(
            mirror(Some(Ending::Exit(143)), exited(143)),
            Ending::Exit(143)
        );
        // The init killed from outside before it could report.
        assert_eq!(mirror(None, killed(9)), Ending::Signal(9));
        assert_eq!(mirror(None, exited(126)), Ending::Exit(126));
    }

    #[test]
    fn only_complete_lines_are_taken() {
        let mut text = b"ready\nexit 3\nsig".to_vec();
        assert_eq!(take_lines(&mut text), ["ready", "exit 3"]);
        assert_eq!(text, b"sig");
        assert!(take_lines(&mut text).is_empty());
    }
}
