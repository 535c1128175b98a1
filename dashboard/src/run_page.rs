//! `GET /ui/runs/{id}`: the run's header (status, usage, actions; `run_header.html`) and its
//! timeline ([`crate::timeline::build`]), each item rendered by `item.html`. The live stream
//! ([`crate::live`]) sends the same fragments, header and items, as they change.

use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use minijinja::{Value, context};
use nightshift_store::{Millis, Run, RunStatus, TaskStatus};

use crate::auth::Session;
use crate::layout::FlashQuery;
use crate::timeline::{self, Item, TaskView};
use crate::{DashboardState, format, layout};

/// The run, its items and the newest seq, or the page that says why not.
#[allow(clippy::result_large_err)]
pub async fn load(state: &DashboardState, id: &str) -> Result<(Run, Vec<Item>, i64), Response> {
    let store_err = |e: nightshift_store::Error| {
        layout::message(
            state,
            StatusCode::SERVICE_UNAVAILABLE,
            "The store failed",
            &e.to_string(),
        )
    };
    let run = match state.store.run(id).await {
        Ok(Some(r)) => r,
        Ok(None) => {
            return Err(layout::message(
                state,
                StatusCode::NOT_FOUND,
                "No such run",
                &format!("run {id} not found"),
            ));
        }
        Err(e) => return Err(store_err(e)),
    };
    let jobs = state.store.jobs_of_run(id).await.map_err(store_err)?;
    let tasks: Vec<TaskView> = state
        .store
        .tasks_of_run(id)
        .await
        .map_err(store_err)?
        .into_iter()
        .map(|task| TaskView {
            live_tail: (task.status == TaskStatus::Running)
                .then(|| state.files.as_deref().and_then(|f| f.task_tail(&task.id)))
                .flatten(),
            task,
        })
        .collect();
    let events = state.store.events(id, 0).await.map_err(store_err)?;
    let last = events.last().map(|e| e.seq).unwrap_or(0);
    Ok((
        run.clone(),
        timeline::build(&run, &jobs, &tasks, &events),
        last,
    ))
}

/// The context one item renders with. A long body shows its head (the whole text one click
/// away); a long result its head and tail, which never overlap
/// ([`timeline::head_and_tail`]): a text short enough to show whole is shown once.
pub fn item_ctx(item: &Item, run: &Run, csrf: &str) -> Value {
    let body = item.body.as_deref().and_then(timeline::head_and_tail);
    let result = item.result.as_deref().and_then(timeline::head_and_tail);
    context! {
        item => Value::from(minijinja::value::Serde(item)), csrf, run_id => run.id.clone(),
        at_utc => format::utc(item.at),
        long_body => body.is_some(),
        long_result => result.is_some(),
        body_head => body.map(|(head, _)| format!("{head}…")).unwrap_or_default(),
        result_head => result.map(|(head, _)| format!("{head}…")).unwrap_or_default(),
        result_tail => result.map(|(_, tail)| tail).unwrap_or_default(),
        can_decide => item.pending && run.status == RunStatus::AwaitingApproval,
        can_fork => run.purged_at.is_none(),
    }
}

/// The context the run's header (`run_header.html`: status, usage, actions) renders with,
/// as of `now`.
pub fn header_ctx(run: &Run, csrf: &str, now: Millis) -> Value {
    let status = run.status;
    context! {
        run => Value::from(minijinja::value::Serde(run)), csrf,
        status => status.as_str(),
        can_cancel => !status.is_terminal(),
        can_wake => status == RunStatus::Waiting,
        can_rerun => run.purged_at.is_none(),
        purged_utc => run.purged_at.map(format::utc),
        created_utc => format::utc(run.created_at),
        age => format::age(now, run.created_at),
        tokens_in => format::tokens(run.input_tokens),
        tokens_out => format::tokens(run.output_tokens),
        cost => format::money(run.cost_usd),
    }
}

/// The run's header as HTML, as of `now`.
pub fn render_header(state: &DashboardState, run: &Run, csrf: &str, now: Millis) -> String {
    state
        .templates
        .get_template("run_header.html")
        .and_then(|t| t.render(header_ctx(run, csrf, now)))
        .unwrap_or_else(|e| format!("<div id=\"run-header\">template failed: {e}</div>"))
}

/// One item as HTML.
pub fn render_item(state: &DashboardState, item: &Item, run: &Run, csrf: &str) -> String {
    state
        .templates
        .get_template("item.html")
        .and_then(|t| t.render(item_ctx(item, run, csrf)))
        .unwrap_or_else(|e| format!("<li data-kind=\"error\">template failed: {e}</li>"))
}

pub async fn page(
    State(state): State<DashboardState>,
    Extension(session): Extension<Session>,
    Path(id): Path<String>,
    Query(q): Query<FlashQuery>,
) -> Response {
    let (run, items, last_seq) = match load(&state, &id).await {
        Ok(loaded) => loaded,
        Err(page) => return page,
    };
    let csrf = state.keys.csrf(&session);
    let now = state.store.now();
    let actions = operator_actions(&state, &id, now).await;
    let forks = forks(&state, &id).await;
    let rendered: Vec<String> = items
        .iter()
        .map(|i| render_item(&state, i, &run, &csrf))
        .collect();
    let header = header_ctx(&run, &csrf, now);
    layout::render(
        &state,
        StatusCode::OK,
        "run.html",
        context! {
            items => rendered, last_seq, signed_in => true,
            flash => layout::flash(&state, &session, q.flash.as_deref(), q.fs.as_deref()),
            nav => "runs",
            terminal => run.status.is_terminal(),
            actions,
            forks,
            ..header
        },
    )
}

/// One fork of the run, as the page lists it.
#[derive(Debug, serde::Serialize)]
struct ForkItem {
    id: String,
    status: String,
    /// The parent's event the fork shares last.
    fork_seq: i64,
}

/// The run's forks (and reruns), oldest first; none when they cannot be read (the page
/// still shows the run).
async fn forks(state: &DashboardState, run_id: &str) -> Value {
    let rows = match state.store.forks_of(run_id).await {
        Ok(rows) => rows,
        Err(e) => {
            tracing::warn!(error = %e, run_id, "cannot read the run's forks");
            Vec::new()
        }
    };
    let rows: Vec<ForkItem> = rows
        .into_iter()
        .map(|f| ForkItem {
            id: f.id,
            status: f.status.as_str().to_string(),
            fork_seq: f.fork_seq,
        })
        .collect();
    Value::from(minijinja::value::Serde(&rows))
}

/// One row of the run's operator actions (the audit trail), as the page shows it.
#[derive(Debug, serde::Serialize)]
struct ActionRow {
    utc: String,
    age: String,
    actor: String,
    action: String,
    target: String,
    detail: String,
}

/// What operators did to the run (approvals, cancels, wakes…), oldest first; none when the
/// trail cannot be read (the page still shows the run).
async fn operator_actions(state: &DashboardState, run_id: &str, now: i64) -> Value {
    let rows = match state.store.audit_log(Some(run_id), None, 200).await {
        Ok(rows) => rows,
        Err(e) => {
            tracing::warn!(error = %e, run_id, "cannot read the run's operator actions");
            Vec::new()
        }
    };
    let rows: Vec<ActionRow> = rows
        .into_iter()
        .rev()
        .map(|a| ActionRow {
            utc: format::utc(a.at),
            age: format::age(now, a.at),
            actor: a.actor,
            action: a.action,
            target: a.target,
            detail: a.detail.unwrap_or_default(),
        })
        .collect();
    Value::from(minijinja::value::Serde(&rows))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::run;

    fn header(run: &Run) -> String {
        crate::layout::templates()
            .get_template("run_header.html")
            .and_then(|t| t.render(header_ctx(run, "c", 120_000)))
            .unwrap()
    }

    #[test]
    fn the_header_shows_status_usage_and_the_actions_the_status_allows() {
        let mut waiting = run(RunStatus::Waiting);
        waiting.turns = 3;
        waiting.input_tokens = 2_400;
        let html = header(&waiting);
        assert!(html.starts_with("<div id=\"run-header\">"), "{html}");
        for part in [
            "data-status=\"waiting\"",
            "3 turns · 2.4k in",
            "2m ago",
            "data-action=\"cancel\"",
            "data-action=\"wake\"",
        ] {
            assert!(html.contains(part), "{part} in {html}");
        }
        let done = header(&run(RunStatus::Succeeded));
        assert!(done.contains("data-status=\"succeeded\""), "{done}");
        let actions: Vec<&str> = done.matches("data-action=\"").collect();
        assert_eq!(actions.len(), 1, "an ended run can only be rerun: {done}");
        assert!(done.contains("data-action=\"rerun\""), "{done}");
        let mut purged = run(RunStatus::Succeeded);
        purged.purged_at = Some(1);
        let purged = header(&purged);
        assert!(
            !purged.contains("data-action="),
            "no action on a purged run"
        );
        assert!(purged.contains("History purged by retention"), "{purged}");
        assert!(!done.contains("purged"), "{done}");
    }
}
