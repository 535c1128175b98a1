//! A run's check run made by one maker at a time, whoever asks: the job starting the run, the
//! agent's `github_check_run` tool, the completion when the run ends, a second daemon.
//!
//! GitHub takes no idempotency key when a check run is created, and looking for one by its
//! `external_id` cannot see a create that is still on its way. So every caller that might
//! create a run's check run first asks a durable record of who makes it ([`CheckRunClaims`],
//! kept by the daemon's store), and [`make_claimed`] decides from the answer:
//!
//! | the claim says | what happens |
//! |---|---|
//! | [`Claim::Made`] | GitHub's id is known: nothing is created ([`Made::Recorded`]) |
//! | [`Claim::BeingMade`] | another maker's create may be on its way: look by `external_id`; found is recorded, absent is [`Made::BeingMade`] — never a create of one's own |
//! | [`Claim::Yours`] | look, create when absent ([`crate::checks::ensure_started`]), record GitHub's id; a refusal gives the claim up, a lost answer keeps it (a check run may exist) |
//!
//! So two callers never both create it while a claim is fresh, and a create whose answer was
//! lost is looked for by whoever comes next, never sent again blind.

use std::future::Future;
use std::pin::Pin;

use serde_json::Value;

use crate::api::{Api, Auth, GithubError};
use crate::checks::{self, CheckOutput, CheckRunKey};

/// Who makes a run's check run of a name, as the durable record says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// The caller: nobody had claimed it, or the last claim grew stale without an id.
    Yours,
    /// It exists: GitHub's id.
    Made(i64),
    /// Another caller claimed it and has not recorded an id yet.
    BeingMade,
}

/// The record could not be read or written.
#[derive(Debug, thiserror::Error)]
#[error("cannot read or record the check run's claim: {0}")]
pub struct ClaimError(pub String);

/// A boxed future, as the claims' methods return.
pub type ClaimFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, ClaimError>> + Send + 'a>>;

/// The durable record of who makes each run's check run of a name.
pub trait CheckRunClaims: Send + Sync + std::fmt::Debug {
    /// Claims the making of `run_id`'s check run `name`, or says who has it.
    fn claim<'a>(&'a self, run_id: &'a str, name: &'a str) -> ClaimFuture<'a, Claim>;
    /// Records GitHub's id of the check run made.
    fn record<'a>(&'a self, run_id: &'a str, name: &'a str, id: i64) -> ClaimFuture<'a, ()>;
    /// Gives the claim up: GitHub refused, nothing was made.
    fn release<'a>(&'a self, run_id: &'a str, name: &'a str) -> ClaimFuture<'a, ()>;
}

/// What [`make_claimed`] found or made.
#[derive(Debug, Clone, PartialEq)]
pub enum Made {
    /// The check run, as GitHub answered or listed it (its id is recorded).
    CheckRun(Value),
    /// The record already held GitHub's id; nothing was asked of GitHub.
    Recorded(i64),
    /// Another maker holds the claim and GitHub does not list the check run yet.
    BeingMade,
}

impl Made {
    /// The check run's id, when it is known.
    pub fn id(&self) -> Option<i64> {
        match self {
            Made::CheckRun(check_run) => check_run["id"].as_i64(),
            Made::Recorded(id) => Some(*id),
            Made::BeingMade => None,
        }
    }
}

/// Why a claimed making failed.
#[derive(Debug, thiserror::Error)]
pub enum MakeError {
    #[error(transparent)]
    Claim(#[from] ClaimError),
    #[error(transparent)]
    Github(#[from] GithubError),
}

/// The run's check run `key`, made `in_progress` with `output` only by the claim's holder
/// (see the module documentation for the rule).
pub async fn make_claimed(
    api: &Api,
    auth: Auth<'_>,
    key: CheckRunKey<'_>,
    claims: &dyn CheckRunClaims,
    output: &CheckOutput,
) -> Result<Made, MakeError> {
    match claims.claim(key.run_id, key.name).await? {
        Claim::Made(id) => Ok(Made::Recorded(id)),
        Claim::BeingMade => match checks::find(api, auth, key).await? {
            Some(found) => {
                record(claims, key, &found).await?;
                Ok(Made::CheckRun(found))
            }
            None => Ok(Made::BeingMade),
        },
        Claim::Yours => match checks::ensure_started(api, auth, key, output).await {
            Ok(made) => {
                record(claims, key, &made).await?;
                Ok(Made::CheckRun(made))
            }
            Err(e) => {
                release_unless_ambiguous(claims, key, &e).await?;
                Err(e.into())
            }
        },
    }
}

/// Records the id of the check run GitHub answered with or listed.
pub async fn record(
    claims: &dyn CheckRunClaims,
    key: CheckRunKey<'_>,
    check_run: &Value,
) -> Result<(), ClaimError> {
    match check_run["id"].as_i64() {
        Some(id) => claims.record(key.run_id, key.name, id).await,
        None => Ok(()),
    }
}

/// Gives the claim up after a refusal (nothing was made); keeps it after a lost answer (a
/// check run may exist: the claim grows stale, and the next caller looks first).
pub async fn release_unless_ambiguous(
    claims: &dyn CheckRunClaims,
    key: CheckRunKey<'_>,
    e: &GithubError,
) -> Result<(), ClaimError> {
    if e.is_ambiguous() {
        Ok(())
    } else {
        claims.release(key.run_id, key.name).await
    }
}
