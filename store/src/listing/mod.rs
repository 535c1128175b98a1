//! Listings for operators (the dashboard and `GET /v1/runs`): pages of runs with filters,
//! and the queue's overview.
//!
//! What it guarantees:
//! - **Newest first, each run once.** [`Store::runs_page`] orders by `(created_at DESC,
//!   id DESC)` and continues from an opaque keyset cursor (never an `OFFSET`): walking the
//!   pages returns every matching run exactly once, also across equal `created_at`, and runs
//!   created after the first page do not shift the later ones.
//! - **Bounded pages.** A page holds 1 to [`MAX_PAGE`] runs (the limit asked for is clamped)
//!   and is read along one index (`migrations/*/0013_runs_listing.sql`), led by the most
//!   selective equality filter given ([`cursor::Shape`]); the other filters are checked on
//!   the rows read, so a rare combination reads further along that index before the page is
//!   full.
//! - **Planned with their values.** The page statements are not kept prepared: PostgreSQL
//!   plans each page with its filter's values, never with the generic plan a kept statement
//!   settles on, which, blind to the values, guesses a handful of matching rows and fetches
//!   and sorts every run of the filter (122 ms for an agent's 20,000 runs of 100,000, against
//!   0.3 ms walking an index). The suite's `plans` tests check the plans; the planning costs
//!   well under a millisecond.
//! - **Search.** A search equal to a run id or an idempotency key lists that run (at most two,
//!   one by each); otherwise it lists the runs whose prompt contains the text, case-insensitive
//!   (`lower()`: ASCII letters on SQLite, every letter on PostgreSQL), `%` and `_` taken
//!   literally. Text search reads prompts along the page's index until the page is full.
//! - **Bad input changes nothing.** A malformed cursor or an empty time range is
//!   [`Error::Invalid`] saying what to send instead.
//! - **The queue overview reads live rows only.** Job counts come from the partial index of
//!   live jobs (`jobs_live_state_lane`), so they cost what the live jobs cost, not the history;
//!   finished jobs are not counted. On PostgreSQL the index entries a burst's finished jobs
//!   leave behind (until vacuum removes them) are read once: the overview's reads are planned
//!   without bitmap scans ([`LiveReads`]), so an index scan marks those entries dead on its
//!   first pass and later overviews skip them.

mod binds;
pub mod cursor;

use std::future::Future;

pub(crate) use binds::listing_statements;
pub use cursor::Shape;

use crate::backend::{Backend, Conn};
use crate::clock::Millis;
use crate::model::WorkerRow;
use crate::queue::QueueStatements;
use crate::states::{JobState, RunStatus, Trigger};
use crate::store::{Store, dispatch};
use crate::{Error, Result};

/// The most runs one page holds.
pub const MAX_PAGE: i64 = 200;

/// Which runs to list; every field set must match (`None`: any).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunFilter {
    pub status: Option<RunStatus>,
    pub agent: Option<String>,
    pub trigger: Option<Trigger>,
    pub concurrency_key: Option<String>,
    /// Created at or after this time.
    pub since: Option<Millis>,
    /// Created before this time.
    pub until: Option<Millis>,
    /// A run id or idempotency key (exact), or else text of the prompt (see the module doc).
    pub search: Option<String>,
}

/// One run of a listing: what a row of the runs page shows.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RunSummary {
    pub id: String,
    pub agent: String,
    pub status: RunStatus,
    pub trigger_kind: Trigger,
    pub concurrency_key: Option<String>,
    pub idempotency_key: Option<String>,
    /// The first [`cursor::PROMPT_HEAD_CHARS`] characters of the prompt.
    pub prompt_head: String,
    pub turns: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cache_read_tokens: i64,
    pub cache_write_tokens: i64,
    pub cost_usd: f64,
    /// The first line of the error, cut at [`cursor::ERROR_HEAD_CHARS`] characters.
    pub error_head: Option<String>,
    pub created_at: Millis,
    pub started_at: Option<Millis>,
    pub finished_at: Option<Millis>,
    pub updated_at: Millis,
}

/// A page of runs, and the cursor of the next one (`None`: this is the last page).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RunPage {
    pub runs: Vec<RunSummary>,
    pub next_cursor: Option<String>,
}

/// The queue at a glance.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct QueueOverview {
    /// Live jobs (queued, running, parked) per state and lane; pairs with none are left out.
    pub by_state_lane: Vec<LaneCount>,
    /// The due time (`run_at`) of the queued job that has waited longest among those due now.
    pub oldest_queued_at: Option<Millis>,
    /// The registered worker processes.
    pub workers: Vec<WorkerRow>,
    /// The live leases, soonest expiry first.
    pub leases: Vec<LeaseRow>,
}

/// How many jobs of one lane are in one state.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LaneCount {
    pub lane: String,
    pub state: JobState,
    pub count: i64,
}

/// A running job's lease.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow, serde::Serialize)]
pub struct LeaseRow {
    pub job_id: i64,
    pub run_id: String,
    pub agent: String,
    pub lane: String,
    /// The worker holding the lease (`jobs.lease_owner`).
    pub owner: Option<String>,
    pub lease_token: i64,
    /// This attempt's number.
    pub attempts: i64,
    pub max_attempts: i64,
    pub lease_expires_at: Option<Millis>,
    /// When the job row was last written: the claim or the lease's last heartbeat.
    pub updated_at: Millis,
    /// The holder's last worker heartbeat (`workers.last_heartbeat_at`); `None` when the
    /// worker is not registered.
    pub worker_heartbeat_at: Option<Millis>,
}

/// A summary as read: heads not yet cut.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct SummaryRow {
    id: String,
    agent: String,
    #[sqlx(try_from = "String")]
    status: RunStatus,
    #[sqlx(try_from = "String")]
    trigger_kind: Trigger,
    #[sqlx(try_from = "crate::text::DbOptText")]
    concurrency_key: Option<String>,
    #[sqlx(try_from = "crate::text::DbOptText")]
    idempotency_key: Option<String>,
    #[sqlx(try_from = "crate::text::DbText")]
    prompt_head: String,
    turns: i64,
    input_tokens: i64,
    output_tokens: i64,
    cache_read_tokens: i64,
    cache_write_tokens: i64,
    cost_usd: f64,
    #[sqlx(try_from = "crate::text::DbOptText")]
    error_head: Option<String>,
    created_at: Millis,
    started_at: Option<Millis>,
    finished_at: Option<Millis>,
    updated_at: Millis,
}

impl From<SummaryRow> for RunSummary {
    fn from(r: SummaryRow) -> Self {
        RunSummary {
            id: r.id,
            agent: r.agent,
            status: r.status,
            trigger_kind: r.trigger_kind,
            concurrency_key: r.concurrency_key,
            idempotency_key: r.idempotency_key,
            prompt_head: cursor::prompt_head(&r.prompt_head),
            turns: r.turns,
            input_tokens: r.input_tokens,
            output_tokens: r.output_tokens,
            cache_read_tokens: r.cache_read_tokens,
            cache_write_tokens: r.cache_write_tokens,
            cost_usd: r.cost_usd,
            error_head: r.error_head.as_deref().map(cursor::error_head),
            created_at: r.created_at,
            started_at: r.started_at,
            finished_at: r.finished_at,
            updated_at: r.updated_at,
        }
    }
}

/// The parameters every page statement binds.
#[derive(Debug)]
pub(crate) struct PageQuery<'a> {
    pub status: Option<&'static str>,
    pub agent: Option<&'a str>,
    pub trigger: Option<&'static str>,
    pub key: Option<&'a str>,
    pub since: Millis,
    pub until: Millis,
    pub text: Option<&'a str>,
    /// The keyset position the page starts after: `(created_at, id)`.
    pub before: (Millis, &'a str),
    pub limit: i64,
}

/// The statements of listings (`store/sql/<backend>/listing/`).
pub(crate) trait ListingStatements: Backend {
    /// `listing/page*.sql`: a page along the index `shape` names.
    fn runs_page(
        c: &mut Conn<Self>,
        shape: Shape,
        q: &PageQuery<'_>,
    ) -> impl Future<Output = Result<Vec<SummaryRow>>> + Send;

    /// `listing/exact.sql`: the runs whose id or idempotency key is `needle`, filtered.
    fn runs_exact(
        c: &mut Conn<Self>,
        needle: &str,
        q: &PageQuery<'_>,
    ) -> impl Future<Output = Result<Vec<SummaryRow>>> + Send;

    /// `listing/live_jobs.sql`: `(state, lane, count)` of live jobs.
    fn live_jobs(
        c: &mut Conn<Self>,
    ) -> impl Future<Output = Result<Vec<(String, String, i64)>>> + Send;

    /// `listing/oldest_due.sql`.
    fn oldest_due(
        c: &mut Conn<Self>,
        now: Millis,
    ) -> impl Future<Output = Result<Option<Millis>>> + Send;

    /// `listing/leases.sql`.
    fn leases(c: &mut Conn<Self>) -> impl Future<Output = Result<Vec<LeaseRow>>> + Send;

    /// `listing/gauge_jobs.sql`: `(state, lane, count)` as the gauges show them.
    fn gauge_jobs(
        c: &mut Conn<Self>,
        now: Millis,
    ) -> impl Future<Output = Result<Vec<(String, String, i64)>>> + Send;

    /// `listing/gauge_backlogs.sql`: pending approvals, the oldest one's `requested_at`,
    /// pending notifications, the oldest one's `created_at`.
    fn gauge_backlogs(
        c: &mut Conn<Self>,
    ) -> impl Future<Output = Result<(i64, Option<Millis>, i64, Option<Millis>)>> + Send;

    /// `listing/oldest_due_per_lane.sql`: `(lane, run_at)`.
    fn oldest_due_per_lane(
        c: &mut Conn<Self>,
        now: Millis,
    ) -> impl Future<Output = Result<Vec<(String, Millis)>>> + Send;
}

/// The connection the queue overview reads on.
pub(crate) trait LiveReads: Backend {
    /// SQLite: a reader. PostgreSQL: a read-only transaction planned with
    /// [`OVERVIEW_PLANNER_SETTINGS`](crate::postgres::OVERVIEW_PLANNER_SETTINGS).
    type LiveReader: std::ops::DerefMut<Target = Conn<Self>> + Send;

    fn live_reader(&self) -> impl Future<Output = Result<Self::LiveReader>> + Send;
}

/// Where a walk starts when no cursor is given: before every run that can exist.
const FIRST: (Millis, &str) = (Millis::MAX, "");

/// The keyset position a page walks down from (pure): after the cursor, and never above
/// `until` — `(until, "")` sorts after every run created before `until` and before every
/// other, so the index walk itself starts at the range's top (SQLite bounds an index range
/// only by the row value, not by a separate `created_at < until`).
pub(crate) fn start_before(
    cursor: Option<(Millis, &str)>,
    until: Option<Millis>,
) -> (Millis, &str) {
    let from = cursor.unwrap_or(FIRST);
    match until {
        Some(until) if (until, "") < from => (until, ""),
        _ => from,
    }
}

async fn page<B: ListingStatements>(
    b: &B,
    filter: &RunFilter,
    before: Option<(Millis, String)>,
    limit: i64,
) -> Result<RunPage> {
    let q = PageQuery {
        status: filter.status.map(RunStatus::as_str),
        agent: filter.agent.as_deref(),
        trigger: filter.trigger.map(Trigger::as_str),
        key: filter.concurrency_key.as_deref(),
        since: filter.since.unwrap_or(Millis::MIN),
        until: filter.until.unwrap_or(Millis::MAX),
        text: None,
        before: start_before(
            before.as_ref().map(|(at, id)| (*at, id.as_str())),
            filter.until,
        ),
        limit: limit + 1,
    };
    let mut conn = b.reader().await?;
    if let Some(needle) = filter.search.as_deref() {
        let exact = B::runs_exact(&mut conn, needle, &q).await?;
        if !exact.is_empty() {
            return Ok(RunPage {
                runs: exact.into_iter().map(RunSummary::from).collect(),
                next_cursor: None,
            });
        }
    }
    let q = PageQuery {
        text: filter.search.as_deref(),
        ..q
    };
    let mut rows = B::runs_page(&mut conn, cursor::shape(filter), &q).await?;
    drop(conn);
    let more = rows.len() as i64 > limit;
    rows.truncate(limit as usize);
    let runs: Vec<RunSummary> = rows.into_iter().map(RunSummary::from).collect();
    let next_cursor = more
        .then(|| runs.last().map(|r| cursor::encode(r.created_at, &r.id)))
        .flatten();
    Ok(RunPage { runs, next_cursor })
}

/// The queue as an alert should read it: every count means what its name says.
#[derive(Debug, Clone, PartialEq)]
pub struct JobGauges {
    /// `(state, lane, count)`: `queued` (due now), `delayed` (queued for later), `running`,
    /// `parked` (of runs that have not ended).
    pub counts: Vec<(String, String, i64)>,
    /// `(lane, seconds)`: how long each lane's longest-waiting due job has waited.
    pub oldest_due_age_seconds: Vec<(String, f64)>,
}

async fn gauges<B: ListingStatements + LiveReads>(b: &B, now: Millis) -> Result<JobGauges> {
    let mut conn = b.live_reader().await?;
    let counts = B::gauge_jobs(&mut conn, now).await?;
    let oldest = B::oldest_due_per_lane(&mut conn, now).await?;
    Ok(JobGauges {
        counts,
        oldest_due_age_seconds: oldest
            .into_iter()
            .map(|(lane, due)| (lane, now.saturating_sub(due).max(0) as f64 / 1000.0))
            .collect(),
    })
}

/// What waits on people and receivers, as the metrics gauges show it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BacklogGauges {
    /// Tool calls waiting for a decision.
    pub approvals_pending: i64,
    /// How long the oldest of them has waited (0 when none does).
    pub oldest_approval_age_seconds: f64,
    /// Run notices not yet delivered (first attempt or retrying).
    pub notifications_pending: i64,
    /// How long the oldest of them has waited since it was made (0 when none does).
    pub oldest_notification_age_seconds: f64,
}

async fn backlogs<B: ListingStatements + LiveReads>(b: &B, now: Millis) -> Result<BacklogGauges> {
    let mut conn = b.live_reader().await?;
    let (approvals, oldest_approval, notifications, oldest_notification) =
        B::gauge_backlogs(&mut conn).await?;
    let age =
        |since: Option<Millis>| since.map_or(0.0, |t| now.saturating_sub(t).max(0) as f64 / 1000.0);
    Ok(BacklogGauges {
        approvals_pending: approvals,
        oldest_approval_age_seconds: age(oldest_approval),
        notifications_pending: notifications,
        oldest_notification_age_seconds: age(oldest_notification),
    })
}

async fn overview<B: ListingStatements + QueueStatements + LiveReads>(
    b: &B,
    now: Millis,
) -> Result<QueueOverview> {
    // Read only; a PostgreSQL transaction is rolled back when dropped.
    let mut conn = b.live_reader().await?;
    let counts = B::live_jobs(&mut conn).await?;
    let oldest_queued_at = B::oldest_due(&mut conn, now).await?;
    let workers = B::list_workers(&mut conn).await?;
    let leases = B::leases(&mut conn).await?;
    let by_state_lane = counts
        .into_iter()
        .map(|(state, lane, count)| {
            let state = state
                .parse::<JobState>()
                .map_err(|e| Error::Corrupt(format!("jobs.status: {e}")))?;
            Ok(LaneCount { lane, state, count })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(QueueOverview {
        by_state_lane,
        oldest_queued_at,
        workers,
        leases,
    })
}

/// Checks a filter before anything is read.
fn check(filter: &RunFilter) -> Result<()> {
    if let (Some(since), Some(until)) = (filter.since, filter.until)
        && since >= until
    {
        return Err(Error::Invalid(format!(
            "the time range is empty: since ({since}) must be before until ({until})"
        )));
    }
    if filter.search.as_deref() == Some("") {
        return Err(Error::Invalid(
            "the search is empty; leave it out to list every run".into(),
        ));
    }
    Ok(())
}

impl Store {
    /// A page of runs matching `filter`, newest first, after `cursor` (the previous page's
    /// `next_cursor`; `None` for the first page). `limit` is clamped to 1..=200 ([`MAX_PAGE`]).
    /// A malformed cursor or an empty time range is [`Error::Invalid`]. See the module doc
    /// of `listing` for the search and what a page costs.
    pub async fn runs_page(
        &self,
        filter: &RunFilter,
        cursor: Option<&str>,
        limit: i64,
    ) -> Result<RunPage> {
        check(filter)?;
        let before = cursor.map(cursor::decode).transpose()?;
        let limit = limit.clamp(1, MAX_PAGE);
        dispatch!(self, b => page(b, filter, before, limit))
    }

    /// The queue at a glance: live jobs per state and lane, the oldest due queued job, the
    /// workers and the live leases. Its cost follows the live jobs and workers, not the
    /// number of jobs ever run.
    pub async fn queue_overview(&self) -> Result<QueueOverview> {
        let now = self.now();
        dispatch!(self, b => overview(b, now))
    }

    /// The queue as the metrics gauges show it ([`JobGauges`]).
    pub async fn job_gauges(&self) -> Result<JobGauges> {
        let now = self.now();
        dispatch!(self, b => gauges(b, now))
    }

    /// Pending approvals and undelivered notices as the metrics gauges show them
    /// ([`BacklogGauges`]).
    pub async fn backlog_gauges(&self) -> Result<BacklogGauges> {
        let now = self.now();
        dispatch!(self, b => backlogs(b, now))
    }
}

#[cfg(test)]
mod start_tests {
    use super::*;

    #[test]
    fn a_walk_starts_at_the_lower_of_the_cursor_and_until() {
        assert_eq!(start_before(None, None), FIRST);
        assert_eq!(start_before(None, Some(5_000)), (5_000, ""));
        assert_eq!(start_before(Some((9_000, "b")), Some(5_000)), (5_000, ""));
        assert_eq!(start_before(Some((3_000, "b")), Some(5_000)), (3_000, "b"));
        // A cursor on `until` itself: the run at `until` is outside [since, until) anyway.
        assert_eq!(start_before(Some((5_000, "b")), Some(5_000)), (5_000, ""));
    }
}
