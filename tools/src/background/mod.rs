//! Background commands: `run_command {background: true}` starts one and returns its task id
//! at once; `task_output` and `task_stop` look at it and stop it; when it ends, the
//! [`TaskLedger`] hears how, so the agent runtime can tell the model.
//!
//! Guarantees:
//! - **Recorded before it is announced.** [`TaskSupervisor::start`] returns a task id only
//!   after [`TaskLedger::started`] accepted it; a ledger refusal (e.g. too many running
//!   tasks) is the model's error message and nothing runs.
//! - **Confined like any command.** `sh -c` in the run's workspace, in the context's sandbox
//!   when it has one, the cleared environment of `process`, its own process group, recorded in the context's process registry (so a
//!   daemon restarted after a crash kills it while its leader still runs). The whole group is stopped (SIGTERM, then
//!   SIGKILL after `kill_grace`) at its deadline, on `task_stop` (here, or requested through
//!   the ledger from another daemon), when its run ends, when another daemon has marked it
//!   lost, and on [`TaskSupervisor::shutdown`]. From [`TaskSupervisor::begin_shutdown`] on,
//!   no task starts, and one killed by a signal counts as `lost`.
//! - **Output on disk, redacted, bounded.** Standard output and error go to
//!   `<dir>/<task id>.log` redacted as a stream (a value split across reads or spanning lines
//!   is replaced whole; one whose print pauses mid-value lets no 8-byte run through), up to
//!   `max_artifact_bytes` (later
//!   output is counted, not kept); the last part stays in memory for the ending.
//! - **Every ending is reported, and a task that did not finish is never a success.** The
//!   ending (`succeeded` only for exit code 0) is handed to [`TaskLedger::ended`], retried
//!   until it is recorded or the supervisor shuts down; a task stopped by shutdown ends as
//!   `lost`. A task of a daemon that died without a shutdown is marked lost by the ledger's
//!   owner (see `nightshift_store::tasks`).

use std::collections::HashMap;
use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

mod error;
mod watcher;

use crate::context::ToolContext;
use crate::process::base_env;
use watcher::{Pump, Watch};

pub use error::{StartRefused, TaskError};

/// Bytes of the newest output kept in memory for a task's ending.
pub(crate) const TAIL_BYTES: usize = 4096;
/// How long output is still read after the main process is gone.
pub(crate) const DRAIN: Duration = Duration::from_millis(1000);

/// How a background task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskEnding {
    /// Exit code 0.
    Succeeded,
    /// Another exit code, or a signal we did not send.
    Failed,
    /// Killed at its deadline.
    TimedOut,
    /// Stopped on purpose (`task_stop`, or its run ended).
    Stopped,
    /// The daemon shut down before it ended.
    Lost,
}

impl TaskEnding {
    /// The stored spelling (`nightshift_store::TaskStatus`).
    pub fn as_str(self) -> &'static str {
        match self {
            TaskEnding::Succeeded => "succeeded",
            TaskEnding::Failed => "failed",
            TaskEnding::TimedOut => "timed_out",
            TaskEnding::Stopped => "stopped",
            TaskEnding::Lost => "lost",
        }
    }
}

/// A task about to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartedTask {
    pub id: String,
    pub run_id: String,
    /// The `run_command` call that starts it.
    pub call_id: String,
    /// The command line, secrets redacted.
    pub command: String,
    /// It is stopped once it has run this long.
    pub timeout: Duration,
}

/// How a task ended, for the ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndedTask {
    pub id: String,
    pub run_id: String,
    pub ending: TaskEnding,
    pub exit_code: Option<i32>,
    /// How it ended, in words for the model.
    pub detail: String,
    /// The last part of its output, redacted.
    pub output_tail: String,
    /// Bytes of output in total.
    pub output_bytes: u64,
}

/// What the ledger knows of a task that does not run here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskSnapshot {
    pub run_id: String,
    pub command: String,
    /// How it ended; `None` while it runs (on another daemon).
    pub ending: Option<TaskEnding>,
    pub detail: Option<String>,
    pub output_tail: Option<String>,
    pub output_bytes: u64,
}

/// Where tasks are recorded durably. The runner implements it with the store.
pub trait TaskLedger: Send + Sync + 'static {
    /// Records a task that starts now. `Err` refuses it, with a message for the model.
    fn started<'a>(&'a self, task: &'a StartedTask) -> BoxFuture<'a, Result<(), String>>;
    /// Records how a task ended. `Err` means "not recorded yet"; the supervisor retries.
    fn ended<'a>(&'a self, task: &'a EndedTask) -> BoxFuture<'a, Result<(), String>>;
    /// A task that does not run in this supervisor (it ended, or runs on another daemon).
    fn lookup<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Option<TaskSnapshot>>;
    /// Asks the daemon running task `id` to stop it; `Ok(false)` when it is not running.
    fn request_stop<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<bool, String>>;
}

/// What `task_output` and `task_stop` show.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskView {
    pub id: String,
    pub command: String,
    /// `running` or how it ended.
    pub status: String,
    pub detail: Option<String>,
    /// The newest output (redacted), at most the bytes asked for.
    pub output: String,
    pub output_bytes: u64,
    /// Seconds since it started, when it runs here.
    pub elapsed: Option<f64>,
}

/// Why a running task is being stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopCause {
    /// `task_stop`, here or (through the ledger) on another daemon.
    Asked,
    /// Its run ended.
    RunEnded,
    /// Another daemon marked it lost (this one was out of touch): it must not run on.
    MarkedLost,
    /// This daemon shuts down.
    Shutdown,
}

pub(crate) struct Live {
    run_id: String,
    command: String,
    started: Instant,
    log: PathBuf,
    stop: CancellationToken,
    why: Mutex<Option<StopCause>>,
    bytes: Arc<std::sync::atomic::AtomicU64>,
    done: watch::Receiver<Option<EndedTask>>,
}

impl Live {
    fn stop(&self, why: StopCause) {
        self.why
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert(why);
        self.stop.cancel();
    }
}

pub(crate) struct Inner {
    dir: PathBuf,
    ledger: Arc<dyn TaskLedger>,
    live: Mutex<HashMap<String, Arc<Live>>>,
    watchers: tokio_util::task::TaskTracker,
    shutting_down: CancellationToken,
}

/// Starts, watches and stops the background tasks of one daemon. Cheap to clone.
#[derive(Clone)]
pub struct TaskSupervisor {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for TaskSupervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskSupervisor")
            .field("dir", &self.inner.dir)
            .field("running", &self.running_ids().len())
            .finish()
    }
}

impl TaskSupervisor {
    /// A supervisor writing task logs to `dir` and recording tasks in `ledger`.
    pub fn new(dir: impl Into<PathBuf>, ledger: Arc<dyn TaskLedger>) -> Self {
        TaskSupervisor {
            inner: Arc::new(Inner {
                dir: dir.into(),
                ledger,
                live: Mutex::new(HashMap::new()),
                watchers: tokio_util::task::TaskTracker::new(),
                shutting_down: CancellationToken::new(),
            }),
        }
    }

    /// The log file of task `id`.
    pub fn log_path(&self, id: &str) -> PathBuf {
        self.inner.dir.join(format!("{id}.log"))
    }

    /// Ids of the tasks running here.
    pub fn running_ids(&self) -> Vec<String> {
        self.live().keys().cloned().collect()
    }

    fn live(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Live>>> {
        self.inner.live.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts `command` for the call in `ctx`; its task id, or why not (for the model).
    pub async fn start(
        &self,
        ctx: &ToolContext,
        command: &str,
        timeout: Duration,
    ) -> Result<String, StartRefused> {
        if self.inner.shutting_down.is_cancelled() {
            return Err(StartRefused::ShuttingDown);
        }
        let id = format!("task_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
        let record = StartedTask {
            id: id.clone(),
            run_id: ctx.run_id().to_string(),
            call_id: ctx.tool_call_id().to_string(),
            command: ctx.secrets().redact(command),
            timeout,
        };
        self.inner
            .ledger
            .started(&record)
            .await
            .map_err(StartRefused::NotRecorded)?;
        let log = self.log_path(&id);
        match self.spawn(ctx, &record, command, log) {
            Ok(()) => Ok(id),
            Err(refused) => {
                // Recorded but never ran: say so, so the run is not left waiting for it.
                let ended = EndedTask {
                    id: id.clone(),
                    run_id: record.run_id.clone(),
                    ending: TaskEnding::Failed,
                    exit_code: None,
                    detail: refused.to_string(),
                    output_tail: String::new(),
                    output_bytes: 0,
                };
                record_ending(&self.inner, &ended).await;
                Err(refused)
            }
        }
    }

    /// Starts the task's process and the watch that pumps its output to `log` and reports
    /// its ending.
    fn spawn(
        &self,
        ctx: &ToolContext,
        record: &StartedTask,
        command: &str,
        log: PathBuf,
    ) -> Result<(), StartRefused> {
        let (file, reader, child) = self.start_process(ctx, record, command, &log)?;
        let (pgid, registered) = crate::process::group_of(ctx, &child);
        let receiver = tokio::net::unix::pipe::Receiver::from_owned_fd(OwnedFd::from(reader))
            .map_err(StartRefused::Spawn)?;
        let (done_tx, done_rx) = watch::channel(None);
        let bytes = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let live = Arc::new(Live {
            run_id: record.run_id.clone(),
            command: record.command.clone(),
            started: Instant::now(),
            log,
            stop: CancellationToken::new(),
            why: Mutex::new(None),
            bytes: bytes.clone(),
            done: done_rx,
        });
        {
            // The shutdown flag is set under this lock, so a task is either refused here or
            // seen (and stopped) by the shutdown.
            let mut running = self.live();
            if self.inner.shutting_down.is_cancelled() {
                live.stop(StopCause::Shutdown);
            }
            running.insert(record.id.clone(), live.clone());
        }
        let watch = Watch {
            inner: self.inner.clone(),
            id: record.id.clone(),
            live,
            child,
            pgid,
            timeout: record.timeout,
            kill_grace: ctx.limits().kill_grace,
            pump: Pump {
                file,
                cap: ctx.limits().max_artifact_bytes,
                written: 0,
                redaction: crate::secrets::StreamRedactor::new(ctx.secrets().redactor().clone()),
                tail: VecDeque::new(),
                total: bytes,
            },
            receiver,
            done: done_tx,
            _registered: registered,
        };
        self.inner.watchers.spawn(watch.run());
        Ok(())
    }

    /// `sh -c command` in the workspace (and sandbox), in a process group of its own, its
    /// output going to a pipe; with the opened log file and the pipe's reading end.
    fn start_process(
        &self,
        ctx: &ToolContext,
        record: &StartedTask,
        command: &str,
        log: &Path,
    ) -> Result<(std::fs::File, std::io::PipeReader, tokio::process::Child), StartRefused> {
        std::fs::create_dir_all(&self.inner.dir).map_err(StartRefused::Spawn)?;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(StartRefused::Spawn)?;
        let (reader, writer) = std::io::pipe().map_err(StartRefused::Spawn)?;
        let mut cmd = crate::process::command(ctx, "sh", &["-c".to_string(), command.to_string()])?;
        cmd.current_dir(ctx.workspace())
            .env_clear()
            .envs(base_env(ctx))
            .env("NIGHTSHIFT_RUN_ID", &record.run_id)
            .env("NIGHTSHIFT_TASK_ID", &record.id)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(writer.try_clone().map_err(StartRefused::Spawn)?)
            .stderr(writer);
        let spawned = cmd.spawn();
        drop(cmd);
        let child = spawned.map_err(StartRefused::Spawn)?;
        Ok((file, reader, child))
    }

    /// What task `id` of run `run_id` is doing, with at most `max_bytes` of its newest output.
    pub async fn view(
        &self,
        run_id: &str,
        id: &str,
        max_bytes: usize,
    ) -> Result<TaskView, TaskError> {
        let live = self.live().get(id).cloned();
        if let Some(live) = live {
            if live.run_id != run_id {
                return Err(no_such_task(id));
            }
            let ended = live.done.borrow().clone();
            let output = read_tail(&live.log, max_bytes);
            return Ok(match ended {
                Some(e) => TaskView {
                    id: id.to_string(),
                    command: live.command.clone(),
                    status: e.ending.as_str().to_string(),
                    detail: Some(e.detail),
                    output,
                    output_bytes: e.output_bytes,
                    elapsed: Some(live.started.elapsed().as_secs_f64()),
                },
                None => TaskView {
                    id: id.to_string(),
                    command: live.command.clone(),
                    status: "running".into(),
                    detail: None,
                    output,
                    output_bytes: live.bytes.load(std::sync::atomic::Ordering::Relaxed),
                    elapsed: Some(live.started.elapsed().as_secs_f64()),
                },
            });
        }
        let Some(snap) = self.inner.ledger.lookup(id).await else {
            return Err(no_such_task(id));
        };
        if snap.run_id != run_id {
            return Err(no_such_task(id));
        }
        let log = self.log_path(id);
        let output = if log.exists() {
            read_tail(&log, max_bytes)
        } else {
            let tail = snap.output_tail.clone().unwrap_or_default();
            tail[floor_char(&tail, tail.len().saturating_sub(max_bytes))..].to_string()
        };
        Ok(TaskView {
            id: id.to_string(),
            command: snap.command,
            detail: snap.detail,
            output,
            output_bytes: snap.output_bytes,
            elapsed: None,
            status: snap
                .ending
                .map_or("running on another daemon", TaskEnding::as_str)
                .into(),
        })
    }

    /// Stops task `id` of run `run_id` and waits (about `kill_grace` + 1 s) for it to end.
    pub async fn stop(
        &self,
        run_id: &str,
        id: &str,
        max_bytes: usize,
    ) -> Result<TaskView, TaskError> {
        let live = self.live().get(id).cloned();
        match live {
            Some(live) if live.run_id == run_id => {
                live.stop(StopCause::Asked);
                let mut done = live.done.clone();
                let _ =
                    tokio::time::timeout(Duration::from_secs(5), done.wait_for(|e| e.is_some()))
                        .await;
            }
            Some(_) => return Err(no_such_task(id)),
            None => {
                let view = self.view(run_id, id, max_bytes).await?;
                if view.status.starts_with("running") {
                    return match self.inner.ledger.request_stop(id).await {
                        Ok(true) => Ok(TaskView {
                            status: "stop requested".into(),
                            detail: Some(
                                "it runs on another daemon, which stops it within about a second; \
                                 you get a reminder when it has ended"
                                    .into(),
                            ),
                            ..view
                        }),
                        Ok(false) => self.view(run_id, id, max_bytes).await,
                        Err(reason) => Err(TaskError::CannotStop {
                            id: id.to_string(),
                            reason,
                        }),
                    };
                }
                return Ok(view);
            }
        }
        self.view(run_id, id, max_bytes).await
    }

    /// Stops the given tasks for `cause` (ids not running here are ignored).
    pub fn stop_ids(&self, ids: &[String], cause: StopCause) {
        let live = self.live();
        for id in ids {
            if let Some(task) = live.get(id) {
                task.stop(cause);
            }
        }
    }

    /// The daemon received its stop signal: no task starts from now on, and a task killed by
    /// a signal from now on (e.g. the service manager's) ended because the daemon went away —
    /// it is `lost`, not failed or succeeded.
    pub fn begin_shutdown(&self) {
        let _running = self.live();
        self.inner.shutting_down.cancel();
    }

    /// Stops every task (they end as `lost`: the daemon goes away before they finished) and
    /// waits until their endings are recorded or `grace` has passed.
    pub async fn shutdown(&self, grace: Duration) {
        // No task starts from here on, so none escapes the stop below (see `spawn`).
        let running: Vec<Arc<Live>> = {
            let live = self.live();
            self.inner.shutting_down.cancel();
            live.values().cloned().collect()
        };
        for live in &running {
            live.stop(StopCause::Shutdown);
        }
        self.inner.watchers.close();
        if tokio::time::timeout(grace, self.inner.watchers.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                "background tasks still being stopped at shutdown; they will be marked lost"
            );
        }
    }
}

fn no_such_task(id: &str) -> TaskError {
    TaskError::NoSuchTask(id.to_string())
}

/// The last `max` bytes of a file, at a character boundary, or a note why it cannot be read.
fn read_tail(path: &Path, max: usize) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let read = || -> std::io::Result<String> {
        let mut file = std::fs::File::open(path)?;
        let len = file.metadata()?.len();
        let from = len.saturating_sub(max as u64);
        file.seek(SeekFrom::Start(from))?;
        let mut bytes = Vec::new();
        file.take(max as u64).read_to_end(&mut bytes)?;
        let text = String::from_utf8_lossy(&bytes).into_owned();
        Ok(text)
    };
    read().unwrap_or_else(|e| format!("(the task's log cannot be read: {e})"))
}

/// The largest char boundary of `s` at or below `i`.
fn floor_char(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// Hands an ending to the ledger until it is recorded, or gives up after a failure once the
/// supervisor is shutting down (the store then marks the task lost when its heartbeat goes
/// stale).
pub(crate) async fn record_ending(inner: &Inner, ended: &EndedTask) {
    let mut delay = Duration::from_millis(100);
    loop {
        match inner.ledger.ended(ended).await {
            Ok(()) => return,
            Err(e) => {
                tracing::warn!(task = %ended.id, error = %e, "cannot record a background task's ending yet; retrying");
                if inner.shutting_down.is_cancelled() {
                    return;
                }
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        }
    }
}
