//! `nightshift runs fork ID --from-turn N [...]` and `nightshift runs rerun [ID | --status S
//! ...]`: forks and reruns, locally (`nightshift_agent::fork` on the store) or through
//! `--server` (`POST /v1/runs/{id}/fork`, `POST /v1/runs/rerun`), the same request either way.
//!
//! What it guarantees: the arguments are read whole before anything is asked (a
//! `--tool-result` without `CALL=`, a file that cannot be read, a rerun with neither an id nor
//! a status are refused here); a refused fork changes nothing and its reason is printed as the
//! error; a bulk rerun prints one line per run matched.

use std::collections::BTreeMap;

use clap::Args;
use nightshift_agent::fork::{self, ForkRequest, Rerun};
use nightshift_runner::retention::operator::{parse_before, rfc3339};
use nightshift_store::{RunFilter, RunStatus, Trigger};
use serde_json::{Value, json};

use super::operator::{Operator, cli_actor};

/// Arguments of `nightshift runs fork`.
#[derive(Debug, Args)]
pub(crate) struct ForkArgs {
    /// The run to fork.
    id: String,
    /// Model calls of the run the fork keeps, counted from 0: the fork makes the run's call
    /// number N again (0: a rerun).
    #[arg(long, value_name = "N")]
    from_turn: u64,
    /// A user message appended at the fork point (at turn 0: the fork's prompt instead).
    #[arg(long)]
    prompt: Option<String>,
    /// The model that answers the fork (of the agent's provider).
    #[arg(long)]
    model: Option<String>,
    /// Replace a recorded tool result: CALL=TEXT, or CALL=@FILE to read it from a file.
    /// Repeat for more calls.
    #[arg(long = "tool-result", value_name = "CALL=TEXT")]
    tool_results: Vec<String>,
    /// A second fork with the same key prints the first fork and makes nothing.
    #[arg(long)]
    idempotency_key: Option<String>,
}

/// Arguments of `nightshift runs rerun`.
#[derive(Debug, Args)]
pub(crate) struct RerunArgs {
    /// Rerun this run (from turn 0, with its input). Without it, rerun the ended runs the
    /// filters match (--status is then required).
    id: Option<String>,
    /// Rerun the runs that ended this way (failed, cancelled, succeeded, budget_exhausted,
    /// max_rounds, superseded).
    #[arg(long, conflicts_with = "id")]
    status: Option<String>,
    /// Only this agent's runs.
    #[arg(long, requires = "status")]
    agent: Option<String>,
    /// Only runs created at or after this: an RFC 3339 time, or an age back from now (24h,
    /// 7d).
    #[arg(long, value_name = "WHEN", requires = "status")]
    since: Option<String>,
    /// At most this many runs, newest first (1-1000).
    #[arg(long, default_value_t = 100, requires = "status")]
    limit: usize,
    /// Say which runs would be rerun; change nothing.
    #[arg(long, requires = "status")]
    dry_run: bool,
}

pub(crate) async fn fork(op: &Operator, args: ForkArgs) -> anyhow::Result<()> {
    let req = ForkRequest {
        from_turn: args.from_turn,
        prompt: args.prompt,
        model: args.model,
        tool_results: tool_results(&args.tool_results)?,
        idempotency_key: args.idempotency_key,
    };
    let (run_id, duplicate) = fork_one(op, &args.id, &req).await?;
    let said = if duplicate {
        "the fork made before with this key"
    } else {
        "forked"
    };
    println!(
        "{run_id}\t{said} from {} at turn {}",
        args.id, req.from_turn
    );
    Ok(())
}

pub(crate) async fn rerun(op: &Operator, args: RerunArgs) -> anyhow::Result<()> {
    if let Some(id) = &args.id {
        let (run_id, _) = fork_one(op, id, &ForkRequest::rerun()).await?;
        println!("{run_id}\trerun of {id}");
        return Ok(());
    }
    let Some(status) = args.status.as_deref() else {
        anyhow::bail!(
            "say which runs to rerun: a run id, or --status (failed, cancelled, …) with any of \
             --agent, --since, --limit; nothing was changed"
        );
    };
    let since = args
        .since
        .as_deref()
        .map(|s| parse_before(s, op.now()))
        .transpose()?;
    let reruns: Vec<Rerun> = match op {
        Operator::Local { store, config, .. } => {
            let guard = nightshift_runner::fork_guard::of(config)?;
            let filter = RunFilter {
                status: Some(
                    status
                        .parse::<RunStatus>()
                        .map_err(|e| anyhow::anyhow!("--status: {e}"))?,
                ),
                agent: args.agent.clone(),
                since,
                ..RunFilter::default()
            };
            let actor = cli_actor();
            let op = store.as_operator(&actor);
            fork::rerun_matching(&op, &filter, args.limit, args.dry_run, Trigger::Cli, &guard)
                .await?
        }
        Operator::Remote(api) => {
            let body = json!({
                "status": status,
                "agent": args.agent,
                "since": since.map(rfc3339),
                "limit": args.limit,
                "dry_run": args.dry_run,
            });
            let said: Value = api.post("/v1/runs/rerun", body).await?;
            serde_json::from_value(said["runs"].clone()).unwrap_or_default()
        }
    };
    print_reruns(&reruns);
    Ok(())
}

/// The lines of a bulk rerun: one per run matched, then a count.
fn print_reruns(reruns: &[Rerun]) {
    for r in reruns {
        match r {
            Rerun::Started { parent, run_id } => println!("{parent}\trerun as {run_id}"),
            Rerun::AlreadyRerun { parent, run_id } => {
                println!("{parent}\talready rerun as {run_id}")
            }
            Rerun::WouldRerun { parent } => println!("{parent}\twould rerun (dry run)"),
            Rerun::Refused { parent, error } => println!("{parent}\tnot rerun: {error}"),
        }
    }
    println!("{} run(s) matched", reruns.len());
}

/// Makes one fork; (its run id, whether the key had made it before).
async fn fork_one(op: &Operator, id: &str, req: &ForkRequest) -> anyhow::Result<(String, bool)> {
    match op {
        Operator::Local { store, config, .. } => {
            let guard = nightshift_runner::fork_guard::of(config)?;
            let actor = cli_actor();
            let e =
                fork::fork_run(&store.as_operator(&actor), id, req, Trigger::Cli, &guard).await?;
            Ok((e.run_id, e.duplicate))
        }
        Operator::Remote(api) => {
            let said: Value = api
                .post(&format!("/v1/runs/{id}/fork"), serde_json::to_value(req)?)
                .await?;
            let run_id = said["run_id"].as_str().unwrap_or_default().to_string();
            Ok((run_id, said["duplicate"] == true))
        }
    }
}

/// `--tool-result` values: CALL=TEXT, or CALL=@FILE read from the file.
fn tool_results(given: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for g in given {
        let Some((call, value)) = g.split_once('=').filter(|(c, _)| !c.trim().is_empty()) else {
            anyhow::bail!(
                "--tool-result '{g}' is not CALL=TEXT (or CALL=@FILE): name the call whose \
                 result to replace; nothing was changed"
            );
        };
        let text = match value.strip_prefix('@') {
            Some(path) => std::fs::read_to_string(path).map_err(|e| {
                anyhow::anyhow!(
                    "--tool-result {call}: cannot read {path}: {e}; nothing was changed"
                )
            })?,
            None => value.to_string(),
        };
        out.insert(call.trim().to_string(), text);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::tool_results;

    #[test]
    fn tool_results_are_call_equals_text_or_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("r.txt");
        std::fs::write(&file, "from a file\n").unwrap();
        let given = vec![
            "call_1=plain = text".to_string(),
            format!("call_2=@{}", file.display()),
        ];
        let got = tool_results(&given).unwrap();
        assert_eq!(got["call_1"], "plain = text");
        assert_eq!(got["call_2"], "from a file\n");
        assert!(tool_results(&["no-equals".into()]).is_err());
        assert!(tool_results(&["=text".into()]).is_err());
        assert!(tool_results(&["c=@/nonexistent/file".into()]).is_err());
    }
}
