//! # nightshift-dashboard
//!
//! The web dashboard `nightshift serve` serves under `/ui` on the API's listener: sign in
//! with the API token; the runs list, a run's live timeline, the queue, schedules, webhooks,
//! notifications and the approvals inbox; and the actions (cancel, wake, approve, deny a
//! run's call; trigger, enable, disable a schedule; redeliver a dead notification), each
//! through the same code path as the API's handler.
//!
//! What it guarantees:
//! - **One binary.** Templates, CSS and JS are embedded (`include_str!`).
//! - **Signed in, CSRF-safe.** Every page but login and static needs a session
//!   ([`auth`]); every POST checks the form's CSRF token and refuses cross-site requests with
//!   a 403 that changes nothing. The `/v1` API keeps its bearer rule and ignores the cookie.
//! - **Escaped and locked down.** Every value is auto-escaped; every response carries a CSP
//!   without inline script, `X-Frame-Options: DENY`, `Referrer-Policy: same-origin` (never a
//!   referrer to another site; `no-referrer` would make browsers send `Origin: null` on the
//!   dashboard's own forms) and pages
//!   `Cache-Control: no-store`. The token is never rendered.
//!
//! - **Honest flashes.** After an action the browser is sent back (303) to the page it
//!   acted from with a flash message signed for the session ([`actions::back_to`]), so a
//!   link cannot put words on a page.
//!
//! - **Live.** A run's timeline and header, the runs list, the queue and the approvals
//!   inbox update while they are open ([`live`]), without a reload, and never take away a
//!   part the operator is using (a reason being typed, the focus, an open `<details>`).
//!
//! One module per page: [`runs`], [`run_page`] (+ [`live`], [`files`]), [`queue`],
//! [`schedules`], [`hooks`], [`notifications`], [`approvals`]; the run actions are in
//! [`actions`]; the pure parts are [`format`], [`timeline`] and [`decision`] (what an
//! approval decides on).

pub mod actions;
pub mod approvals;
pub mod auth;
pub mod data;
pub mod decision;
pub mod files;
pub mod format;
pub mod hooks;
pub mod layout;
pub mod live;
pub mod notifications;
pub mod queue;
pub mod run_page;
pub mod runs;
pub mod schedules;
pub mod timeline;

#[cfg(test)]
mod test_support;

use std::sync::Arc;

use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderValue, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use nightshift_scheduler::Intake;
use nightshift_scheduler::hooks::HookSet;
use nightshift_store::Store;

/// Where the dashboard gets the guard of each fork it makes: the daemon's config as of now,
/// or why it cannot.
pub type ForkGuardSource =
    Arc<dyn Fn() -> Result<nightshift_agent::fork::ForkGuard, String> + Send + Sync>;

/// What the dashboard's handlers share.
#[derive(Clone)]
pub struct DashboardState {
    pub store: Store,
    /// The main API token (sessions are keyed from it).
    pub token: Arc<String>,
    /// Who a sign-in token is (every token the API accepts; by default only the main one).
    pub sign_in: auth::SignIn,
    /// Where runs are checked and enqueued (a schedule's trigger goes through it, as the
    /// API's does); it knows the configured agent names (the agent filter's choices), as
    /// they are after a reload.
    pub intake: Intake,
    /// The configured webhooks, with their in-process counters (as `GET /v1/hooks` shows).
    pub hooks: Arc<HookSet>,
    /// This daemon's run files (artifacts, task logs), when it has a data directory.
    pub files: Option<Arc<files::Files>>,
    /// What a fork made here is checked against and stored through, from the daemon's
    /// config as of now (it changes on reload). Without it (by default) the dashboard
    /// refuses forks and reruns, saying so.
    pub fork_guard: Option<ForkGuardSource>,
    pub(crate) keys: auth::Keys,
    pub(crate) templates: Arc<minijinja::Environment<'static>>,
}

impl DashboardState {
    /// The state for `store`, `token`, the API's `intake` (which knows the configured
    /// agents) and its `hooks`.
    pub fn new(
        store: Store,
        token: Arc<String>,
        intake: Intake,
        hooks: Arc<HookSet>,
    ) -> DashboardState {
        DashboardState {
            keys: auth::Keys::new(&token),
            sign_in: auth::only(token.clone()),
            store,
            token,
            intake,
            hooks,
            files: None,
            fork_guard: None,
            templates: Arc::new(layout::templates()),
        }
    }

    /// The state whose sign-in takes the tokens `sign_in` knows (the API's named tokens).
    pub fn with_sign_in(mut self, sign_in: auth::SignIn) -> DashboardState {
        self.sign_in = sign_in;
        self
    }

    /// The state whose forks are checked and stored through the guard `guard` gives.
    pub fn with_fork_guard(mut self, guard: ForkGuardSource) -> DashboardState {
        self.fork_guard = Some(guard);
        self
    }

    /// The state that shows the run files under `data_dir` (artifacts, running tasks'
    /// output).
    pub fn with_data_dir(mut self, data_dir: std::path::PathBuf) -> DashboardState {
        self.files = Some(Arc::new(files::Files { data_dir }));
        self
    }
}

impl std::fmt::Debug for DashboardState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DashboardState")
            .field("agents", &self.intake.agents())
            .field("token", &"[redacted]")
            .finish()
    }
}

/// The dashboard's routes, under `/ui` (and `GET /` redirecting to it).
pub fn router(state: DashboardState) -> Router {
    let signed_in = Router::new()
        .route("/ui/", get(|| async { Redirect::to("/ui/runs") }))
        .route("/ui", get(|| async { Redirect::to("/ui/runs") }))
        .route("/ui/runs", get(runs::page))
        .route("/ui/runs/{id}", get(run_page::page))
        .route("/ui/runs/{id}/live", get(live::stream))
        .route("/ui/runs/{id}/artifacts/{name}", get(files::artifact))
        .route("/ui/runs/{id}/cancel", post(actions::cancel))
        .route("/ui/runs/{id}/fork", post(actions::fork))
        .route("/ui/runs/{id}/wake", post(actions::wake))
        .route("/ui/runs/{id}/approvals/{call}", post(actions::decide))
        .route("/ui/live/runs", get(live::lists::runs))
        .route("/ui/live/queue", get(live::lists::queue))
        .route("/ui/live/approvals", get(live::lists::approvals))
        .route("/ui/queue", get(queue::page))
        .route("/ui/schedules", get(schedules::page))
        .route("/ui/schedules/{name}/trigger", post(schedules::trigger))
        .route("/ui/schedules/{name}/enable", post(schedules::enable))
        .route("/ui/schedules/{name}/disable", post(schedules::disable))
        .route("/ui/hooks", get(hooks::page))
        .route("/ui/notifications", get(notifications::page))
        .route(
            "/ui/notifications/{id}/redeliver",
            post(notifications::redeliver),
        )
        .route("/ui/approvals", get(approvals::page))
        .route("/ui/confirm", get(actions::confirm_page))
        .route("/ui/logout", post(layout::logout))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            layout::require_session,
        ));
    Router::new()
        .route("/", get(|| async { Redirect::to("/ui/") }))
        .route("/ui/login", get(layout::login_page).post(layout::login))
        .route(
            "/ui/static/app.css",
            get(|| async { asset("text/css", include_str!("static/app.css")) }),
        )
        .route(
            "/ui/static/app.js",
            get(|| async { asset("text/javascript", include_str!("static/app.js")) }),
        )
        .merge(signed_in)
        .layer(middleware::from_fn(security_headers))
        .with_state(state)
}

fn asset(kind: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        body,
    )
        .into_response()
}

async fn security_headers(req: Request, next: Next) -> Response {
    let is_ui = req.uri().path().starts_with("/ui");
    let is_static = req.uri().path().starts_with("/ui/static/");
    let mut resp = next.run(req).await;
    if is_ui {
        let h = resp.headers_mut();
        h.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(
                "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
            ),
        );
        h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
        h.insert(
            header::REFERRER_POLICY,
            HeaderValue::from_static("same-origin"),
        );
        h.insert(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        );
        if !is_static {
            h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        }
    }
    resp
}
