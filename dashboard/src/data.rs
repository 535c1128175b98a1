//! The one place the runs list reads the store, shaped like the store's coming
//! `Store::runs_page(&RunFilter, cursor, limit) -> RunPage`, so the lead swaps one body at
//! merge. Until then it filters today's `Store::list_runs` in memory: correct, but it reads
//! up to [`SCAN`] newest runs (keyset pagination by `created_at|id` cursor).

use nightshift_store::{Millis, Result, Run, RunStatus, Store, Trigger};

/// How many newest runs the stand-in scans.
pub const SCAN: i64 = 5_000;

/// The runs list's filters (each `None` is no filter).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunFilter {
    pub status: Option<RunStatus>,
    pub agent: Option<String>,
    pub trigger: Option<Trigger>,
    pub concurrency_key: Option<String>,
    pub since: Option<Millis>,
    pub until: Option<Millis>,
    /// Run id, idempotency key, concurrency key, or text of the prompt.
    pub search: Option<String>,
}

/// One page of runs, newest first, and the cursor of the next.
#[derive(Debug, Clone, PartialEq)]
pub struct RunPage {
    pub runs: Vec<Run>,
    pub next_cursor: Option<String>,
}

fn cursor_of(r: &Run) -> String {
    format!("{:016}|{}", r.created_at, r.id)
}

/// Whether `r` passes `f` (pure).
pub fn matches(f: &RunFilter, r: &Run) -> bool {
    f.status.is_none_or(|s| r.status == s)
        && f.agent.as_ref().is_none_or(|a| &r.agent == a)
        && f.trigger.is_none_or(|t| r.trigger_kind == t)
        && f.concurrency_key
            .as_ref()
            .is_none_or(|k| r.concurrency_key.as_ref() == Some(k))
        && f.since.is_none_or(|t| r.created_at >= t)
        && f.until.is_none_or(|t| r.created_at < t)
        && f.search.as_ref().is_none_or(|q| {
            r.id == *q
                || r.idempotency_key.as_deref() == Some(q)
                || r.concurrency_key.as_deref() == Some(q)
                || r.input.to_lowercase().contains(&q.to_lowercase())
        })
}

/// A page of runs passing `filter`, after `cursor`, at most `limit`.
// lead: switch to Store::runs_page at merge
pub async fn runs_page(
    store: &Store,
    filter: &RunFilter,
    cursor: Option<&str>,
    limit: i64,
) -> Result<RunPage> {
    let all = store.list_runs(filter.status, SCAN).await?;
    let mut runs: Vec<Run> = all
        .into_iter()
        .filter(|r| cursor.is_none_or(|c| cursor_of(r).as_str() < c))
        .filter(|r| matches(filter, r))
        .take(usize::try_from(limit + 1).unwrap_or(51))
        .collect();
    let next_cursor = if runs.len() as i64 > limit {
        runs.truncate(usize::try_from(limit).unwrap_or(50));
        runs.last().map(cursor_of)
    } else {
        None
    };
    Ok(RunPage { runs, next_cursor })
}
