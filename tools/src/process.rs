//! Running a child process for a tool: confined, bounded, killable.
//!
//! Guarantees: the child runs in the run's workspace with an environment holding only PATH,
//! HOME, LANG, TERM, the context's allowed variables and what the caller adds (so the
//! daemon's secrets never reach it); with a sandbox in the context it is started through the
//! sandbox's launcher and confined to its policy (HOME and TMPDIR are then its temp dir, and
//! PATH is the context's sandboxed PATH, [`crate::SANDBOXED_PATH`] unless configured, never
//! the daemon's: the daemon's may name directories the sandbox cannot read), and
//! a launch that cannot be confined runs nothing (exit code 126, the reason on stderr); it leads its own process group, and that whole group is
//! stopped on timeout or cancellation (SIGTERM, then SIGKILL after `kill_grace`, so a process
//! ignoring SIGTERM dies too), when the main process exits (leftover background processes),
//! and if the future running it is dropped; while it runs, the group is recorded in the
//! context's process registry, so a daemon restarted after a crash can kill it. Output is read concurrently into a bounded
//! [`Capture`]; a process that escaped the group and keeps the pipe open cannot make the call
//! hang (reading stops shortly after the main process is gone).

use std::io::PipeWriter;
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Child;

use crate::context::ToolContext;
use crate::output::{Capture, Rendered};

/// Variables always passed through from the daemon (when set).
pub(crate) const BASE_ENV: [&str; 4] = ["PATH", "HOME", "LANG", "TERM"];
/// PATH of a command run without a sandbox when the daemon has none.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";
/// PATH of a sandboxed command unless `[sandbox] path` says otherwise: the system's
/// directories, which the sandbox lets commands read.
pub const SANDBOXED_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// How long output is still read after the main process is gone.
const DRAIN: Duration = Duration::from_millis(1000);
const STDERR_TAIL: usize = 4096;

/// What to run.
pub(crate) struct ProcessSpec {
    pub program: String,
    pub args: Vec<String>,
    pub extra_env: Vec<(String, String)>,
    pub stdin: Option<Vec<u8>>,
    pub timeout: Duration,
    /// `true`: stderr goes into the same capture as stdout (like `2>&1`);
    /// `false`: stdout is captured and only the tail of stderr is kept.
    pub merge_stderr: bool,
    /// Artifact label for the captured output.
    pub label: String,
}

/// How the process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    Exited(i32),
    Signaled(i32),
    TimedOut,
    Cancelled,
}

pub(crate) struct ProcessResult {
    pub ending: Ending,
    pub output: Rendered,
    pub stderr_tail: String,
    pub elapsed: Duration,
    /// A process outside the group kept the output pipe open; reading stopped early.
    pub pipe_left_open: bool,
}

/// The environment a tool process gets. In a sandbox, HOME and TMPDIR are its temp dir.
pub(crate) fn base_env(ctx: &ToolContext) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = BASE_ENV
        .iter()
        .map(|s| s.to_string())
        .chain(ctx.env_allow().iter().cloned())
        .filter_map(|name| std::env::var(&name).ok().map(|v| (name, v)))
        .collect();
    if !env.iter().any(|(k, _)| k == "PATH") {
        env.push(("PATH".to_string(), DEFAULT_PATH.to_string()));
    }
    if let Some(sandbox) = ctx.sandbox() {
        env.retain(|(k, _)| k != "PATH");
        env.push(("PATH".to_string(), ctx.sandboxed_path().to_string()));
        for (name, value) in sandbox.env() {
            env.retain(|(k, _)| *k != name);
            env.push((name, value));
        }
    }
    env
}

/// Why a tool's process did not run. `Display` is what the model is told (after the tool's
/// name); the process never started, so nothing of it needs undoing.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The system refused a step of starting it (a pipe, the spawn).
    #[error("failed to start `{program}`: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    /// Its sandbox policy could not be given to the launcher.
    #[error("failed to start `{program}`: {source}")]
    Sandbox {
        program: String,
        source: nightshift_sandbox::EncodeError,
    },
    /// It ran, but its output could not be collected.
    #[error("internal error while collecting output: {0}")]
    Collect(tokio::task::JoinError),
}

/// `program args`, or, when the context has a sandbox, the launcher that runs them in it
/// (it executes the program in place: the pid and process group are the program's).
pub(crate) fn command(
    ctx: &ToolContext,
    program: &str,
    args: &[String],
) -> Result<tokio::process::Command, StartError> {
    match ctx.sandbox() {
        None => {
            let mut cmd = tokio::process::Command::new(program);
            cmd.args(args);
            Ok(cmd)
        }
        Some(sandbox) => {
            let (launcher, argv) =
                sandbox
                    .command(ctx.workspace(), program, args)
                    .map_err(|source| StartError::Sandbox {
                        program: program.to_string(),
                        source,
                    })?;
            let mut cmd = tokio::process::Command::new(launcher);
            cmd.args(argv);
            Ok(cmd)
        }
    }
}

/// The process group `child` leads (it was started with `process_group(0)`), recorded in
/// `ctx`'s process registry while the returned record lives (see `orphans`).
pub(crate) fn group_of(
    ctx: &ToolContext,
    child: &Child,
) -> (Option<Pid>, Option<crate::orphans::Registered>) {
    let pgid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw);
    let registered = match (ctx.process_registry(), pgid) {
        (Some(registry), Some(pgid)) => registry.register(pgid.as_raw()),
        _ => None,
    };
    (pgid, registered)
}

/// Kills the group with SIGKILL when dropped while armed (e.g. the call's future is dropped).
struct GroupGuard {
    pgid: Option<Pid>,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.pgid {
            let _ = killpg(pgid, Signal::SIGKILL);
        }
    }
}

/// Run `spec` for `ctx`. `Err` says why the process did not run (a message for the model).
pub(crate) async fn run(ctx: &ToolContext, spec: ProcessSpec) -> Result<ProcessResult, StartError> {
    let started = Instant::now();
    let spawn_err = |source: std::io::Error| StartError::Spawn {
        program: spec.program.clone(),
        source,
    };
    let (reader, writer) = std::io::pipe().map_err(spawn_err)?;
    let mut child = spawn(ctx, &spec, writer)?;
    // Recorded for as long as the call runs (see `orphans`).
    let (pgid, _registered) = group_of(ctx, &child);
    let mut guard = GroupGuard { pgid };
    if let (Some(input), Some(mut stdin)) = (spec.stdin, child.stdin.take()) {
        tokio::spawn(async move {
            // A process that does not read its stdin is not an error.
            let _ = stdin.write_all(&input).await;
        });
    }
    let capture = Arc::new(Mutex::new(Capture::new(ctx, &spec.label)));
    let receiver = tokio::net::unix::pipe::Receiver::from_owned_fd(OwnedFd::from(reader))
        .map_err(spawn_err)?;
    let out_task = tokio::spawn(pump(receiver, capture.clone()));
    let stderr_tail = Arc::new(Mutex::new(RedactedTail::new(
        ctx.secrets().redactor().clone(),
    )));
    let err_task = child
        .stderr
        .take()
        .map(|stderr| tokio::spawn(pump_tail(stderr, stderr_tail.clone())));

    let ending = wait_for_end(ctx, &mut child, guard.pgid, spec.timeout).await;
    // Background processes left in the group do not outlive the call.
    if let Some(pgid) = guard.pgid.take() {
        let _ = killpg(pgid, Signal::SIGKILL);
    }
    let pipe_left_open = drain(out_task, err_task).await;
    let capture = take_capture(capture, ctx, &spec.label);
    let output = tokio::task::spawn_blocking(move || capture.finish())
        .await
        .map_err(StartError::Collect)?;
    let stderr_tail = stderr_tail
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .finish();
    Ok(ProcessResult {
        ending,
        output,
        stderr_tail,
        elapsed: started.elapsed(),
        pipe_left_open,
    })
}

/// Starts `spec` in the workspace, in a process group of its own, with its cleared
/// environment; its output (and with `merge_stderr` its stderr) goes to `writer`.
fn spawn(ctx: &ToolContext, spec: &ProcessSpec, writer: PipeWriter) -> Result<Child, StartError> {
    let spawn_err = |source: std::io::Error| StartError::Spawn {
        program: spec.program.clone(),
        source,
    };
    let mut cmd = command(ctx, &spec.program, &spec.args)?;
    cmd.current_dir(ctx.workspace())
        .env_clear()
        .envs(base_env(ctx))
        .envs(spec.extra_env.iter().cloned())
        .process_group(0)
        .stdin(if spec.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
    if spec.merge_stderr {
        cmd.stdout(writer.try_clone().map_err(spawn_err)?)
            .stderr(writer);
    } else {
        cmd.stdout(writer).stderr(Stdio::piped());
    }
    let spawned = cmd.spawn();
    drop(cmd); // closes our copies of the pipe's write end, so EOF can come
    spawned.map_err(spawn_err)
}

/// How the process ended: it exited, or its group was stopped because the call was
/// cancelled or `timeout` passed.
async fn wait_for_end(
    ctx: &ToolContext,
    child: &mut Child,
    pgid: Option<Pid>,
    timeout: Duration,
) -> Ending {
    enum First {
        Exit(std::io::Result<ExitStatus>),
        Cancel,
        Timeout,
    }
    let first = tokio::select! {
        biased;
        _ = ctx.cancel().cancelled() => First::Cancel,
        status = child.wait() => First::Exit(status),
        _ = tokio::time::sleep(timeout) => First::Timeout,
    };
    match first {
        First::Exit(status) => exit_ending(status),
        First::Cancel => {
            stop_group(child, pgid, ctx.limits().kill_grace).await;
            Ending::Cancelled
        }
        First::Timeout => {
            stop_group(child, pgid, ctx.limits().kill_grace).await;
            Ending::TimedOut
        }
    }
}

/// Waits (at most [`DRAIN`] each) for the output readers to reach the end of their pipes;
/// true when a process outside the group kept the output pipe open, so reading was stopped.
async fn drain(
    mut out_task: tokio::task::JoinHandle<()>,
    err_task: Option<tokio::task::JoinHandle<()>>,
) -> bool {
    let pipe_left_open = tokio::time::timeout(DRAIN, &mut out_task).await.is_err();
    if pipe_left_open {
        out_task.abort();
        let _ = out_task.await;
    }
    if let Some(task) = err_task
        && tokio::time::timeout(DRAIN, task).await.is_err()
    {
        tracing::debug!("stderr of a tool process left open");
    }
    pipe_left_open
}

fn exit_ending(status: std::io::Result<ExitStatus>) -> Ending {
    match status {
        Ok(status) => match (status.code(), status.signal()) {
            (Some(code), _) => Ending::Exited(code),
            (None, Some(signal)) => Ending::Signaled(signal),
            (None, None) => Ending::Exited(-1),
        },
        Err(e) => {
            tracing::warn!(error = %e, "waiting for a tool process failed");
            Ending::Exited(-1)
        }
    }
}

/// SIGTERM the group, give it `grace`, SIGKILL whatever is left, reap the child.
async fn stop_group(child: &mut Child, pgid: Option<Pid>, grace: Duration) {
    match pgid {
        Some(pgid) => {
            let _ = killpg(pgid, Signal::SIGTERM);
            let _ = tokio::time::timeout(grace, child.wait()).await;
            let _ = killpg(pgid, Signal::SIGKILL);
        }
        None => {
            let _ = child.start_kill();
        }
    }
    let _ = child.wait().await;
}

async fn pump(mut source: impl AsyncRead + Unpin, capture: Arc<Mutex<Capture>>) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match source.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => capture
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(&buf[..n]),
        }
    }
}

pub(crate) async fn pump_tail(mut source: impl AsyncRead + Unpin, tail: Arc<Mutex<RedactedTail>>) {
    let mut buf = vec![0u8; 8 * 1024];
    loop {
        match source.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => tail
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(&buf[..n]),
        }
    }
}

/// The last [`STDERR_TAIL`] bytes of a stream, redacted before they are cut.
pub(crate) struct RedactedTail {
    redactor: crate::secrets::Redactor,
    pending: Vec<u8>,
    kept: Vec<u8>,
}

impl RedactedTail {
    pub(crate) fn new(redactor: crate::secrets::Redactor) -> Self {
        RedactedTail {
            redactor,
            pending: Vec::new(),
            kept: Vec::new(),
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
        let (done, used) = self.redactor.redact_stream_prefix(&self.pending, false);
        self.pending.drain(..used);
        self.keep(&done);
    }

    fn keep(&mut self, redacted: &[u8]) {
        self.kept.extend_from_slice(redacted);
        let excess = self.kept.len().saturating_sub(STDERR_TAIL);
        self.kept.drain(..excess);
    }

    /// Ends the stream: what was held back (it might have begun a secret) is redacted and
    /// kept; returns the tail.
    pub(crate) fn finish(&mut self) -> String {
        let pending = std::mem::take(&mut self.pending);
        let (done, _) = self.redactor.redact_stream_prefix(&pending, true);
        self.keep(&done);
        self.shown()
    }

    /// The tail so far, without the bytes held back because they might begin a secret.
    pub(crate) fn shown(&self) -> String {
        String::from_utf8_lossy(&self.kept).into_owned()
    }
}

fn take_capture(capture: Arc<Mutex<Capture>>, ctx: &ToolContext, label: &str) -> Capture {
    match Arc::try_unwrap(capture) {
        Ok(mutex) => mutex.into_inner().unwrap_or_else(|e| e.into_inner()),
        // Not expected: the reading task has finished, or was aborted and awaited.
        Err(shared) => {
            let mut guard = shared.lock().unwrap_or_else(|e| e.into_inner());
            std::mem::replace(&mut *guard, Capture::new(ctx, label))
        }
    }
}

/// A short description of how the process ended, for the model.
pub(crate) fn describe(ending: Ending, timeout: Duration) -> String {
    match ending {
        Ending::Exited(code) => format!("exit code {code}"),
        Ending::Signaled(signal) => format!("killed by signal {signal}"),
        Ending::TimedOut => format!(
            "timed out after {} s; the command and its child processes were killed",
            timeout.as_secs_f64()
        ),
        Ending::Cancelled => {
            "cancelled; the command and its child processes were killed".to_string()
        }
    }
}
