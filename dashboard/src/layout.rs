//! The page frame and sign-in: the embedded templates, rendering, the session middleware,
//! login and logout, the plain message pages (401, 403, errors), and reading a page's
//! signed flash ([`flash`]).

use axum::Form;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Redirect, Response};
use minijinja::{Environment, Value, context};
use serde::Deserialize;

use crate::DashboardState;
use crate::auth::{self, Session};

/// The embedded templates; `.html` auto-escapes every value.
pub fn templates() -> Environment<'static> {
    let mut env = Environment::new();
    for (name, src) in [
        ("base.html", include_str!("templates/base.html")),
        ("login.html", include_str!("templates/login.html")),
        ("message.html", include_str!("templates/message.html")),
        ("runs.html", include_str!("templates/runs.html")),
        ("runs_list.html", include_str!("templates/runs_list.html")),
        ("decision.html", include_str!("templates/decision.html")),
        ("run.html", include_str!("templates/run.html")),
        ("run_header.html", include_str!("templates/run_header.html")),
        ("item.html", include_str!("templates/item.html")),
        ("confirm.html", include_str!("templates/confirm.html")),
        ("queue.html", include_str!("templates/queue.html")),
        ("queue_live.html", include_str!("templates/queue_live.html")),
        ("schedules.html", include_str!("templates/schedules.html")),
        ("hooks.html", include_str!("templates/hooks.html")),
        (
            "notifications.html",
            include_str!("templates/notifications.html"),
        ),
        ("approvals.html", include_str!("templates/approvals.html")),
        (
            "approvals_list.html",
            include_str!("templates/approvals_list.html"),
        ),
    ] {
        env.add_template(name, src)
            .expect("embedded templates parse");
    }
    env
}

/// Renders `name` with `ctx`; a template error is a 500 page naming it.
pub fn render(state: &DashboardState, status: StatusCode, name: &str, ctx: Value) -> Response {
    match state
        .templates
        .get_template(name)
        .and_then(|t| t.render(ctx))
    {
        Ok(html) => (status, Html(html)).into_response(),
        Err(e) => {
            tracing::error!(error = %e, template = name, "dashboard template failed");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("template {name} failed: {e}"),
            )
                .into_response()
        }
    }
}

/// Renders `name` (a page's part, which the live lists send) with `ctx` to a string.
pub fn render_string(
    state: &DashboardState,
    name: &str,
    ctx: Value,
) -> Result<String, minijinja::Error> {
    state.templates.get_template(name)?.render(ctx)
}

/// A message page: `title`, `message`, and a link back.
pub fn message(state: &DashboardState, status: StatusCode, title: &str, message: &str) -> Response {
    render(
        state,
        status,
        "message.html",
        context! { title, message, signed_in => true },
    )
}

/// A page's flash in its query: `flash` and its signature `fs` (see `Keys::flash_mac`).
#[derive(Debug, Default, Clone, Deserialize)]
pub struct FlashQuery {
    #[serde(default)]
    pub flash: Option<String>,
    #[serde(default)]
    pub fs: Option<String>,
}

/// The flash to show: the text when it is signed for this session, else nothing (a link
/// cannot put its own words on a page).
pub fn flash(
    state: &DashboardState,
    session: &Session,
    flash: Option<&str>,
    fs: Option<&str>,
) -> String {
    flash
        .filter(|text| state.keys.flash_ok(session, text, fs.unwrap_or("")))
        .unwrap_or_default()
        .to_string()
}

/// The store failed while reading a page: a 503 saying so.
pub fn store_failed(state: &DashboardState, e: &dyn std::fmt::Display) -> Response {
    message(
        state,
        StatusCode::SERVICE_UNAVAILABLE,
        "The store failed",
        &format!("{e}. Reload the page to try again."),
    )
}

/// Sends a request without a valid session to the login page.
pub async fn require_session(
    State(state): State<DashboardState>,
    mut req: Request,
    next: Next,
) -> Response {
    let now = state.store.now();
    match auth::cookie(req.headers(), auth::COOKIE).and_then(|c| state.keys.verify(c, now)) {
        Some(session) => {
            req.extensions_mut().insert(session);
            next.run(req).await
        }
        None => Redirect::to("/ui/login").into_response(),
    }
}

pub async fn login_page(State(state): State<DashboardState>) -> Response {
    render(
        &state,
        StatusCode::OK,
        "login.html",
        context! { error => "" },
    )
}

#[derive(Debug, Deserialize)]
pub struct LoginForm {
    #[serde(default)]
    token: String,
}

pub async fn login(
    State(state): State<DashboardState>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    if let Some(why) = auth::cross_site(&headers) {
        return render(
            &state,
            StatusCode::FORBIDDEN,
            "login.html",
            context! { error => why },
        );
    }
    let Some(signer) = (state.sign_in)(form.token.trim()) else {
        return render(
            &state,
            StatusCode::UNAUTHORIZED,
            "login.html",
            context! { error => "That is not the API token (nor one of the [[server.tokens]]). Use the token the daemon printed at start (or its api-token file)." },
        );
    };
    let cookie = state.keys.issue(state.store.now(), &signer);
    (
        StatusCode::SEE_OTHER,
        [
            (header::SET_COOKIE, auth::set_cookie(&cookie)),
            (header::LOCATION, "/ui/runs".to_string()),
        ],
    )
        .into_response()
}

#[derive(Debug, Deserialize)]
pub struct CsrfForm {
    #[serde(default)]
    pub csrf: String,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub confirmed: Option<String>,
}

/// Refuses a POST that is cross-site or lacks the session's CSRF token (a 403 page).
#[allow(clippy::result_large_err)] // the Err is the response
pub fn check_post(
    state: &DashboardState,
    session: &Session,
    headers: &HeaderMap,
    csrf: &str,
) -> Result<(), Response> {
    if let Some(why) = auth::cross_site(headers) {
        return Err(message(
            state,
            StatusCode::FORBIDDEN,
            "Refused",
            &format!("{why}. Nothing was changed."),
        ));
    }
    if session.read_only {
        return Err(message(
            state,
            StatusCode::FORBIDDEN,
            "Refused",
            &format!(
                "You signed in with '{}', a read-only token: it may look, not act. Sign in with an operator token to do this. Nothing was changed.",
                session.name
            ),
        ));
    }
    if !state.keys.csrf_ok(session, csrf) {
        return Err(message(
            state,
            StatusCode::FORBIDDEN,
            "Refused",
            "The form's CSRF token is missing or wrong (an old page, or a request from another site). Reload the page and try again. Nothing was changed.",
        ));
    }
    Ok(())
}

pub async fn logout(
    State(state): State<DashboardState>,
    axum::Extension(session): axum::Extension<Session>,
    headers: HeaderMap,
    Form(form): Form<CsrfForm>,
) -> Response {
    if let Err(refused) = check_post(&state, &session, &headers, &form.csrf) {
        return refused;
    }
    (
        StatusCode::SEE_OTHER,
        [
            (header::SET_COOKIE, auth::clear_cookie()),
            (header::LOCATION, "/ui/login".to_string()),
        ],
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_embedded_template_parses_and_renders_empty() {
        let env = templates();
        let none = Vec::<()>::new();
        let q = context! { states => none.clone(), workers => none.clone(), leases => none };
        for (name, empty) in [
            ("queue.html", "none queued"),
            ("schedules.html", "No schedules; add"),
            ("hooks.html", "No webhooks; add"),
            ("notifications.html", "No notifications yet"),
            ("approvals.html", "No tool call is waiting"),
            ("confirm.html", "No, go back"),
        ] {
            let html = env
                .get_template(name)
                .and_then(|t| {
                    t.render(
                        context! { signed_in => true, csrf => "c", nav => "queue", q => q.clone() },
                    )
                })
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(
                html.contains("href=\"/ui/queue\" aria-current=\"page\""),
                "{name}: {html}"
            );
            assert!(html.contains(empty), "{name}: {html}");
        }
    }
}
