//! What the crate's unit tests share: a run's log made from events.

use nightshift_agent::events::RunEvent;
use nightshift_store::Event;

/// `events` as run `r1`'s stored log: seqs 1, 2, … logged by job 1 at 1 s, 2 s, ….
pub(crate) fn log(events: Vec<RunEvent>) -> Vec<Event> {
    events
        .into_iter()
        .enumerate()
        .map(|(i, e)| Event {
            run_id: "r1".into(),
            seq: i as i64 + 1,
            job_id: 1,
            lease_token: 1,
            event_type: e.kind().into(),
            payload: e.payload(),
            created_at: 1_000 * (i as i64 + 1),
        })
        .collect()
}
