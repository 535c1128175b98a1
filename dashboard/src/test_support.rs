//! What the crate's unit tests share: a run and its log made from events.

use nightshift_agent::events::RunEvent;
use nightshift_store::{Event, Run, RunStatus, Trigger};

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

/// Run `r1` of agent `a`, prompted `Go.`, in `status`.
pub(crate) fn run(status: RunStatus) -> Run {
    Run {
        id: "r1".into(),
        agent: "a".into(),
        status,
        trigger_kind: Trigger::Api,
        input: "Go.".into(),
        idempotency_key: None,
        concurrency_key: None,
        agent_hash: None,
        notify: false,
        turns: 1,
        input_tokens: 0,
        output_tokens: 0,
        cache_read_tokens: 0,
        cache_write_tokens: 0,
        cost_usd: 0.0,
        result: None,
        error: None,
        cancel_requested_at: None,
        created_at: 0,
        updated_at: 0,
        started_at: None,
        finished_at: None,
        trace_parent: None,
        context: None,
        purged_at: None,
        forked_from: None,
        fork_seq: None,
    }
}
