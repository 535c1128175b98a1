//! A long-lived program spoken to over its stdin and stdout — an MCP server over stdio —
//! started the way a command tool's process is.
//!
//! What it guarantees:
//! - **Confined like a command.** It runs in the run's workspace, under the run's sandbox when
//!   the context has one, with the cleared environment commands get plus the variables given
//!   (their `{{secret:NAME}}` placeholders substituted here, never written to the log).
//! - **Gone with its handle.** It leads a process group of its own; dropping the
//!   [`StdioServer`] (or [`StdioServer::kill`]) kills the whole group with SIGKILL, and while it
//!   lives the group is recorded in the run's process registry, so a daemon that crashed kills
//!   it at its next start like any orphaned tool process.
//! - **Its stderr never blocks it.** It is drained as it comes into the same redacted tail a
//!   command's stderr goes to (a secret split across reads is still redacted: bytes that might
//!   begin one are held back until the stream ends); the last few KB say why a server that
//!   died did ([`StdioServer::stderr_tail`]).

use std::process::Stdio;
use std::sync::{Arc, Mutex};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, ChildStdin, ChildStdout};

use crate::context::ToolContext;
use crate::process::{RedactedTail, StartError, base_env, command, group_of, pump_tail};

/// A started server: its pipes, until taken, and its process group.
pub struct StdioServer {
    child: Child,
    pgid: Option<Pid>,
    stdin: Option<ChildStdin>,
    stdout: Option<ChildStdout>,
    stderr: Arc<Mutex<RedactedTail>>,
    _registered: Option<crate::orphans::Registered>,
}

impl std::fmt::Debug for StdioServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StdioServer")
            .field("pid", &self.child.id())
            .field("pgid", &self.pgid)
            .finish()
    }
}

impl StdioServer {
    /// Starts `program args` for `ctx` with `env` added (each value's secret placeholders
    /// substituted from `ctx`'s secrets). `Err` says why it did not start.
    pub fn spawn(
        ctx: &ToolContext,
        program: &str,
        args: &[String],
        env: &[(String, String)],
    ) -> Result<StdioServer, StartError> {
        let spawn_err = |source: std::io::Error| StartError::Spawn {
            program: program.to_string(),
            source,
        };
        let mut extra = Vec::with_capacity(env.len());
        for (name, value) in env {
            let value = ctx.secrets().substitute(value).map_err(|e| {
                spawn_err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("variable {name}: {e}"),
                ))
            })?;
            extra.push((name.clone(), value));
        }
        let mut cmd = command(ctx, program, args)?;
        cmd.current_dir(ctx.workspace())
            .env_clear()
            .envs(base_env(ctx))
            .envs(extra)
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(spawn_err)?;
        let (pgid, registered) = group_of(ctx, &child);
        let stderr = Arc::new(Mutex::new(RedactedTail::new(
            ctx.secrets().redactor().clone(),
        )));
        if let Some(pipe) = child.stderr.take() {
            let tail = stderr.clone();
            tokio::spawn(async move {
                pump_tail(pipe, tail.clone()).await;
                tail.lock().unwrap_or_else(|e| e.into_inner()).finish();
            });
        }
        Ok(StdioServer {
            stdin: child.stdin.take(),
            stdout: child.stdout.take(),
            child,
            pgid,
            stderr,
            _registered: registered,
        })
    }

    /// Its stdout (to read from) and stdin (to write to), once.
    pub fn take_pipes(&mut self) -> Option<(ChildStdout, ChildStdin)> {
        Some((self.stdout.take()?, self.stdin.take()?))
    }

    /// Whether it has exited (its exit is reaped).
    pub fn has_exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// The last of what it wrote to stderr, redacted.
    pub fn stderr_tail(&self) -> String {
        let tail = self.stderr.lock().unwrap_or_else(|e| e.into_inner());
        tail.shown().trim().to_string()
    }

    /// Kills its process group and reaps it.
    pub async fn kill(mut self) {
        self.kill_group();
        let _ = self.child.wait().await;
    }

    fn kill_group(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            let _ = killpg(pgid, Signal::SIGKILL);
        }
    }
}

impl Drop for StdioServer {
    fn drop(&mut self) {
        self.kill_group();
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    use super::*;
    use crate::secrets::SecretResolver;

    fn ctx(dir: &std::path::Path) -> ToolContext {
        ToolContext::new("run-1", "call-1", dir, dir.join("artifacts"))
            .unwrap()
            .with_secrets(SecretResolver::from_map([("SERVER_KEY", "s3cr3t-value")]))
    }

    #[tokio::test]
    async fn a_server_is_spoken_to_over_its_pipes_in_the_workspace_with_its_env() {
        let dir = tempfile::tempdir().unwrap();
        let script = "echo starting >&2; echo \"key=$SERVER_KEY\" >&2; \
                      while read line; do echo \"got $line in $(pwd)\"; done";
        let env = [(
            "SERVER_KEY".to_string(),
            "{{secret:SERVER_KEY}}".to_string(),
        )];
        let mut server =
            StdioServer::spawn(&ctx(dir.path()), "sh", &["-c".into(), script.into()], &env)
                .unwrap();
        let (stdout, mut stdin) = server.take_pipes().unwrap();
        assert!(server.take_pipes().is_none(), "the pipes are taken once");
        stdin.write_all(b"ping\n").await.unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let line = lines.next_line().await.unwrap().unwrap();
        let workspace = dir.path().canonicalize().unwrap();
        assert_eq!(line, format!("got ping in {}", workspace.display()));
        assert!(!server.has_exited());
        // Its stderr is kept, redacted (bytes that might begin a secret are held back until
        // the stream ends: closing stdin ends this server).
        drop(stdin);
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        while !server.stderr_tail().contains("key=") {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{}",
                server.stderr_tail()
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!(server.stderr_tail(), "starting\nkey=[REDACTED:SERVER_KEY]");
    }

    #[tokio::test]
    async fn dropping_it_kills_its_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        // The server starts a child of its own that would outlive it.
        let script = "sleep 300 & echo $!; wait";
        let mut server =
            StdioServer::spawn(&ctx(dir.path()), "sh", &["-c".into(), script.into()], &[]).unwrap();
        let (stdout, _stdin) = server.take_pipes().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let grandchild: i32 = lines.next_line().await.unwrap().unwrap().parse().unwrap();
        let alive = |pid: i32| nix::sys::signal::kill(Pid::from_raw(pid), None).is_ok();
        assert!(alive(grandchild));
        drop(server);
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        // Killed, and reaped by init once its parent is gone.
        while alive(grandchild) && !zombie(grandchild) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{grandchild} lives on"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    fn zombie(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| {
                s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
            .unwrap_or(true)
    }

    #[tokio::test]
    async fn an_unknown_secret_or_program_is_an_error_before_anything_runs() {
        let dir = tempfile::tempdir().unwrap();
        let env = [("K".to_string(), "{{secret:NOT_SET}}".to_string())];
        let err = StdioServer::spawn(&ctx(dir.path()), "sh", &[], &env).unwrap_err();
        assert!(err.to_string().contains("variable K"), "{err}");
        let err =
            StdioServer::spawn(&ctx(dir.path()), "no-such-program-here", &[], &[]).unwrap_err();
        assert!(err.to_string().contains("no-such-program-here"), "{err}");
    }
}
