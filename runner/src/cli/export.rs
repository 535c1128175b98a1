//! `nightshift runs export ID`: a run as a replay file (see `nightshift_runner::replay`),
//! recorded with the local config's agent, or, with `--server`, by the daemon with its own
//! (`GET /v1/runs/{id}/export`). The file goes to stdout, or to `--output FILE` (written
//! whole, or not at all).

use std::path::PathBuf;

use anyhow::Context;
use nightshift_agent::replay::Recording;

use super::operator::Operator;

/// Arguments of `nightshift runs export`.
#[derive(Debug, clap::Args)]
pub(crate) struct ExportArgs {
    /// The run's id (it must have ended).
    id: String,
    /// Write the file here instead of to stdout.
    #[arg(long, short, value_name = "FILE")]
    output: Option<PathBuf>,
}

pub(crate) async fn export(op: &Operator, args: ExportArgs) -> anyhow::Result<()> {
    let recording = op.export(&args.id).await?;
    if recording.run_agent_hash.as_deref() != Some(recording.agent_hash.as_str()) {
        eprintln!(
            "note: the agent '{}' was changed since run {} started; its requests were recorded \
             with the definition it has now",
            recording.agent, recording.run_id
        );
    }
    let text = recording.to_text();
    let summary = summary(&recording);
    match &args.output {
        Some(path) => {
            let tmp = path.with_extension("partial");
            std::fs::write(&tmp, &text).with_context(|| format!("writing {}", tmp.display()))?;
            std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
            eprintln!("{summary}: {}", path.display());
        }
        None => {
            print!("{text}");
            eprintln!("{summary}");
        }
    }
    Ok(())
}

fn summary(r: &Recording) -> String {
    format!(
        "exported run {} ({} events, {} model calls, {} tool calls)",
        r.run_id,
        r.events.len(),
        r.model_calls.len(),
        r.tool_calls
    )
}
