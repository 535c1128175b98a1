//! The client against a fake GitHub on loopback that answers as GitHub documents: the App
//! JWT is verified with the App's public key (RS256, `iss`, `exp` − `iat` within 10 minutes)
//! before an installation token is handed out (`201` with `token` and `expires_at`); lists
//! are paginated with `Link`; a primary rate limit answers `403` with
//! `x-ratelimit-remaining: 0` and `x-ratelimit-reset`; errors carry `message` and
//! `documentation_url`.

use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use nightshift_github::{Api, AppKey, Auth, GithubError, InstallationTokens, Secret};
use serde_json::{Value, json};

const APP_ID: &str = "424242";
const PRIVATE_KEY: &[u8] = include_bytes!("fixtures/test-app-key.pem");
const PUBLIC_KEY: &[u8] = include_bytes!("fixtures/test-app-key.pub.pem");

#[derive(Default)]
struct Fake {
    /// Installation tokens handed out, in order.
    issued: Mutex<Vec<String>>,
    /// How long a token lives, in seconds.
    token_lifetime: AtomicI64,
    /// Requests refused for a rate limit so far; `rate_limit_first` are refused.
    limited: AtomicUsize,
    rate_limit_first: AtomicUsize,
    base: Mutex<String>,
    /// Installation 9's exchange waits for `release` after telling `held`.
    held: tokio::sync::Notify,
    release: tokio::sync::Notify,
}

fn error(status: StatusCode, message: &str) -> Response {
    (
        status,
        Json(json!({"message": message,
                    "documentation_url": "https://docs.github.com/rest"})),
    )
        .into_response()
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

#[derive(serde::Deserialize)]
struct Claims {
    iat: i64,
    exp: i64,
    iss: String,
}

async fn access_tokens(
    State(fake): State<Arc<Fake>>,
    Path(installation): Path<u64>,
    headers: HeaderMap,
) -> Response {
    let Some(jwt) = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    else {
        return error(
            StatusCode::UNAUTHORIZED,
            "A JSON web token could not be decoded",
        );
    };
    let mut validation = Validation::new(Algorithm::RS256);
    validation.set_required_spec_claims(&["exp", "iat", "iss"]);
    validation.leeway = 0;
    let key = DecodingKey::from_rsa_pem(PUBLIC_KEY).unwrap();
    let claims = match jsonwebtoken::decode::<Claims>(jwt, &key, &validation) {
        Ok(data) => data.claims,
        Err(_) => {
            return error(
                StatusCode::UNAUTHORIZED,
                "A JSON web token could not be decoded",
            );
        }
    };
    if claims.iss != APP_ID || claims.exp - claims.iat > 600 || claims.iat > now() {
        return error(
            StatusCode::UNAUTHORIZED,
            "'Expiration time' claim ('exp') is too far in the future",
        );
    }
    if installation == 9 {
        // A slow GitHub for this installation: answers once the test releases it.
        fake.held.notify_one();
        fake.release.notified().await;
    } else if installation != 7 {
        return error(StatusCode::NOT_FOUND, "Not Found");
    }
    let mut issued = fake.issued.lock().unwrap();
    let token = format!("ghs_fake{}", issued.len());
    issued.push(token.clone());
    let expires =
        chrono::DateTime::from_timestamp(now() + fake.token_lifetime.load(Ordering::SeqCst), 0)
            .unwrap()
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    (
        StatusCode::CREATED,
        Json(json!({"token": token, "expires_at": expires,
                    "permissions": {"pull_requests": "write", "contents": "read"},
                    "repository_selection": "selected"})),
    )
        .into_response()
}

#[derive(serde::Deserialize)]
struct PageQuery {
    page: Option<usize>,
}

/// `GET /repos/o/r/pulls/1/files`: 3 pages of 2 files; needs an issued token.
async fn files(
    State(fake): State<Arc<Fake>>,
    headers: HeaderMap,
    Query(q): Query<PageQuery>,
) -> Response {
    let token = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default()
        .to_string();
    if !fake.issued.lock().unwrap().contains(&token) {
        return error(StatusCode::UNAUTHORIZED, "Bad credentials");
    }
    if fake.limited.load(Ordering::SeqCst) < fake.rate_limit_first.load(Ordering::SeqCst) {
        fake.limited.fetch_add(1, Ordering::SeqCst);
        let mut resp = error(
            StatusCode::FORBIDDEN,
            "API rate limit exceeded for installation ID 7.",
        );
        let h = resp.headers_mut();
        h.insert("x-ratelimit-remaining", HeaderValue::from_static("0"));
        h.insert(
            "x-ratelimit-reset",
            HeaderValue::from_str(&(now() + 1).to_string()).unwrap(),
        );
        return resp;
    }
    let page = q.page.unwrap_or(1);
    let base = fake.base.lock().unwrap().clone();
    let link =
        |p: usize, rel: &str| format!("<{base}/repos/o/r/pulls/1/files?page={p}>; rel=\"{rel}\"");
    let mut links = Vec::new();
    if page < 3 {
        links.push(link(page + 1, "next"));
        links.push(link(3, "last"));
    }
    if page == 99 {
        links.push("<https://elsewhere.example/steal?page=1>; rel=\"next\"".to_string());
    }
    let items: Vec<Value> = (0..2)
        .map(|i| json!({"filename": format!("src/file{page}{i}.rs"), "status": "modified"}))
        .collect();
    let mut resp = Json(items).into_response();
    if !links.is_empty() {
        resp.headers_mut()
            .insert("link", HeaderValue::from_str(&links.join(", ")).unwrap());
    }
    resp
}

async fn fake_github() -> (Arc<Fake>, String) {
    let fake = Arc::new(Fake::default());
    fake.token_lifetime.store(3600, Ordering::SeqCst);
    let app = Router::new()
        .route(
            "/app/installations/{installation}/access_tokens",
            post(access_tokens),
        )
        .route("/repos/o/r/pulls/1/files", get(files))
        .with_state(fake.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    *fake.base.lock().unwrap() = base.clone();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (fake, base)
}

fn api(base: &str) -> Api {
    let http = nightshift_llm::http::build_client(nightshift_llm::HttpTimeouts::default()).unwrap();
    Api::new(http, base).unwrap()
}

fn tokens(base: &str) -> InstallationTokens {
    let key = AppKey::from_pem(APP_ID, PRIVATE_KEY).unwrap();
    InstallationTokens::new(api(base), key)
}

#[tokio::test]
async fn an_installation_token_is_fetched_with_the_app_jwt_cached_and_refreshed() {
    let (fake, base) = fake_github().await;
    let tokens = tokens(&base);
    let first = tokens.token(7).await.unwrap();
    assert_eq!(first.expose(), "ghs_fake0");
    assert_eq!(
        format!("{first:?}"),
        "Secret(…)",
        "Debug never shows a token"
    );
    let again = tokens.token(7).await.unwrap();
    assert_eq!(again, first, "cached");
    assert_eq!(fake.issued.lock().unwrap().len(), 1);
    // A token with less than 5 minutes left is refreshed before it is handed out.
    fake.token_lifetime.store(4 * 60, Ordering::SeqCst);
    tokens.forget(7).await;
    let short = tokens.token(7).await.unwrap();
    assert_eq!(short.expose(), "ghs_fake1");
    fake.token_lifetime.store(3600, Ordering::SeqCst);
    let refreshed = tokens.token(7).await.unwrap();
    assert_eq!(
        refreshed.expose(),
        "ghs_fake2",
        "the short-lived token was replaced"
    );
    // Concurrent callers share one exchange.
    tokens.forget(7).await;
    let (a, b) = tokio::join!(tokens.token(7), tokens.token(7));
    assert_eq!(a.unwrap(), b.unwrap());
    assert_eq!(fake.issued.lock().unwrap().len(), 4);
}

/// A token exchange GitHub is slow to answer holds up only its own installation: another
/// installation's token is fetched meanwhile, and the slow one arrives when GitHub answers.
#[tokio::test]
async fn a_slow_exchange_holds_up_only_its_own_installation() {
    let (fake, base) = fake_github().await;
    let tokens = Arc::new(tokens(&base));
    let slow = tokio::spawn({
        let tokens = tokens.clone();
        async move { tokens.token(9).await }
    });
    fake.held.notified().await;
    // Bounded so that a regression fails instead of hanging; it answers in milliseconds.
    let other = tokio::time::timeout(Duration::from_secs(20), tokens.token(7))
        .await
        .expect("installation 7 waited for installation 9's exchange")
        .unwrap();
    assert!(other.expose().starts_with("ghs_fake"));
    assert!(!slow.is_finished());
    fake.release.notify_one();
    let slow = slow.await.unwrap().unwrap();
    assert_ne!(slow, other);
    assert_eq!(fake.issued.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn a_refused_key_or_installation_is_github_s_message() {
    let (_fake, base) = fake_github().await;
    let missing = tokens(&base).token(8).await.unwrap_err();
    assert!(
        matches!(&missing, GithubError::Status { status: 404, .. }),
        "{missing}"
    );
    assert!(
        missing
            .to_string()
            .contains("/app/installations/8/access_tokens")
    );
    // A key that is not the App's: GitHub cannot verify the JWT.
    let other = AppKey::from_pem("999", PRIVATE_KEY).unwrap();
    let wrong = InstallationTokens::new(api(&base), other)
        .token(7)
        .await
        .unwrap_err();
    assert!(
        matches!(&wrong, GithubError::Status { status: 401, .. })
            && wrong.to_string().contains("'Expiration time' claim"),
        "{wrong}"
    );
    let garbage = AppKey::from_pem(APP_ID, b"-----BEGIN RSA PRIVATE KEY-----\nnope\n").unwrap_err();
    assert!(
        garbage.to_string().contains("GitHub App 424242"),
        "{garbage}"
    );
}

#[tokio::test]
async fn lists_follow_link_pagination_and_rate_limits_are_waited_out() {
    let (fake, base) = fake_github().await;
    let token = tokens(&base).token(7).await.unwrap();
    fake.rate_limit_first.store(1, Ordering::SeqCst);
    let gh = api(&base);
    let files = gh
        .get_all("/repos/o/r/pulls/1/files", Auth::Bearer(&token))
        .await
        .unwrap();
    let names: Vec<&str> = files
        .iter()
        .map(|f| f["filename"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "src/file10.rs",
            "src/file11.rs",
            "src/file20.rs",
            "src/file21.rs",
            "src/file30.rs",
            "src/file31.rs"
        ]
    );
    assert_eq!(fake.limited.load(Ordering::SeqCst), 1, "one 403 waited out");
    // A rate limit longer than allowed is an error, not a hang.
    fake.limited.store(0, Ordering::SeqCst);
    let impatient = api(&base).with_max_wait(Duration::ZERO);
    let e = impatient
        .get_all("/repos/o/r/pulls/1/files", Auth::Bearer(&token))
        .await
        .unwrap_err();
    assert!(matches!(e, GithubError::RateLimited { .. }), "{e}");
    // A next link off the API host is not followed with the token.
    let e = gh
        .get_all("/repos/o/r/pulls/1/files?page=99", Auth::Bearer(&token))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, GithubError::Foreign { url, .. } if url.contains("elsewhere.example")),
        "{e}"
    );
    let e = gh
        .get_all(
            "/repos/o/r/pulls/1/files",
            Auth::Bearer(&Secret::new("ghp_wrong")),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&e, GithubError::Status { status: 401, message, .. } if message == "Bad credentials"),
        "{e}"
    );
    assert!(
        !e.to_string().contains("ghp_wrong"),
        "no token in errors: {e}"
    );
}
