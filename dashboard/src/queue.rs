//! `GET /ui/queue`: the queue at a glance from [`Store::queue_overview`] — live jobs per
//! state and lane, the oldest due queued job's age, the workers with the slots their leases
//! fill and their last heartbeat, and the live leases — every time as an age with its UTC
//! time on hover, never an epoch number.
//!
//! The store does not keep when a lease was taken: a lease row's `updated_at` is the claim
//! or its latest renewal, whichever is newer, so the page labels it "last renewed or
//! claimed" rather than pretending it is the lease's start.
//!
//! The page updates live ([`crate::live::lists`]).
//!
//! [`Store::queue_overview`]: nightshift_store::Store::queue_overview

use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use minijinja::{Value, context};
use nightshift_store::{Millis, QueueOverview};
use serde::Serialize;

use crate::auth::Session;
use crate::{DashboardState, format, layout};

/// One `(state, lane)` count.
#[derive(Debug, Serialize, PartialEq)]
pub struct StateRow {
    pub state: &'static str,
    pub lane: String,
    pub count: i64,
}

/// One worker and the slots its leases fill.
#[derive(Debug, Serialize, PartialEq)]
pub struct WorkerView {
    pub id: String,
    pub host: String,
    pub pid: i64,
    /// Leases it holds now (its busy slots); its total is not recorded in the store.
    pub busy: usize,
    pub heartbeat_utc: String,
    pub heartbeat_age: String,
    pub started_age: String,
}

/// One live lease.
#[derive(Debug, Serialize, PartialEq)]
pub struct LeaseView {
    pub job_id: i64,
    pub run_id: String,
    pub agent: String,
    pub lane: String,
    pub owner: String,
    pub attempt: String,
    pub written_utc: String,
    pub written_age: String,
    pub heartbeat_utc: String,
    /// The holder's last worker heartbeat as an age, or why there is none.
    pub heartbeat_age: String,
    pub expires_utc: String,
    /// `in 25s`, or `expired 3s ago` when the lease is past its expiry (rescue is due).
    pub expires_in: String,
    pub expired: bool,
}

/// What the queue page shows, from an overview read at `now` (pure).
#[derive(Debug, Serialize, PartialEq)]
pub struct QueueView {
    pub states: Vec<StateRow>,
    pub oldest_utc: Option<String>,
    pub oldest_age: Option<String>,
    pub workers: Vec<WorkerView>,
    pub leases: Vec<LeaseView>,
}

/// The page's view of `o` as of `now` (pure).
pub fn view(o: &QueueOverview, now: Millis) -> QueueView {
    let states = o
        .by_state_lane
        .iter()
        .map(|c| StateRow {
            state: c.state.as_str(),
            lane: c.lane.clone(),
            count: c.count,
        })
        .collect();
    let workers = o
        .workers
        .iter()
        .map(|w| WorkerView {
            id: w.id.clone(),
            host: w.host.clone(),
            pid: w.pid,
            busy: o
                .leases
                .iter()
                .filter(|l| l.owner.as_deref() == Some(w.id.as_str()))
                .count(),
            heartbeat_utc: format::utc(w.last_heartbeat_at),
            heartbeat_age: format::age(now, w.last_heartbeat_at),
            started_age: format::age(now, w.started_at),
        })
        .collect();
    let leases = o
        .leases
        .iter()
        .map(|l| {
            let expires = l.lease_expires_at;
            LeaseView {
                job_id: l.job_id,
                run_id: l.run_id.clone(),
                agent: l.agent.clone(),
                lane: l.lane.clone(),
                owner: l.owner.clone().unwrap_or_else(|| "(none)".into()),
                attempt: format!("{}/{}", l.attempts, l.max_attempts),
                written_utc: format::utc(l.updated_at),
                written_age: format::age(now, l.updated_at),
                heartbeat_utc: l.worker_heartbeat_at.map(format::utc).unwrap_or_default(),
                heartbeat_age: l
                    .worker_heartbeat_at
                    .map(|h| format::age(now, h))
                    .unwrap_or_else(|| "worker not registered".into()),
                expires_utc: expires.map(format::utc).unwrap_or_default(),
                expires_in: match expires {
                    Some(e) if e > now => format::age(now, e),
                    Some(e) => format!("expired {}", format::age(now, e)),
                    None => "no expiry".into(),
                },
                expired: expires.is_some_and(|e| e <= now),
            }
        })
        .collect();
    QueueView {
        states,
        oldest_utc: o.oldest_queued_at.map(format::utc),
        oldest_age: o.oldest_queued_at.map(|t| format::age(now, t)),
        workers,
        leases,
    }
}

/// The context `queue_live.html` renders with, read now.
pub async fn list_ctx(state: &DashboardState) -> Result<Value, nightshift_store::Error> {
    let overview = state.store.queue_overview().await?;
    let v = view(&overview, state.store.now());
    Ok(context! { q => Value::from(minijinja::value::Serde(&v)) })
}

pub async fn page(
    State(state): State<DashboardState>,
    Extension(session): Extension<Session>,
) -> Response {
    let list = match list_ctx(&state).await {
        Ok(list) => list,
        Err(e) => return layout::store_failed(&state, &e),
    };
    layout::render(
        &state,
        StatusCode::OK,
        "queue.html",
        context! {
            csrf => state.keys.csrf(&session), signed_in => true, nav => "queue",
            ..list
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use nightshift_store::{JobState, LaneCount, LeaseRow, WorkerRow};

    fn lease(job_id: i64, owner: Option<&str>, expires: Option<Millis>) -> LeaseRow {
        LeaseRow {
            job_id,
            run_id: format!("r{job_id}"),
            agent: "helper".into(),
            lane: "default".into(),
            owner: owner.map(str::to_string),
            lease_token: 1,
            attempts: 1,
            max_attempts: 3,
            lease_expires_at: expires,
            updated_at: 90_000,
            worker_heartbeat_at: owner.map(|_| 95_000),
        }
    }

    #[test]
    fn the_view_counts_busy_slots_and_shows_ages_not_epochs() {
        let now = 100_000;
        let o = QueueOverview {
            by_state_lane: vec![LaneCount {
                lane: "fast".into(),
                state: JobState::Queued,
                count: 4,
            }],
            oldest_queued_at: Some(now - 120_000),
            workers: vec![WorkerRow {
                id: "w1".into(),
                host: "h".into(),
                pid: 7,
                started_at: 0,
                last_heartbeat_at: now - 3_000,
            }],
            leases: vec![
                lease(1, Some("w1"), Some(now + 25_000)),
                lease(2, Some("w1"), Some(now - 3_000)),
                lease(3, None, None),
            ],
        };
        let v = view(&o, now);
        assert_eq!(
            v.states,
            vec![StateRow {
                state: "queued",
                lane: "fast".into(),
                count: 4
            }]
        );
        assert_eq!(v.oldest_age.as_deref(), Some("2m ago"));
        assert_eq!(v.workers[0].busy, 2);
        assert_eq!(v.workers[0].heartbeat_age, "3s ago");
        assert_eq!(v.leases[0].expires_in, "in 25s");
        assert!(!v.leases[0].expired);
        assert_eq!(v.leases[1].expires_in, "expired 3s ago");
        assert!(v.leases[1].expired);
        assert_eq!(v.leases[2].heartbeat_age, "worker not registered");
        assert_eq!(v.leases[2].owner, "(none)");
        assert_eq!(v.leases[0].written_age, "10s ago");
    }

    #[test]
    fn an_empty_queue_has_no_oldest_job() {
        let o = QueueOverview {
            by_state_lane: vec![],
            oldest_queued_at: None,
            workers: vec![],
            leases: vec![],
        };
        let v = view(&o, 1);
        assert_eq!((v.oldest_utc, v.oldest_age), (None, None));
    }
}
