//! The pull request of the webhook fixture: the pull itself, its files (paged), its reviews
//! (listed, and created pinned to a commit), and a file's contents at a ref.

use axum::Json;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::auth::refused;
use super::{REPO, Shared, answer_stored, github_error, pull_request, unavailable};

pub(super) async fn pull(State(seen): State<Shared>, headers: HeaderMap) -> Response {
    if let Some(e) = refused(&seen, &headers, "pull") {
        return e;
    }
    let accept = headers
        .get("accept")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if accept == "application/vnd.github.diff" {
        return (
            [("content-type", "text/plain; charset=utf-8")],
            "diff --git a/src/lib.rs b/src/lib.rs\n--- a/src/lib.rs\n+++ b/src/lib.rs\n\
             @@ -1 +1 @@\n-fn old() {}\n+fn retry_uploads() {}\n",
        )
            .into_response();
    }
    let mut pr = pull_request();
    pr["head"]["sha"] = json!(seen.lock().unwrap().head());
    Json(pr).into_response()
}

pub(super) async fn list_reviews(State(seen): State<Shared>, headers: HeaderMap) -> Response {
    if let Some(e) = refused(&seen, &headers, "list reviews").or_else(|| unavailable(&seen)) {
        return e;
    }
    Json(seen.lock().unwrap().reviews.clone()).into_response()
}

/// `POST …/reviews` as GitHub answers it: 422 for a `commit_id` that is not the head, else
/// the review with its state.
pub(super) async fn create_review(
    State(seen): State<Shared>,
    headers: HeaderMap,
    Json(review): Json<Value>,
) -> Response {
    if let Some(e) = refused(&seen, &headers, "create review") {
        return e;
    }
    let stored = {
        let mut s = seen.lock().unwrap();
        let head = s.head();
        if review["commit_id"] != json!(head) {
            return github_error(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Unprocessable Entity: commit_id is not part of the pull request",
            );
        }
        let id = 80 + s.reviews.len() as u64;
        let state = match review["event"].as_str() {
            Some("APPROVE") => "APPROVED",
            Some("REQUEST_CHANGES") => "CHANGES_REQUESTED",
            _ => "COMMENTED",
        };
        let stored = json!({
            "id": id, "node_id": "PRR_kwDOABCD", "body": review["body"], "state": state,
            "user": {"login": "review-bot[bot]", "type": "Bot"},
            "html_url": format!("https://github.com/{REPO}/pull/42#pullrequestreview-{id}"),
            "pull_request_url": format!("https://api.github.com/repos/{REPO}/pulls/42"),
            "commit_id": review["commit_id"], "submitted_at": "2026-12-03T10:00:00Z",
            "author_association": "NONE",
            "comments_posted": review["comments"].as_array().map_or(0, Vec::len),
        });
        s.reviews.push(stored.clone());
        if let Some(pid) = s.kill_on_review.take() {
            let killed = std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status()
                .expect("run kill");
            assert!(killed.success(), "kill -KILL {pid}");
        }
        stored
    };
    answer_stored(&seen, Json(stored).into_response()).await
}

#[derive(serde::Deserialize)]
pub(super) struct PageQuery {
    page: Option<usize>,
}

pub(super) async fn files(
    State(seen): State<Shared>,
    headers: HeaderMap,
    Query(q): Query<PageQuery>,
) -> Response {
    if let Some(e) = refused(&seen, &headers, "files") {
        return e;
    }
    let page = q.page.unwrap_or(1);
    let file = |name: &str, status: &str| {
        json!({"sha": "bbcd538c8e72b8c175046e27cc8f907076331401", "filename": name,
               "status": status, "additions": 3, "deletions": 1, "changes": 4,
               "blob_url": format!("https://github.com/{REPO}/blob/c48f1b3/{name}"),
               "raw_url": format!("https://github.com/{REPO}/raw/c48f1b3/{name}"),
               "contents_url": format!("https://api.github.com/repos/{REPO}/contents/{name}"),
               "patch": "@@ -1 +1 @@\n-fn old() {}\n+fn retry_uploads() {}"})
    };
    let items = if page == 1 {
        vec![
            file("src/lib.rs", "modified"),
            file("src/upload.rs", "added"),
        ]
    } else {
        vec![file("README.md", "modified")]
    };
    let mut resp = Json(items).into_response();
    if page == 1 {
        let base = headers
            .get("host")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        let link = format!(
            "<http://{base}/repos/{REPO}/pulls/42/files?per_page=100&page=2>; rel=\"next\", \
             <http://{base}/repos/{REPO}/pulls/42/files?per_page=100&page=2>; rel=\"last\""
        );
        resp.headers_mut()
            .insert("link", HeaderValue::from_str(&link).unwrap());
    }
    resp
}

#[derive(serde::Deserialize)]
pub(super) struct RefQuery {
    #[serde(rename = "ref")]
    git_ref: Option<String>,
}

pub(super) async fn contents(
    State(seen): State<Shared>,
    headers: HeaderMap,
    Query(q): Query<RefQuery>,
) -> Response {
    if let Some(e) = refused(&seen, &headers, "contents") {
        return e;
    }
    let head = pull_request()["head"]["sha"].as_str().unwrap().to_string();
    if q.git_ref.as_deref() != Some(head.as_str()) {
        return github_error(StatusCode::NOT_FOUND, "No commit found for the ref");
    }
    "pub fn retry_uploads() {}\n".into_response()
}
