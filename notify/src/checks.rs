//! The check runs agents keep on pull requests (`[agents.github] check_run = "NAME"`).
//!
//! A run started by a GitHub pull request delivery (its context names the repository and the
//! head commit) of such an agent gets a check run of that name on that commit:
//! - **started** `in_progress` by every job of the run before it works ([`start`], from the
//!   tool box's preparation; a failure is logged and the run goes on). Its name is recorded
//!   on the run first (`runs.check_runs`), then its making is claimed in the store
//!   ([`Store::claim_check_run`]): only the claimant creates it, looking first by
//!   `external_id` = the run's id, and records GitHub's id; a job that finds it made or
//!   being made leaves it be. So a crash, a slow answer, a push racing the start or a second
//!   daemon never make a second one;
//! - **completed** when the run ends, whatever ended it — success, failure, cancellation,
//!   supersession, a budget — from the run's outbox row ([`complete`], called by the notifier
//!   for a delivery whose target is [`TARGET_PREFIX`]`NAME`). The outbox row is written in the
//!   transaction that ends the run, so a run that ends without any job running (cancelled or
//!   superseded while queued or parked) is completed too, and a failed completion is retried
//!   with the notifier's backoff like any delivery. A check run the agent already completed
//!   with `github_check_run` keeps the agent's verdict. The completion is made for the name
//!   the agent's config gives when the run ends and for every name the run recorded, so a
//!   check run renamed or removed from the config (a reload) while a run had it open is
//!   completed too.
//! - **filled in** by the agent's `github_check_run` tool, which asks the same claim
//!   ([`StoreClaims`], given to every tool call's context): it creates the check run only
//!   when it holds the claim, so a start whose create is still unanswered is never doubled.
//! - **Never left open by a race, never doubled by one**: a completion that finds the check
//!   run being made by a job (a push superseded the run during the create) does not create
//!   one of its own: it completes what GitHub lists, or, when GitHub lists none yet, fails
//!   as [`CompleteError::BeingMade`], and the notifier tries again
//!   with its backoff — by then the maker recorded it, and the maker itself completes it when
//!   it sees the run ended ([`complete_if_ended`]). A completion that finds no claim claims
//!   it before creating the check run completed.

use nightshift_github::check_claims::{
    self, CheckRunClaims, Claim, ClaimError, ClaimFuture, MakeError,
};
use nightshift_github::checks::{self, CheckOutput, CheckRunKey, Completion};
use nightshift_github::{Auth, GithubAccess, GithubError};
use std::time::Duration;

use nightshift_store::{CheckRunClaim, Run, RunStatus, Store};
use serde_json::Value;

/// How long a claim on making a check run holds without GitHub's id: past it, the maker is
/// taken to have died or given up, and the next caller looks for the check run (by
/// `external_id`) before creating it. Longer than a maker can take: a create, its lookups
/// after a lost answer and a second create, each bounded by `github.timeout_seconds`.
pub const CLAIM_STALE: Duration = Duration::from_secs(15 * 60);

/// A notify delivery whose target starts with this completes the run's check run named by
/// the rest (`github-check-run:Nightshift review`) instead of POSTing a notice.
pub const TARGET_PREFIX: &str = "github-check-run:";

/// The repository and head commit a run's context names, when it came from a pull request.
pub fn pull_request_of(context: Option<&Value>) -> Option<(&str, &str, Option<u64>)> {
    let gh = context?.get("github")?;
    let repo = gh.get("repo")?.as_str()?;
    let head_sha = gh.get("head_sha")?.as_str()?;
    // They go into API paths: an owner/name and a hexadecimal SHA, nothing else.
    let valid = nightshift_github::is_repo_name(repo) && nightshift_github::is_commit_sha(head_sha);
    valid.then_some((
        repo,
        head_sha,
        gh.get("installation_id").and_then(Value::as_u64),
    ))
}

/// The conclusion and title a check run gets for a run that ended as `status`.
pub fn conclusion_for(status: RunStatus) -> (&'static str, &'static str) {
    match status {
        RunStatus::Succeeded => ("success", "Done"),
        RunStatus::Failed => ("failure", "The run failed"),
        RunStatus::Cancelled => ("cancelled", "The run was cancelled"),
        RunStatus::Superseded => ("cancelled", "Superseded by a newer run"),
        RunStatus::BudgetExhausted => ("neutral", "Stopped by its budget"),
        RunStatus::MaxRounds => ("neutral", "Stopped at its round limit"),
        // Not an end; never asked (a delivery is made for terminal runs only).
        RunStatus::Queued
        | RunStatus::Running
        | RunStatus::Waiting
        | RunStatus::AwaitingApproval => ("neutral", "Not finished"),
    }
}

/// What the completed check run says about `run`: its result or its error (both stored
/// redacted).
pub fn completion_output(run: &Run) -> CheckOutput {
    let (_, title) = conclusion_for(run.status);
    let summary = match (run.status, &run.result, &run.error) {
        (RunStatus::Succeeded, Some(result), _) if !result.trim().is_empty() => result.clone(),
        (_, _, Some(error)) if !error.trim().is_empty() => error.clone(),
        _ => format!("Nightshift run {} ended as {}.", run.id, run.status),
    };
    CheckOutput {
        title: title.into(),
        summary,
        text: Some(format!(
            "Run `{}` of agent `{}`: {} turn(s), {} input and {} output tokens.",
            run.id, run.agent, run.turns, run.input_tokens, run.output_tokens
        )),
    }
}

/// The store's record of who makes each run's check run ([`Store::claim_check_run`]), as
/// the GitHub crate's makers ask it: the job starting a run, the `github_check_run` tool and
/// the completion all go through it.
#[derive(Debug, Clone)]
pub struct StoreClaims(pub Store);

impl CheckRunClaims for StoreClaims {
    fn claim<'a>(&'a self, run_id: &'a str, name: &'a str) -> ClaimFuture<'a, Claim> {
        Box::pin(async move {
            Ok(
                match self.0.claim_check_run(run_id, name, CLAIM_STALE).await {
                    Ok(CheckRunClaim::Yours) => Claim::Yours,
                    Ok(CheckRunClaim::Made(id)) => Claim::Made(id),
                    Ok(CheckRunClaim::BeingMade { .. }) => Claim::BeingMade,
                    Err(e) => return Err(ClaimError(e.to_string())),
                },
            )
        })
    }

    fn record<'a>(&'a self, run_id: &'a str, name: &'a str, id: i64) -> ClaimFuture<'a, ()> {
        Box::pin(async move {
            (self.0.record_check_run(run_id, name, id).await).map_err(|e| ClaimError(e.to_string()))
        })
    }

    fn release<'a>(&'a self, run_id: &'a str, name: &'a str) -> ClaimFuture<'a, ()> {
        Box::pin(async move {
            (self.0.release_check_run(run_id, name).await).map_err(|e| ClaimError(e.to_string()))
        })
    }
}

/// Creates the run's check run `in_progress` unless it exists. First it records the name on
/// the run ([`Store::note_check_run`]): whatever the config says when the run ends, the
/// outbox completes every check run the run opened. Then it is made under the store's claim
/// ([`check_claims::make_claimed`]): a check run made, or being made by another job or
/// daemon, is left to that one.
pub async fn start(
    gh: &GithubAccess,
    store: &Store,
    name: &str,
    run_id: &str,
    context: Option<&Value>,
) -> Result<(), StartError> {
    let Some((repo, head_sha, installation)) = pull_request_of(context) else {
        return Ok(());
    };
    store.note_check_run(run_id, name).await?;
    // The token first: a failure to get one says nothing about the check run, so it must not
    // leave a claim behind.
    let token = gh.token_for_delivery(repo, installation).await?;
    let key = CheckRunKey {
        repo,
        head_sha,
        name,
        run_id,
    };
    let output = checks::started_output(run_id, head_sha);
    let claims = StoreClaims(store.clone());
    check_claims::make_claimed(gh.api(), Auth::Bearer(&token), key, &claims, &output).await?;
    Ok(())
}

/// Why a check run could not be started: recording it failed (nothing was asked of GitHub),
/// or GitHub refused.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot record the check run on the run: {0}")]
    Store(#[from] nightshift_store::Error),
    #[error(transparent)]
    Claim(#[from] ClaimError),
    #[error(transparent)]
    Github(#[from] GithubError),
}

impl From<MakeError> for StartError {
    fn from(e: MakeError) -> Self {
        match e {
            MakeError::Claim(e) => StartError::Claim(e),
            MakeError::Github(e) => StartError::Github(e),
        }
    }
}

/// Why a check run could not be completed.
#[derive(Debug, thiserror::Error)]
pub enum CompleteError {
    /// A job of the run is making the check run right now: completing it must wait until
    /// it is made (never a second one made completed beside it).
    #[error(
        "the run's check run {name:?} is being created by one of its jobs; it is completed \
         once that create is answered"
    )]
    BeingMade { name: String },
    #[error(transparent)]
    Claim(#[from] ClaimError),
    #[error(transparent)]
    Github(#[from] GithubError),
}

impl CompleteError {
    /// GitHub's status, when GitHub refused.
    pub fn status(&self) -> Option<u16> {
        match self {
            CompleteError::Github(GithubError::Status { status, .. }) => Some(*status),
            _ => None,
        }
    }
}

/// Completes `run`'s check run `name` from how the run ended; `Ok(None)` when the run has no
/// pull request to check. A check run being made by a job of the run is waited for
/// ([`CompleteError::BeingMade`]); with no claim at all, the making is claimed first.
pub async fn complete(
    gh: &GithubAccess,
    store: &Store,
    name: &str,
    run: &Run,
) -> Result<Option<Completion>, CompleteError> {
    let context: Option<Value> = run
        .context
        .as_deref()
        .and_then(|c| serde_json::from_str(c).ok());
    let Some((repo, head_sha, installation)) = pull_request_of(context.as_ref()) else {
        return Ok(None);
    };
    let token = gh.token_for_delivery(repo, installation).await?;
    let key = CheckRunKey {
        repo,
        head_sha,
        name,
        run_id: &run.id,
    };
    let claims = StoreClaims(store.clone());
    let mine = match claims.claim(&run.id, name).await? {
        // Another maker's create may be on its way: complete what GitHub lists, never make
        // one beside it.
        Claim::BeingMade => {
            let Some(found) = checks::find(gh.api(), Auth::Bearer(&token), key).await? else {
                return Err(CompleteError::BeingMade { name: name.into() });
            };
            check_claims::record(&claims, key, &found).await?;
            false
        }
        Claim::Made(_) => false,
        Claim::Yours => true,
    };
    let (conclusion, _) = conclusion_for(run.status);
    // The agent's own output (set with github_check_run) is kept on success; any other end
    // says what ended the run.
    let keep_agents = run.status == RunStatus::Succeeded;
    let done = checks::complete(gh.api(), Auth::Bearer(&token), key, conclusion, |found| {
        let agent_wrote = found.is_some_and(|c| !checks::untouched(c));
        (!(agent_wrote && keep_agents)).then(|| completion_output(run))
    });
    match done.await {
        Ok(done) => {
            if mine {
                let (Completion::Completed(made) | Completion::AlreadyCompleted(made)) = &done;
                check_claims::record(&claims, key, made).await?;
            }
            Ok(Some(done))
        }
        Err(e) => {
            if mine {
                check_claims::release_unless_ambiguous(&claims, key, &e).await?;
            }
            Err(e.into())
        }
    }
}

/// [`start`], then [`complete_if_ended`]; a failure to start is logged and the run goes on
/// without its check run. Owned, to run as a task of its own.
pub async fn start_then_complete_if_ended(
    gh: std::sync::Arc<GithubAccess>,
    store: Store,
    name: String,
    run_id: String,
    context: Option<Value>,
) {
    match start(&gh, &store, &name, &run_id, context.as_ref()).await {
        Err(e) => tracing::warn!(run_id, check_run = %name, error = %e,
            "cannot start the run's check run; the run goes on without it"),
        Ok(()) => complete_if_ended(&gh, &name, &store, &run_id).await,
    }
}

/// After [`start`]: when the run ended meanwhile (a push superseded it as its job began), the
/// outbox's completion may have looked for the check run before it existed — complete it now.
/// Whichever comes second, this or the outbox's, completes it: this reads the run after its
/// check run was made, the outbox's completion looks after the run ended.
pub async fn complete_if_ended(gh: &GithubAccess, name: &str, store: &Store, run_id: &str) {
    let ended = match store.run(run_id).await {
        Ok(Some(run)) if run.status.is_terminal() => run,
        _ => return,
    };
    if let Err(e) = complete(gh, store, name, &ended).await {
        tracing::warn!(run_id, check_run = %name, error = %e,
            "the run ended while its check run was made, and completing it failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_end_has_a_conclusion_github_accepts() {
        let accepted = [
            "success",
            "failure",
            "neutral",
            "cancelled",
            "timed_out",
            "action_required",
            "skipped",
        ];
        for status in [
            RunStatus::Succeeded,
            RunStatus::Failed,
            RunStatus::Cancelled,
            RunStatus::Superseded,
            RunStatus::BudgetExhausted,
            RunStatus::MaxRounds,
        ] {
            let (conclusion, title) = conclusion_for(status);
            assert!(accepted.contains(&conclusion), "{status}: {conclusion}");
            assert!(!title.is_empty());
        }
        assert_eq!(conclusion_for(RunStatus::Superseded).0, "cancelled");
        assert_eq!(conclusion_for(RunStatus::Failed).0, "failure");
    }

    #[test]
    fn only_a_pull_request_context_names_a_commit() {
        let sha = "a".repeat(40);
        let pr = json!({"github": {"repo": "o/r", "number": 1, "head_sha": sha,
                                   "installation_id": 7}});
        assert_eq!(
            pull_request_of(Some(&pr)),
            Some(("o/r", sha.as_str(), Some(7)))
        );
        for (repo, sha) in [
            ("o/r", "abc"),
            ("o/../x", "a".repeat(40).as_str()),
            ("o/r?x", "a"),
        ] {
            let bad = json!({"github": {"repo": repo, "head_sha": sha}});
            assert_eq!(pull_request_of(Some(&bad)), None, "{repo} {sha}");
        }
        assert_eq!(
            pull_request_of(Some(&json!({"github": {"repo": "o/r"}}))),
            None
        );
        assert_eq!(pull_request_of(None), None);
    }
}
