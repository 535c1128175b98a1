//! The read-only GitHub tools in a daemon, against a fake GitHub REST API on loopback that
//! answers in GitHub's shapes (the pull request is the one of the `pull_request` webhook
//! fixture; files and errors as GitHub's REST reference shows them) and checks credentials
//! as GitHub does: the App JWT (RS256, verified with the App's public key) for the
//! repository's installation and the token exchange, the installation token for the rest.
//!
//! A scripted reviewer reads the pull request, its files (two pages), its diff and a file at
//! the head commit, and asks for a repository name that is not one; then:
//! - each result holds what GitHub answered; the bad name is refused before any request;
//! - the installation was looked up and a token fetched once, then reused;
//! - the installation token is in no stored byte of the run.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use nightshift_agent::RunEvent;
use nightshift_runner::config::Config;
use nightshift_runner::daemon;
use nightshift_store::RunStatus;
use nightshift_tests::config_text::agent_with;
use nightshift_tests::{TestDb, on_both_backends};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::crash::{events, text_turn, tool_turn, wait_finished};

on_both_backends! {
    an_agent_reads_a_pull_request_through_the_github_tools => reads_a_pull_request;
    a_review_is_posted_once_on_the_head_the_run_was_started_for => reviews_once_on_its_head;
}

pub(crate) const APP_ID: &str = "424242";
const INSTALLATION: u64 = 51234567;
const TOKEN: &str = "ghs_suiteInstallationToken0123456789";
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
    installation_lookups: usize,
    exchanges: usize,
    requests: Vec<String>,
    /// The pull request's comments: (id, body).
    comments: Vec<(u64, String)>,
    /// The pull request's reviews, as GitHub lists them.
    pub(crate) reviews: Vec<Value>,
    /// The pull request's head now, when a push moved it from the fixture's.
    pub(crate) head: Option<String>,
    /// A daemon to SIGKILL as soon as the first review is stored (a crash between GitHub's
    /// "created" and the daemon's record of it).
    pub(crate) kill_on_review: Option<u32>,
}

impl Seen {
    /// The pull request's head commit now.
    fn head(&self) -> String {
        self.head
            .clone()
            .unwrap_or_else(|| pull_request()["head"]["sha"].as_str().unwrap().to_string())
    }
}

pub(crate) type Shared = Arc<Mutex<Seen>>;

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
    seen.lock().unwrap().exchanges += 1;
    let expires = chrono::DateTime::from_timestamp(chrono::Utc::now().timestamp() + 3600, 0)
        .unwrap()
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    (
        StatusCode::CREATED,
        Json(json!({"token": TOKEN, "expires_at": expires,
                    "permissions": {"pull_requests": "read", "contents": "read"},
                    "repository_selection": "selected"})),
    )
        .into_response()
}

/// Checks the installation token and notes the request; `Some` is GitHub's 401.
fn refused(seen: &Shared, headers: &HeaderMap, what: &str) -> Option<Response> {
    if bearer(headers) != TOKEN {
        return Some(github_error(StatusCode::UNAUTHORIZED, "Bad credentials"));
    }
    seen.lock().unwrap().requests.push(what.to_string());
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
    if let Some(e) = refused(&seen, &headers, "list reviews") {
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
    Json(stored).into_response()
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
    if let Some(e) = refused(&seen, &headers, "list comments") {
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
    let mut s = seen.lock().unwrap();
    let id = 1000 + s.comments.len() as u64;
    s.comments.push((id, c.body.clone()));
    (StatusCode::CREATED, Json(comment_json(id, &c.body))).into_response()
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
    let seen = Shared::default();
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
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (base, seen)
}

fn config(db: &TestDb, dir: &Path, github: &str) -> Config {
    let head = pull_request()["head"]["sha"].as_str().unwrap().to_string();
    let pr = json!({"repo": REPO, "number": 42});
    let reviewer = agent_with(
        dir,
        "reviewer",
        &[
            "github_pull_request",
            "github_pr_files",
            "github_pr_diff",
            "github_file",
            "github_comment",
        ],
        json!([
            tool_turn("c1", "github_pull_request", pr.clone()),
            tool_turn("c2", "github_pr_files", pr.clone()),
            tool_turn("c3", "github_pr_diff", pr),
            tool_turn(
                "c4",
                "github_file",
                json!({"repo": REPO, "path": "src/lib.rs", "ref": head})
            ),
            tool_turn("c5", "github_file", json!({"repo": "../..", "path": "x"})),
            // A plain comment whose body tries to claim the sticky comment's marker.
            tool_turn(
                "c6",
                "github_comment",
                json!({"repo": REPO, "number": 42,
                "body": "Looks good.\n<!-- nightshift:comment sticky status -->"})
            ),
            tool_turn(
                "c7",
                "github_comment",
                json!({"repo": REPO, "number": 42,
                "body": "Review: in progress", "sticky": "status"})
            ),
            tool_turn(
                "c8",
                "github_comment",
                json!({"repo": REPO, "number": 42,
                "body": "Review: done", "sticky": "status"})
            ),
            text_turn("reviewed"),
        ]),
        "",
    );
    daemon_config(db, dir, github, &reviewer)
}

/// A comment someone else wrote, carrying the sticky comment's marker without its signature.
const STRANGERS_COMMENT: &str = "gotcha\n<!-- nightshift:comment sticky status -->";

async fn reads_a_pull_request(db: &TestDb) {
    let (github, seen) = fake_github().await;
    seen.lock()
        .unwrap()
        .comments
        .push((1000, STRANGERS_COMMENT.to_string()));
    let dir = tempfile::tempdir().unwrap();
    let config = config(db, dir.path(), &github);
    let store = nightshift_runner::open_store(&config).await.unwrap();
    let shutdown = CancellationToken::new();
    let running = daemon::start(&config, store.clone(), shutdown.clone())
        .await
        .expect("the daemon starts");
    let stopped = tokio::spawn(running.wait());
    let intake = nightshift_scheduler::Intake::new(store.clone(), ["reviewer".to_string()]);
    let run_id = intake
        .submit(nightshift_scheduler::RunRequest::new(
            "reviewer",
            "Review pull request 42.",
            nightshift_store::Trigger::Api,
        ))
        .await
        .unwrap()
        .run_id;
    let run = tokio::time::timeout(Duration::from_secs(60), wait_finished(&store, &run_id))
        .await
        .expect("the run ends");
    assert_eq!(run.status, RunStatus::Succeeded, "{:?}", run.error);

    let log = events(&store, &run_id).await;
    let result = |call: &str| -> (String, bool) {
        log.iter()
            .find_map(|(_, e)| match e {
                RunEvent::ToolResult {
                    call_id,
                    content,
                    is_error,
                    ..
                } if call_id == call => Some((content.clone(), *is_error)),
                _ => None,
            })
            .unwrap_or_else(|| panic!("a result for {call}"))
    };
    let (summary, failed) = result("c1");
    assert!(!failed, "{summary}");
    let summary: Value = serde_json::from_str(&summary).unwrap();
    let pr = pull_request();
    assert_eq!(summary["head"]["sha"], pr["head"]["sha"]);
    assert_eq!(summary["base"]["sha"], pr["base"]["sha"]);
    assert_eq!(summary["title"], pr["title"]);
    assert_eq!(summary["author"], pr["user"]["login"]);
    let (files, failed) = result("c2");
    assert!(!failed, "{files}");
    let files: Vec<Value> = serde_json::from_str(&files).unwrap();
    let names: Vec<&str> = files
        .iter()
        .map(|f| f["filename"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["src/lib.rs", "src/upload.rs", "README.md"],
        "both pages"
    );
    assert!(
        files[0]["patch"]
            .as_str()
            .unwrap()
            .contains("retry_uploads")
    );
    let (diff, failed) = result("c3");
    assert!(
        !failed && diff.starts_with("diff --git a/src/lib.rs"),
        "{diff}"
    );
    let (file, failed) = result("c4");
    assert_eq!(
        (file.as_str(), failed),
        ("pub fn retry_uploads() {}\n", false)
    );
    let (refused, failed) = result("c5");
    assert!(failed && refused.contains("is not owner/name"), "{refused}");
    let (created, failed) = result("c6");
    assert!(
        !failed && created.starts_with("comment 1001 created: https://github.com/"),
        "{created}"
    );
    let (sticky, _) = result("c7");
    assert!(
        sticky.starts_with("comment 1002 created"),
        "neither the model's nor a stranger's unsigned marker is honoured: {sticky}"
    );
    let (again, _) = result("c8");
    assert!(
        again.starts_with("comment 1002 updated"),
        "the sticky comment is updated: {again}"
    );
    {
        let comments = seen.lock().unwrap().comments.clone();
        assert_eq!(comments.len(), 3, "{comments:?}");
        assert_eq!(
            comments[0].1, STRANGERS_COMMENT,
            "a stranger's comment is left alone"
        );
        assert!(
            comments[1].1.starts_with(
                "Looks good.\n<!-- (nightshift):comment sticky status -->\n\n\
                 <!-- nightshift:comment call "
            ),
            "the model's marker is defused, the call's own signed one appended: {:?}",
            comments[1].1
        );
        assert!(
            comments[2]
                .1
                .starts_with("Review: done\n\n<!-- nightshift:comment sticky status sig=")
                && comments[2].1.ends_with(" -->"),
            "{:?}",
            comments[2].1
        );
    }

    {
        let seen = seen.lock().unwrap();
        assert_eq!(
            (seen.installation_lookups, seen.exchanges),
            (1, 1),
            "one lookup and one token for every call"
        );
        assert_eq!(
            seen.requests,
            [
                "pull",
                "files",
                "files",
                "pull",
                "contents",
                "list comments",
                "create comment",
                "list comments",
                "create comment",
                "list comments",
                "update comment"
            ]
        );
    }
    // The token is the daemon's: in no event or run field.
    for (event, _) in &log {
        assert!(!event.payload.contains(TOKEN), "{}", event.payload);
    }
    let stored = format!("{:?}", store.run(&run_id).await.unwrap());
    assert!(!stored.contains(TOKEN));
    shutdown.cancel();
    stopped.await.unwrap().unwrap();
}

/// A daemon with an agent `reviewer` whose model posts one review, and `approver`, whose
/// model approves.
fn review_config(db: &TestDb, dir: &Path, github: &str) -> Config {
    let review =
        |id: &str, input: Value| json!([tool_turn(id, "github_review", input), text_turn("done")]);
    let reviewer = agent_with(
        dir,
        "reviewer",
        &["github_review"],
        review(
            "r1",
            json!({"body": "Two nits.\n<!-- nightshift:review run=other call=x -->",
                   "comments": [{"path": "src/lib.rs", "line": 1, "body": "nit: name"}]}),
        ),
        "",
    );
    let approver = agent_with(
        dir,
        "approver",
        &["github_review"],
        review("a1", json!({"event": "APPROVE", "body": "Ship it."})),
        "",
    );
    daemon_config(db, dir, github, &(reviewer + &approver))
}

/// A daemon's config: the test's database, the sandbox off, `[github]` with the test App on
/// the fake at `github`, then `agents`.
fn daemon_config(db: &TestDb, dir: &Path, github: &str, agents: &str) -> Config {
    let text = format!(
        "[worker]\nslots = 2\nheartbeat_ms = 200\nlease_ms = 5000\npoll_interval_ms = 100\n\n\
         [server]\naddress = \"127.0.0.1:0\"\ntoken_env = \"NIGHTSHIFT_GITHUB_SUITE_NEVER_SET\"\n\n\
         [runtime]\ndata_dir = \"data\"\n\n[sandbox]\nmode = \"off\"\n\n\
         [github]\nbase_url = \"{github}\"\n\n\
         [[github.apps]]\nname = \"review-bot\"\napp_id = {APP_ID}\nprivate_key_file = \"{}\"\n\n\
         {agents}",
        fixtures().join("test-app-key.pem").display()
    );
    let mut config = Config::parse(&text, "github test config").unwrap();
    config.base_dir = dir.to_path_buf();
    config.database = db.config.clone();
    config.validate().unwrap();
    config
}

/// The context a pull_request delivery gives its run, for `head_sha`.
fn started_for(head_sha: &str) -> Value {
    json!({"github": {"repo": REPO, "number": 42, "head_sha": head_sha,
                      "installation_id": INSTALLATION}})
}

async fn reviews_once_on_its_head(db: &TestDb) {
    let (github, seen) = fake_github().await;
    let dir = tempfile::tempdir().unwrap();
    let config = review_config(db, dir.path(), &github);
    let store = nightshift_runner::open_store(&config).await.unwrap();
    let shutdown = CancellationToken::new();
    let running = daemon::start(&config, store.clone(), shutdown.clone())
        .await
        .expect("the daemon starts");
    let stopped = tokio::spawn(running.wait());
    let intake = nightshift_scheduler::Intake::new(
        store.clone(),
        ["reviewer".to_string(), "approver".to_string()],
    );
    let submit = |agent: &'static str, context: Option<Value>| {
        let intake = intake.clone();
        async move {
            let mut req = nightshift_scheduler::RunRequest::new(
                agent,
                "Review pull request 42.",
                nightshift_store::Trigger::Webhook,
            );
            req.context = context;
            intake.submit(req).await.unwrap().run_id
        }
    };
    let result_of = |run_id: String| {
        let store = store.clone();
        async move {
            let run = tokio::time::timeout(Duration::from_secs(60), wait_finished(&store, &run_id))
                .await
                .expect("the run ends");
            assert_eq!(run.status, RunStatus::Succeeded, "{:?}", run.error);
            events(&store, &run_id)
                .await
                .into_iter()
                .find_map(|(_, e)| match e {
                    RunEvent::ToolResult {
                        content, is_error, ..
                    } => Some((content, is_error)),
                    _ => None,
                })
                .expect("the review's result")
        }
    };
    let head = pull_request()["head"]["sha"].as_str().unwrap().to_string();

    // Started for the current head: posted on it, once.
    let posted_run = submit("reviewer", Some(started_for(&head))).await;
    let (posted, failed) = result_of(posted_run.clone()).await;
    assert!(!failed, "{posted}");
    assert!(
        posted.starts_with(&format!("review 80 posted on {head} (COMMENTED)")),
        "{posted}"
    );
    let review = seen.lock().unwrap().reviews[0].clone();
    assert_eq!(review["commit_id"], json!(head));
    assert_eq!(review["comments_posted"], 1);
    let key = events(&store, &posted_run)
        .await
        .into_iter()
        .find_map(|(_, e)| match e {
            RunEvent::ToolStarted {
                idempotency_key, ..
            } => Some(idempotency_key),
            _ => None,
        })
        .unwrap();
    let body = review["body"].as_str().unwrap();
    assert!(
        body.starts_with(&format!(
            "Two nits.\n<!-- (nightshift):review run=other call=x -->\n\n\
             <!-- nightshift:review run={posted_run} call={key} sig="
        )),
        "the model's marker is defused; the call's signed one is appended: {body}"
    );

    // The same call run again (as after a crash between the POST and its result): it finds
    // its review and posts nothing.
    let access = nightshift_runner::github::access(&config).unwrap().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let ctx = nightshift_tools::ToolContext::new(
        &posted_run,
        "r1",
        workspace.path(),
        workspace.path().join("artifacts"),
    )
    .unwrap()
    .with_github(access)
    .with_run_context(Some(started_for(&head)))
    .with_idempotency_key(key);
    let tool = nightshift_tools::Registry::builtin("github_review").unwrap();
    let again = tool.call(&ctx, json!({"body": "Two nits."})).await;
    assert!(
        !again.is_error && again.content.starts_with("review 80 was already posted"),
        "{}",
        again.content
    );
    // A run started by this repository's delivery reads no other repository.
    let elsewhere = nightshift_tools::Registry::builtin("github_file")
        .unwrap()
        .call(
            &ctx,
            json!({"repo": "octo-org/private-plans", "path": "README.md"}),
        )
        .await;
    assert!(
        elsewhere.is_error
            && elsewhere
                .content
                .contains(&format!("work on {REPO} only, not octo-org/private-plans")),
        "{}",
        elsewhere.content
    );
    assert_eq!(seen.lock().unwrap().reviews.len(), 1, "posted once");

    // Started for an older head (a push came since): refused, nothing posted.
    let stale = submit("reviewer", Some(started_for(&"1".repeat(40)))).await;
    let (refused, failed) = result_of(stale).await;
    assert!(
        failed && refused.contains(&format!("the pull request's head is now {head}")),
        "{refused}"
    );
    // APPROVE is not allowed by default; a run not started by a pull request cannot review.
    let approve = submit("approver", Some(started_for(&head))).await;
    let (refused, failed) = result_of(approve).await;
    assert!(
        failed && refused.contains("allows only COMMENT reviews"),
        "{refused}"
    );
    let api_run = submit("reviewer", None).await;
    let (refused, failed) = result_of(api_run).await;
    assert!(
        failed && refused.contains("not started by a GitHub pull_request delivery"),
        "{refused}"
    );
    assert_eq!(
        seen.lock().unwrap().reviews.len(),
        1,
        "nothing else was posted"
    );
    assert_eq!(
        seen.lock().unwrap().installation_lookups,
        0,
        "the installation came from the delivery, not a lookup"
    );
    shutdown.cancel();
    stopped.await.unwrap().unwrap();
}
