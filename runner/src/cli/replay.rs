//! `nightshift replay FILE`: a run's loop driven again from its replay file, offline, with
//! the local config's agent and tools (see `nightshift_runner::replay`). Exits zero when
//! every model call's request matched the recorded one; otherwise non-zero, naming the turn
//! and what differs. Needs no database and no daemon: `--server` and the database are not
//! used.

use std::path::Path;

use anyhow::Context;
use nightshift_agent::replay::Recording;
use nightshift_runner::config::{Config, DEFAULT_PATH, Overrides};

/// Replays `file` with the config at `config` (or `./nightshift.toml`).
pub(crate) async fn replay(config: Option<&Path>, file: &Path) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("cannot read the replay file {}", file.display()))?;
    let recording = Recording::parse(&text)
        .with_context(|| format!("{} cannot be replayed", file.display()))?;
    if config.is_none() && !Path::new(DEFAULT_PATH).exists() {
        anyhow::bail!(
            "replay needs the config that defines the agent '{}': pass --config PATH (there is \
             no {DEFAULT_PATH} here)",
            recording.agent
        );
    }
    let config = Config::load(config, &Overrides::default())?;
    let report = nightshift_runner::replay::replay(&config, &recording).await?;
    if !report.same_definition {
        eprintln!(
            "note: the agent '{}' is defined differently from when the file was recorded",
            recording.agent
        );
    }
    let report = report.replayed;
    if let Some(divergence) = report.divergence {
        anyhow::bail!("replay of run {}: {divergence}", recording.run_id);
    }
    println!(
        "replayed {} model calls and {} tool calls: no divergence",
        report.model_calls.len(),
        report.tool_calls
    );
    Ok(())
}
