//! Real `nightshift` processes for the suites: the binary (built once per test process), a
//! child that is killed when the test lets go of it ([`Proc`]), and `nightshift serve` started
//! one way ([`serve`], or [`Serve`] for extra environment or a log receiver).
//!
//! Starting a daemon does not wait for it: a test that needs the API waits with
//! [`wait_for_api`], and one that expects `serve` to refuse waits for its exit
//! ([`Proc::wait_exit`]). Every helper panics naming what failed (a spawn, a signal, an exit
//! that did not come), so a broken setup fails the test that met it.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::Receiver;
use std::time::Duration;

use crate::eventually;

/// A child process that is killed if the test ends without waiting for it.
pub struct Proc {
    pub child: Child,
}

impl Proc {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends signal `name` (`TERM`, `KILL`, `HUP`, …) with `kill`; panics when it fails.
    pub fn signal(&self, name: &str) {
        let ok = Command::new("kill")
            .args([format!("-{name}"), self.pid().to_string()])
            .status()
            .expect("run kill")
            .success();
        assert!(ok, "kill -{name} {}", self.pid());
    }

    /// Waits for the process to exit; panics when it has not within `within`.
    pub async fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "process {} did not exit within {within:?}",
                self.pid()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `nightshift` binary, brought up to date once per test process. `cargo test` builds
/// only this package's binaries, so this runs the same `cargo build --bins` as
/// `scripts/test`, from the workspace root (a no-op there, and never a stale binary when a
/// test is run on its own).
pub fn nightshift_bin() -> PathBuf {
    static BUILT: std::sync::Once = std::sync::Once::new();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root");
    BUILT.call_once(|| {
        let ok = Command::new(env!("CARGO"))
            .current_dir(root)
            .args(["build", "--quiet", "--bins"])
            .status()
            .expect("cargo build")
            .success();
        assert!(ok, "building the nightshift binary failed");
    });
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    let bin = dir.join("nightshift");
    assert!(bin.exists(), "no nightshift binary at {}", bin.display());
    bin
}

/// `nightshift --config cfg`, ready for a subcommand: the database only from the config
/// (`NIGHTSHIFT_DATABASE_URL` removed) and warnings only in its log.
pub fn nightshift(cfg: &Path) -> Command {
    let mut cmd = Command::new(nightshift_bin());
    cmd.arg("--config")
        .arg(cfg)
        .env_remove("NIGHTSHIFT_DATABASE_URL")
        .env("RUST_LOG", "warn,sqlx=warn");
    cmd
}

/// `nightshift serve` on `cfg` (through [`nightshift`]) with stdout dropped and its log on the
/// test's stderr. For extra environment or a log to read, use [`Serve`].
pub fn serve(cfg: &Path) -> Proc {
    Serve::new(cfg).spawn()
}

/// A `nightshift serve` about to start: [`nightshift`] `serve`, plus the environment a suite
/// gives its daemon; [`Serve::spawn`] or [`Serve::spawn_logged`] starts it.
pub struct Serve {
    cmd: Command,
}

impl Serve {
    pub fn new(cfg: &Path) -> Self {
        let mut cmd = nightshift(cfg);
        cmd.arg("serve").stdout(Stdio::null());
        Self { cmd }
    }

    /// Sets `key` to `value` in the daemon's environment.
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.cmd.env(key, value);
        self
    }

    /// Sets each `(key, value)` of `vars`, in order, in the daemon's environment.
    pub fn envs<K, V>(mut self, vars: impl IntoIterator<Item = (K, V)>) -> Self
    where
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        self.cmd.envs(vars);
        self
    }

    /// Removes `key` from the daemon's environment.
    pub fn env_remove(mut self, key: impl AsRef<OsStr>) -> Self {
        self.cmd.env_remove(key);
        self
    }

    /// Starts the daemon with its log on the test's stderr.
    pub fn spawn(mut self) -> Proc {
        Proc {
            child: self
                .cmd
                .stderr(Stdio::inherit())
                .spawn()
                .expect("spawn nightshift serve"),
        }
    }

    /// Starts the daemon with its log read by a thread: each line is echoed to the test's
    /// stderr (prefixed `serve: `) and sent to the receiver. The thread drains the log until
    /// the daemon closes it, also after the receiver is dropped, so the daemon never blocks
    /// on a full pipe.
    pub fn spawn_logged(mut self) -> (Proc, Receiver<String>) {
        let mut child = self
            .cmd
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn nightshift serve");
        let stderr = child.stderr.take().expect("a piped stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("serve: {line}");
                let _ = tx.send(line);
            }
        });
        (Proc { child }, rx)
    }
}

/// A free loopback port for a daemon's API (bound and released; the tiny race with other
/// processes is acceptable in tests).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits (30 s at most) until the daemon at `api` answers `GET /healthz`.
pub async fn wait_for_api(http: &reqwest::Client, api: &str) {
    eventually(Duration::from_secs(30), "the API to answer", || async {
        let r = http.get(format!("{api}/healthz")).send().await.ok()?;
        r.status().is_success().then_some(())
    })
    .await;
}
