//! `github_pull_requests`: a repository's pull requests — open, closed, merged, or all —
//! optionally only those merged (or updated) since a date, through GitHub's search
//! (`GET /search/issues?q=repo:OWNER/NAME is:pr …`, newest first, `Link` pages followed up to
//! the limit). `read_only`.
//!
//! The query is built from checked fields only (a repository name, one of four states, a
//! date), so the model cannot widen it to other repositories or inject qualifiers.

use futures::future::BoxFuture;
use nightshift_github::Auth;
use serde::Deserialize;
use serde_json::{Value, json};

use super::super::parse_input;
use super::{allowed_repo, repo_schema, with_token};
use crate::context::ToolContext;
use crate::{Tool, ToolClass, ToolDefinition, ToolOutput};

/// The most pull requests one call lists.
const MAX_LIMIT: usize = 300;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListInput {
    repo: String,
    #[serde(default = "open")]
    state: String,
    since: Option<String>,
    limit: Option<usize>,
}

fn open() -> String {
    "open".into()
}

/// `github_pull_requests`
#[derive(Debug, Default)]
pub struct PullRequests;

impl Tool for PullRequests {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: "github_pull_requests".into(),
            description: "Lists a GitHub repository's pull requests, newest first: open, \
                closed, merged or all, optionally only those merged (state merged) or updated \
                (other states) since a date. Each with number, title, author, state, dates and \
                URL."
                .into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "repo": repo_schema(),
                    "state": {"type": "string", "enum": ["open", "closed", "merged", "all"],
                              "description": "Which pull requests (default open)."},
                    "since": {"type": "string",
                              "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}(T[0-9]{2}:[0-9]{2}(:[0-9]{2})?(Z|[+-][0-9]{2}:[0-9]{2}))?$",
                              "description": "A date (2026-12-02) or time (2026-12-02T00:00:00Z)."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT,
                              "description": "The most to list (default 100)."}
                },
                "required": ["repo"],
                "additionalProperties": false
            }),
            class: ToolClass::ReadOnly,
        }
    }

    fn call<'a>(&'a self, ctx: &'a ToolContext, input: Value) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move { run(ctx, input).await.unwrap_or_else(|e| e) })
    }
}

/// The search query for `input` (checked), or what is wrong with it.
fn query(repo: &str, state: &str, since: Option<&str>) -> Result<String, ToolOutput> {
    let mut q = format!("repo:{repo} is:pr");
    let when = match state {
        "open" => {
            q.push_str(" is:open");
            "updated"
        }
        "closed" => {
            q.push_str(" is:closed");
            "updated"
        }
        "merged" => {
            q.push_str(" is:merged");
            "merged"
        }
        "all" => "updated",
        other => {
            return Err(ToolOutput::error(format!(
                "state {other:?} is not one of open, closed, merged or all"
            )));
        }
    };
    if let Some(since) = since {
        let ok = !since.is_empty()
            && since
                .bytes()
                .all(|b| b.is_ascii_digit() || b"-:TZ+".contains(&b));
        if !ok {
            return Err(ToolOutput::error(format!(
                "since {since:?} is not a date like 2026-12-02 or a time like \
                 2026-12-02T00:00:00Z"
            )));
        }
        q.push_str(&format!(" {when}:>={since}"));
    }
    Ok(q)
}

async fn run(ctx: &ToolContext, input: Value) -> Result<ToolOutput, ToolOutput> {
    let input: ListInput = parse_input("github_pull_requests", input)?;
    let repo = allowed_repo(ctx, &input.repo)?;
    let q = query(repo, &input.state, input.since.as_deref())?;
    let limit = input.limit.unwrap_or(100).clamp(1, MAX_LIMIT);
    let encoded: String = url::form_urlencoded::byte_serialize(q.as_bytes()).collect();
    let path = format!("/search/issues?q={encoded}&sort=updated&order=desc&per_page=100");
    let found = with_token(ctx, repo, |gh, token| {
        let path = path.clone();
        async move {
            let api = gh.api();
            let mut items = Vec::new();
            let mut next = Some(api.url(&path));
            while let Some(url) = next.take() {
                let page = api.page(url, Auth::Bearer(&token)).await?;
                items.extend(page.items);
                if items.len() < limit {
                    next = page.next;
                }
            }
            items.truncate(limit);
            Ok(items)
        }
    })
    .await?;
    let listed: Vec<Value> = found
        .iter()
        .map(|pr| {
            json!({
                "number": pr["number"], "title": pr["title"], "author": pr["user"]["login"],
                "state": pr["state"], "draft": pr["draft"],
                "merged_at": pr["pull_request"]["merged_at"],
                "created_at": pr["created_at"], "updated_at": pr["updated_at"],
                "closed_at": pr["closed_at"], "url": pr["html_url"],
            })
        })
        .collect();
    Ok(ToolOutput::ok(format!(
        "{} pull request(s) ({q}):\n{}",
        listed.len(),
        serde_json::to_string_pretty(&listed).unwrap_or_default()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_built_from_checked_fields_only() {
        assert_eq!(
            query("o/r", "merged", Some("2026-12-02")).unwrap(),
            "repo:o/r is:pr is:merged merged:>=2026-12-02"
        );
        assert_eq!(
            query("o/r", "open", None).unwrap(),
            "repo:o/r is:pr is:open"
        );
        assert_eq!(
            query("o/r", "all", Some("2026-12-02T00:00:00Z")).unwrap(),
            "repo:o/r is:pr updated:>=2026-12-02T00:00:00Z"
        );
        assert!(query("o/r", "draft", None).is_err());
        assert!(query("o/r", "open", Some("2026 repo:other/secret")).is_err());
    }
}
