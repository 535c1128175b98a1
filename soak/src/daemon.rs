//! One `nightshift serve` process of the soak: started with its own config and log file,
//! waited on until its API answers, SIGKILLed, stopped with SIGTERM.
//!
//! Guarantees: every wait is bounded and says what it waited for when it gives up; a daemon
//! that exits while it is waited on is an error that points at its log; every pid started is
//! in [`live_pids`] until it is reaped, so a watchdog can kill them all before giving up.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context as _, bail};
use tokio::process::{Child, Command};
use tokio::time::Instant;

/// The bearer token every soak daemon is started with.
pub const TOKEN: &str = "crash-soak-token";

static LIVE: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// The pids of daemons started and not yet reaped.
pub fn live_pids() -> Vec<u32> {
    LIVE.lock().expect("not poisoned").clone()
}

fn forget(pid: Option<u32>) {
    if let Some(pid) = pid {
        LIVE.lock().expect("not poisoned").retain(|p| *p != pid);
    }
}

/// A daemon of the soak (not running until [`Daemon::start`]).
#[derive(Debug)]
pub struct Daemon {
    pub name: String,
    bin: PathBuf,
    config: PathBuf,
    log: PathBuf,
    /// `http://127.0.0.1:PORT`.
    pub api: String,
    child: Option<Child>,
    pub starts: usize,
}

impl Daemon {
    pub fn new(name: &str, bin: &Path, config: &Path, log: &Path, port: u16) -> Daemon {
        Daemon {
            name: name.to_string(),
            bin: bin.to_path_buf(),
            config: config.to_path_buf(),
            log: log.to_path_buf(),
            api: format!("http://127.0.0.1:{port}"),
            child: None,
            starts: 0,
        }
    }

    /// Whether the process is running (reaps it when it has exited).
    pub fn running(&mut self) -> bool {
        let Some(child) = &mut self.child else {
            return false;
        };
        match child.try_wait() {
            Ok(None) => true,
            _ => {
                forget(child.id());
                self.child = None;
                false
            }
        }
    }

    /// Starts `nightshift --config CONFIG serve`, its stderr appended to the log file.
    pub fn start(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("cannot open {}", self.log.display()))?;
        let child = Command::new(&self.bin)
            .arg("--config")
            .arg(&self.config)
            .arg("serve")
            .env("NIGHTSHIFT_API_TOKEN", TOKEN)
            .env_remove("NIGHTSHIFT_DATABASE_URL")
            .env("RUST_LOG", "warn,sqlx=error")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start {}", self.bin.display()))?;
        if let Some(pid) = child.id() {
            LIVE.lock().expect("not poisoned").push(pid);
        }
        self.child = Some(child);
        self.starts += 1;
        Ok(())
    }

    /// Waits until `GET /healthz` answers 200, for at most `within`.
    pub async fn wait_healthy(
        &mut self,
        http: &reqwest::Client,
        within: Duration,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + within;
        loop {
            if !self.running() {
                bail!(
                    "daemon {} exited before its API answered; see {}:\n{}",
                    self.name,
                    self.log.display(),
                    self.log_tail()
                );
            }
            let ok = http
                .get(format!("{}/healthz", self.api))
                .timeout(Duration::from_secs(2))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if ok {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "daemon {}'s API at {} did not answer within {within:?}; see {}",
                    self.name,
                    self.api,
                    self.log.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGKILL, and wait (at most 10 s) until it is gone.
    pub async fn sigkill(&mut self) -> anyhow::Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let pid = child.id();
        child.start_kill().ok();
        let waited = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
        forget(pid);
        match waited {
            Ok(_) => Ok(()),
            Err(_) => bail!("daemon {} did not die within 10 s of SIGKILL", self.name),
        }
    }

    /// SIGTERM, and wait at most `within` for a clean exit (then SIGKILL).
    pub async fn sigterm(&mut self, within: Duration) -> anyhow::Result<ExitStatus> {
        let Some(mut child) = self.child.take() else {
            bail!("daemon {} was not running", self.name);
        };
        let pid = child.id();
        if let Some(pid) = pid {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
        let status = match tokio::time::timeout(within, child.wait()).await {
            Ok(s) => s?,
            Err(_) => {
                child.start_kill().ok();
                child.wait().await?;
                forget(pid);
                bail!(
                    "daemon {} did not stop within {within:?} of SIGTERM (killed); see {}",
                    self.name,
                    self.log.display()
                );
            }
        };
        forget(pid);
        Ok(status)
    }

    /// The last lines of the daemon's log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }
}

/// A free loopback port (bound and released; the race with other processes is acceptable
/// for a bench).
pub fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}
