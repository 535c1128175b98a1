//! Check runs (GitHub's Checks API) kept for a Nightshift run: one per run and name on the
//! head commit the run was started for, told apart by `external_id` = the run's id.
//!
//! What it guarantees:
//! - **One check run per run, without any storage of ours.** Every operation first looks for
//!   the check run with the run's `external_id` among that commit's check runs of that name
//!   (`GET /repos/{owner}/{repo}/commits/{sha}/check-runs?check_name=…&filter=all`), and
//!   creates one only when there is none. A daemon that dies after creating it, or another
//!   daemon resuming the run, finds the same one.
//! - **A completed check run is final.** [`complete`] leaves a check run that is already
//!   completed (the agent gave its verdict with the `github_check_run` tool) as it is, and
//!   completes every open one of the run (should a start racing the run's end have made a
//!   second).
//! - **A lost answer makes no second check run.** A create whose answer was lost is looked
//!   up by its `external_id` before it is sent again, and an update is repeated as it is
//!   ([`crate::once`]).
//! - Outputs are cut to what GitHub accepts (65,535 characters for a summary or text).
//!
//! Only GitHub Apps can create check runs (with the `checks: write` permission); GitHub
//! refuses a personal token with 403, which callers report as it is.

use reqwest::Method;
use serde_json::{Value, json};

use crate::api::{Api, Auth, GithubError};
use crate::once::{self, Written};

/// The most characters GitHub takes in a check run output's `summary` or `text`.
pub const OUTPUT_CHARS: usize = 65_535;

/// The title of a check run until the run (or its end) says more.
pub const STARTED_TITLE: &str = "Working";

/// The output a check run starts with.
pub fn started_output(run_id: &str, head_sha: &str) -> CheckOutput {
    CheckOutput {
        title: STARTED_TITLE.into(),
        summary: format!("Nightshift run {run_id} is working on {head_sha}."),
        text: None,
    }
}

/// Whether the check run's output is still the one it started with (nobody wrote to it).
pub fn untouched(check_run: &Value) -> bool {
    check_run["output"]["title"].as_str() == Some(STARTED_TITLE)
}

/// Which check run: the run's, by name, on a commit of a repository.
#[derive(Debug, Clone, Copy)]
pub struct CheckRunKey<'a> {
    /// `owner/name`.
    pub repo: &'a str,
    pub head_sha: &'a str,
    /// The check run's name, as configured.
    pub name: &'a str,
    /// The Nightshift run's id (the check run's `external_id`).
    pub run_id: &'a str,
}

/// A check run's `output`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckOutput {
    pub title: String,
    pub summary: String,
    pub text: Option<String>,
}

impl CheckOutput {
    /// GitHub's shape, each text cut to what GitHub accepts.
    pub fn to_json(&self) -> Value {
        let mut out = json!({
            "title": cut(&self.title, 1000),
            "summary": cut(&self.summary, OUTPUT_CHARS),
        });
        if let Some(text) = &self.text {
            out["text"] = Value::String(cut(text, OUTPUT_CHARS));
        }
        out
    }
}

/// `text` cut to `max` characters, ending in `…` when cut.
pub fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// What [`complete`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum Completion {
    /// The check run was completed now (created completed when it did not exist).
    Completed(Value),
    /// It was already completed; it was left as it was.
    AlreadyCompleted(Value),
}

/// The run's check runs (one, unless a race made two), the open ones first.
pub async fn find_all(
    api: &Api,
    auth: Auth<'_>,
    key: CheckRunKey<'_>,
) -> Result<Vec<Value>, GithubError> {
    let name: String = url::form_urlencoded::byte_serialize(key.name.as_bytes()).collect();
    let path = format!(
        "/repos/{}/commits/{}/check-runs?check_name={name}&filter=all&per_page=100",
        key.repo, key.head_sha
    );
    // Every page: a commit may carry more than a page of check runs of one name.
    let mut found: Vec<Value> = api
        .get_all(&path, auth)
        .await?
        .into_iter()
        .filter(|c| c["external_id"].as_str() == Some(key.run_id))
        .collect();
    found.sort_by_key(is_completed);
    Ok(found)
}

/// The run's check run, if it exists (an open one when there is one).
pub async fn find(
    api: &Api,
    auth: Auth<'_>,
    key: CheckRunKey<'_>,
) -> Result<Option<Value>, GithubError> {
    Ok(find_all(api, auth, key).await?.into_iter().next())
}

fn is_completed(check_run: &Value) -> bool {
    check_run["status"].as_str() == Some("completed")
}

/// The run's check run, created `in_progress` with `output` when there is none yet.
pub async fn ensure_started(
    api: &Api,
    auth: Auth<'_>,
    key: CheckRunKey<'_>,
    output: &CheckOutput,
) -> Result<Value, GithubError> {
    if let Some(existing) = find(api, auth, key).await? {
        return Ok(existing);
    }
    let body = json!({
        "name": key.name,
        "head_sha": key.head_sha,
        "external_id": key.run_id,
        "status": "in_progress",
        "started_at": now_rfc3339(),
        "output": output.to_json(),
    });
    create(api, auth, key, &body).await.map(Written::into_inner)
}

/// Creates the run's check run with `body`, looking it up by `external_id` before sending
/// again when an answer is lost.
async fn create(
    api: &Api,
    auth: Auth<'_>,
    key: CheckRunKey<'_>,
    body: &Value,
) -> Result<Written<Value>, GithubError> {
    let path = format!("/repos/{}/check-runs", key.repo);
    once::send_once(
        || api.request(Method::POST, &path, auth, Some(body)),
        || find(api, auth, key),
        api.patience(),
    )
    .await
}

/// Sets the output of `existing` (a check run of `repo`: at least its `id`) and, with a
/// `conclusion`, completes it.
pub async fn update_existing(
    api: &Api,
    auth: Auth<'_>,
    repo: &str,
    existing: &Value,
    output: &Value,
    conclusion: Option<&str>,
) -> Result<Value, GithubError> {
    let mut body = json!({ "output": output });
    if let Some(conclusion) = conclusion {
        body["status"] = json!("completed");
        body["conclusion"] = json!(conclusion);
        body["completed_at"] = json!(now_rfc3339());
    }
    patch(api, auth, repo, existing, &body).await
}

/// Completes the run's check run with `conclusion` — every open one, should a race have made
/// two — creating it completed when the run never made one; a completed one is left alone.
/// Its output is what `output_for` makes of the check run found (`None`: GitHub keeps the
/// output it has).
pub async fn complete(
    api: &Api,
    auth: Auth<'_>,
    key: CheckRunKey<'_>,
    conclusion: &str,
    output_for: impl Fn(Option<&Value>) -> Option<CheckOutput>,
) -> Result<Completion, GithubError> {
    let found = find_all(api, auth, key).await?;
    let body_for = |existing: Option<&Value>| {
        let mut body = json!({
            "status": "completed",
            "conclusion": conclusion,
            "completed_at": now_rfc3339(),
        });
        if let Some(output) = output_for(existing) {
            body["output"] = output.to_json();
        }
        body
    };
    if found.is_empty() {
        let mut body = body_for(None);
        body["name"] = json!(key.name);
        body["head_sha"] = json!(key.head_sha);
        body["external_id"] = json!(key.run_id);
        return match create(api, auth, key, &body).await? {
            Written::Sent(made) => Ok(Completion::Completed(made)),
            // A lost answer, and the look found a check run of the run: completed (this
            // create's), or open (a start's that raced it), which is completed now.
            Written::FoundAfterLostAnswer(made) if is_completed(&made) => {
                Ok(Completion::Completed(made))
            }
            Written::FoundAfterLostAnswer(open) => {
                let body = body_for(Some(&open));
                patch(api, auth, key.repo, &open, &body)
                    .await
                    .map(Completion::Completed)
            }
        };
    }
    let mut done = None;
    for open in found.iter().filter(|c| !is_completed(c)) {
        done = Some(patch(api, auth, key.repo, open, &body_for(Some(open))).await?);
    }
    Ok(match done {
        Some(last) => Completion::Completed(last),
        None => Completion::AlreadyCompleted(found[0].clone()),
    })
}

async fn patch(
    api: &Api,
    auth: Auth<'_>,
    repo: &str,
    existing: &Value,
    body: &Value,
) -> Result<Value, GithubError> {
    let id = existing["id"].as_u64().ok_or_else(|| GithubError::Decode {
        method: Method::GET,
        path: format!("/repos/{repo}/commits/…/check-runs"),
        reason: "a check run without an id".into(),
    })?;
    let path = format!("/repos/{repo}/check-runs/{id}");
    once::send_idempotent(
        || api.request(Method::PATCH, &path, auth, Some(body)),
        api.patience(),
    )
    .await
}

fn now_rfc3339() -> String {
    chrono::DateTime::<chrono::Utc>::from(std::time::SystemTime::now())
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_are_cut_to_what_github_takes() {
        let long = "é".repeat(OUTPUT_CHARS + 10);
        let out = CheckOutput {
            title: "t".into(),
            summary: long.clone(),
            text: Some(long),
        }
        .to_json();
        let summary = out["summary"].as_str().unwrap();
        assert_eq!(summary.chars().count(), OUTPUT_CHARS);
        assert!(summary.ends_with('…'));
        assert_eq!(out["text"].as_str().unwrap().chars().count(), OUTPUT_CHARS);
        assert_eq!(cut("short", 10), "short");
    }
}
