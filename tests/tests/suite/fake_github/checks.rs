//! Check runs: listed for a commit, created and updated, each checked as GitHub checks it
//! (a known status, a known conclusion exactly when completed, an output with a title and a
//! summary) and refused with GitHub's 422 otherwise.

use axum::Json;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::auth::refused;
use super::{REPO, Shared, answer_stored, github_error, unavailable};

/// The conclusions GitHub accepts from an App.
const CONCLUSIONS: [&str; 7] = [
    "action_required",
    "cancelled",
    "failure",
    "neutral",
    "success",
    "skipped",
    "timed_out",
];

/// A check run's fields checked as GitHub does: a known status, and a known conclusion exactly
/// when completed. `Some` is GitHub's 422.
fn invalid_check_run(run: &Value) -> Option<Response> {
    let status = run["status"].as_str().unwrap_or("queued");
    let conclusion = run["conclusion"].as_str();
    let bad = !["queued", "in_progress", "completed"].contains(&status)
        || conclusion.is_some_and(|c| !CONCLUSIONS.contains(&c))
        || (status == "completed") != conclusion.is_some()
        || run["output"]
            .as_object()
            .is_some_and(|o| !o.contains_key("title") || !o.contains_key("summary"));
    bad.then(|| {
        github_error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid request.\n\nFor 'properties/conclusion', nil is not one of the allowed \
             values when status is completed.",
        )
    })
}

#[derive(serde::Deserialize)]
pub(super) struct CheckRunQuery {
    check_name: Option<String>,
}

/// `GET /repos/{owner}/{repo}/commits/{ref}/check-runs`: `{total_count, check_runs}`.
pub(super) async fn list_check_runs(
    State(seen): State<Shared>,
    axum::extract::Path(sha): axum::extract::Path<String>,
    headers: HeaderMap,
    Query(q): Query<CheckRunQuery>,
) -> Response {
    if let Some(e) = refused(&seen, &headers, "list check runs").or_else(|| unavailable(&seen)) {
        return e;
    }
    let runs: Vec<Value> = seen
        .lock()
        .unwrap()
        .check_runs
        .iter()
        .filter(|c| c["head_sha"] == json!(sha))
        .filter(|c| q.check_name.as_ref().is_none_or(|n| c["name"] == json!(n)))
        .cloned()
        .collect();
    Json(json!({"total_count": runs.len(), "check_runs": runs})).into_response()
}

/// `POST /repos/{owner}/{repo}/check-runs`: 201 with the check run.
pub(super) async fn create_check_run(
    State(seen): State<Shared>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    if let Some(e) = refused(&seen, &headers, "create check run") {
        return e;
    }
    if !body["name"].is_string() || !body["head_sha"].is_string() {
        return github_error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid request.\n\n\"name\", \"head_sha\" weren't supplied.",
        );
    }
    if let Some(e) = invalid_check_run(&body) {
        return e;
    }
    let slow = {
        let mut s = seen.lock().unwrap();
        (s.slow_check_run_creates > 0).then(|| {
            s.slow_check_run_creates -= 1;
            s.late_by
        })
    };
    if let Some(slow) = slow {
        tokio::time::sleep(slow).await;
    }
    let run = {
        let mut s = seen.lock().unwrap();
        s.check_run_writes.push(body.clone());
        let id = 4000 + s.check_runs.len() as u64;
        let run = json!({
            "id": id, "node_id": "CR_kwDOABCD", "head_sha": body["head_sha"],
            "external_id": body["external_id"].as_str().unwrap_or(""),
            "url": format!("https://api.github.com/repos/{REPO}/check-runs/{id}"),
            "html_url": format!("https://github.com/{REPO}/runs/{id}"),
            "details_url": body["details_url"],
            "status": body["status"].as_str().unwrap_or("queued"),
            "conclusion": body["conclusion"], "started_at": body["started_at"],
            "completed_at": body["completed_at"],
            "output": check_output(&body["output"]),
            "name": body["name"], "check_suite": {"id": 5},
            "app": {"id": 424242, "slug": "review-bot", "name": "review-bot"},
            "pull_requests": [],
        });
        s.check_runs.push(run.clone());
        run
    };
    answer_stored(&seen, (StatusCode::CREATED, Json(run)).into_response()).await
}

/// A check run's `output` as GitHub shows it (annotations counted, not listed).
fn check_output(output: &Value) -> Value {
    json!({"title": output["title"], "summary": output["summary"], "text": output["text"],
           "annotations_count": output["annotations"].as_array().map_or(0, Vec::len),
           "annotations_url": "https://api.github.com/repos/o/r/check-runs/1/annotations"})
}

/// `PATCH /repos/{owner}/{repo}/check-runs/{id}`.
pub(super) async fn update_check_run(
    State(seen): State<Shared>,
    axum::extract::Path(id): axum::extract::Path<u64>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    if let Some(e) = refused(&seen, &headers, "update check run") {
        return e;
    }
    let mut s = seen.lock().unwrap();
    s.check_run_writes.push(body.clone());
    let Some(run) = s.check_runs.iter_mut().find(|c| c["id"] == json!(id)) else {
        return github_error(StatusCode::NOT_FOUND, "Not Found");
    };
    let mut next = run.clone();
    for key in ["status", "conclusion", "completed_at", "details_url"] {
        if !body[key].is_null() {
            next[key] = body[key].clone();
        }
    }
    if !body["output"].is_null() {
        next["output"] = check_output(&body["output"]);
    }
    if let Some(e) = invalid_check_run(&next) {
        return e;
    }
    *run = next.clone();
    Json(next).into_response()
}
