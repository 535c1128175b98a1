//! One task from spawn to recorded ending: [`Pump`] copies its output to the log (redacted as
//! a stream, capped, the newest part kept in memory; what is held back in case a secret
//! straddles the next write is written once the task has been quiet for a moment, and the
//! next write is still matched together with it, so a print that pauses mid-secret lets no
//! 8-byte run of it through) and [`Watch`] waits for the first of
//! exit, stop and deadline, stops the whole process group when needed, drains the output,
//! decides how the task ended and hands that to the ledger.
//!
//! Guarantees: a task ends exactly once, as `succeeded` only for exit code 0; a task stopped
//! because the daemon shuts down, killed by a signal while it does, or marked lost elsewhere
//! ends as `lost`; no process of the group outlives the watch.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::AsyncReadExt;
use tokio::sync::watch;

use super::{DRAIN, EndedTask, Inner, Live, StopCause, TAIL_BYTES, TaskEnding, record_ending};
use crate::secrets::StreamRedactor;

/// How long a task may write nothing before what is held back for redaction is written.
const IDLE_FLUSH: Duration = Duration::from_millis(500);

/// Copies a task's output to its log, redacted as a stream (a secret split across reads or
/// spanning lines is still replaced whole) and capped; keeps the newest part in memory.
pub(super) struct Pump {
    pub(super) file: std::fs::File,
    pub(super) cap: u64,
    pub(super) written: u64,
    /// The stream's redaction: output read but not yet written, and what came before.
    pub(super) redaction: StreamRedactor,
    pub(super) tail: VecDeque<u8>,
    pub(super) total: Arc<std::sync::atomic::AtomicU64>,
}

impl Pump {
    fn push(&mut self, chunk: &[u8]) {
        self.total
            .fetch_add(chunk.len() as u64, std::sync::atomic::Ordering::Relaxed);
        let out = self.redaction.push(chunk);
        self.write(&out);
    }

    /// Everything still pending, at the end of the output.
    fn finish(&mut self) {
        let out = self.redaction.flush();
        self.write(&out);
    }

    /// Everything still pending, after the task wrote nothing for [`IDLE_FLUSH`]: a quiet
    /// task's newest line reaches its log (and `task_output`) instead of waiting. What it
    /// writes next is matched together with what was flushed, so a secret whose print pauses
    /// there is still replaced from the pause on (fewer than 8 of its bytes may stay before it).
    fn flush_idle(&mut self) {
        let out = self.redaction.flush();
        self.write(&out);
    }

    fn write(&mut self, out: &[u8]) {
        if out.is_empty() {
            return;
        }
        self.tail.extend(out.iter().copied());
        let excess = self.tail.len().saturating_sub(TAIL_BYTES);
        self.tail.drain(..excess);
        if self.written < self.cap {
            let room = usize::try_from(self.cap - self.written).unwrap_or(usize::MAX);
            let part = &out[..out.len().min(room)];
            // One write per read (at most 16 KiB): cheap enough for the async runtime.
            if self.file.write_all(part).is_ok() {
                self.written += part.len() as u64;
            }
            if part.len() < out.len() {
                let _ = writeln!(
                    self.file,
                    "\n[output beyond {} bytes is not kept]",
                    self.cap
                );
            }
        }
    }

    fn tail_text(&self) -> String {
        let bytes: Vec<u8> = self.tail.iter().copied().collect();
        let text = String::from_utf8_lossy(&bytes);
        // The first character may have been cut in half; drop what cannot be shown.
        text.trim_start_matches('\u{FFFD}').to_string()
    }
}

/// Watches one task from spawn to recorded ending.
pub(super) struct Watch {
    pub(super) inner: Arc<Inner>,
    pub(super) id: String,
    pub(super) live: Arc<Live>,
    pub(super) child: tokio::process::Child,
    pub(super) pgid: Option<Pid>,
    pub(super) timeout: Duration,
    pub(super) kill_grace: Duration,
    pub(super) pump: Pump,
    pub(super) receiver: tokio::net::unix::pipe::Receiver,
    pub(super) done: watch::Sender<Option<EndedTask>>,
    pub(super) _registered: Option<crate::orphans::Registered>,
}

enum First {
    Exit(std::io::Result<std::process::ExitStatus>),
    Stop,
    Timeout,
}

impl Watch {
    pub(super) async fn run(mut self) {
        let mut buf = vec![0u8; 16 * 1024];
        let deadline = tokio::time::sleep(self.timeout);
        tokio::pin!(deadline);
        let mut reading = true;
        let first = loop {
            tokio::select! {
                biased;
                _ = self.live.stop.cancelled() => break First::Stop,
                status = self.child.wait() => break First::Exit(status),
                _ = &mut deadline => break First::Timeout,
                read = self.receiver.read(&mut buf), if reading => match read {
                    Ok(0) | Err(_) => reading = false,
                    Ok(n) => self.pump.push(&buf[..n]),
                },
                () = tokio::time::sleep(IDLE_FLUSH), if self.pump.redaction.is_holding() => {
                    self.pump.flush_idle();
                }
            }
        };
        if !matches!(first, First::Exit(_)) {
            self.stop_group().await;
        }
        // Processes left in the group do not outlive the task.
        if let Some(pgid) = self.pgid {
            let _ = killpg(pgid, Signal::SIGKILL);
        }
        let drain_until = Instant::now() + DRAIN;
        while reading {
            let left = drain_until.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.receiver.read(&mut buf)).await {
                Ok(Ok(n)) if n > 0 => self.pump.push(&buf[..n]),
                _ => reading = false,
            }
        }
        self.pump.finish();
        let _ = self.pump.file.flush();
        let why = *self.live.why.lock().unwrap_or_else(|e| e.into_inner());
        let (mut ending, exit_code, mut detail) = describe_ending(first, why, self.timeout);
        if ending == TaskEnding::Failed
            && exit_code.is_none()
            && self.inner.shutting_down.is_cancelled()
        {
            // Killed by a signal while the daemon stops (a service manager signals the whole
            // group): it did not get to finish.
            ending = TaskEnding::Lost;
            detail = format!(
                "{detail} while the daemon was shutting down; it may not have finished its work"
            );
        }
        let ended = EndedTask {
            id: self.id.clone(),
            run_id: self.live.run_id.clone(),
            ending,
            exit_code,
            detail,
            output_tail: self.pump.tail_text(),
            output_bytes: self.pump.total.load(std::sync::atomic::Ordering::Relaxed),
        };
        let _ = self.done.send(Some(ended.clone()));
        record_ending(&self.inner, &ended).await;
        self.inner
            .live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.id);
    }

    /// SIGTERM the group, give it `kill_grace`, SIGKILL whatever is left, reap the child.
    async fn stop_group(&mut self) {
        match self.pgid {
            Some(pgid) => {
                let _ = killpg(pgid, Signal::SIGTERM);
                let _ = tokio::time::timeout(self.kill_grace, self.child.wait()).await;
                let _ = killpg(pgid, Signal::SIGKILL);
            }
            None => {
                let _ = self.child.start_kill();
            }
        }
        let _ = self.child.wait().await;
    }
}

fn describe_ending(
    first: First,
    why: Option<StopCause>,
    timeout: Duration,
) -> (TaskEnding, Option<i32>, String) {
    use std::os::unix::process::ExitStatusExt;
    match first {
        First::Exit(Ok(status)) => match (status.code(), status.signal()) {
            (Some(0), _) => (TaskEnding::Succeeded, Some(0), "exit code 0".into()),
            (Some(code), _) => (TaskEnding::Failed, Some(code), format!("exit code {code}")),
            (None, Some(signal)) => (
                TaskEnding::Failed,
                None,
                format!("killed by signal {signal}"),
            ),
            (None, None) => (TaskEnding::Failed, None, "ended without an exit code".into()),
        },
        First::Exit(Err(e)) => (
            TaskEnding::Failed,
            None,
            format!("waiting for the command failed: {e}"),
        ),
        First::Timeout => (
            TaskEnding::TimedOut,
            None,
            format!(
                "timed out after {} s; the command and its child processes were killed",
                timeout.as_secs_f64()
            ),
        ),
        First::Stop => match why {
            Some(StopCause::Shutdown) => (
                TaskEnding::Lost,
                None,
                "the daemon shut down before it ended; it was killed and may not have finished its work"
                    .into(),
            ),
            Some(StopCause::RunEnded) => (
                TaskEnding::Stopped,
                None,
                "stopped because its run ended".into(),
            ),
            Some(StopCause::MarkedLost) => (
                TaskEnding::Lost,
                None,
                "killed: another daemon had marked it lost while this one was out of touch".into(),
            ),
            Some(StopCause::Asked) | None => (
                TaskEnding::Stopped,
                None,
                "stopped by task_stop; the command and its child processes were killed".into(),
            ),
        },
    }
}
