//! `GET /ui/hooks`: each configured webhook with its routes (what each takes and makes), its
//! counts per outcome since this daemon started (the in-process counters `GET /v1/hooks`
//! shows), and its recent deliveries newest first with links to the runs each made (the
//! durable record `GET /v1/hooks/{name}/deliveries` reads).
//!
//! Only what the API shows is shown: names, signature scheme, routes, counts, delivery ids
//! and runs — never a hook's secret (the dashboard cannot reach it: it lives inside the
//! hook's verifier).

use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use minijinja::{Value, context};
use nightshift_scheduler::hooks::{DeliveryRun, Hook, RouteKind};
use nightshift_store::{Millis, WebhookDelivery};
use serde::Serialize;
use std::sync::atomic::Ordering;

use crate::auth::Session;
use crate::{DashboardState, format, layout};

/// How many recent deliveries each hook shows.
pub const RECENT: i64 = 20;

#[derive(Debug, Serialize, PartialEq)]
pub struct RouteView {
    pub name: String,
    pub kind: &'static str,
    pub events: String,
    pub agent: String,
}

#[derive(Debug, Serialize, PartialEq)]
pub struct RunLink {
    pub route: String,
    pub run_id: String,
    /// `duplicate`, `skipped` or empty.
    pub note: &'static str,
}

#[derive(Debug, Serialize, PartialEq)]
pub struct DeliveryView {
    pub delivery_id: String,
    pub event: String,
    pub status: &'static str,
    pub received: i64,
    pub first_utc: String,
    pub first_age: String,
    pub runs: Vec<RunLink>,
    /// The recorded runs could not be read (shown as such rather than hidden).
    pub runs_unreadable: bool,
}

#[derive(Debug, Serialize)]
pub struct HookView {
    pub name: String,
    pub path: String,
    pub signature: &'static str,
    pub routes: Vec<RouteView>,
    pub counts: Vec<(&'static str, u64)>,
    pub deliveries: Vec<DeliveryView>,
}

/// The routes of `hook` (pure).
pub fn routes(hook: &Hook) -> Vec<RouteView> {
    hook.routes()
        .iter()
        .map(|r| RouteView {
            name: r.name.clone(),
            kind: match r.kind {
                RouteKind::Start => "start",
                RouteKind::Resume => "resume",
                RouteKind::Cancel => "cancel",
            },
            events: r
                .events()
                .map(|e| e.join(", "))
                .unwrap_or_else(|| "any event".into()),
            agent: r.agent.clone().unwrap_or_default(),
        })
        .collect()
}

/// One recorded delivery as of `now` (pure): its `runs` column is the JSON list of
/// [`DeliveryRun`]s the store wrote.
pub fn delivery(d: &WebhookDelivery, now: Millis) -> DeliveryView {
    let parsed: Option<Vec<DeliveryRun>> = match d.runs.as_deref() {
        None => Some(Vec::new()),
        Some(text) => serde_json::from_str(text).ok(),
    };
    DeliveryView {
        delivery_id: d.delivery_id.clone(),
        event: d.event.clone(),
        status: d.status.as_str(),
        received: d.received,
        first_utc: format::utc(d.first_received_at),
        first_age: format::age(now, d.first_received_at),
        runs_unreadable: parsed.is_none(),
        runs: parsed
            .unwrap_or_default()
            .into_iter()
            .map(|r| RunLink {
                note: if r.skipped {
                    "skipped"
                } else if r.duplicate {
                    "duplicate"
                } else {
                    ""
                },
                route: r.route,
                run_id: r.run_id,
            })
            .collect(),
    }
}

pub async fn page(
    State(state): State<DashboardState>,
    Extension(session): Extension<Session>,
) -> Response {
    let now = state.store.now();
    let mut hooks = Vec::new();
    for h in state.hooks.iter() {
        let recorded = match state.store.webhook_deliveries(&h.name, RECENT).await {
            Ok(rows) => rows,
            Err(e) => return layout::store_failed(&state, &e),
        };
        hooks.push(HookView {
            name: h.name.clone(),
            path: format!("/hooks/{}", h.name),
            signature: h.scheme.name(),
            routes: routes(&h),
            counts: h.counters.snapshot().into_iter().collect(),
            deliveries: recorded.iter().map(|d| delivery(d, now)).collect(),
        });
    }
    layout::render(
        &state,
        StatusCode::OK,
        "hooks.html",
        context! {
            hooks => Value::from(minijinja::value::Serde(&hooks)),
            unknown => state.hooks.unknown.load(Ordering::Relaxed),
            csrf => state.keys.csrf(&session), signed_in => true, nav => "hooks",
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use nightshift_store::WebhookDeliveryStatus;

    fn recorded(runs: Option<&str>) -> WebhookDelivery {
        WebhookDelivery {
            hook: "gh".into(),
            delivery_id: "d-1".into(),
            event: "push".into(),
            status: WebhookDeliveryStatus::Done,
            runs: runs.map(str::to_string),
            received: 2,
            first_received_at: 40_000,
            last_received_at: 50_000,
            finished_at: Some(41_000),
        }
    }

    #[test]
    fn a_delivery_links_the_runs_it_made_and_says_when_it_cannot_read_them() {
        let runs = r#"[{"route":"review","kind":"start","run_id":"r1","job_id":1,"duplicate":false,"skipped":false},
                      {"route":"review","kind":"start","run_id":"r0","job_id":0,"duplicate":false,"skipped":true}]"#;
        let v = delivery(&recorded(Some(runs)), 100_000);
        assert_eq!(v.runs.len(), 2);
        assert_eq!((v.runs[0].run_id.as_str(), v.runs[0].note), ("r1", ""));
        assert_eq!(v.runs[1].note, "skipped");
        assert_eq!(v.first_age, "1m ago");
        assert!(!v.runs_unreadable);
        let none = delivery(&recorded(None), 100_000);
        assert!(none.runs.is_empty() && !none.runs_unreadable);
        let bad = delivery(&recorded(Some("not json")), 100_000);
        assert!(bad.runs.is_empty() && bad.runs_unreadable);
    }
}
