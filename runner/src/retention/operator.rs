//! An operator's purge: `nightshift runs purge --before … [--agent A] [--status S]
//! [--dry-run] [--no-summary]` and `POST /v1/runs/purge`, the same request and the same
//! report either way.
//!
//! What it guarantees:
//! - **Bad input changes nothing.** A `before` that is neither RFC 3339 nor a duration
//!   (`30d`, `12h`, `90m`, `45s`), or a status that is not an end state, is refused
//!   ([`PurgeError`]) before the store is touched.
//! - **A dry run changes nothing** and reports what a purge would remove now (runs, events,
//!   checkpoints, bytes).
//! - **A purge is audited once** (`purge` of `runs`, with the request as detail) and runs in
//!   bounded batches with the purger's rest after each, so the queue's writes go between; the purged runs' files in the given data directory
//!   are removed after the commits (every daemon's sweep removes the rest).

use std::time::Instant;

use nightshift_store::{Millis, PurgeCounts, PurgeRule, RunStatus, Store};
use serde::{Deserialize, Serialize};

use super::files::{Removal, RunFiles};
use super::purger::rest_after;

/// Runs per batch of an operator's purge.
pub const OPERATOR_BATCH: i64 = 500;
/// The least rest after a batch of an operator's purge (as `retention.pause_ms`'s default);
/// the rest is also at least nine times the batch's time, as the purger's.
pub const OPERATOR_PAUSE: std::time::Duration = std::time::Duration::from_millis(50);

/// What to purge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PurgeRequest {
    /// Runs that ended before this time, RFC 3339 (`2026-11-01T00:00:00Z`).
    pub before: String,
    /// Only this agent's runs; every agent when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Only runs that ended in this state (`succeeded`, `failed`, `cancelled`,
    /// `budget_exhausted`, `max_rounds`, `superseded`); every end state when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Report what would be purged, changing nothing. Default false.
    #[serde(default)]
    pub dry_run: bool,
    /// Keep each purged run's row, marked purged, as its summary. Default true.
    #[serde(default = "yes")]
    pub keep_summary: bool,
}

fn yes() -> bool {
    true
}

/// What a purge removed, or a dry run would remove.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PurgeReport {
    pub dry_run: bool,
    /// The cutoff, epoch milliseconds.
    pub before: Millis,
    pub runs: u64,
    pub events: u64,
    pub checkpoints: u64,
    /// Bytes of events and checkpoints.
    pub bytes: u64,
    /// Store rows removed (0 for a dry run).
    pub rows: u64,
    /// Directories and task logs removed from the data directory at once: by a local
    /// `runs purge` only; through the API each daemon's sweep removes them within
    /// `retention.interval_seconds`.
    pub files: u64,
}

/// Why a purge request was refused; nothing was changed.
#[derive(Debug, thiserror::Error)]
pub enum PurgeError {
    #[error(
        "before: `{0}` is neither a time (RFC 3339, e.g. 2026-11-01T00:00:00Z) nor an age \
         (e.g. 30d, 12h, 90m, 45s)"
    )]
    Before(String),
    #[error(
        "status: `{0}` is not an end state; use one of succeeded, failed, cancelled, \
         budget_exhausted, max_rounds, superseded"
    )]
    Status(String),
    #[error(transparent)]
    Store(#[from] nightshift_store::Error),
}

/// `text` as a time: RFC 3339, or an age (`30d`, `12h`, `90m`, `45s`) before `now`.
pub fn parse_before(text: &str, now: Millis) -> Result<Millis, PurgeError> {
    let text = text.trim();
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(t.timestamp_millis());
    }
    let bad = || PurgeError::Before(text.to_string());
    let unit = text.chars().last().ok_or_else(bad)?;
    let ms: i64 = match unit {
        'd' => 86_400_000,
        'h' => 3_600_000,
        'm' => 60_000,
        's' => 1_000,
        _ => return Err(bad()),
    };
    let n: i64 = text[..text.len() - 1].parse().map_err(|_| bad())?;
    if n < 0 {
        return Err(bad());
    }
    Ok(now.saturating_sub(n.saturating_mul(ms)))
}

/// `millis` as RFC 3339 (what the API takes).
pub fn rfc3339(millis: Millis) -> String {
    chrono::DateTime::from_timestamp_millis(millis)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The rules of a request, with its cutoff.
pub fn rules(req: &PurgeRequest) -> Result<(Millis, Vec<PurgeRule>), PurgeError> {
    let before = chrono::DateTime::parse_from_rfc3339(req.before.trim())
        .map_err(|_| PurgeError::Before(req.before.clone()))?
        .timestamp_millis();
    let statuses: Vec<RunStatus> = match &req.status {
        Some(s) => match s.parse::<RunStatus>() {
            Ok(status) if status.is_terminal() => vec![status],
            _ => return Err(PurgeError::Status(s.clone())),
        },
        None => RunStatus::ALL
            .iter()
            .copied()
            .filter(|s| s.is_terminal())
            .collect(),
    };
    let rules = statuses
        .into_iter()
        .map(|status| PurgeRule {
            status,
            ended_before: before,
            agent: req.agent.clone(),
            except_agents: Vec::new(),
            keep_summary: req.keep_summary,
        })
        .collect();
    Ok((before, rules))
}

/// The audit detail of a request.
fn detail(req: &PurgeRequest) -> String {
    format!(
        "before={} agent={} status={} keep_summary={}",
        req.before,
        req.agent.as_deref().unwrap_or("*"),
        req.status.as_deref().unwrap_or("*"),
        req.keep_summary
    )
}

/// Answers `req` for `actor`; `files`: the data directory whose files of purged runs go.
pub async fn purge(
    store: &Store,
    actor: &str,
    req: &PurgeRequest,
    files: Option<&RunFiles>,
) -> Result<PurgeReport, PurgeError> {
    let (before, rules) = rules(req)?;
    let mut report = PurgeReport {
        dry_run: req.dry_run,
        before,
        runs: 0,
        events: 0,
        checkpoints: 0,
        bytes: 0,
        rows: 0,
        files: 0,
    };
    if req.dry_run {
        let mut counts = PurgeCounts::default();
        for rule in &rules {
            counts.add(store.purge_preview(rule).await?);
        }
        fill(&mut report, counts);
        return Ok(report);
    }
    let started = Instant::now();
    let done = store
        .as_operator(actor)
        .purge_runs(&rules, OPERATOR_BATCH, &detail(req), |took| {
            rest_after(took, OPERATOR_PAUSE)
        })
        .await?;
    fill(&mut report, done.counts);
    report.rows = done.rows;
    if let Some(files) = files {
        for run in &done.runs {
            report.files += files.remove_run(run, Removal::Purged);
        }
        report.files += files.remove_task_logs(&done.tasks);
    }
    tracing::info!(
        actor,
        runs = report.runs,
        rows = report.rows,
        bytes = report.bytes,
        files = report.files,
        duration_ms = started.elapsed().as_millis() as u64,
        "purged finished runs on request"
    );
    Ok(report)
}

fn fill(report: &mut PurgeReport, c: PurgeCounts) {
    report.runs = c.runs;
    report.events = c.events;
    report.checkpoints = c.checkpoints;
    report.bytes = c.bytes;
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Millis = 1_800_000_000_000;

    #[test]
    fn before_takes_a_time_or_an_age_and_refuses_anything_else() {
        assert_eq!(parse_before("30d", NOW).unwrap(), NOW - 30 * 86_400_000);
        assert_eq!(parse_before("12h", NOW).unwrap(), NOW - 12 * 3_600_000);
        assert_eq!(parse_before("90m", NOW).unwrap(), NOW - 90 * 60_000);
        assert_eq!(parse_before("0s", NOW).unwrap(), NOW);
        assert_eq!(
            parse_before("2026-11-01T00:00:00Z", NOW).unwrap(),
            1_793_491_200_000
        );
        for bad in ["", "30", "d", "-3d", "30w", "yesterday", "2026-11-01"] {
            let e = parse_before(bad, NOW).unwrap_err().to_string();
            assert!(e.starts_with("before: "), "{bad}: {e}");
        }
        assert_eq!(rfc3339(1_793_491_200_000), "2026-11-01T00:00:00.000Z");
    }

    #[test]
    fn a_request_names_every_end_state_or_one_and_refuses_a_live_one() {
        let mut req = PurgeRequest {
            before: "2026-11-01T00:00:00Z".into(),
            agent: Some("bot".into()),
            status: None,
            dry_run: false,
            keep_summary: true,
        };
        let (before, all) = rules(&req).unwrap();
        assert_eq!(before, 1_793_491_200_000);
        assert_eq!(all.len(), 6);
        assert!(all.iter().all(|r| r.agent.as_deref() == Some("bot")));
        req.status = Some("failed".into());
        assert_eq!(rules(&req).unwrap().1[0].status, RunStatus::Failed);
        for bad in ["running", "queued", "done"] {
            req.status = Some(bad.into());
            let e = rules(&req).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("status: `{bad}` is not an end state")),
                "{e}"
            );
        }
        let parsed: PurgeRequest =
            serde_json::from_str(r#"{"before":"2026-11-01T00:00:00Z"}"#).unwrap();
        assert!(parsed.keep_summary && !parsed.dry_run);
    }
}
