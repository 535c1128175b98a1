//! `GET /ui/runs`: runs newest first, with the filter form and the next-page link, fed by
//! [`crate::data::runs_page`]. The list updates live ([`crate::live::lists`]) with the same
//! filters and page: `/ui/live/runs` takes the page's own query.

use axum::Extension;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use minijinja::{Value, context};
use nightshift_store::{RunStatus, Trigger, UnknownName};
use serde::{Deserialize, Serialize};

use crate::actions::query_value;
use crate::auth::Session;
use crate::data::{RunFilter, runs_page};
use crate::{DashboardState, format, layout};

/// The filter form's fields, as the browser sends them (empty means no filter).
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
pub struct FilterForm {
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub agent: String,
    #[serde(default)]
    pub trigger: String,
    #[serde(default)]
    pub key: String,
    #[serde(default)]
    pub since: String,
    #[serde(default)]
    pub until: String,
    #[serde(default)]
    pub q: String,
    #[serde(default)]
    pub cursor: String,
}

fn some(s: &str) -> Option<String> {
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

/// Why a filter form asks for no filter; `Display` is what the page says.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadFilter {
    /// A status or trigger that is none of the names.
    #[error(transparent)]
    Name(#[from] UnknownName),
    /// A `since` or `until` that is not a time.
    #[error(transparent)]
    Time(#[from] format::NotATime),
}

/// The store filter the form asks for, or what is wrong with it (pure).
pub fn parse_filter(f: &FilterForm) -> Result<RunFilter, BadFilter> {
    Ok(RunFilter {
        status: some(&f.status)
            .map(|s| s.parse::<RunStatus>())
            .transpose()?,
        agent: some(&f.agent),
        trigger: some(&f.trigger).map(|s| s.parse::<Trigger>()).transpose()?,
        concurrency_key: some(&f.key),
        since: format::parse_time(&f.since)?,
        until: format::parse_time(&f.until)?,
        search: some(&f.q),
    })
}

#[derive(Debug, Serialize)]
struct Row {
    id: String,
    status: &'static str,
    agent: String,
    trigger: &'static str,
    key: String,
    created_utc: String,
    age: String,
    duration: String,
    turns: i64,
    tokens: String,
    cost: String,
    error: String,
    prompt: String,
}

/// The list the form asks for, as the context `runs_list.html` renders with, or the page
/// that says why not.
#[allow(clippy::result_large_err)] // the Err is the response
pub async fn list_ctx(state: &DashboardState, form: &FilterForm) -> Result<Value, Response> {
    let filter = parse_filter(form).map_err(|why| {
        layout::message(
            state,
            StatusCode::BAD_REQUEST,
            "That filter is not valid",
            &why.to_string(),
        )
    })?;
    let cursor = some(&form.cursor);
    let page = match runs_page(&state.store, &filter, cursor.as_deref(), 50).await {
        Ok(p) => p,
        Err(nightshift_store::Error::Invalid(why)) => {
            return Err(layout::message(
                state,
                StatusCode::BAD_REQUEST,
                "That page link is not valid",
                &format!("{why}. Go back to the first page of runs and page on from there."),
            ));
        }
        Err(e) => {
            return Err(layout::message(
                state,
                StatusCode::SERVICE_UNAVAILABLE,
                "The store failed",
                &e.to_string(),
            ));
        }
    };
    let now = state.store.now();
    let rows: Vec<Row> = page
        .runs
        .iter()
        .map(|r| Row {
            id: r.id.clone(),
            status: r.status.as_str(),
            agent: r.agent.clone(),
            trigger: r.trigger_kind.as_str(),
            key: r.concurrency_key.clone().unwrap_or_default(),
            created_utc: format::utc(r.created_at),
            age: format::age(now, r.created_at),
            duration: r
                .started_at
                .map(|s| format::duration(r.finished_at.unwrap_or(now) - s))
                .unwrap_or_default(),
            turns: r.turns,
            tokens: format::tokens(r.input_tokens + r.output_tokens),
            cost: format::money(r.cost_usd),
            error: r
                .error_head
                .as_deref()
                .map(|e| format::first_line(e, 120))
                .unwrap_or_default(),
            prompt: format::first_line(&r.prompt_head, 100),
        })
        .collect();
    let next = page.next_cursor.map(|c| {
        let mut f = form.clone();
        f.cursor = c;
        format!("/ui/runs?{}", query(&f))
    });
    Ok(context! { rows => Value::from(minijinja::value::Serde(&rows)), next })
}

pub async fn page(
    State(state): State<DashboardState>,
    Extension(session): Extension<Session>,
    Query(form): Query<FilterForm>,
) -> Response {
    let csrf = state.keys.csrf(&session);
    let statuses: Vec<&str> = RunStatus::ALL.iter().map(|s| s.as_str()).collect();
    let triggers: Vec<&str> = Trigger::ALL.iter().map(|s| s.as_str()).collect();
    if let Err(why) = parse_filter(&form) {
        return layout::render(
            &state,
            StatusCode::BAD_REQUEST,
            "runs.html",
            context! { csrf, form => Value::from(minijinja::value::Serde(&form)), statuses, triggers, agents => state.intake.agents().to_vec(), rows => Vec::<()>::new(), error => why.to_string(), signed_in => true, nav => "runs" },
        );
    }
    let list = match list_ctx(&state, &form).await {
        Ok(list) => list,
        Err(page) => return page,
    };
    // The live list asks for the same runs: the same filters, the same page.
    let live = format!("/ui/live/runs?{}", query(&form));
    layout::render(
        &state,
        StatusCode::OK,
        "runs.html",
        context! { csrf, form => Value::from(minijinja::value::Serde(&form)), statuses, triggers, agents => state.intake.agents().to_vec(), live, error => "", signed_in => true, nav => "runs", ..list },
    )
}

/// `status=…&…` of the form (only the form's own fields that are set, each
/// percent-encoded) (pure).
pub fn query(f: &FilterForm) -> String {
    let pairs = [
        ("status", &f.status),
        ("agent", &f.agent),
        ("trigger", &f.trigger),
        ("key", &f.key),
        ("since", &f.since),
        ("until", &f.until),
        ("q", &f.q),
        ("cursor", &f.cursor),
    ];
    let q: Vec<String> = pairs
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!("{k}={}", query_value(v)))
        .collect();
    q.join("&")
}
