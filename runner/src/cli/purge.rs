//! `nightshift runs purge --before WHEN [--agent A] [--status S] [--dry-run] [--no-summary]
//! [--json]`: an operator's purge of finished runs, locally or through `--server`
//! (`POST /v1/runs/purge`), the same request either way.
//!
//! What it guarantees: `--before` is read here (an age like `30d` counts back from this
//! machine's clock) and sent as an RFC 3339 time, so a bad value is refused before anything
//! is asked of the store; `--dry-run` changes nothing; the answer says what was (or would
//! be) removed, as a sentence or one JSON object.

use clap::Args;
use nightshift_runner::retention::operator::{PurgeReport, PurgeRequest, parse_before, rfc3339};

use super::format;
use super::operator::Operator;

/// Arguments of `nightshift runs purge`.
#[derive(Debug, Args)]
pub(crate) struct PurgeArgs {
    /// Runs that ended before this: an RFC 3339 time, or an age back from now (30d, 12h,
    /// 90m, 45s).
    #[arg(long, value_name = "WHEN")]
    before: String,
    /// Only this agent's runs.
    #[arg(long)]
    agent: Option<String>,
    /// Only runs that ended this way (succeeded, failed, cancelled, budget_exhausted,
    /// max_rounds, superseded).
    #[arg(long)]
    status: Option<String>,
    /// Say what would be purged; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Remove the runs' rows too, instead of keeping each as a summary marked purged.
    #[arg(long)]
    no_summary: bool,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
}

pub(crate) async fn purge(op: &Operator, args: PurgeArgs) -> anyhow::Result<()> {
    let before = parse_before(&args.before, op.now())?;
    let req = PurgeRequest {
        before: rfc3339(before),
        agent: args.agent,
        status: args.status,
        dry_run: args.dry_run,
        keep_summary: !args.no_summary,
    };
    let report = op.purge(&req).await?;
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!("{}", sentence(&report));
    }
    Ok(())
}

/// The report as a person reads it.
fn sentence(r: &PurgeReport) -> String {
    let what = format!(
        "{} run(s) that ended before {} ({} events, {} checkpoints, {} bytes)",
        r.runs,
        format::utc(r.before),
        r.events,
        r.checkpoints,
        r.bytes
    );
    if r.dry_run {
        format!("would purge {what}; nothing was changed (dry run)")
    } else {
        format!(
            "purged {what}: {} rows and {} files removed",
            r.rows, r.files
        )
    }
}
