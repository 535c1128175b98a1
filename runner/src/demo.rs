//! `nightshift demo`: the whole machine on the embedded default, no API key needed. A
//! SQLite file, the real worker pool and agent runtime with real file and command tools,
//! and a built-in scripted model that fixes a bug in a small shell script. It prints the
//! run's transcript as it happens, then the result and usage.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use nightshift_agent::AgentConfig;
use nightshift_llm::{ProviderConfig, ProviderKind};
use nightshift_store::{NewRun, Trigger};
use nightshift_worker::{Pool, PoolConfig};
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::transcript;

/// The model turns the demo replays.
pub(crate) const SCRIPT: &str = include_str!("../demo/script.json");
/// The file the demo agent is asked to fix.
pub(crate) const GREET_SH: &str =
    "#!/bin/sh\n# Greets whoever is named on the command line.\necho \"Helo, ${1:-world}!\"\n";

/// The demo's configuration, rooted in `dir`.
pub(crate) fn config(dir: &Path) -> Config {
    let mut provider = ProviderConfig::new(ProviderKind::Scripted);
    provider.script = Some(dir.join("script.json"));
    let agent: AgentConfig = serde_json::from_value(serde_json::json!({
        "name": "fixer",
        "provider": "scripted",
        "model": "scripted-demo",
        "system": "You fix small bugs in the files of your workspace. Plan with todo_write, \
                   look before you change anything, and check your fix by running it.",
        "tools": ["edit_file", "list_files", "read_file", "run_command", "todo_write"],
        "max_tokens": 1024,
        "pricing": {"input": 3.0, "output": 15.0, "cache_write": 3.75, "cache_read": 0.3}
    }))
    .expect("the demo agent is valid");
    let mut config = Config::default();
    config.database.url = format!("sqlite://{}", dir.join("demo.db").display());
    config.runtime.data_dir = dir.join("data");
    // The demo shows the file the agent fixed, after the run ended.
    config.retention.keep_workspace = true;
    config.providers.insert("scripted".into(), provider);
    config.agents.push(agent);
    config.worker = PoolConfig {
        slots: 2,
        poll_interval_ms: 200,
        heartbeat_ms: 1000,
        lease_ms: 10_000,
        ..PoolConfig::default()
    };
    config
}

/// Runs the demo in `dir` (a fresh temporary directory when `None`), printing as it goes.
pub async fn run(dir: Option<PathBuf>) -> anyhow::Result<()> {
    let temp;
    let dir = match dir {
        Some(d) => {
            std::fs::create_dir_all(&d)
                .with_context(|| format!("cannot create {}", d.display()))?;
            d
        }
        None => {
            temp = tempdir()?;
            temp.0.clone()
        }
    };
    std::fs::write(dir.join("script.json"), SCRIPT)?;
    let config = config(&dir);
    config.validate()?;
    let runtime = crate::build_runtime(
        &config,
        None,
        crate::redaction::secrets(&config),
        None,
        None,
    )?;
    let store = crate::open_store(&config).await?;
    store.migrate().await?;
    println!(
        "Nightshift demo — store {}, scripted model, real tools",
        config.database.url
    );

    let mut new = NewRun::new(
        "fixer",
        "greet.sh prints a wrong greeting. Find the bug, fix it, and show that it works.",
    );
    new.trigger = Trigger::Cli;
    let run_id = store.enqueue(&new).await?.run_id;
    let workspace = config.runtime.data_dir.join("workspaces").join(&run_id);
    std::fs::create_dir_all(&workspace)?;
    std::fs::write(workspace.join("greet.sh"), GREET_SH)?;
    println!("run {run_id}, workspace {}\n", workspace.display());

    let stop = CancellationToken::new();
    let pool =
        tokio::spawn(Pool::new(store.clone(), runtime, config.worker.clone()).run(stop.clone()));
    let run = transcript::follow(&store, &run_id, Duration::from_secs(60)).await?;
    stop.cancel();
    pool.await??;

    println!();
    println!("status:  {}", run.status);
    if let Some(result) = &run.result {
        println!("result:  {result}");
    }
    if let Some(error) = &run.error {
        println!("error:   {error}");
    }
    println!(
        "usage:   {} model calls, {} input + {} output tokens ({} cache reads, {} cache writes), ${:.4}",
        run.turns,
        run.input_tokens,
        run.output_tokens,
        run.cache_read_tokens,
        run.cache_write_tokens,
        run.cost_usd
    );
    println!(
        "greet.sh now says: {}",
        std::fs::read_to_string(workspace.join("greet.sh"))?
            .lines()
            .last()
            .unwrap_or_default()
    );
    store.close().await;
    if run.status != nightshift_store::RunStatus::Succeeded {
        anyhow::bail!("the demo run ended as {}", run.status);
    }
    Ok(())
}

/// A temporary directory removed on drop.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tempdir() -> anyhow::Result<TempDir> {
    let dir =
        std::env::temp_dir().join(format!("nightshift-demo-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir)?;
    Ok(TempDir(dir))
}
