//! A real headless Chromium driven over WebDriver: `chromedriver` started on a free loopback
//! port, one fresh browser profile per test, and helpers that wait on conditions in the page
//! (never on time).
//!
//! Without Chromium on the machine the tests print `SKIPPED` and pass, except under `CI=true`,
//! where a missing browser is a failure (`.ci/run` installs Debian's `chromium` and
//! `chromium-driver`). `NIGHTSHIFT_CHROMIUM` and `NIGHTSHIFT_CHROMEDRIVER` override the
//! paths. One browser runs at a time ([`Browser::start`] holds a lock), so a 2-core machine is
//! never asked to run several.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::elements::Element;
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};
use tokio::sync::{Mutex, MutexGuard};

/// How long a page condition may take before the test fails, naming it.
pub const PATIENCE: Duration = Duration::from_secs(30);

static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

fn program(env: &str, default: &str) -> Option<PathBuf> {
    let path = std::env::var_os(env)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(default));
    path.is_file().then_some(path)
}

/// The browser and its driver, or `None` after printing `SKIPPED` (a panic under CI).
fn programs(test: &str) -> Option<(PathBuf, PathBuf)> {
    let chromium = program("NIGHTSHIFT_CHROMIUM", "/usr/bin/chromium");
    let driver = program("NIGHTSHIFT_CHROMEDRIVER", "/usr/bin/chromedriver");
    match (chromium, driver) {
        (Some(c), Some(d)) => Some((c, d)),
        _ if std::env::var("CI").as_deref() == Ok("true") => panic!(
            "{test}: chromium and chromedriver are required under CI \
             (apt-get install chromium chromium-driver, as .ci/run does)"
        ),
        _ => {
            eprintln!(
                "SKIPPED {test}: no /usr/bin/chromium and /usr/bin/chromedriver \
                 (apt-get install chromium chromium-driver)"
            );
            None
        }
    }
}

/// A free loopback port (bound, read and released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A headless Chromium session; dropping it kills the driver (and with it the browser).
pub struct Browser {
    pub client: Client,
    driver: Child,
    _profile: tempfile::TempDir,
    _turn: MutexGuard<'static, ()>,
}

impl Browser {
    /// Starts chromedriver and a fresh headless Chromium, or `None` when the machine has none
    /// (outside CI).
    pub async fn start(test: &str) -> Option<Browser> {
        Browser::start_with(test, &[]).await
    }

    /// [`Browser::start`] with `extra` browser flags (for example `--force-dark-mode`).
    pub async fn start_with(test: &str, extra: &[&str]) -> Option<Browser> {
        let (chromium, driver_path) = programs(test)?;
        let turn = ONE_AT_A_TIME.lock().await;
        let port = free_port();
        let driver = Command::new(&driver_path)
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own process group, so that dropping the session kills the browser too.
            .process_group(0)
            .spawn()
            .expect("start chromedriver");
        let profile = tempfile::tempdir().unwrap();
        let mut args: Vec<String> = [
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--window-size=1280,900",
        ]
        .iter()
        .chain(extra)
        .map(|a| a.to_string())
        .collect();
        args.push(format!("--user-data-dir={}", profile.path().display()));
        let caps = json!({"goog:chromeOptions": {"binary": chromium, "args": args}});
        let caps = match caps {
            Value::Object(map) => map,
            _ => unreachable!(),
        };
        let url = format!("http://127.0.0.1:{port}");
        // chromedriver listens a moment after it starts: retry the session until it does.
        let deadline = tokio::time::Instant::now() + PATIENCE;
        let client = loop {
            match ClientBuilder::new(HttpConnector::new())
                .capabilities(caps.clone())
                .connect(&url)
                .await
            {
                Ok(c) => break c,
                Err(_) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("{test}: no WebDriver session from chromedriver: {e}"),
            }
        };
        Some(Browser {
            client,
            driver,
            _profile: profile,
            _turn: turn,
        })
    }

    pub async fn goto(&self, url: &str) {
        self.client
            .goto(url)
            .await
            .unwrap_or_else(|e| panic!("open {url}: {e}"));
    }

    /// The first element matching `css`, waiting until there is one.
    pub async fn find(&self, css: &str) -> Element {
        let found = self
            .client
            .wait()
            .at_most(PATIENCE)
            .for_element(Locator::Css(css))
            .await;
        match found {
            Ok(el) => el,
            Err(e) => {
                let url = self.client.current_url().await.map(|u| u.to_string());
                let html = self
                    .js("return document.querySelector('main') ? document.querySelector('main').outerHTML : document.documentElement.outerHTML")
                    .await;
                panic!(
                    "no element `{css}` within {PATIENCE:?} on {url:?}: {e}; the page:\n{}",
                    html.as_str().unwrap_or_default()
                )
            }
        }
    }

    /// Every element matching `css` now.
    pub async fn all(&self, css: &str) -> Vec<Element> {
        self.client.find_all(Locator::Css(css)).await.unwrap()
    }

    /// Runs `script` (a function body) in the page and returns its value.
    pub async fn js(&self, script: &str) -> Value {
        self.client
            .execute(script, vec![])
            .await
            .unwrap_or_else(|e| panic!("script failed: {e}\n{script}"))
    }

    /// Waits until `script` returns `true` in the page, failing with `what`.
    pub async fn until(&self, what: &str, script: &str) {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            if self.js(script).await == Value::Bool(true) {
                return;
            }
            if tokio::time::Instant::now() > deadline {
                let url = self.client.current_url().await.map(|u| u.to_string());
                let body = self.js("return document.body.innerText").await;
                panic!("{what}: not within {PATIENCE:?} on {url:?}; the page reads:\n{body}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The page's visible text.
    pub async fn text(&self) -> String {
        self.js("return document.body.innerText")
            .await
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    pub async fn path(&self) -> String {
        self.client.current_url().await.unwrap().path().to_string()
    }

    /// Presses `key` (a WebDriver key such as [`fantoccini::key::Key::Tab`]) on the element
    /// that has the focus.
    pub async fn press(&self, key: fantoccini::key::Key) {
        let focused = self.client.active_element().await.unwrap();
        focused.send_keys(&key.to_string()).await.unwrap();
    }

    /// Saves a PNG of the page as `name.png` (see [`screenshot_dir`]).
    pub async fn screenshot(&self, name: &str) {
        let png = self.client.screenshot().await.expect("screenshot");
        assert!(png.starts_with(b"\x89PNG"), "a PNG from the browser");
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
    }
}

impl Browser {
    /// Ends the WebDriver session (the browser quits), then the driver.
    pub async fn finish(self) {
        let _ = self.client.clone().close().await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // The whole group: chromedriver and any browser a failed test left behind.
        if let Ok(pgid) = i32::try_from(self.driver.id()) {
            let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
        }
        let _ = self.driver.wait();
    }
}

/// Where screenshots go: `NIGHTSHIFT_SCREENSHOTS` (the committed ones are made with
/// `NIGHTSHIFT_SCREENSHOTS=docs/screenshots`, relative to the workspace), otherwise
/// `target/screenshots`.
pub fn screenshot_dir() -> PathBuf {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    match std::env::var_os("NIGHTSHIFT_SCREENSHOTS") {
        Some(d) => workspace.join(d),
        None => workspace.join("target").join("screenshots"),
    }
}
