//! A fake of GitHub's git host for tests: bare repositories under a root directory, served
//! read-only over git's smart HTTP protocol on loopback by bridging each request to
//! `git http-backend` as CGI.
//!
//! It authenticates as GitHub does for an App's installation token — every request must carry
//! `Authorization: Basic base64("x-access-token:<token>")` with a token the test accepts
//! (the set is shared and mutable, so a test can revoke one), else `401` with
//! `WWW-Authenticate: Basic realm="GitHub"` — and records every request (path, query, the
//! token presented, the status answered) for assertions. A repository that is not there
//! answers `404`, as GitHub's does; pushes answer `403`.
//!
//! Its routes (`/{owner}/{name}.git/info/refs`, `/{owner}/{name}.git/git-upload-pack`)
//! merge into a larger fake GitHub router serving `/repos/...` on the same port.
//! [`make_repo`] builds a repository with fixed authors and dates, so its SHAs are the same
//! on every run.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path as UrlPath, RawQuery, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use tokio::io::AsyncWriteExt;

/// One request the fake answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitRequest {
    pub method: String,
    /// `/owner/name.git/info/refs`.
    pub path: String,
    pub query: String,
    /// The token of the `Authorization` header, when it had the `x-access-token` form.
    pub token: Option<String>,
    /// The raw `Authorization` header, when there was one.
    pub authorization: Option<String>,
    pub status: u16,
}

/// The fake git host: its root, the tokens it accepts and what it saw.
#[derive(Debug, Clone)]
pub struct GitHttp {
    root: PathBuf,
    accepted: Arc<Mutex<HashSet<String>>>,
    seen: Arc<Mutex<Vec<GitRequest>>>,
}

impl GitHttp {
    /// A host serving the bare repositories `root/owner/name.git`, accepting no token yet.
    pub fn new(root: impl Into<PathBuf>) -> GitHttp {
        GitHttp {
            root: root.into(),
            accepted: Arc::default(),
            seen: Arc::default(),
        }
    }

    /// The directory the repositories live in.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Accepts `token` from now on.
    pub fn accept(&self, token: &str) {
        self.accepted.lock().unwrap().insert(token.to_string());
    }

    /// Refuses `token` from now on (it expired, or was revoked).
    pub fn revoke(&self, token: &str) {
        self.accepted.lock().unwrap().remove(token);
    }

    /// Every request answered so far, in order.
    pub fn requests(&self) -> Vec<GitRequest> {
        self.seen.lock().unwrap().clone()
    }

    /// The routes, to serve alone or merged into a fake GitHub's router.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/{owner}/{name}/info/refs", get(answer))
            .route("/{owner}/{name}/git-upload-pack", post(answer))
            .route("/{owner}/{name}/git-receive-pack", post(answer))
            .with_state(self.clone())
    }

    /// Serves [`Self::router`] alone on a loopback port; the base URL (`http://127.0.0.1:PORT/`).
    pub async fn serve(&self) -> reqwest::Url {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let router = self.router();
        tokio::spawn(async move { axum::serve(listener, router).await });
        reqwest::Url::parse(&format!("http://{addr}/")).unwrap()
    }

    fn record(&self, request: GitRequest) {
        self.seen.lock().unwrap().push(request);
    }
}

/// The token of `Authorization: Basic base64(x-access-token:<token>)`.
pub fn basic_token(authorization: &str) -> Option<String> {
    let encoded = authorization.strip_prefix("Basic ")?;
    let decoded = String::from_utf8(STANDARD.decode(encoded.trim()).ok()?).ok()?;
    decoded.strip_prefix("x-access-token:").map(str::to_string)
}

async fn answer(
    State(host): State<GitHttp>,
    UrlPath((owner, name)): UrlPath<(String, String)>,
    method: Method,
    uri: axum::http::Uri,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let authorization = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let token = authorization.as_deref().and_then(basic_token);
    let query = query.unwrap_or_default();
    let accepted = token
        .as_ref()
        .is_some_and(|t| host.accepted.lock().unwrap().contains(t));
    let response = if !accepted {
        let mut refused =
            (StatusCode::UNAUTHORIZED, "Invalid username or token.\n").into_response();
        refused.headers_mut().insert(
            "www-authenticate",
            HeaderValue::from_static("Basic realm=\"GitHub\""),
        );
        refused
    } else if uri.path().ends_with("git-receive-pack") || query.contains("git-receive-pack") {
        (StatusCode::FORBIDDEN, "this fake is read-only\n").into_response()
    } else if !name.ends_with(".git") || !host.root.join(&owner).join(&name).is_dir() {
        (StatusCode::NOT_FOUND, "Repository not found.\n").into_response()
    } else {
        cgi(&host.root, &method, uri.path(), &query, &headers, body).await
    };
    host.record(GitRequest {
        method: method.to_string(),
        path: uri.path().to_string(),
        query,
        token,
        authorization,
        status: response.status().as_u16(),
    });
    response
}

/// `git http-backend` for one request: the CGI environment in, the CGI answer out.
async fn cgi(
    root: &Path,
    method: &Method,
    path: &str,
    query: &str,
    headers: &HeaderMap,
    body: Bytes,
) -> Response {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let mut command = tokio::process::Command::new("git");
    command
        .arg("http-backend")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", root)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_PROJECT_ROOT", root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("PATH_INFO", path)
        .env("REQUEST_METHOD", method.as_str())
        .env("QUERY_STRING", query)
        .env("CONTENT_LENGTH", body.len().to_string())
        .env("REMOTE_USER", "x-access-token")
        .env("REMOTE_ADDR", "127.0.0.1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (var, name) in [
        ("CONTENT_TYPE", "content-type"),
        ("GIT_PROTOCOL", "git-protocol"),
        ("HTTP_CONTENT_ENCODING", "content-encoding"),
    ] {
        if let Some(value) = header(name) {
            command.env(var, value);
        }
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => return server_error(format!("cannot start git http-backend: {e}")),
    };
    let mut stdin = child.stdin.take().expect("piped stdin");
    let writer = tokio::spawn(async move {
        let _ = stdin.write_all(&body).await;
    });
    let output = match child.wait_with_output().await {
        Ok(output) => output,
        Err(e) => return server_error(format!("git http-backend: {e}")),
    };
    let _ = writer.await;
    match parse_cgi(&output.stdout) {
        Some(response) => response,
        None => server_error(format!(
            "git http-backend answered no CGI headers ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )),
    }
}

/// A CGI answer (`Status:` and other headers, a blank line, the body) as an HTTP response.
fn parse_cgi(out: &[u8]) -> Option<Response> {
    let (head, body) = split_head(out)?;
    let mut status = StatusCode::OK;
    let mut headers = HeaderMap::new();
    for line in std::str::from_utf8(head).ok()?.lines() {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("status") {
            let code = value.split_whitespace().next()?.parse().ok()?;
            status = StatusCode::from_u16(code).ok()?;
        } else if let (Ok(name), Ok(value)) = (
            HeaderName::try_from(name.trim()),
            HeaderValue::try_from(value),
        ) {
            headers.append(name, value);
        }
    }
    let mut response = (status, body.to_vec()).into_response();
    response.headers_mut().extend(headers);
    Some(response)
}

fn split_head(out: &[u8]) -> Option<(&[u8], &[u8])> {
    let crlf = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, 4));
    let lf = out.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2));
    let (at, len) = match (crlf, lf) {
        (Some(a), Some(b)) => {
            if a.0 <= b.0 {
                a
            } else {
                b
            }
        }
        (a, b) => a.or(b)?,
    };
    Some((&out[..at], &out[at + len..]))
}

fn server_error(message: String) -> Response {
    (StatusCode::INTERNAL_SERVER_ERROR, message).into_response()
}

/// Makes the bare repository `root/<repo>.git` (`repo` is `owner/name`) whose `main` holds
/// one commit per entry of `commits` (each a list of `(path, content)` files written in that
/// commit), with fixed authors and dates; the commits' SHAs, oldest first. The repository
/// lets clients fetch any SHA (`uploadpack.allowAnySHA1InWant`), as GitHub lets them fetch
/// reachable ones.
pub fn make_repo(root: &Path, repo: &str, commits: &[&[(&str, &str)]]) -> Vec<String> {
    let work = tempfile::tempdir().expect("work dir");
    git(
        work.path(),
        &["init", "--quiet", "--initial-branch=main", "."],
    );
    let mut shas = Vec::new();
    for (i, files) in commits.iter().enumerate() {
        for (path, content) in *files {
            let file = work.path().join(path);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(file, content).unwrap();
        }
        git(work.path(), &["add", "--all"]);
        let message = format!("commit {}", i + 1);
        git(
            work.path(),
            &["commit", "--quiet", "--allow-empty", "-m", &message],
        );
        shas.push(git(work.path(), &["rev-parse", "HEAD"]));
    }
    let bare = root.join(format!("{repo}.git"));
    std::fs::create_dir_all(bare.parent().unwrap()).unwrap();
    let work_path = work.path().to_str().unwrap();
    let bare_path = bare.to_str().unwrap();
    git(root, &["clone", "--quiet", "--bare", work_path, bare_path]);
    git(&bare, &["config", "uploadpack.allowAnySHA1InWant", "true"]);
    shas
}

/// Points `refname` (`refs/heads/feature`, `refs/pull/1/head`) of `root/<repo>.git` at `sha`.
pub fn set_ref(root: &Path, repo: &str, refname: &str, sha: &str) {
    git(
        &root.join(format!("{repo}.git")),
        &["update-ref", refname, sha],
    );
}

/// Runs `git args` in `dir` with a fixed identity and clock and no user config; its stdout,
/// trimmed. Panics with git's stderr when it fails.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let output = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "Mona Lisa")
        .env("GIT_AUTHOR_EMAIL", "mona@example.com")
        .env("GIT_AUTHOR_DATE", "2024-05-01T12:00:00Z")
        .env("GIT_COMMITTER_NAME", "Mona Lisa")
        .env("GIT_COMMITTER_EMAIL", "mona@example.com")
        .env("GIT_COMMITTER_DATE", "2024-05-01T12:00:00Z")
        .output()
        .expect("git runs");
    assert!(
        output.status.success(),
        "git {args:?} in {} failed: {}",
        dir.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap().trim().to_string()
}
