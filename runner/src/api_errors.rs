//! How the HTTP API refuses a request: one error type, one JSON error shape, one mapping from
//! store errors to status codes, and one JSON body extractor.
//!
//! What it guarantees:
//! - **Every refusal is an [`ApiError`]**: a handler returns `Result<_, ApiError>` and
//!   refuses with `?`. The errors of the layers below (the store's, the intake's, the
//!   schedules', a webhook delivery's) convert into it with `From`, each to one status, so
//!   every endpoint answers the same error the same way.
//! - **Every error is `{"error": "…"}`** ([`ErrorBody`]) saying what was wrong and what to do.
//! - **A store that cannot be reached is a 503 with `Retry-After`**, never a 500: a refused or
//!   dropped connection, a pool that timed out, a busy or locked SQLite file, an I/O error,
//!   PostgreSQL shutting down or refusing connections ([`store_unavailable`] decides). Only a
//!   real bug (a corrupt row, a failed migration, an unexpected database error) is a 500, and
//!   it is logged. Every store error reaches the client through [`store_error`] (it is what
//!   [`ApiError::Store`] answers), so no endpoint answers an outage differently.
//! - **A JSON body that does not fit is a 422 naming the key** ([`JsonBody`]): a wrong type, a
//!   bad enum value, a missing or unknown field, e.g. `concurrency_policy: unknown variant
//!   "sometimes", expected one of "queue", "skip", "supersede", "debounce"`. A body that is
//!   not JSON at all is a 400; a body sent without `Content-Type: application/json` is a 415.
//!   Decoding is a pure function ([`decode_body`]) so each case is tested without a server.

use axum::extract::{FromRequest, Request};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use nightshift_scheduler::IntakeError;
use nightshift_scheduler::cron::ScheduleError;
use nightshift_scheduler::hooks::Refused;
use nightshift_store::Error as StoreError;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// The seconds a client is told to wait (`Retry-After`) before retrying when the store is
/// unavailable.
pub(crate) const RETRY_AFTER_SECONDS: u64 = 5;

/// The body of every error answer.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct ErrorBody {
    /// What was wrong and what to do about it.
    #[schema(example = "missing field `prompt`")]
    pub error: String,
}

/// Why the API refused a request. Each variant answers with one status and `{"error": …}`
/// holding its message word for word; [`ApiError::Store`] answers as [`store_error`]
/// decides (404, 409, 422, 503 with `Retry-After`, or a logged 500).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ApiError {
    /// 400: a body that is not JSON, or a bad query parameter, naming it.
    #[error("{0}")]
    BadRequest(String),
    /// 401: no token or a wrong one; or a webhook's missing or wrong signature.
    #[error("{0}")]
    Unauthorized(String),
    /// 403: a read-only token asked to change something.
    #[error("{0}")]
    Forbidden(String),
    /// 404: no such run, schedule, hook, endpoint, …
    #[error("{0}")]
    NotFound(String),
    /// 409: the thing is not in a state that allows the request.
    #[error("{0}")]
    Conflict(String),
    /// 413: a body over its limit.
    #[error("{0}")]
    PayloadTooLarge(String),
    /// 415: a body not sent as JSON.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// 422: a value that does not fit or is not allowed, naming it.
    #[error("{0}")]
    Unprocessable(String),
    /// 503 with `Retry-After`: the store cannot answer now, for the reason given (see
    /// [`unavailable`]).
    #[error("the store is unavailable ({0})")]
    Unavailable(String),
    /// Any other status, decided where the refusal arises: reading a body (400 or 413), a
    /// metrics scrape whose store reads failed (503, without `Retry-After`).
    #[error("{1}")]
    Status(StatusCode, String),
    /// The store failed or refused: answered by [`store_error`].
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, message) = match self {
            ApiError::Store(e) => return store_error(e),
            ApiError::Unavailable(why) => return unavailable(why),
            ApiError::BadRequest(m) => (StatusCode::BAD_REQUEST, m),
            ApiError::Unauthorized(m) => (StatusCode::UNAUTHORIZED, m),
            ApiError::Forbidden(m) => (StatusCode::FORBIDDEN, m),
            ApiError::NotFound(m) => (StatusCode::NOT_FOUND, m),
            ApiError::Conflict(m) => (StatusCode::CONFLICT, m),
            ApiError::PayloadTooLarge(m) => (StatusCode::PAYLOAD_TOO_LARGE, m),
            ApiError::UnsupportedMediaType(m) => (StatusCode::UNSUPPORTED_MEDIA_TYPE, m),
            ApiError::Unprocessable(m) => (StatusCode::UNPROCESSABLE_ENTITY, m),
            ApiError::Status(status, m) => (status, m),
        };
        error(status, message)
    }
}

/// A run request the intake refused: a bad value is 422, a resume with no run to resume 404.
impl From<IntakeError> for ApiError {
    fn from(e: IntakeError) -> Self {
        match e {
            IntakeError::Invalid(m) => ApiError::Unprocessable(m),
            IntakeError::NotFound(m) => ApiError::NotFound(m),
            IntakeError::Store(e) => ApiError::Store(e),
        }
    }
}

/// A schedule change refused: a bad value is 422, an unknown schedule 404, a schedule from
/// the config file or a taken name 409.
impl From<ScheduleError> for ApiError {
    fn from(e: ScheduleError) -> Self {
        match e {
            ScheduleError::Invalid(m) => ApiError::Unprocessable(m),
            ScheduleError::NotFound(m) => ApiError::NotFound(m),
            ScheduleError::Conflict(m) => ApiError::Conflict(m),
            ScheduleError::Store(e) => ApiError::Store(e),
        }
    }
}

/// A webhook delivery refused (see [`crate::hooks`] for the table of answers).
impl From<Refused> for ApiError {
    fn from(e: Refused) -> Self {
        match e {
            Refused::Unauthorized(m) => ApiError::Unauthorized(m),
            Refused::BadRequest(m) => ApiError::BadRequest(m),
            Refused::Unmatched(m) => ApiError::Unprocessable(m),
            Refused::NoRun(m) => ApiError::NotFound(m),
            Refused::Invalid(m) => ApiError::Unprocessable(m),
            Refused::Store(e) => ApiError::Store(e),
        }
    }
}

/// An error answer: `status` with `{"error": message}`.
pub(crate) fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (
        status,
        axum::Json(ErrorBody {
            error: message.into(),
        }),
    )
        .into_response()
}

/// A 503 with `Retry-After`: the store cannot answer now (`why`), retrying later can help.
pub(crate) fn unavailable(why: impl std::fmt::Display) -> Response {
    let mut response = error(
        StatusCode::SERVICE_UNAVAILABLE,
        format!(
            "the store is unavailable ({why}); nothing was changed — retry in \
             {RETRY_AFTER_SECONDS} seconds"
        ),
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS));
    response
}

/// True when `e` means the store could not be reached or is too busy to answer now, so the
/// same request may succeed later: what [`StoreError::is_transient`] says, and PostgreSQL's
/// connection exceptions (class 08), shutdowns and start-ups (57P01-57P03) and a full
/// connection table (53300).
pub(crate) fn store_unavailable(e: &StoreError) -> bool {
    if e.is_transient() {
        return true;
    }
    match e {
        StoreError::Database(sqlx::Error::Database(db)) => {
            let code = db.code();
            let code = code.as_deref().unwrap_or("");
            code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03" | "53300")
        }
        StoreError::Database(sqlx::Error::Tls(_) | sqlx::Error::Protocol(_)) => true,
        _ => false,
    }
}

/// The one mapping from a store error to an answer: 404, 409 and 422 for the caller's
/// mistakes, 503 with `Retry-After` when the store is unavailable, else a logged 500.
pub(crate) fn store_error(e: StoreError) -> Response {
    match e {
        StoreError::NotFound { .. } => error(StatusCode::NOT_FOUND, e.to_string()),
        StoreError::Conflict(m) => error(StatusCode::CONFLICT, m),
        StoreError::Invalid(m) => error(StatusCode::UNPROCESSABLE_ENTITY, m),
        e if store_unavailable(&e) => {
            tracing::warn!(error = %e, "API request refused: the store is unavailable");
            unavailable(e)
        }
        e => {
            tracing::error!(error = %e, "API request failed");
            error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
        }
    }
}

/// A JSON request body decoded as `T`, or the refusal [`decode_body`] and the content-type
/// check decide.
#[derive(Debug)]
pub(crate) struct JsonBody<T>(pub T);

impl<T, S> FromRequest<S> for JsonBody<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let content_type = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if !is_json_content_type(content_type) {
            return Err(ApiError::UnsupportedMediaType(
                "the body must be JSON; send it with `Content-Type: application/json`".into(),
            ));
        }
        let bytes = axum::body::Bytes::from_request(req, state)
            .await
            .map_err(|e| {
                ApiError::Status(
                    e.status(),
                    format!("cannot read the body: {}", e.body_text()),
                )
            })?;
        decode_body(&bytes)
            .map(JsonBody)
            .map_err(|(status, message)| ApiError::Status(status, message))
    }
}

/// `application/json`, optionally with parameters, or any `application/*+json`.
fn is_json_content_type(value: &str) -> bool {
    let essence = value
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// Decodes a JSON body as `T`: a body that is not JSON is a 400; JSON that does not fit `T`
/// (wrong type, bad enum value, missing or unknown field) is a 422 whose message starts with
/// the key's path (`concurrency_policy: unknown variant …`, `routes[0].agent: …`).
pub(crate) fn decode_body<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, (StatusCode, String)> {
    let mut json = serde_json::Deserializer::from_slice(bytes);
    let decoded: Result<T, _> = serde_path_to_error::deserialize(&mut json);
    let value = match decoded {
        Ok(value) => value,
        Err(e) => {
            let path = e.path().to_string();
            let inner = e.into_inner();
            return Err(refusal(&path, &inner));
        }
    };
    json.end().map_err(|e| refusal(".", &e)).map(|()| value)
}

/// Decodes one JSON value as `T`, or says what is wrong, naming the field
/// (`priority: invalid type: …`), as [`decode_body`] does for a whole body.
pub(crate) fn decode_value<T: DeserializeOwned>(
    value: serde_json::Value,
) -> Result<T, Undecodable> {
    serde_path_to_error::deserialize(value).map_err(Undecodable)
}

/// A JSON value that does not fit the type asked for; `Display` names the field and says
/// what is wrong, in [`decode_body`]'s words.
#[derive(Debug, thiserror::Error)]
#[error("{}", refusal(&.0.path().to_string(), .0.inner()).1)]
pub(crate) struct Undecodable(serde_path_to_error::Error<serde_json::Error>);

fn refusal(path: &str, e: &serde_json::Error) -> (StatusCode, String) {
    let message = without_position(e);
    match e.classify() {
        serde_json::error::Category::Data => {
            let message = if path == "." {
                message
            } else {
                format!("{path}: {message}")
            };
            (StatusCode::UNPROCESSABLE_ENTITY, message)
        }
        _ => (
            StatusCode::BAD_REQUEST,
            format!("the body is not valid JSON: {message}; send a JSON object"),
        ),
    }
}

/// serde_json's message without its " at line L column C" suffix.
fn without_position(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    text.strip_suffix(&suffix).unwrap_or(&text).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Body {
        name: String,
        #[serde(default)]
        mode: Option<Mode>,
        #[serde(default)]
        items: Vec<Item>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "lowercase")]
    enum Mode {
        Fast,
        Slow,
    }

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Item {
        count: u32,
    }

    fn refused(body: &str) -> (StatusCode, String) {
        decode_body::<Body>(body.as_bytes()).unwrap_err()
    }

    #[test]
    fn data_that_does_not_fit_is_422_naming_the_key() {
        let (status, m) = refused(r#"{"name": "a", "mode": "sometimes"}"#);
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(
            m,
            "mode: unknown variant `sometimes`, expected `fast` or `slow`"
        );
        let (status, m) = refused(r#"{"name": 7}"#);
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(m, "name: invalid type: integer `7`, expected a string");
        let (status, m) = refused(r#"{"name": "a", "items": [{"count": -1}]}"#);
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
        assert!(m.starts_with("items[0].count: invalid value"), "{m}");
        let (status, m) = refused(r#"{"mode": "fast"}"#);
        assert_eq!(
            (status, m.as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, "missing field `name`")
        );
        let (status, m) = refused(r#"{"name": "a", "nmae": "b"}"#);
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
        assert!(m.starts_with("nmae: unknown field `nmae`"), "{m}");
    }

    #[test]
    fn a_body_that_is_not_json_is_400() {
        for body in ["{not json", "", r#"{"name": "a"} trailing"#] {
            let (status, m) = refused(body);
            assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {m}");
            assert!(m.starts_with("the body is not valid JSON"), "{m}");
        }
        assert_eq!(decode_body::<Body>(br#"{"name": "a"}"#).unwrap().name, "a");
    }

    #[test]
    fn json_content_types_are_recognised() {
        for ok in [
            "application/json",
            "application/json; charset=utf-8",
            "Application/JSON",
            "application/merge-patch+json",
        ] {
            assert!(is_json_content_type(ok), "{ok}");
        }
        for no in ["", "text/plain", "application/x-www-form-urlencoded"] {
            assert!(!is_json_content_type(no), "{no}");
        }
    }

    #[test]
    fn an_unreachable_store_is_503_with_retry_after_and_a_bug_is_500() {
        let down = store_error(StoreError::Database(sqlx::Error::PoolTimedOut));
        assert_eq!(down.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            down.headers()[header::RETRY_AFTER],
            RETRY_AFTER_SECONDS.to_string().as_str()
        );
        let refused = store_error(StoreError::Connect {
            target: "127.0.0.1:5432/app".into(),
            detail: "connection refused".into(),
        });
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        let bug = store_error(StoreError::Corrupt("runs.status 'odd'".into()));
        assert_eq!(bug.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(bug.headers().get(header::RETRY_AFTER).is_none());
        assert_eq!(
            store_error(StoreError::Conflict("taken".into())).status(),
            StatusCode::CONFLICT
        );
    }

    /// The status and `{"error"}` text an [`ApiError`] answers with.
    async fn answer(e: impl Into<ApiError>) -> (StatusCode, String, Option<String>) {
        let response = e.into().into_response();
        let status = response.status();
        let retry = response
            .headers()
            .get(header::RETRY_AFTER)
            .map(|v| v.to_str().unwrap().to_string());
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        (status, body["error"].as_str().unwrap().to_string(), retry)
    }

    #[tokio::test]
    async fn each_refusal_answers_its_status_with_its_message_word_for_word() {
        let m = || "what was wrong".to_string();
        for (e, status) in [
            (ApiError::BadRequest(m()), StatusCode::BAD_REQUEST),
            (ApiError::Unauthorized(m()), StatusCode::UNAUTHORIZED),
            (ApiError::Forbidden(m()), StatusCode::FORBIDDEN),
            (ApiError::NotFound(m()), StatusCode::NOT_FOUND),
            (ApiError::Conflict(m()), StatusCode::CONFLICT),
            (
                ApiError::PayloadTooLarge(m()),
                StatusCode::PAYLOAD_TOO_LARGE,
            ),
            (
                ApiError::UnsupportedMediaType(m()),
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ),
            (
                ApiError::Unprocessable(m()),
                StatusCode::UNPROCESSABLE_ENTITY,
            ),
            (
                ApiError::Status(StatusCode::SERVICE_UNAVAILABLE, m()),
                StatusCode::SERVICE_UNAVAILABLE,
            ),
        ] {
            assert_eq!(answer(e).await, (status, m(), None));
        }
        let (status, message, retry) = answer(ApiError::Unavailable("down".into())).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            message.starts_with("the store is unavailable (down)"),
            "{message}"
        );
        assert_eq!(retry.as_deref(), Some("5"));
    }

    #[tokio::test]
    async fn the_layers_errors_convert_to_the_status_each_means() {
        let m = || "why".to_string();
        let not_found = (StatusCode::NOT_FOUND, m(), None);
        let invalid = (StatusCode::UNPROCESSABLE_ENTITY, m(), None);
        assert_eq!(answer(IntakeError::Invalid(m())).await, invalid);
        assert_eq!(answer(IntakeError::NotFound(m())).await, not_found);
        assert_eq!(answer(ScheduleError::Invalid(m())).await, invalid);
        assert_eq!(answer(ScheduleError::NotFound(m())).await, not_found);
        assert_eq!(
            answer(ScheduleError::Conflict(m())).await,
            (StatusCode::CONFLICT, m(), None)
        );
        assert_eq!(
            answer(Refused::Unauthorized(m())).await,
            (StatusCode::UNAUTHORIZED, m(), None)
        );
        assert_eq!(
            answer(Refused::BadRequest(m())).await,
            (StatusCode::BAD_REQUEST, m(), None)
        );
        assert_eq!(answer(Refused::Unmatched(m())).await, invalid);
        assert_eq!(answer(Refused::NoRun(m())).await, not_found);
        assert_eq!(answer(Refused::Invalid(m())).await, invalid);
        // A store error under any of them answers as the store's own would.
        let down = || StoreError::Database(sqlx::Error::PoolTimedOut);
        for e in [
            answer(down()).await,
            answer(IntakeError::Store(down())).await,
            answer(ScheduleError::Store(down())).await,
            answer(Refused::Store(down())).await,
        ] {
            assert_eq!(e.0, StatusCode::SERVICE_UNAVAILABLE);
            assert_eq!(e.2.as_deref(), Some("5"));
        }
        assert_eq!(
            answer(StoreError::Conflict(m())).await,
            (StatusCode::CONFLICT, m(), None)
        );
    }
}
