//! Live pages, as server-sent events while a client is connected.
//!
//! `GET /ui/runs/{id}/live?after=SEQ`: a run's page. It polls the store every [`POLL`]
//! and sends `item` events (an item's HTML fragment; `app.js` puts it in place of the `li`
//! with the same id or appends it) for every item whose HTML changed or that reflects an
//! event after `after` — every item, when the run's status is no longer the page's
//! `status` — and a `header` event (the run's header: status, usage, actions) at its first
//! read and whenever the header changed; it sends `end` and stops once the run is terminal.
//! `app.js` never replaces a part the operator is using (focus, typed text such as a deny
//! reason, an open `<details>`, a selection, the confirm dialog open on one of its forms):
//! the rest of the item or header is updated around it, and the whole once it is no longer
//! in use.
//!
//! [`lists`]: `GET /ui/live/runs?<the runs page's query>`, `/ui/live/queue` and
//! `/ui/live/approvals`: the lists. Each polls the store every [`LIST_POLL`] and, when the
//! list's HTML (the same partial template the page includes, with the same filters and
//! page) differs from what it sent last, sends it whole as a `list` event. `app.js` puts it
//! in place row by row, by each row's `data-key`: only changed rows are replaced, and never
//! one the operator is using (focus, typed text, an open `<details>`, a selection, the
//! confirm dialog open on it), so nothing flashes and no reload loses the filters.

use std::collections::HashMap;
use std::convert::Infallible;
use std::time::Duration;

use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::stream::{self, Stream};
use serde::Deserialize;

use crate::auth::Session;
use crate::run_page::{load, render_header, render_item};
use crate::runs::FilterForm;
use crate::{DashboardState, approvals, layout, queue, runs};

/// How often the stream reads the store.
pub const POLL: Duration = Duration::from_millis(500);

/// How often a live list reads the store.
pub const LIST_POLL: Duration = Duration::from_secs(1);

#[derive(Debug, Default, Deserialize)]
pub struct LiveQuery {
    /// The newest event seq the page was rendered with.
    #[serde(default)]
    pub after: i64,
    /// The run status the page was rendered with: when the first read finds another, every
    /// item is sent again (an item's HTML depends on the status — an approval's buttons).
    #[serde(default)]
    pub status: String,
}

struct Cursor {
    state: DashboardState,
    id: String,
    csrf: String,
    after: i64,
    sent: Option<HashMap<String, String>>,
    /// The header's HTML sent last.
    header: Option<String>,
    status: String,
    done: bool,
    queue: Vec<Event>,
}

pub async fn stream(
    State(state): State<DashboardState>,
    Extension(session): Extension<Session>,
    Path(id): Path<String>,
    Query(q): Query<LiveQuery>,
) -> Response {
    let csrf = state.keys.csrf(&session);
    let cursor = Cursor {
        state,
        id,
        csrf,
        after: q.after,
        sent: None,
        header: None,
        status: q.status,
        done: false,
        queue: Vec::new(),
    };
    Sse::new(events(cursor))
        .keep_alive(KeepAlive::default())
        .into_response()
}

fn events(cursor: Cursor) -> impl Stream<Item = Result<Event, Infallible>> {
    stream::unfold(cursor, |mut c| async move {
        loop {
            if let Some(e) = c.queue.pop() {
                return Some((Ok(e), c));
            }
            if c.done {
                return None;
            }
            if c.sent.is_some() {
                tokio::time::sleep(POLL).await;
            }
            let Ok((run, items, _)) = load(&c.state, &c.id).await else {
                c.done = true;
                continue;
            };
            let first = c.sent.is_none();
            let status = run.status.as_str().to_string();
            let page_is_stale = first && status != c.status;
            let sent = c.sent.get_or_insert_with(HashMap::new);
            let mut out = Vec::new();
            for item in &items {
                let html = render_item(&c.state, item, &run, &c.csrf);
                let changed = sent.get(&item.key) != Some(&html);
                let fresh =
                    !first || page_is_stale || item.last_seq > c.after || item.last_seq == 0;
                if changed && fresh {
                    // Line breaks are kept (each line is a `data:` line of the event): they
                    // are the lines of the `<pre>` texts.
                    out.push(Event::default().event("item").data(&html));
                }
                sent.insert(item.key.clone(), html);
            }
            let header = render_header(&c.state, &run, &c.csrf, c.state.store.now());
            if c.header.as_ref() != Some(&header) {
                out.push(Event::default().event("header").data(&header));
                c.header = Some(header);
            }
            c.status = status;
            if run.status.is_terminal() {
                out.push(Event::default().event("end").data("end"));
                c.done = true;
            }
            out.reverse();
            c.queue = out;
        }
    })
}

/// Which list a live list stream renders.
enum List {
    Runs(FilterForm),
    Queue,
    /// What is known of each waiting call, read once.
    Approvals(approvals::Known),
}

struct ListCursor {
    state: DashboardState,
    csrf: String,
    list: List,
    /// The HTML sent last.
    last: Option<String>,
}

impl ListCursor {
    /// The list's HTML now, or `None` when the store could not be read (tried again at the
    /// next poll).
    async fn render(&mut self) -> Option<String> {
        let (name, ctx) = match &mut self.list {
            List::Runs(form) => (
                "runs_list.html",
                runs::list_ctx(&self.state, form).await.ok()?,
            ),
            List::Queue => ("queue_live.html", queue::list_ctx(&self.state).await.ok()?),
            List::Approvals(known) => {
                let rows = approvals::rows(&self.state, known).await.ok()?;
                (
                    "approvals_list.html",
                    approvals::list_ctx(&rows, &self.csrf),
                )
            }
        };
        layout::render_string(&self.state, name, ctx).ok()
    }
}

/// The live lists' handlers (see the module documentation).
pub mod lists {
    use super::*;

    /// `GET /ui/live/runs?…`: the runs list with the runs page's filters and page.
    pub async fn runs(
        State(state): State<DashboardState>,
        Extension(session): Extension<Session>,
        Query(form): Query<FilterForm>,
    ) -> Response {
        if let Err(why) = runs::parse_filter(&form) {
            return (axum::http::StatusCode::BAD_REQUEST, why.to_string()).into_response();
        }
        stream_list(state, &session, List::Runs(form))
    }

    /// `GET /ui/live/queue`.
    pub async fn queue(
        State(state): State<DashboardState>,
        Extension(session): Extension<Session>,
    ) -> Response {
        stream_list(state, &session, List::Queue)
    }

    /// `GET /ui/live/approvals`.
    pub async fn approvals(
        State(state): State<DashboardState>,
        Extension(session): Extension<Session>,
    ) -> Response {
        stream_list(state, &session, List::Approvals(approvals::Known::new()))
    }
}

fn stream_list(state: DashboardState, session: &Session, list: List) -> Response {
    let cursor = ListCursor {
        csrf: state.keys.csrf(session),
        state,
        list,
        last: None,
    };
    let events = stream::unfold(cursor, |mut c| async move {
        loop {
            // The page was rendered just now: the first look is a poll later.
            tokio::time::sleep(LIST_POLL).await;
            let Some(html) = c.render().await else {
                continue;
            };
            if c.last.as_deref() == Some(html.as_str()) {
                continue;
            }
            c.last = Some(html.clone());
            let event = Event::default().event("list").data(html);
            return Some((Ok::<_, Infallible>(event), c));
        }
    });
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}
