//! Issue comments (listed, created, updated) and the issue search (merged pull requests), as
//! GitHub's REST reference shows them.

use axum::Json;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::auth::refused;
use super::{REPO, Shared, answer_stored, github_error, unavailable};

fn comment_json(id: u64, body: &str) -> Value {
    json!({"id": id, "node_id": "IC_kwDOABCD", "body": body,
           "user": {"login": "review-bot[bot]", "type": "Bot"},
           "html_url": format!("https://github.com/{REPO}/pull/42#issuecomment-{id}"),
           "created_at": "2026-12-03T10:00:00Z", "updated_at": "2026-12-03T10:00:00Z",
           "author_association": "NONE"})
}

pub(super) async fn list_comments(State(seen): State<Shared>, headers: HeaderMap) -> Response {
    if let Some(e) = refused(&seen, &headers, "list comments").or_else(|| unavailable(&seen)) {
        return e;
    }
    let comments = seen.lock().unwrap().comments.clone();
    Json(
        comments
            .iter()
            .map(|(id, body)| comment_json(*id, body))
            .collect::<Vec<_>>(),
    )
    .into_response()
}

#[derive(serde::Deserialize)]
pub(super) struct CommentBody {
    body: String,
}

pub(super) async fn create_comment(
    State(seen): State<Shared>,
    headers: HeaderMap,
    Json(c): Json<CommentBody>,
) -> Response {
    if let Some(e) = refused(&seen, &headers, "create comment") {
        return e;
    }
    let id = {
        let mut s = seen.lock().unwrap();
        let id = 1000 + s.comments.len() as u64;
        s.comments.push((id, c.body.clone()));
        id
    };
    let created = (StatusCode::CREATED, Json(comment_json(id, &c.body))).into_response();
    answer_stored(&seen, created).await
}

pub(super) async fn update_comment(
    State(seen): State<Shared>,
    axum::extract::Path(id): axum::extract::Path<u64>,
    headers: HeaderMap,
    Json(c): Json<CommentBody>,
) -> Response {
    if let Some(e) = refused(&seen, &headers, "update comment") {
        return e;
    }
    let mut s = seen.lock().unwrap();
    match s.comments.iter_mut().find(|(cid, _)| *cid == id) {
        Some(existing) => {
            existing.1 = c.body.clone();
            Json(comment_json(id, &c.body)).into_response()
        }
        None => github_error(StatusCode::NOT_FOUND, "Not Found"),
    }
}

#[derive(serde::Deserialize)]
pub(super) struct SearchQuery {
    q: String,
}

/// `GET /search/issues`: two merged pull requests of the repository for a query naming it
/// and `is:merged`, nothing else.
pub(super) async fn search_issues(
    State(seen): State<Shared>,
    headers: HeaderMap,
    Query(query): Query<SearchQuery>,
) -> Response {
    if let Some(e) = refused(&seen, &headers, "search") {
        return e;
    }
    seen.lock().unwrap().searches.push(query.q.clone());
    let words: Vec<&str> = query.q.split(' ').collect();
    let items: Vec<Value> =
        if words.contains(&format!("repo:{REPO}").as_str()) && words.contains(&"is:merged") {
            [
                (41, "Retry uploads on 503"),
                (40, "Document the upload limits"),
            ]
            .iter()
            .map(|(n, title)| {
                json!({
                    "url": format!("https://api.github.com/repos/{REPO}/issues/{n}"),
                    "html_url": format!("https://github.com/{REPO}/pull/{n}"),
                    "id": 9000 + n, "number": n, "title": title, "state": "closed",
                    "user": {"login": "octocat", "type": "User"}, "draft": false,
                    "created_at": "2026-12-02T08:00:00Z", "updated_at": "2026-12-02T18:00:00Z",
                    "closed_at": "2026-12-02T18:00:00Z", "score": 1.0,
                    "pull_request": {
                        "url": format!("https://api.github.com/repos/{REPO}/pulls/{n}"),
                        "html_url": format!("https://github.com/{REPO}/pull/{n}"),
                        "merged_at": "2026-12-02T18:00:00Z"
                    }
                })
            })
            .collect()
        } else {
            Vec::new()
        };
    Json(json!({"total_count": items.len(), "incomplete_results": false, "items": items}))
        .into_response()
}
