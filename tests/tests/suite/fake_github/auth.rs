//! GitHub's credentials as GitHub checks them: the App JWT (RS256, verified with the App's
//! public key) for the repository's installation and the token exchange, and the installation
//! token (expiring when asked to) for every other call; anything else is GitHub's 401.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::{APP_ID, INSTALLATION, Shared, TOKEN, fixtures, github_error};

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

pub(super) async fn installation(State(seen): State<Shared>, headers: HeaderMap) -> Response {
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

pub(super) async fn access_tokens(State(seen): State<Shared>, headers: HeaderMap) -> Response {
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
pub(super) fn refused(seen: &Shared, headers: &HeaderMap, what: &str) -> Option<Response> {
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
