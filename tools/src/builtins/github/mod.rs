//! The GitHub tools: `github_pull_request` (metadata, head and base SHA), `github_pr_files`
//! (every changed file, all pages), `github_pr_diff` (the unified diff) and `github_file` (a
//! file's contents at a ref), all `read_only`; and `github_comment`, an issue or pull request
//! comment that is `idempotent` through a hidden marker: the call looks for the comment
//! carrying its marker first and updates it in place, so a call run again after a crash (or
//! a `sticky` comment written by every run) never makes a second comment.
//!
//! Guarantees: the credentials are the daemon's ([`nightshift_github::GithubAccess`]: the
//! installation token of the App installed on the repository, else the personal token);
//! no token ever reaches the model — inputs name only a repository, a number, a path and a
//! ref, each checked and percent-encoded, so the model cannot point a request anywhere but
//! the configured API; a write whose answer is lost is looked up by its marker before it is
//! sent again ([`nightshift_github::once`]), and one still unknown is answered `unresolved`
//! (the loop runs the call again later under the same key); GitHub's refusals (404, 401, 422, rate limits it would not lift) are
//! `is_error` outputs carrying GitHub's message and what to do; a refused token is dropped
//! and the call tried once more with a fresh one; long outputs are cut by the registry with
//! the whole kept as an artifact.

use futures::future::BoxFuture;
use nightshift_github::{Auth, GithubAccess, GithubError, Secret, once};
use serde::Deserialize;
use serde_json::{Value, json};

use super::parse_input;
use crate::context::ToolContext;
use crate::{Tool, ToolClass, ToolDefinition, ToolOutput};

/// The most characters of a pull request's body `github_pull_request` shows.
const BODY_CHARS: usize = 4000;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PullInput {
    repo: String,
    number: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileInput {
    repo: String,
    path: String,
    #[serde(rename = "ref")]
    git_ref: Option<String>,
}

pub(super) fn repo_schema() -> Value {
    json!({"type": "string", "description": "The repository, as owner/name.",
           "pattern": "^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$"})
}

fn pull_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "repo": repo_schema(),
            "number": {"type": "integer", "minimum": 1, "description": "The pull request's number."}
        },
        "required": ["repo", "number"],
        "additionalProperties": false
    })
}

/// `owner/name` checked: two segments of letters, digits, `-`, `_` and `.`, neither `.` nor
/// `..`.
pub(super) fn checked_repo(repo: &str) -> Result<&str, ToolOutput> {
    if nightshift_github::is_repo_name(repo) {
        Ok(repo)
    } else {
        Err(ToolOutput::error(format!(
            "repo {repo:?} is not owner/name (letters, digits, '-', '_' and '.'), like \
             octocat/hello-world"
        )))
    }
}

/// `text` percent-encoded but for RFC 3986's unreserved characters (and `/` when `slashes`).
fn encode(text: &str, slashes: bool) -> String {
    let mut out = String::new();
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) || (slashes && b == b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A file path inside the repository, checked (relative, no `.` or `..` segment) and encoded.
fn checked_path(path: &str) -> Result<String, ToolOutput> {
    let bad = path.is_empty()
        || path.starts_with('/')
        || path
            .split('/')
            .any(|s| s.is_empty() || s == "." || s == "..")
        || path.chars().any(char::is_control);
    if bad {
        return Err(ToolOutput::error(format!(
            "path {path:?} is not a file path inside the repository; write it relative to the \
             repository's root, like src/main.rs"
        )));
    }
    Ok(encode(path, true))
}

/// The daemon's GitHub, or the error output saying it is not configured.
pub(super) fn access(ctx: &ToolContext) -> Result<&GithubAccess, ToolOutput> {
    ctx.github().ok_or_else(|| {
        ToolOutput::error(
            "GitHub is not configured on this daemon (no [github] section); ask the operator \
             to add a GitHub App or token",
        )
    })
}

/// What the model is told about a failed request. A write whose outcome stays unknown after
/// looking is not a failure: the call is [`ToolOutput::unresolved`], and the loop runs it
/// again later under the same key (its marker or `external_id` finds what it made).
pub(super) fn refusal(e: &GithubError) -> ToolOutput {
    if e.is_ambiguous() {
        return ToolOutput::unresolved(format!(
            "{e}. The call will be run again later under the same key, which finds what it \
             made instead of making a second one."
        ));
    }
    let hint = match e {
        GithubError::Status { status: 404, .. } => {
            " (the repository, pull request or file does not exist, or the credentials cannot \
             see it: check the names)"
        }
        GithubError::Status {
            status: 401 | 403, ..
        } => " (the credentials were refused: the App may lack a permission on this repository)",
        GithubError::Status { status: 422, .. } => " (GitHub refused the request as invalid)",
        _ => "",
    };
    ToolOutput::error(format!("{e}{hint}"))
}

/// Runs `request` with the token for `repo`; a refused token (401) is dropped and the
/// request tried once more with a fresh one. Honours cancellation.
pub(super) async fn with_token<'a, T, F, Fut>(
    ctx: &'a ToolContext,
    repo: &str,
    request: F,
) -> Result<T, ToolOutput>
where
    F: Fn(&'a GithubAccess, Secret) -> Fut,
    Fut: std::future::Future<Output = Result<T, GithubError>> + 'a,
{
    let gh = access(ctx)?;
    // The installation the run's delivery named, for that delivery's repository.
    let github = ctx.run_context().and_then(|c| c.get("github"));
    let installation = github
        .filter(|g| {
            g["repo"]
                .as_str()
                .is_some_and(|r| r.eq_ignore_ascii_case(repo))
        })
        .and_then(|g| g["installation_id"].as_u64());
    let attempt = async {
        match request(gh, gh.token_for_delivery(repo, installation).await?).await {
            Err(GithubError::Status { status: 401, .. }) => {
                gh.forget(repo).await;
                request(gh, gh.token_for(repo).await?).await
            }
            done => done,
        }
    };
    tokio::select! {
        () = ctx.cancel().cancelled() => Err(ToolOutput::error("cancelled")),
        done = attempt => done.map_err(|e| refusal(&e)),
    }
}

/// A GitHub tool: its definition and a `run` of its own that may end in an error output.
macro_rules! github_tool {
    ($ty:ident, $name:literal, $description:literal, $schema:expr) => {
        github_tool!($ty, $name, $description, $schema, ToolClass::ReadOnly);
    };
    ($ty:ident, $name:literal, $description:literal, $schema:expr, $class:expr) => {
        #[doc = concat!("`", $name, "`: ", $description)]
        #[derive(Debug, Default)]
        pub struct $ty;

        impl Tool for $ty {
            fn definition(&self) -> ToolDefinition {
                ToolDefinition {
                    name: $name.into(),
                    description: $description.into(),
                    input_schema: $schema,
                    class: $class,
                }
            }

            fn call<'a>(&'a self, ctx: &'a ToolContext, input: Value) -> BoxFuture<'a, ToolOutput> {
                Box::pin(async move { self.run(ctx, input).await.unwrap_or_else(|e| e) })
            }
        }
    };
}

github_tool!(
    PullRequest,
    "github_pull_request",
    "A GitHub pull request: title, state, author, head and base (ref and commit SHA), size and \
     description.",
    pull_schema()
);

impl PullRequest {
    async fn run(&self, ctx: &ToolContext, input: Value) -> Result<ToolOutput, ToolOutput> {
        let input: PullInput = parse_input("github_pull_request", input)?;
        let repo = allowed_repo(ctx, &input.repo)?;
        let path = format!("/repos/{repo}/pulls/{}", input.number);
        let pr = with_token(ctx, repo, |gh, token| {
            let path = path.clone();
            async move {
                gh.api()
                    .request(reqwest::Method::GET, &path, Auth::Bearer(&token), None)
                    .await
            }
        })
        .await?;
        let body: String = pr["body"]
            .as_str()
            .unwrap_or_default()
            .chars()
            .take(BODY_CHARS)
            .collect();
        let summary = json!({
            "number": pr["number"], "title": pr["title"], "state": pr["state"],
            "draft": pr["draft"], "merged": pr["merged"], "author": pr["user"]["login"],
            "head": {"ref": pr["head"]["ref"], "sha": pr["head"]["sha"],
                     "repo": pr["head"]["repo"]["full_name"]},
            "base": {"ref": pr["base"]["ref"], "sha": pr["base"]["sha"]},
            "commits": pr["commits"], "changed_files": pr["changed_files"],
            "additions": pr["additions"], "deletions": pr["deletions"],
            "url": pr["html_url"], "body": body,
        });
        Ok(ToolOutput::ok(
            serde_json::to_string_pretty(&summary).unwrap_or_default(),
        ))
    }
}

github_tool!(
    PrFiles,
    "github_pr_files",
    "Every file a GitHub pull request changes: name, status, additions, deletions and the \
     patch of each (all pages).",
    pull_schema()
);

impl PrFiles {
    async fn run(&self, ctx: &ToolContext, input: Value) -> Result<ToolOutput, ToolOutput> {
        let input: PullInput = parse_input("github_pr_files", input)?;
        let repo = allowed_repo(ctx, &input.repo)?;
        let path = format!("/repos/{repo}/pulls/{}/files?per_page=100", input.number);
        let files = with_token(ctx, repo, |gh, token| {
            let path = path.clone();
            async move { gh.api().get_all(&path, Auth::Bearer(&token)).await }
        })
        .await?;
        let files: Vec<Value> = files
            .iter()
            .map(|f| {
                json!({"filename": f["filename"], "status": f["status"],
                       "previous_filename": f["previous_filename"],
                       "additions": f["additions"], "deletions": f["deletions"],
                       "patch": f["patch"]})
            })
            .collect();
        Ok(ToolOutput::ok(
            serde_json::to_string_pretty(&files).unwrap_or_default(),
        ))
    }
}

github_tool!(
    PrDiff,
    "github_pr_diff",
    "The unified diff of a GitHub pull request (long diffs are cut, the whole kept as an \
     artifact).",
    pull_schema()
);

impl PrDiff {
    async fn run(&self, ctx: &ToolContext, input: Value) -> Result<ToolOutput, ToolOutput> {
        let input: PullInput = parse_input("github_pr_diff", input)?;
        let repo = allowed_repo(ctx, &input.repo)?;
        let path = format!("/repos/{repo}/pulls/{}", input.number);
        let diff = with_token(ctx, repo, |gh, token| {
            let path = path.clone();
            async move {
                gh.api()
                    .raw(&path, "application/vnd.github.diff", Auth::Bearer(&token))
                    .await
            }
        })
        .await?;
        Ok(ToolOutput::ok(diff))
    }
}

github_tool!(
    File,
    "github_file",
    "A file's contents in a GitHub repository, at a branch, tag or commit SHA (default: the \
     default branch).",
    json!({
        "type": "object",
        "properties": {
            "repo": repo_schema(),
            "path": {"type": "string", "description": "The file's path from the repository's root."},
            "ref": {"type": "string", "description": "A branch, tag or commit SHA."}
        },
        "required": ["repo", "path"],
        "additionalProperties": false
    })
);

impl File {
    async fn run(&self, ctx: &ToolContext, input: Value) -> Result<ToolOutput, ToolOutput> {
        let input: FileInput = parse_input("github_file", input)?;
        let repo = allowed_repo(ctx, &input.repo)?;
        let mut path = format!("/repos/{repo}/contents/{}", checked_path(&input.path)?);
        if let Some(r) = input.git_ref.as_deref().filter(|r| !r.is_empty()) {
            path.push_str(&format!("?ref={}", encode(r, false)));
        }
        let text = with_token(ctx, repo, |gh, token| {
            let path = path.clone();
            async move {
                gh.api()
                    .raw(
                        &path,
                        "application/vnd.github.raw+json",
                        Auth::Bearer(&token),
                    )
                    .await
            }
        })
        .await?;
        Ok(ToolOutput::ok(text))
    }
}

/// The hidden line that marks a comment as this call's (or this sticky key's), signed with
/// the daemon's credentials so that nobody else can write one the tool would take for its own.
fn marker(gh: &GithubAccess, kind: &str, key: &str) -> String {
    format!(
        "<!-- nightshift:{kind} {key} sig={} -->",
        gh.sign_marker(&format!("{kind} {key}"))
    )
}

/// The item (comment, review) among `items` whose body carries `mark`.
pub(super) fn marked(items: Vec<Value>, mark: &str) -> Option<Value> {
    items
        .into_iter()
        .find(|c| c["body"].as_str().is_some_and(|b| b.contains(mark)))
}

/// How every marker starts.
const MARKER_PREFIX: &str = "<!-- nightshift:";

/// `body` with anything that looks like a marker defused (a model cannot claim another
/// comment's or review's marker), then `mark` on a line of its own.
pub(super) fn with_marker(body: &str, mark: &str) -> String {
    let mut text = body.replace(MARKER_PREFIX, "<!-- (nightshift):");
    text.push_str("\n\n");
    text.push_str(mark);
    text
}

/// The repository a call may touch: a run started by a GitHub delivery may use the GitHub
/// tools only on that delivery's repository (a pull request cannot make the model read a
/// private repository and post what it read); other runs, any the credentials reach.
pub(super) fn allowed_repo<'r>(ctx: &ToolContext, repo: &'r str) -> Result<&'r str, ToolOutput> {
    let repo = checked_repo(repo)?;
    let pinned = ctx
        .run_context()
        .and_then(|c| c.pointer("/github/repo"))
        .and_then(Value::as_str);
    match pinned {
        Some(own) if !own.eq_ignore_ascii_case(repo) => Err(ToolOutput::error(format!(
            "this run was started by a delivery from {own}, so its GitHub tools work on {own} \
             only, not {repo}"
        ))),
        _ => Ok(repo),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CommentInput {
    repo: String,
    number: u64,
    body: String,
    sticky: Option<String>,
}

github_tool!(
    Comment,
    "github_comment",
    "Comments on a GitHub issue or pull request (Markdown). Calling it again after a crash \
     updates the same comment instead of adding one; with `sticky`, every run updates one \
     comment under that name (a status comment kept current).",
    json!({
        "type": "object",
        "properties": {
            "repo": repo_schema(),
            "number": {"type": "integer", "minimum": 1,
                       "description": "The issue's or pull request's number."},
            "body": {"type": "string", "minLength": 1, "maxLength": 60000,
                     "description": "The comment, in GitHub Markdown."},
            "sticky": {"type": "string", "pattern": "^[A-Za-z0-9_.-]{1,64}$",
                       "description": "A name: the comment of that name on this issue is updated instead of adding one."}
        },
        "required": ["repo", "number", "body"],
        "additionalProperties": false
    }),
    ToolClass::Idempotent
);

impl Comment {
    async fn run(&self, ctx: &ToolContext, input: Value) -> Result<ToolOutput, ToolOutput> {
        let input: CommentInput = parse_input("github_comment", input)?;
        let repo = allowed_repo(ctx, &input.repo)?;
        let key = match &input.sticky {
            Some(name) => format!("sticky {name}"),
            None => format!("call {}", ctx.idempotency_key()),
        };
        let mark = marker(access(ctx)?, "comment", &key);
        let body = with_marker(&input.body, &mark);
        let list = format!(
            "/repos/{repo}/issues/{}/comments?per_page=100",
            input.number
        );
        let (verb, comment) = with_token(ctx, repo, |gh, token| {
            let (list, body, mark) = (list.clone(), body.clone(), mark.clone());
            async move {
                let auth = Auth::Bearer(&token);
                let mine = marked(gh.api().get_all(&list, auth).await?, &mark);
                let payload = json!({ "body": body });
                let api = gh.api();
                match mine.and_then(|c| c["id"].as_u64()) {
                    Some(id) => {
                        let path = format!("/repos/{repo}/issues/comments/{id}");
                        let updated = once::send_idempotent(
                            || api.request(reqwest::Method::PATCH, &path, auth, Some(&payload)),
                            api.patience(),
                        )
                        .await?;
                        Ok(("updated", updated))
                    }
                    None => {
                        let path = list.split('?').next().unwrap_or(&list).to_string();
                        let look = || async { Ok(marked(api.get_all(&list, auth).await?, &mark)) };
                        let created = once::send_once(
                            || api.request(reqwest::Method::POST, &path, auth, Some(&payload)),
                            look,
                            api.patience(),
                        )
                        .await?
                        .into_inner();
                        Ok(("created", created))
                    }
                }
            }
        })
        .await?;
        Ok(ToolOutput::ok(format!(
            "comment {} {verb}: {}",
            comment["id"],
            comment["html_url"]
                .as_str()
                .unwrap_or("(no URL in GitHub's answer)")
        )))
    }
}

mod check_run;
mod list;
mod review;

pub(crate) use check_run::CheckRun;
pub(crate) use list::PullRequests;
pub(crate) use review::Review;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repositories_and_paths_are_checked_and_encoded() {
        assert!(checked_repo("octocat/hello-world").is_ok());
        for bad in ["octocat", "a/b/c", "../x", "a/..", "a b/c", "a/b?x=1", "/a"] {
            assert!(checked_repo(bad).is_err(), "{bad}");
        }
        assert_eq!(checked_path("src/main.rs").unwrap(), "src/main.rs");
        assert_eq!(checked_path("docs/a b#c.md").unwrap(), "docs/a%20b%23c.md");
        for bad in ["", "/etc/passwd", "a/../b", "./a", "a//b", "a\n"] {
            assert!(checked_path(bad).is_err(), "{bad:?}");
        }
        assert_eq!(encode("feature/x?y", false), "feature%2Fx%3Fy");
    }
}
