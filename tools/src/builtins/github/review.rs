//! `github_review`: a pull request review pinned to the head commit the run was started for.
//!
//! Guarantees:
//! - **Which pull request and commit come from the run, not the model**: the run's context
//!   (written at enqueue from the GitHub delivery) names the repository, the number and the
//!   head SHA; a run without them is refused, and the review's `commit_id` is that SHA.
//! - **Fenced twice**: the loop starts it only while the run is neither cancelled nor
//!   superseded (the guarded write of every non-read-only call), and the tool refuses when
//!   the pull request's head is no longer that SHA (a newer push: a newer run reviews it).
//! - **Posted once, also across a crash**: the review carries a hidden marker with the run
//!   and the call's idempotency key; the tool looks for a review with its marker before it
//!   posts, so running it again after a crash (it is `idempotent`) answers with the review
//!   already there instead of posting a second or leaving the outcome unknown. A POST whose
//!   answer is lost (a timeout after sending, a 5xx) is looked up by the marker before it is
//!   sent again; one still unknown is `unresolved`, and the call is run again later.
//! - **Only the events allowed**: the agent's `[agents.github] review_events`, else the
//!   daemon's `github.review_events` (default `COMMENT`): a model told by a pull request to
//!   approve it cannot, unless the operator allowed it.

use futures::future::BoxFuture;
use nightshift_github::Auth;
use nightshift_github::once::{self, Written};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::super::parse_input;
use super::{access, checked_repo, marked, with_marker, with_token};
use crate::context::ToolContext;
use crate::{Tool, ToolClass, ToolDefinition, ToolOutput};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReviewInput {
    #[serde(default = "comment_event")]
    event: String,
    body: String,
    #[serde(default)]
    comments: Vec<InlineComment>,
}

fn comment_event() -> String {
    "COMMENT".into()
}

/// A comment on a line of the diff, in GitHub's shape.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct InlineComment {
    path: String,
    line: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    side: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    start_line: Option<u64>,
    body: String,
}

/// The pull request and commit the run was started for.
struct Target {
    repo: String,
    number: u64,
    head_sha: String,
}

fn target(ctx: &ToolContext) -> Result<Target, ToolOutput> {
    let gh = ctx.run_context().and_then(|c| c.get("github"));
    let field = |name: &str| gh.and_then(|g| g.get(name));
    match (
        field("repo").and_then(Value::as_str),
        field("number").and_then(Value::as_u64),
        field("head_sha").and_then(Value::as_str),
    ) {
        (Some(repo), Some(number), Some(sha)) => Ok(Target {
            repo: checked_repo(repo)?.to_string(),
            number,
            head_sha: sha.to_string(),
        }),
        _ => Err(ToolOutput::error(
            "github_review reviews the pull request this run was started for, and this run was \
             not started by a GitHub pull_request delivery (its context has no repository, \
             number and head commit); report your findings another way",
        )),
    }
}

/// What posting found.
enum Posted {
    New(Value),
    /// Posted by this call, whose answer was lost: found by its marker.
    Recovered(Value),
    Already(Value),
    HeadMoved(String),
}

/// `github_review`
#[derive(Debug, Default)]
pub struct Review;

impl Tool for Review {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: "github_review".into(),
            description: "Posts your review of the pull request this run was started for, on \
                the commit it was started for: a summary and optional comments on lines of the \
                diff. Post it once, at the end."
                .into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "event": {"type": "string", "enum": ["COMMENT", "REQUEST_CHANGES", "APPROVE"],
                              "description": "The verdict (default COMMENT); the daemon may allow only some."},
                    "body": {"type": "string", "minLength": 1, "maxLength": 60000,
                             "description": "The review's summary, in GitHub Markdown."},
                    "comments": {
                        "type": "array", "maxItems": 100,
                        "items": {
                            "type": "object",
                            "properties": {
                                "path": {"type": "string", "description": "The file, as in the diff."},
                                "line": {"type": "integer", "minimum": 1,
                                         "description": "The line in the diff's new (RIGHT) or old (LEFT) file."},
                                "side": {"type": "string", "enum": ["LEFT", "RIGHT"]},
                                "start_line": {"type": "integer", "minimum": 1,
                                               "description": "First line of a multi-line comment."},
                                "body": {"type": "string", "minLength": 1}
                            },
                            "required": ["path", "line", "body"],
                            "additionalProperties": false
                        }
                    }
                },
                "required": ["body"],
                "additionalProperties": false
            }),
            class: ToolClass::Idempotent,
        }
    }

    fn call<'a>(&'a self, ctx: &'a ToolContext, input: Value) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move { run(ctx, input).await.unwrap_or_else(|e| e) })
    }
}

async fn run(ctx: &ToolContext, input: Value) -> Result<ToolOutput, ToolOutput> {
    let input: ReviewInput = parse_input("github_review", input)?;
    check_event(ctx, &input.event)?;
    let t = target(ctx)?;
    let mark = super::marker(
        access(ctx)?,
        "review",
        &format!("run={} call={}", ctx.run_id(), ctx.idempotency_key()),
    );
    let body = with_marker(&input.body, &mark);
    let pull = format!("/repos/{}/pulls/{}", t.repo, t.number);
    let comments = serde_json::to_value(&input.comments).unwrap_or(Value::Array(Vec::new()));
    let posted = with_token(ctx, &t.repo, |gh, token| {
        let (pull, body, mark, event, comments) = (
            pull.clone(),
            body.clone(),
            mark.clone(),
            input.event.clone(),
            comments.clone(),
        );
        let head_sha = t.head_sha.clone();
        async move {
            let auth = Auth::Bearer(&token);
            let api = gh.api();
            let reviews = format!("{pull}/reviews?per_page=100");
            let look = || async { Ok(marked(api.get_all(&reviews, auth).await?, &mark)) };
            if let Some(mine) = look().await? {
                return Ok(Posted::Already(mine));
            }
            let current = api.request(reqwest::Method::GET, &pull, auth, None).await?;
            let head = current["head"]["sha"].as_str().unwrap_or_default();
            if head != head_sha {
                return Ok(Posted::HeadMoved(head.to_string()));
            }
            let review = json!({"commit_id": head_sha, "body": body, "event": event,
                                "comments": comments});
            let path = format!("{pull}/reviews");
            let posted = once::send_once(
                || api.request(reqwest::Method::POST, &path, auth, Some(&review)),
                look,
                api.patience(),
            )
            .await?;
            Ok(match posted {
                Written::Sent(r) => Posted::New(r),
                Written::FoundAfterLostAnswer(r) => Posted::Recovered(r),
            })
        }
    })
    .await?;
    Ok(reply(posted, &t.head_sha))
}

/// Whether the agent (or else the daemon) allows reviews of kind `event`; `Err` says which
/// are allowed and by what key.
fn check_event(ctx: &ToolContext, event: &str) -> Result<(), ToolOutput> {
    let (allowed, key) = match &ctx.github_agent().review_events {
        Some(own) => (own.as_slice(), "the agent's github.review_events"),
        None => (
            access(ctx)?.review_events(),
            "the daemon's github.review_events",
        ),
    };
    if allowed.iter().any(|e| e == event) {
        return Ok(());
    }
    let allowed = if allowed.is_empty() {
        "no".to_string()
    } else {
        allowed.join(" or ")
    };
    Err(ToolOutput::error(format!(
        "only {allowed} reviews are allowed ({key}), not {event}; post your review as one of \
         those, or report your findings another way"
    )))
}

/// What the model is told of the review of the head `head_sha`.
fn reply(posted: Posted, head_sha: &str) -> ToolOutput {
    match posted {
        Posted::New(r) => posted_output(&r, head_sha, ""),
        Posted::Recovered(r) => posted_output(
            &r,
            head_sha,
            "; GitHub's answer was lost, the review was found by its marker",
        ),
        Posted::Already(r) => ToolOutput::ok(format!(
            "review {} was already posted by this call (before a restart): {}",
            r["id"],
            r["html_url"]
                .as_str()
                .unwrap_or("(no URL in GitHub's answer)")
        )),
        Posted::HeadMoved(head) => ToolOutput::error(format!(
            "the review was not posted: the pull request's head is now {head}, not {head_sha} \
             that this run reviewed; a newer run reviews the new head"
        )),
    }
}

/// What the model is told about a review this call posted (`note` after its state).
fn posted_output(review: &Value, head_sha: &str, note: &str) -> ToolOutput {
    ToolOutput::ok(format!(
        "review {} posted on {head_sha} ({}{note}): {}",
        review["id"],
        review["state"].as_str().unwrap_or("submitted"),
        review["html_url"]
            .as_str()
            .unwrap_or("(no URL in GitHub's answer)")
    ))
}
