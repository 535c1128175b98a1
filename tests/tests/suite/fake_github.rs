//! A fake GitHub on loopback for the GitHub suites, speaking GitHub's REST shapes (the pull
//! request is the one of the `pull_request` webhook fixture; files, reviews, comments, check
//! runs, search results and errors as GitHub's REST reference shows them) and checking
//! credentials as GitHub does: the App JWT (RS256, verified with the App's public key) for the
//! repository's installation and the token exchange, the installation token for the rest.
//! What it was asked and what it stores are in [`Seen`] for the tests to assert on.

use std::path::Path;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

pub(crate) const APP_ID: &str = "424242";
pub(crate) const INSTALLATION: u64 = 51234567;
pub(crate) const TOKEN: &str = "ghs_16C7e42F292c6912E7710c838347Ae178B4a";
pub(crate) const REPO: &str = "octo-org/hello-world";

pub(crate) fn fixtures() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../github/tests/fixtures")
}

pub(crate) fn pull_request() -> Value {
    let path = format!(
        "{}/fixtures/github/pull_request.synchronize.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let payload: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    payload["pull_request"].clone()
}

#[derive(Default)]
pub(crate) struct Seen {
    pub(crate) installation_lookups: usize,
    pub(crate) exchanges: usize,
    pub(crate) requests: Vec<String>,
    /// The pull request's comments: (id, body).
    pub(crate) comments: Vec<(u64, String)>,
    /// The repository's check runs, as GitHub shows them.
    pub(crate) check_runs: Vec<Value>,
    /// Every check run body written (created or updated), in order.
    pub(crate) check_run_writes: Vec<Value>,
    /// The `q` of every search.
    pub(crate) searches: Vec<String>,
    /// The pull request's reviews, as GitHub lists them.
    pub(crate) reviews: Vec<Value>,
    /// The pull request's head now, when a push moved it from the fixture's.
    pub(crate) head: Option<String>,
    /// A daemon to SIGKILL as soon as the first review is stored (a crash between GitHub's
    /// "created" and the daemon's record of it).
    pub(crate) kill_on_review: Option<u32>,
    /// Mint a new token at each exchange, each valid this long (else [`TOKEN`], forever).
    pub(crate) token_lifetime: Option<std::time::Duration>,
    /// The tokens minted, and when.
    pub(crate) minted: Vec<(String, std::time::Instant)>,
    /// The token of every request the API took: (what, token).
    pub(crate) tokens_used: Vec<(String, String)>,
    /// The git host, told of each token minted.
    pub(crate) git: Option<nightshift_tests::git_http::GitHttp>,
    /// How many of the next creates (review, comment, check run) GitHub stores but answers
    /// only after [`Seen::late_by`] — past the client's timeout: an answer lost on the way.
    pub(crate) late_answers: usize,
    pub(crate) late_by: std::time::Duration,
    /// How many of the next list reads (reviews, comments, check runs) answer 503.
    pub(crate) unavailable_reads: usize,
    /// How many of the next check run creates GitHub takes [`Seen::late_by`] to store (and
    /// then answers): a create still on its way, which no list shows yet.
    pub(crate) slow_check_run_creates: usize,
}

impl Seen {
    /// The pull request's head commit now.
    pub(crate) fn head(&self) -> String {
        self.head
            .clone()
            .unwrap_or_else(|| pull_request()["head"]["sha"].as_str().unwrap().to_string())
    }
}

pub(crate) type Shared = Arc<Mutex<Seen>>;

/// `answer` to a create that GitHub has stored: sent at once, or after [`Seen::late_by`]
/// while late answers are asked for.
async fn answer_stored(seen: &Shared, answer: Response) -> Response {
    let late = {
        let mut s = seen.lock().unwrap();
        (s.late_answers > 0).then(|| {
            s.late_answers -= 1;
            s.late_by
        })
    };
    if let Some(late) = late {
        tokio::time::sleep(late).await;
    }
    answer
}

/// GitHub's 503 for a list read, while unavailable reads are asked for.
fn unavailable(seen: &Shared) -> Option<Response> {
    let mut s = seen.lock().unwrap();
    (s.unavailable_reads > 0).then(|| {
        s.unavailable_reads -= 1;
        github_error(StatusCode::SERVICE_UNAVAILABLE, "Service Unavailable")
    })
}

fn github_error(status: StatusCode, message: &str) -> Response {
    (
        status,
        Json(json!({"message": message,
                    "documentation_url": "https://docs.github.com/rest"})),
    )
        .into_response()
}

fn bearer(headers: &HeaderMap) -> String {
    headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default()
        .to_string()
}

/// Whether `headers` carry a JWT of the App, signed with its key.
fn app_jwt(headers: &HeaderMap) -> bool {
    #[derive(serde::Deserialize)]
    struct Claims {
        iss: String,
    }
    let public = std::fs::read(fixtures().join("test-app-key.pub.pem")).unwrap();
    let key = jsonwebtoken::DecodingKey::from_rsa_pem(&public).unwrap();
    let validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::RS256);
    jsonwebtoken::decode::<Claims>(&bearer(headers), &key, &validation)
        .is_ok_and(|d| d.claims.iss == APP_ID)
}

async fn installation(State(seen): State<Shared>, headers: HeaderMap) -> Response {
    if !app_jwt(&headers) {
        return github_error(
            StatusCode::UNAUTHORIZED,
            "A JSON web token could not be decoded",
        );
    }
    seen.lock().unwrap().installation_lookups += 1;
    Json(
        json!({"id": INSTALLATION, "app_id": 424242, "target_type": "Organization",
                "account": {"login": "octo-org", "type": "Organization"},
                "repository_selection": "selected"}),
    )
    .into_response()
}

async fn access_tokens(State(seen): State<Shared>, headers: HeaderMap) -> Response {
    if !app_jwt(&headers) {
        return github_error(
            StatusCode::UNAUTHORIZED,
            "A JSON web token could not be decoded",
        );
    }
    let mut s = seen.lock().unwrap();
    s.exchanges += 1;
    let (token, lifetime) = match s.token_lifetime {
        Some(lifetime) => (
            format!("ghs_rotated{:0>29}", s.exchanges),
            lifetime.as_secs(),
        ),
        None => (TOKEN.to_string(), 3600),
    };
    s.minted.push((token.clone(), std::time::Instant::now()));
    if let Some(git) = &s.git {
        git.accept(&token);
    }
    // GitHub says when the token expires; a client refreshes it ahead of that.
    let expires = chrono::DateTime::from_timestamp(
        chrono::Utc::now().timestamp() + 300 + i64::try_from(lifetime).unwrap(),
        0,
    )
    .unwrap()
    .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    (
        StatusCode::CREATED,
        Json(json!({"token": token, "expires_at": expires,
                    "permissions": {"pull_requests": "write", "contents": "read",
                                    "checks": "write", "issues": "write"},
                    "repository_selection": "selected"})),
    )
        .into_response()
}

/// Checks the installation token and notes the request; `Some` is GitHub's 401.
fn refused(seen: &Shared, headers: &HeaderMap, what: &str) -> Option<Response> {
    let token = bearer(headers);
    let mut s = seen.lock().unwrap();
    let valid = match s.token_lifetime {
        None => token == TOKEN,
        // A minted token works for its lifetime, then GitHub answers 401.
        Some(lifetime) => s
            .minted
            .iter()
            .any(|(t, at)| *t == token && at.elapsed() < lifetime),
    };
    if !valid {
        return Some(github_error(StatusCode::UNAUTHORIZED, "Bad credentials"));
    }
    s.requests.push(what.to_string());
    s.tokens_used.push((what.to_string(), token));
    None
}

async fn pull(State(seen): State<Shared>, headers: HeaderMap) -> Response {
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

async fn list_reviews(State(seen): State<Shared>, headers: HeaderMap) -> Response {
    if let Some(e) = refused(&seen, &headers, "list reviews").or_else(|| unavailable(&seen)) {
        return e;
    }
    Json(seen.lock().unwrap().reviews.clone()).into_response()
}

/// `POST …/reviews` as GitHub answers it: 422 for a `commit_id` that is not the head, else
/// the review with its state.
async fn create_review(
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
struct PageQuery {
    page: Option<usize>,
}

async fn files(
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
struct RefQuery {
    #[serde(rename = "ref")]
    git_ref: Option<String>,
}

async fn contents(
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

fn comment_json(id: u64, body: &str) -> Value {
    json!({"id": id, "node_id": "IC_kwDOABCD", "body": body,
           "user": {"login": "review-bot[bot]", "type": "Bot"},
           "html_url": format!("https://github.com/{REPO}/pull/42#issuecomment-{id}"),
           "created_at": "2026-12-03T10:00:00Z", "updated_at": "2026-12-03T10:00:00Z",
           "author_association": "NONE"})
}

async fn list_comments(State(seen): State<Shared>, headers: HeaderMap) -> Response {
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
struct CommentBody {
    body: String,
}

async fn create_comment(
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

async fn update_comment(
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

pub(crate) async fn fake_github() -> (String, Shared) {
    fake_github_with(Seen::default(), None).await
}

/// [`fake_github`] starting from `seen`, also serving `git`'s repositories (smart HTTP, the
/// tokens it mints accepted) on the same port, as github.com serves both.
pub(crate) async fn fake_github_with(
    seen: Seen,
    git: Option<nightshift_tests::git_http::GitHttp>,
) -> (String, Shared) {
    let git_routes = git.as_ref().map(|g| g.router());
    let seen = Arc::new(Mutex::new(Seen { git, ..seen }));
    let app = Router::new()
        .route(&format!("/repos/{REPO}/installation"), get(installation))
        .route(
            &format!("/app/installations/{INSTALLATION}/access_tokens"),
            post(access_tokens),
        )
        .route(&format!("/repos/{REPO}/pulls/42"), get(pull))
        .route(&format!("/repos/{REPO}/pulls/42/files"), get(files))
        .route(
            &format!("/repos/{REPO}/pulls/42/reviews"),
            get(list_reviews).post(create_review),
        )
        .route(&format!("/repos/{REPO}/contents/src/lib.rs"), get(contents))
        .route(
            &format!("/repos/{REPO}/issues/42/comments"),
            get(list_comments).post(create_comment),
        )
        .route(
            &format!("/repos/{REPO}/issues/comments/{{id}}"),
            axum::routing::patch(update_comment),
        )
        .route(
            &format!("/repos/{REPO}/commits/{{sha}}/check-runs"),
            get(list_check_runs),
        )
        .route(&format!("/repos/{REPO}/check-runs"), post(create_check_run))
        .route(
            &format!("/repos/{REPO}/check-runs/{{id}}"),
            axum::routing::patch(update_check_run),
        )
        .route("/search/issues", get(search_issues))
        .with_state(seen.clone());
    let app = match git_routes {
        Some(git) => app.merge(git),
        None => app,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (base, seen)
}

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
struct CheckRunQuery {
    check_name: Option<String>,
}

/// `GET /repos/{owner}/{repo}/commits/{ref}/check-runs`: `{total_count, check_runs}`.
async fn list_check_runs(
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
async fn create_check_run(
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
async fn update_check_run(
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

#[derive(serde::Deserialize)]
struct SearchQuery {
    q: String,
}

/// `GET /search/issues`: two merged pull requests of the repository for a query naming it
/// and `is:merged`, nothing else.
async fn search_issues(
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
