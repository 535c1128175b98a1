//! `GET /ui/schedules` and the schedule actions.
//!
//! The page lists every schedule as the API's `GET /v1/schedules` describes it
//! ([`cron::describe`]): its expression, zone, next fire in its zone and in UTC, last run and
//! its status, counts, and where it was defined. The actions go through the API's code
//! paths: trigger is [`cron::trigger`] (fires now, whatever `enabled` says), enable and
//! disable are [`cron::update`] with only `enabled` set. Schedules from the config file are
//! refused by that code (they are re-applied at every start); the page shows no
//! enable/disable buttons for them, and a forged POST gets the same refusal as the API's
//! 409, as the flash. All three are safe to repeat and undone by the other button (a
//! triggered run can be cancelled), so none asks for confirmation.

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::{Extension, Form};
use minijinja::{Value, context};
use nightshift_scheduler::cron::{self, FireOutcome, ScheduleError, SchedulePatch, ScheduleView};
use nightshift_store::{Millis, ScheduleSource};
use serde::Serialize;

use crate::actions::{back_to, store_message};
use crate::auth::Session;
use crate::layout::{self, CsrfForm, FlashQuery, check_post};
use crate::{DashboardState, format};

/// One schedule as a row.
#[derive(Debug, Serialize, PartialEq)]
pub struct Row {
    pub name: String,
    pub cron: String,
    pub zone: String,
    pub agent: String,
    pub prompt: String,
    pub next_local: String,
    pub next_utc: String,
    pub next_in: String,
    pub last_status: String,
    pub last_run_id: String,
    pub last_fire_age: String,
    pub enabled: bool,
    pub source: &'static str,
    /// Made through the API, so the page may enable and disable it.
    pub from_api: bool,
    pub fired: i64,
    pub skipped: i64,
    pub missed: i64,
}

/// The row of one described schedule as of `now` (pure).
pub fn row(v: &ScheduleView, now: Millis) -> Row {
    let r = &v.row;
    Row {
        name: r.name.clone(),
        cron: r.cron.clone(),
        zone: r.timezone.clone(),
        agent: r.agent.clone(),
        prompt: format::first_line(&r.prompt, 100),
        next_local: v
            .next_fire_local
            .clone()
            .unwrap_or_else(|| "— (disabled)".into()),
        next_utc: v
            .next_fire_utc
            .clone()
            .unwrap_or_else(|| "— (disabled)".into()),
        next_in: r
            .next_fire_at
            .map(|t| format::age(now, t))
            .unwrap_or_default(),
        last_status: v
            .last_run_status
            .map(|s| s.as_str().to_string())
            .unwrap_or_default(),
        last_run_id: r.last_run_id.clone().unwrap_or_default(),
        last_fire_age: r
            .last_fire_at
            .map(|t| format::age(now, t))
            .unwrap_or_default(),
        enabled: r.enabled,
        source: r.source.as_str(),
        from_api: r.source == ScheduleSource::Api,
        fired: r.fired_count,
        skipped: r.skipped_count,
        missed: r.missed_count,
    }
}

/// The flash of a schedule error, as the API words it (pure).
pub fn schedule_message(e: &ScheduleError) -> String {
    match e {
        ScheduleError::Invalid(m) | ScheduleError::NotFound(m) | ScheduleError::Conflict(m) => {
            m.clone()
        }
        ScheduleError::Store(e) => store_message(e),
    }
}

/// The flash of a trigger's outcome (pure).
pub fn fire_message(name: &str, outcome: &FireOutcome) -> String {
    match outcome {
        FireOutcome::Enqueued {
            run_id,
            duplicate: false,
        } => format!("Triggered {name}: enqueued run {run_id}."),
        FireOutcome::Enqueued {
            run_id,
            duplicate: true,
        } => format!("Triggered {name}: this fire's run {run_id} already existed."),
        FireOutcome::Skipped { active_run } => format!(
            "Triggered {name}: skipped: run {active_run} of this schedule is still going (overlap = skip)."
        ),
    }
}

pub async fn page(
    State(state): State<DashboardState>,
    Extension(session): Extension<Session>,
    Query(q): Query<FlashQuery>,
) -> Response {
    let listed = match state.store.schedules().await {
        Ok(rows) => rows,
        Err(e) => return layout::store_failed(&state, &e),
    };
    let now = state.store.now();
    let mut rows = Vec::with_capacity(listed.len());
    for r in listed {
        match cron::describe(&state.store, r).await {
            Ok(v) => rows.push(row(&v, now)),
            Err(e) => return layout::store_failed(&state, &e),
        }
    }
    layout::render(
        &state,
        StatusCode::OK,
        "schedules.html",
        context! {
            rows => Value::from(minijinja::value::Serde(&rows)),
            flash => layout::flash(&state, &session, q.flash.as_deref(), q.fs.as_deref()),
            csrf => state.keys.csrf(&session), signed_in => true, nav => "schedules",
        },
    )
}

pub async fn trigger(
    State(state): State<DashboardState>,
    Extension(session): Extension<Session>,
    headers: HeaderMap,
    Path(name): Path<String>,
    Form(form): Form<CsrfForm>,
) -> Response {
    if let Err(refused) = check_post(&state, &session, &headers, &form.csrf) {
        return refused;
    }
    let flash = match cron::trigger(&state.intake, &name, &session.actor()).await {
        Ok(outcome) => fire_message(&name, &outcome),
        Err(e) => schedule_message(&e),
    };
    back_to(&state, &session, "/ui/schedules", &flash)
}

async fn set_enabled(
    state: DashboardState,
    session: Session,
    headers: HeaderMap,
    name: String,
    form: CsrfForm,
    enabled: bool,
) -> Response {
    if let Err(refused) = check_post(&state, &session, &headers, &form.csrf) {
        return refused;
    }
    let patch = SchedulePatch {
        enabled: Some(enabled),
        ..SchedulePatch::default()
    };
    let actor = session.actor();
    let op = state.store.as_operator(&actor);
    let updated = cron::update(op, &name, patch, &state.intake.agents()).await;
    let flash = match updated {
        Ok(r) if enabled => match r.next_fire_at {
            Some(t) => format!("Enabled {name}: next fire {}.", format::utc(t)),
            None => format!("Enabled {name}."),
        },
        Ok(_) => format!("Disabled {name}: it does not fire until enabled again."),
        Err(e) => schedule_message(&e),
    };
    back_to(&state, &session, "/ui/schedules", &flash)
}

pub async fn enable(
    State(state): State<DashboardState>,
    Extension(session): Extension<Session>,
    headers: HeaderMap,
    Path(name): Path<String>,
    Form(form): Form<CsrfForm>,
) -> Response {
    set_enabled(state, session, headers, name, form, true).await
}

pub async fn disable(
    State(state): State<DashboardState>,
    Extension(session): Extension<Session>,
    headers: HeaderMap,
    Path(name): Path<String>,
    Form(form): Form<CsrfForm>,
) -> Response {
    set_enabled(state, session, headers, name, form, false).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use nightshift_store::{Missed, Overlap, RunStatus, ScheduleRow};

    fn view(source: ScheduleSource, next: Option<Millis>) -> ScheduleView {
        ScheduleView {
            row: ScheduleRow {
                id: "s1".into(),
                name: "nightly".into(),
                source,
                cron: "0 3 * * *".into(),
                timezone: "Europe/Paris".into(),
                agent: "helper".into(),
                prompt: "Check <things>\nsecond line".into(),
                overlap: Overlap::Skip,
                missed: Missed::Skip,
                enabled: next.is_some(),
                next_fire_at: next,
                last_fire_at: Some(0),
                last_run_id: Some("r9".into()),
                fired_count: 3,
                skipped_count: 1,
                missed_count: 0,
                created_at: 0,
                updated_at: 0,
            },
            next_fire_local: next.map(|_| "2026-12-03T03:00:00+01:00".into()),
            next_fire_utc: next.map(|_| "2026-12-03T02:00:00Z".into()),
            last_fire_local: None,
            last_run_status: Some(RunStatus::Succeeded),
        }
    }

    #[test]
    fn a_row_shows_both_zones_the_source_and_the_last_run() {
        let r = row(&view(ScheduleSource::Config, Some(3_600_000)), 0);
        assert_eq!(r.next_local, "2026-12-03T03:00:00+01:00");
        assert_eq!(r.next_utc, "2026-12-03T02:00:00Z");
        assert_eq!(r.next_in, "in 1h");
        assert_eq!((r.source, r.from_api, r.enabled), ("config", false, true));
        assert_eq!(
            (r.last_status.as_str(), r.last_run_id.as_str()),
            ("succeeded", "r9")
        );
        assert_eq!(
            r.prompt, "Check <things>",
            "first line; escaping is the template's"
        );
        let off = row(&view(ScheduleSource::Api, None), 0);
        assert!(off.from_api && !off.enabled);
        assert_eq!(off.next_utc, "— (disabled)");
        assert_eq!(off.next_in, "");
    }

    #[test]
    fn outcomes_and_refusals_read_as_the_api_says_them() {
        let enq = FireOutcome::Enqueued {
            run_id: "r1".into(),
            duplicate: false,
        };
        assert_eq!(fire_message("n", &enq), "Triggered n: enqueued run r1.");
        let skip = FireOutcome::Skipped {
            active_run: "r0".into(),
        };
        assert!(fire_message("n", &skip).contains("skipped: run r0"));
        let refused = ScheduleError::Conflict("comes from the config file".into());
        assert_eq!(schedule_message(&refused), "comes from the config file");
    }
}
