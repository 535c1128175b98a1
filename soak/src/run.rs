//! One backend's soak, end to end: write the config, start the daemons, enqueue runs and
//! SIGKILL daemons along the [`Plan`], restart them, wait (bounded) for every accepted run to
//! end, stop the daemons, then read the truth and judge it.
//!
//! Guarantees: every loop is bounded (by the plan, by `deadline`, or by a fixed number of
//! tries); only loopback addresses are used; "accepted" is exactly the set of runs the API
//! acknowledged with 200 or 202.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail};
use serde_json::json;
use tokio::time::Instant;

use super::daemon::{self, Daemon};
use super::plan::Plan;
use super::script::{self, AGENTS};
use super::truth::Db;
use super::verdict::{self, Accepted, Context, Report};

/// What a backend's soak is asked to do.
#[derive(Debug, Clone)]
pub struct Settings {
    pub backend: &'static str,
    pub db: Db,
    pub daemons: usize,
    pub kills: usize,
    pub runs: usize,
    pub seed: u64,
    pub work_ms: (u64, u64),
    pub model_delay_ms: u64,
    pub tool_sleep_ms: u64,
    pub max_attempts: Option<i64>,
    pub settle: Duration,
    pub nightshift: PathBuf,
    /// The soak binary (its `tool` subcommand is the tools' program).
    pub tool_exe: PathBuf,
    pub dir: PathBuf,
}

const HEALTHY_WITHIN: Duration = Duration::from_secs(60);

struct Soak<'a> {
    s: &'a Settings,
    http: reqwest::Client,
    daemons: Vec<Daemon>,
    accepted: Vec<Accepted>,
    refused: usize,
    next_run: usize,
}

/// Runs the soak for one backend and returns its report (the table is not printed here).
pub async fn soak(s: &Settings, deadline: Instant) -> anyhow::Result<Report> {
    // Beside the daemons' data directories, not above them: the tools' sandbox may write here.
    let shared = s.dir.join("shared");
    std::fs::create_dir_all(&shared)?;
    let ledger = shared.join("ledger.txt");
    for agent in &AGENTS {
        let path = s.dir.join(format!("script-{}.json", agent.name));
        std::fs::write(
            &path,
            script::script_json(agent, s.model_delay_ms).to_string(),
        )?;
    }
    let url = s.db.url();
    let mut daemons = Vec::new();
    for i in 0..s.daemons {
        let dir = s.dir.join(format!("daemon-{i}"));
        std::fs::create_dir_all(&dir)?;
        let port = daemon::free_port()?;
        let text = script::config_toml(&script::DaemonConfig {
            database_url: &url,
            schema: s.db.schema(),
            port,
            data_dir: &dir.join("data"),
            script_dir: &s.dir,
            tool_exe: &s.tool_exe,
            ledger: &ledger,
            tool_sleep_ms: s.tool_sleep_ms,
        });
        let config = dir.join("nightshift.toml");
        std::fs::write(&config, text)?;
        let name = format!("{}-{i}", s.backend);
        daemons.push(Daemon::new(
            &name,
            &s.nightshift,
            &config,
            &dir.join("daemon.log"),
            port,
        ));
    }
    let http = nightshift_llm::http::build_client(nightshift_llm::HttpTimeouts::default())
        .map_err(|e| anyhow::anyhow!("cannot build an HTTP client: {e}"))?;
    let mut soak = Soak {
        s,
        http,
        daemons,
        accepted: Vec::new(),
        refused: 0,
        next_run: 0,
    };
    let plan = Plan::new(s.seed, s.kills, s.runs, s.daemons, s.work_ms);
    let mut ctx = Context {
        backend: s.backend.to_string(),
        daemons: s.daemons,
        kills_planned: s.kills,
        seed: s.seed,
        ..Context::default()
    };
    let reserve = s.settle + Duration::from_secs(10);
    for (k, cycle) in plan.cycles.iter().enumerate() {
        if Instant::now() + reserve >= deadline {
            eprintln!(
                "{}: time limit: stopping after {k} of {} kills",
                s.backend, s.kills
            );
            break;
        }
        soak.all_up().await?;
        soak.enqueue(cycle.enqueue).await?;
        tokio::time::sleep(Duration::from_millis(cycle.work_ms)).await;
        for &t in &cycle.targets {
            soak.daemons[t].sigkill().await?;
        }
        ctx.kill_moments += 1;
        ctx.daemons_killed += cycle.targets.len();
        if (k + 1) % 25 == 0 {
            eprintln!("{}: {} of {} kills done", s.backend, k + 1, s.kills);
        }
    }
    soak.all_up().await?;
    let rest = s.runs - soak.next_run;
    soak.enqueue(rest).await?;
    soak.settle(deadline).await?;
    for d in &mut soak.daemons {
        if let Err(e) = d.sigterm(Duration::from_secs(20)).await {
            eprintln!("{}: {e:#}", s.backend);
        }
    }
    ctx.enqueue_refused = soak.refused;
    let truth =
        s.db.read()
            .await
            .context("reading the soak's database")?
            .with_ledger(&ledger)?;
    Ok(verdict::judge(ctx, &soak.accepted, &truth))
}

impl Soak<'_> {
    /// Starts every daemon that is not running and waits until all answer.
    async fn all_up(&mut self) -> anyhow::Result<()> {
        for d in &mut self.daemons {
            if !d.running() {
                d.start()?;
            }
        }
        for d in &mut self.daemons {
            d.wait_healthy(&self.http, HEALTHY_WITHIN).await?;
        }
        Ok(())
    }

    /// Enqueues the next `n` runs through the API, alternating agents and daemons, each with
    /// its own idempotency key (so a retried request cannot make a second run).
    async fn enqueue(&mut self, n: usize) -> anyhow::Result<()> {
        for _ in 0..n {
            let i = self.next_run;
            self.next_run += 1;
            let agent = AGENTS[i % AGENTS.len()].name;
            let mut body = json!({
                "agent": agent,
                "prompt": format!("soak run {i}: follow your script"),
                "idempotency_key": format!("soak-{}-{}-{i}", self.s.backend, self.s.seed),
            });
            if let Some(n) = self.s.max_attempts {
                body["max_attempts"] = json!(n);
            }
            let mut last_error = String::new();
            let mut done = false;
            for attempt in 0..4 {
                let d = &self.daemons[(i + attempt) % self.daemons.len()];
                let sent = self
                    .http
                    .post(format!("{}/v1/runs", d.api))
                    .bearer_auth(daemon::TOKEN)
                    .timeout(Duration::from_secs(30))
                    .json(&body)
                    .send()
                    .await;
                match sent {
                    Ok(resp) if resp.status().as_u16() == 200 || resp.status().as_u16() == 202 => {
                        let v: serde_json::Value = resp.json().await?;
                        let run_id = v["run_id"]
                            .as_str()
                            .context("the API acknowledged a run without a run_id")?;
                        self.accepted.push(Accepted {
                            run_id: run_id.to_string(),
                            agent: agent.to_string(),
                        });
                        done = true;
                        break;
                    }
                    Ok(resp) => {
                        let status = resp.status();
                        let text = resp.text().await.unwrap_or_default();
                        last_error = format!("{status}: {text}");
                        if status.is_client_error() {
                            break;
                        }
                    }
                    Err(e) => last_error = e.to_string(),
                }
                self.all_up().await?;
            }
            if !done {
                self.refused += 1;
                eprintln!(
                    "{}: enqueue of run {i} refused: {last_error}",
                    self.s.backend
                );
            }
        }
        Ok(())
    }

    /// Waits until every accepted run is terminal, for at most the settle time (and never
    /// past `deadline`); restarts a daemon that died on its own.
    async fn settle(&mut self, deadline: Instant) -> anyhow::Result<()> {
        let until = (Instant::now() + self.s.settle).min(deadline);
        let want = self.accepted.len() as i64;
        loop {
            let done = self.s.db.terminal_runs().await.unwrap_or(0);
            if done >= want {
                return Ok(());
            }
            if Instant::now() >= until {
                eprintln!(
                    "{}: {done} of {want} runs terminal when the settle time ran out",
                    self.s.backend
                );
                return Ok(());
            }
            for d in &mut self.daemons {
                if !d.running() {
                    eprintln!(
                        "{}: daemon {} died on its own; restarting",
                        self.s.backend, d.name
                    );
                    d.start()?;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// The `nightshift` binary to soak: `explicit`, else the one next to this executable, else
/// `${CARGO_TARGET_DIR:-target}/{release,debug}/nightshift`.
pub fn find_nightshift(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(p) = explicit {
        if p.is_file() {
            return Ok(p.to_path_buf());
        }
        bail!("--binary {}: no such file", p.display());
    }
    let mut tried = Vec::new();
    if let Some(dir) = std::env::current_exe()?.parent() {
        tried.push(dir.join("nightshift"));
    }
    let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
    for profile in ["release", "debug"] {
        tried.push(Path::new(&target).join(profile).join("nightshift"));
    }
    if let Some(p) = tried.iter().find(|p| p.is_file()) {
        return Ok(p.clone());
    }
    let list: Vec<String> = tried.iter().map(|p| p.display().to_string()).collect();
    bail!(
        "no nightshift binary found (looked at {}); build it with `cargo build -p nightshift \
         --bin nightshift` or pass --binary PATH",
        list.join(", ")
    )
}
