//! A fake GitHub on loopback for the GitHub suites, speaking GitHub's REST shapes (the pull
//! request is the one of the `pull_request` webhook fixture; files, reviews, comments, check
//! runs, search results and errors as GitHub's REST reference shows them) and checking
//! credentials as GitHub does: the App JWT (RS256, verified with the App's public key) for the
//! repository's installation and the token exchange, the installation token for the rest.
//! What it was asked and what it stores are in [`Seen`] for the tests to assert on.
//!
//! The routes are served from [`fake_github_with`] here, with what the fake stores; their
//! handlers are in [`auth`], [`pulls`], [`issues`] and [`checks`].

mod auth;
mod checks;
mod issues;
mod pulls;

use std::path::Path;
use std::sync::{Arc, Mutex};

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};

use auth::{access_tokens, installation};
use checks::{create_check_run, list_check_runs, update_check_run};
use issues::{create_comment, list_comments, search_issues, update_comment};
use pulls::{contents, create_review, files, list_reviews, pull};

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
