//! `github_check_run`: the agent's word on the check run the daemon keeps for its run.
//!
//! When an agent has `[agents.github] check_run = "NAME"`, the daemon creates that check run
//! `in_progress` on the head commit of the pull request a run was started for, and completes
//! it when the run ends. This tool lets the model fill it in: a title, a summary, details and
//! annotations on lines of files, and — if it gives one — the conclusion, which completes the
//! check run now (the daemon then leaves it as the model left it).
//!
//! Guarantees: which repository, commit and check run come from the run (its context and its
//! agent's config), never from the model; the call is `idempotent` (it finds the run's check
//! run by the daemon's record or by `external_id` = the run's id and updates it, so running
//! it again after a crash changes nothing more); it creates the check run only while it
//! holds the daemon's claim on making it (`check_claims`), so a create the daemon started
//! that GitHub has not answered yet is never doubled — the model is told to call again;
//! conclusions are limited to those a reviewer may give
//! (`success`, `failure`, `neutral`, `action_required`).

use futures::future::BoxFuture;
use nightshift_github::Auth;
use nightshift_github::check_claims::{self, Made, MakeError};
use nightshift_github::checks::{self, CheckRunKey, cut};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::super::parse_input;
use super::{checked_repo, with_token};
use crate::context::ToolContext;
use crate::{Tool, ToolClass, ToolDefinition, ToolOutput};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckInput {
    title: String,
    summary: String,
    text: Option<String>,
    conclusion: Option<String>,
    #[serde(default)]
    annotations: Vec<Annotation>,
}

/// An annotation on lines of a file, in GitHub's shape.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct Annotation {
    path: String,
    start_line: u64,
    end_line: u64,
    annotation_level: String,
    message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    title: Option<String>,
}

/// Where a call got to.
enum Step {
    /// The check run, as GitHub answered the update.
    Updated(Value),
    /// Another maker holds the claim and GitHub does not list the check run yet.
    BeingMade,
    /// The daemon's record of the claim could not be read or written (the check run may have
    /// been created; the model's output was not written).
    Unrecorded(String),
}

/// The most annotations GitHub takes in one request.
const MAX_ANNOTATIONS: usize = 50;

/// `github_check_run`
#[derive(Debug, Default)]
pub struct CheckRun;

impl Tool for CheckRun {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: "github_check_run".into(),
            description: "Fills in the check run shown on the pull request this run was started \
                for: a title, a summary (Markdown), optional details and annotations on lines \
                of files. Give a conclusion only with your final verdict: it completes the \
                check run."
                .into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "title": {"type": "string", "minLength": 1, "maxLength": 200},
                    "summary": {"type": "string", "minLength": 1, "maxLength": 60000,
                                "description": "What you found, in GitHub Markdown."},
                    "text": {"type": "string", "maxLength": 60000,
                             "description": "Details, in GitHub Markdown."},
                    "conclusion": {"type": "string",
                                   "enum": ["success", "failure", "neutral", "action_required"],
                                   "description": "Your verdict; completes the check run."},
                    "annotations": {
                        "type": "array", "maxItems": MAX_ANNOTATIONS,
                        "items": {
                            "type": "object",
                            "properties": {
                                "path": {"type": "string", "description": "The file, from the repository's root."},
                                "start_line": {"type": "integer", "minimum": 1},
                                "end_line": {"type": "integer", "minimum": 1},
                                "annotation_level": {"type": "string", "enum": ["notice", "warning", "failure"]},
                                "message": {"type": "string", "minLength": 1, "maxLength": 60000},
                                "title": {"type": "string", "maxLength": 255}
                            },
                            "required": ["path", "start_line", "end_line", "annotation_level", "message"],
                            "additionalProperties": false
                        }
                    }
                },
                "required": ["title", "summary"],
                "additionalProperties": false
            }),
            class: ToolClass::Idempotent,
        }
    }

    fn call<'a>(&'a self, ctx: &'a ToolContext, input: Value) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move { run(ctx, input).await.unwrap_or_else(|e| e) })
    }
}

/// The run's repository and head commit, and the agent's check run name.
fn key_parts(ctx: &ToolContext) -> Result<(String, String, String), ToolOutput> {
    let Some(name) = ctx.github_agent().check_run.clone() else {
        return Err(ToolOutput::error(
            "this agent keeps no check run (its [agents.github] check_run is not set); report \
             your findings another way",
        ));
    };
    let gh = ctx.run_context().and_then(|c| c.get("github"));
    let field = |f: &str| gh.and_then(|g| g.get(f)).and_then(Value::as_str);
    match (field("repo"), field("head_sha")) {
        (Some(repo), Some(sha)) => Ok((checked_repo(repo)?.to_string(), sha.to_string(), name)),
        _ => Err(ToolOutput::error(
            "github_check_run fills in the check run of the pull request this run was started \
             for, and this run was not started by a GitHub pull_request delivery",
        )),
    }
}

async fn run(ctx: &ToolContext, input: Value) -> Result<ToolOutput, ToolOutput> {
    let input: CheckInput = parse_input("github_check_run", input)?;
    if let Some(bad) = input.annotations.iter().find(|a| a.end_line < a.start_line) {
        return Err(ToolOutput::error(format!(
            "the annotation on {} ends (line {}) before it starts (line {}); give end_line ≥ \
             start_line",
            bad.path, bad.end_line, bad.start_line
        )));
    }
    let (repo, head_sha, name) = key_parts(ctx)?;
    let mut output = checks::CheckOutput {
        title: input.title.clone(),
        summary: input.summary.clone(),
        text: input.text.clone(),
    }
    .to_json();
    if !input.annotations.is_empty() {
        output["annotations"] = serde_json::to_value(&input.annotations).unwrap_or_default();
    }
    let Some(claims) = ctx.check_run_claims() else {
        return Err(ToolOutput::error(
            "this daemon keeps no record of who makes its check runs, so github_check_run \
             cannot run here; report your findings another way",
        ));
    };
    let run_id = ctx.run_id().to_string();
    let step = with_token(ctx, &repo, |gh, token| {
        let (output, conclusion) = (output.clone(), input.conclusion.clone());
        let (repo, head_sha, name, run_id) = (&repo, &head_sha, &name, &run_id);
        async move {
            let key = CheckRunKey {
                repo,
                head_sha,
                name,
                run_id,
            };
            let auth = Auth::Bearer(&token);
            let started = checks::started_output(run_id, head_sha);
            let existing =
                match check_claims::make_claimed(gh.api(), auth, key, claims, &started).await {
                    Ok(Made::CheckRun(made)) => made,
                    Ok(Made::Recorded(id)) => json!({ "id": id }),
                    Ok(Made::BeingMade) => return Ok(Step::BeingMade),
                    Err(MakeError::Claim(e)) => return Ok(Step::Unrecorded(e.to_string())),
                    Err(MakeError::Github(e)) => return Err(e),
                };
            let (conclusion, repo) = (conclusion.as_deref(), key.repo);
            checks::update_existing(gh.api(), auth, repo, &existing, &output, conclusion)
                .await
                .map(Step::Updated)
        }
    })
    .await?;
    reply(step, &name, input.conclusion.as_deref())
}

/// What the model is told of the check run `name` after `step`.
fn reply(step: Step, name: &str, conclusion: Option<&str>) -> Result<ToolOutput, ToolOutput> {
    let updated = match step {
        Step::Updated(updated) => updated,
        Step::BeingMade => {
            return Err(ToolOutput::error(
                "the check run is still being created (the daemon's create has not been \
                 answered by GitHub yet); nothing was changed — call github_check_run again \
                 in a minute",
            ));
        }
        Step::Unrecorded(e) => {
            return Err(ToolOutput::error(format!(
                "{e}; your title, summary and verdict were not written — call \
                 github_check_run again"
            )));
        }
    };
    let state = match conclusion {
        Some(c) => format!("completed as {c}"),
        None => "updated (the daemon completes it when the run ends)".into(),
    };
    Ok(ToolOutput::ok(format!(
        "check run {:?} {state}: {}",
        cut(name, 100),
        updated["html_url"]
            .as_str()
            .unwrap_or("(no URL in GitHub's answer)")
    )))
}
