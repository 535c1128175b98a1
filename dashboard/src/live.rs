//! `GET /ui/runs/{id}/live?after=SEQ`: server-sent events while a client is connected. It
//! polls the store every [`POLL`] and sends `item` events (an item's HTML fragment; `app.js`
//! replaces the `li` with the same id or appends it) for every item whose HTML changed or
//! that reflects an event after `after` — every item, when the run's status is no longer the
//! page's `status` — and a `status` event when the run's status changes; it sends `end` and
//! stops once the run is terminal.

use std::collections::HashMap;
use std::convert::Infallible;
use std::time::Duration;

use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::stream::{self, Stream};
use serde::Deserialize;

use crate::DashboardState;
use crate::auth::Session;
use crate::run_page::{load, render_item};

/// How often the stream reads the store.
pub const POLL: Duration = Duration::from_millis(500);

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
                    out.push(Event::default().event("item").data(html.replace('\n', " ")));
                }
                sent.insert(item.key.clone(), html);
            }
            if status != c.status {
                out.push(Event::default().event("status").data(status.clone()));
                c.status = status;
            }
            if run.status.is_terminal() {
                out.push(Event::default().event("end").data("end"));
                c.done = true;
            }
            out.reverse();
            c.queue = out;
        }
    })
}
