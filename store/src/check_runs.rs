//! Who makes a run's GitHub check run (`run_check_runs`, migration 0020).
//!
//! GitHub takes no idempotency key when a check run is created, and looking for one by its
//! `external_id` cannot see a create that is still on its way. So the making of a run's check
//! run of a name is claimed here first, and only the claimant creates it:
//!
//! - [`Store::claim_check_run`] answers [`CheckRunClaim::Yours`] to one caller at a time —
//!   the first, or the first after a claim without an id grew older than `stale` (its maker
//!   died, or lost GitHub's answer and gave up). Everyone else hears that it is
//!   [`CheckRunClaim::Made`] (GitHub's id is recorded) or [`CheckRunClaim::BeingMade`].
//! - The maker records GitHub's id ([`Store::record_check_run`]), or gives the claim up when
//!   GitHub refused and nothing was made ([`Store::release_check_run`]).
//!
//! What it guarantees: two callers never both create the check run while a claim is fresh,
//! whatever the timing — a job starting the run, the run's completion after a push, a second
//! daemon. A claimant after a stale claim looks for the check run before creating it.

use std::future::Future;
use std::time::Duration;

use crate::Result;
use crate::backend::{Backend, Conn};
use crate::clock::Millis;
use crate::store::{Store, dispatch};

/// Who makes a run's check run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckRunClaim {
    /// The caller: nobody had claimed it, or the last claim grew stale without an id.
    Yours,
    /// It exists: GitHub's id.
    Made(i64),
    /// Another caller claimed it at `since` and has not recorded an id yet.
    BeingMade { since: Millis },
}

/// The statements of check-run claims.
pub(crate) trait CheckRunStatements: Backend {
    /// `check_runs/claim.sql`: whether the caller holds the claim now.
    fn claim_check_run(
        c: &mut Conn<Self>,
        run_id: &str,
        name: &str,
        now: Millis,
        stale_before: Millis,
    ) -> impl Future<Output = Result<bool>> + Send;
    /// `check_runs/get.sql`: (GitHub's id, claimed at), when claimed.
    fn get_check_run_claim(
        c: &mut Conn<Self>,
        run_id: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<(Option<i64>, Millis)>>> + Send;
    /// `check_runs/record.sql`.
    fn record_check_run(
        c: &mut Conn<Self>,
        run_id: &str,
        name: &str,
        check_run_id: i64,
    ) -> impl Future<Output = Result<()>> + Send;
    /// `check_runs/release.sql`.
    fn release_check_run(
        c: &mut Conn<Self>,
        run_id: &str,
        name: &str,
    ) -> impl Future<Output = Result<()>> + Send;
}

/// Implements [`CheckRunStatements`] for a backend from its SQL directory.
macro_rules! check_run_statements {
    ($backend:ty, $dir:literal) => {
        impl $crate::check_runs::CheckRunStatements for $backend {
            async fn claim_check_run(
                c: &mut $crate::backend::Conn<Self>,
                run_id: &str,
                name: &str,
                now: i64,
                stale_before: i64,
            ) -> $crate::Result<bool> {
                let claimed: Option<i64> =
                    sqlx::query_scalar($crate::backend::sql!($dir, "check_runs/claim"))
                        .bind(run_id)
                        .bind(name)
                        .bind(now)
                        .bind(stale_before)
                        .fetch_optional(c)
                        .await?;
                Ok(claimed.is_some())
            }

            async fn get_check_run_claim(
                c: &mut $crate::backend::Conn<Self>,
                run_id: &str,
                name: &str,
            ) -> $crate::Result<Option<(Option<i64>, i64)>> {
                Ok(
                    sqlx::query_as($crate::backend::sql!($dir, "check_runs/get"))
                        .bind(run_id)
                        .bind(name)
                        .fetch_optional(c)
                        .await?,
                )
            }

            async fn record_check_run(
                c: &mut $crate::backend::Conn<Self>,
                run_id: &str,
                name: &str,
                check_run_id: i64,
            ) -> $crate::Result<()> {
                sqlx::query($crate::backend::sql!($dir, "check_runs/record"))
                    .bind(run_id)
                    .bind(name)
                    .bind(check_run_id)
                    .execute(c)
                    .await?;
                Ok(())
            }

            async fn release_check_run(
                c: &mut $crate::backend::Conn<Self>,
                run_id: &str,
                name: &str,
            ) -> $crate::Result<()> {
                sqlx::query($crate::backend::sql!($dir, "check_runs/release"))
                    .bind(run_id)
                    .bind(name)
                    .execute(c)
                    .await?;
                Ok(())
            }
        }
    };
}
pub(crate) use check_run_statements;

/// What a claim row says, for a caller that did not get the claim.
fn claim_of(row: Option<(Option<i64>, Millis)>) -> CheckRunClaim {
    match row {
        Some((Some(id), _)) => CheckRunClaim::Made(id),
        Some((None, since)) => CheckRunClaim::BeingMade { since },
        // Released between the two statements: nobody makes it now; the caller may.
        None => CheckRunClaim::Yours,
    }
}

async fn claim<B: CheckRunStatements>(
    b: &B,
    run_id: &str,
    name: &str,
    now: Millis,
    stale_before: Millis,
) -> Result<CheckRunClaim> {
    let mut c = b.writer().await?;
    if B::claim_check_run(&mut c, run_id, name, now, stale_before).await? {
        return Ok(CheckRunClaim::Yours);
    }
    Ok(claim_of(
        B::get_check_run_claim(&mut c, run_id, name).await?,
    ))
}

async fn get<B: CheckRunStatements>(
    b: &B,
    run_id: &str,
    name: &str,
) -> Result<Option<CheckRunClaim>> {
    let row = B::get_check_run_claim(&mut *b.reader().await?, run_id, name).await?;
    Ok(row.map(|r| claim_of(Some(r))))
}

async fn record<B: CheckRunStatements>(b: &B, run_id: &str, name: &str, id: i64) -> Result<()> {
    B::record_check_run(&mut *b.writer().await?, run_id, name, id).await
}

async fn release<B: CheckRunStatements>(b: &B, run_id: &str, name: &str) -> Result<()> {
    B::release_check_run(&mut *b.writer().await?, run_id, name).await
}

impl Store {
    /// Claims the making of `run_id`'s check run `name` (see the module documentation): a
    /// claim without an id older than `stale` is taken over.
    pub async fn claim_check_run(
        &self,
        run_id: &str,
        name: &str,
        stale: Duration,
    ) -> Result<CheckRunClaim> {
        let now = self.now();
        let stale_ms = i64::try_from(stale.as_millis()).unwrap_or(i64::MAX);
        let stale_before = now.saturating_sub(stale_ms);
        dispatch!(self, b => claim(b, run_id, name, now, stale_before))
    }

    /// The claim on `run_id`'s check run `name`, if any, without claiming (`Yours` is never
    /// answered: `None` means nobody claimed it).
    pub async fn check_run_claim(&self, run_id: &str, name: &str) -> Result<Option<CheckRunClaim>> {
        dispatch!(self, b => get(b, run_id, name))
    }

    /// Records GitHub's id for `run_id`'s check run `name` (the claimant made or found it).
    pub async fn record_check_run(
        &self,
        run_id: &str,
        name: &str,
        check_run_id: i64,
    ) -> Result<()> {
        dispatch!(self, b => record(b, run_id, name, check_run_id))
    }

    /// Gives up the claim on `run_id`'s check run `name` when nothing was made (GitHub
    /// refused); a recorded id stays.
    pub async fn release_check_run(&self, run_id: &str, name: &str) -> Result<()> {
        dispatch!(self, b => release(b, run_id, name))
    }
}
