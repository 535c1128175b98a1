//! The API's routes and its OpenAPI 3.1 document, built from the same place.
//!
//! Every route of the API is registered here (or in a module's `routes()` merged here) with
//! `utoipa-axum`'s [`routes!`], which takes the method and path from the handler's
//! `#[utoipa::path]`: a handler cannot be routed without being documented, and [`document`]
//! is built from the very routers [`routes`] serves. On top of what each handler declares,
//! the document gets, by construction:
//! - the bearer security scheme on every route behind the token (`/v1/…`), and the 401;
//! - the error answers every route shares: 503 with `Retry-After` when the store is
//!   unavailable, 500 for a bug; and on routes with a JSON body, 400 (not JSON), 415 (not
//!   `application/json`) and 422 (a value that does not fit, naming the key).
//!
//! `GET /metrics` is behind the token (and open on `telemetry.metrics_address`).
//! `GET /healthz`, `GET /readyz`, `GET /openapi.json` and `POST /hooks/{name}` (signed) need
//! no token; the document holds no secrets. The dashboard (`/ui…`, HTML) is not part of it.

use std::sync::OnceLock;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::middleware;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::openapi::path::Operation;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{
    ContentBuilder, HeaderBuilder, OpenApi as Document, RefOr, ResponseBuilder, Type,
};
use utoipa::{OpenApi, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::{self, ApiError, ApiState, ErrorBody};
use crate::api_errors::RETRY_AFTER_SECONDS;

/// How long `GET /readyz` waits for the store before answering 503.
pub(crate) const READY_TIMEOUT: Duration = Duration::from_secs(2);

/// The name of the bearer security scheme in the document.
const BEARER: &str = "bearer";

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Nightshift",
        description = "The HTTP API of `nightshift serve`: runs, approvals, wakeups, \
                       schedules, background tasks, webhooks and notifications. Every error \
                       is `{\"error\": \"…\"}`; a refused request changes nothing.",
    ),
    components(schemas(ErrorBody)),
    tags(
        (name = "runs"), (name = "approvals"), (name = "wakeups"), (name = "tasks"),
        (name = "schedules"), (name = "hooks"), (name = "notifications"), (name = "audit"), (name = "health"),
    )
)]
struct ApiDoc;

/// The routes behind the API token (`Authorization: Bearer <token>`).
fn token_routes() -> OpenApiRouter<ApiState> {
    OpenApiRouter::new()
        .merge(api::routes())
        .merge(crate::batch_api::routes())
        .merge(crate::schedules_api::routes())
        .merge(crate::tasks_api::routes())
        .merge(crate::hooks::token_routes())
        .merge(crate::metrics::api_routes())
        .merge(crate::queue_api::routes())
        .merge(crate::audit_api::routes())
        .merge(crate::retention_api::routes())
}

/// The routes without the token.
fn public_routes() -> OpenApiRouter<ApiState> {
    OpenApiRouter::new()
        .routes(routes!(healthz))
        .routes(routes!(readyz))
        .routes(routes!(openapi_json))
        .merge(crate::hooks::public_routes())
}

/// Every route of the API (not the dashboard), the token checked where it is needed.
pub(crate) fn routes(state: &ApiState) -> Router<ApiState> {
    let (token, _) = token_routes().split_for_parts();
    let (public, _) = public_routes().split_for_parts();
    public.merge(token.route_layer(middleware::from_fn_with_state(
        state.clone(),
        api::require_token,
    )))
}

/// The OpenAPI 3.1 document of every route [`routes`] serves.
pub fn document() -> Document {
    let (_, mut token) = token_routes().split_for_parts();
    for (_, op) in operations(&mut token) {
        op.security = Some(vec![SecurityRequirement::new(BEARER, Vec::<String>::new())]);
        add_error(op, 401, "missing or wrong API token");
    }
    let (_, public) = public_routes().split_for_parts();
    let mut doc = ApiDoc::openapi();
    doc.merge(token);
    doc.merge(public);
    let components = doc.components.get_or_insert_with(Default::default);
    components.add_security_scheme(
        BEARER,
        SecurityScheme::Http(
            HttpBuilder::new()
                .scheme(HttpAuthScheme::Bearer)
                .description(Some(
                    "the API token: $NIGHTSHIFT_API_TOKEN (server.token_env) or \
                     <runtime.data_dir>/api-token",
                ))
                .build(),
        ),
    );
    for (path, op) in operations(&mut doc) {
        if op.request_body.is_some() {
            add_error(op, 400, "the body is not JSON");
            add_error(
                op,
                415,
                "the body is not sent as `Content-Type: application/json`",
            );
            add_error(
                op,
                422,
                "a value that does not fit (wrong type, bad enum value, missing or unknown \
                 field), naming the key",
            );
        }
        if !STORELESS.contains(&path.as_str()) {
            add_store_errors(op);
        }
    }
    doc
}

/// The document as served (built once).
fn served_document() -> &'static Document {
    static DOC: OnceLock<Document> = OnceLock::new();
    DOC.get_or_init(document)
}

/// The paths that answer without the store (so never 503).
const STORELESS: [&str; 2] = ["/healthz", "/openapi.json"];

/// Every operation of `doc`, with its path.
fn operations(doc: &mut Document) -> impl Iterator<Item = (&String, &mut Operation)> {
    doc.paths.paths.iter_mut().flat_map(|(path, item)| {
        [
            item.get.as_mut(),
            item.put.as_mut(),
            item.post.as_mut(),
            item.delete.as_mut(),
            item.options.as_mut(),
            item.head.as_mut(),
            item.patch.as_mut(),
            item.trace.as_mut(),
        ]
        .into_iter()
        .flatten()
        .map(move |op| (path, op))
    })
}

fn error_content() -> utoipa::openapi::Content {
    ContentBuilder::new()
        .schema(Some(RefOr::Ref(utoipa::openapi::Ref::from_schema_name(
            "ErrorBody",
        ))))
        .build()
}

/// Adds the error answer `status` to `op`, unless the handler declared its own.
fn add_error(op: &mut Operation, status: u16, description: &str) {
    let key = status.to_string();
    if op.responses.responses.contains_key(&key) {
        return;
    }
    let response = ResponseBuilder::new()
        .description(description)
        .content("application/json", error_content())
        .build();
    op.responses.responses.insert(key, RefOr::T(response));
}

fn add_store_errors(op: &mut Operation) {
    let retry_after = HeaderBuilder::new()
        .schema(utoipa::openapi::schema::Object::with_type(Type::Integer))
        .description(Some(format!(
            "seconds to wait before retrying ({RETRY_AFTER_SECONDS})"
        )))
        .build();
    let unavailable = ResponseBuilder::new()
        .description("the store is unavailable (unreachable, shutting down, busy); nothing was changed, retry after `Retry-After` seconds")
        .header("Retry-After", retry_after)
        .content("application/json", error_content())
        .build();
    op.responses
        .responses
        .insert("503".into(), RefOr::T(unavailable));
    add_error(
        op,
        500,
        "a bug: the store returned something it should not; logged",
    );
}

/// `{"ok": true}`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Health {
    ok: bool,
}

/// `GET /healthz`: liveness. Answers while the process serves HTTP, whatever the store does.
#[utoipa::path(
    get, path = "/healthz", tag = "health",
    responses((status = 200, description = "the daemon is up", body = Health))
)]
async fn healthz() -> Json<Health> {
    Json(Health { ok: true })
}

/// `GET /readyz`: readiness. 200 when the store takes a write transaction within
/// [`READY_TIMEOUT`], else 503 with `Retry-After` and why (no credentials).
#[utoipa::path(
    get, path = "/readyz", tag = "health",
    responses((status = 200, description = "the store answers", body = Health))
)]
async fn readyz(State(state): State<ApiState>) -> Result<Json<Health>, ApiError> {
    match tokio::time::timeout(READY_TIMEOUT, state.store.ping()).await {
        Ok(Ok(())) => Ok(Json(Health { ok: true })),
        Ok(Err(e)) => Err(ApiError::Unavailable(e.to_string())),
        Err(_) => Err(ApiError::Unavailable(format!(
            "no answer within {} ms",
            READY_TIMEOUT.as_millis()
        ))),
    }
}

/// `GET /openapi.json`: this document.
#[utoipa::path(
    get, path = "/openapi.json", tag = "health",
    responses((status = 200, description = "the OpenAPI 3.1 document of this API", content_type = "application/json", body = Object))
)]
async fn openapi_json() -> Response {
    (StatusCode::OK, Json(served_document())).into_response()
}
