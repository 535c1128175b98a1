//! The pool's decisions, apart from its I/O: what to claim for the free slots, what the loop
//! does after a settle (claim again at once, or wait — and for how long), and when the drain
//! is over. Each is a pure function of counts and times, so the loop in [`crate::pool`] only
//! carries them out, and each is tested without a store or a runtime.

use std::time::Duration;

use nightshift_store::{ClaimRequest, Millis};

use crate::slots::Wanted;

/// The claims of one settle: one per reserved lane with free slots (that lane only), then
/// one for the shared slots (any lane). Empty when no slot is free.
pub(crate) fn claim_requests(wanted: Wanted) -> Vec<ClaimRequest> {
    let mut requests: Vec<ClaimRequest> = wanted
        .reserved
        .into_iter()
        .map(|(lane, limit)| ClaimRequest {
            lanes: Some(vec![lane]),
            limit,
        })
        .collect();
    if wanted.shared > 0 {
        requests.push(ClaimRequest {
            lanes: None,
            limit: wanted.shared,
        });
    }
    requests
}

/// Whether some claim got all it asked for: more due work may be waiting.
pub(crate) fn claimed_all(requests: &[ClaimRequest], got: &[usize]) -> bool {
    requests.iter().zip(got).any(|(r, n)| *n == r.limit)
}

/// What the loop does after a settle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// A claim filled up and a slot is still free: claim again at once.
    ClaimAgain,
    /// Wait for a job to end or a heartbeat tick; with `listen`, also for an enqueue signal
    /// (only a pool with a free slot listens), up to the wait `until`.
    Wait { listen: bool, until: WaitFor },
}

/// How long a listening pool waits for a signal before claiming again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WaitFor {
    /// The poll interval.
    Poll,
    /// The poll interval, or less when a scheduled job comes due sooner (see [`until_due`]):
    /// only a pool about to go idle asks the store when that is.
    NextDue,
}

/// The decision after a settle: `claimed_all` is `None` when the settle failed (wait a poll
/// interval before trying again), `busy` the slots in use out of `slots`.
pub(crate) fn next(claimed_all: Option<bool>, busy: usize, slots: usize) -> Next {
    let free = busy < slots;
    match claimed_all {
        Some(true) if free => Next::ClaimAgain,
        Some(false) if free => Next::Wait {
            listen: true,
            until: WaitFor::NextDue,
        },
        _ => Next::Wait {
            listen: free,
            until: WaitFor::Poll,
        },
    }
}

/// How long an idle pool waits: `poll`, or until the next job is `due` when that is sooner
/// (at least a millisecond, so a job due now does not spin the loop).
pub(crate) fn until_due(poll: Duration, due: Option<Millis>, now: Millis) -> Duration {
    match due {
        Some(due) => {
            let until = due.saturating_sub(now);
            let until = Duration::from_millis(u64::try_from(until).unwrap_or(0));
            poll.min(until.max(Duration::from_millis(1)))
        }
        None => poll,
    }
}

/// One turn of the drain after shutdown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Drain {
    /// Write the ends waiting (no claims: claiming stopped).
    WriteEnds,
    /// Wait for a running job to end (or the grace period to run out).
    AwaitJobs,
    /// Nothing runs and nothing waits to be written: the pool may stop.
    Done,
}

/// The drain's next turn: ends waiting are written first, then running jobs awaited.
pub(crate) fn drain(ends_waiting: bool, running: usize) -> Drain {
    if ends_waiting {
        Drain::WriteEnds
    } else if running > 0 {
        Drain::AwaitJobs
    } else {
        Drain::Done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_lanes_are_claimed_alone_and_shared_slots_from_any_lane() {
        let wanted = Wanted {
            reserved: vec![("fast".into(), 1), ("slow".into(), 2)],
            shared: 3,
        };
        assert_eq!(
            claim_requests(wanted),
            vec![
                ClaimRequest {
                    lanes: Some(vec!["fast".into()]),
                    limit: 1
                },
                ClaimRequest {
                    lanes: Some(vec!["slow".into()]),
                    limit: 2
                },
                ClaimRequest {
                    lanes: None,
                    limit: 3
                },
            ]
        );
        let full = Wanted {
            reserved: vec![],
            shared: 0,
        };
        assert!(claim_requests(full).is_empty());
    }

    #[test]
    fn a_claim_that_filled_up_means_more_work_may_wait() {
        let requests = claim_requests(Wanted {
            reserved: vec![("fast".into(), 1)],
            shared: 4,
        });
        assert!(claimed_all(&requests, &[1, 0]));
        assert!(claimed_all(&requests, &[0, 4]));
        assert!(!claimed_all(&requests, &[0, 3]));
        assert!(!claimed_all(&[], &[]));
    }

    #[test]
    fn the_loop_claims_again_only_while_a_claim_filled_up_and_a_slot_is_free() {
        assert_eq!(next(Some(true), 3, 4), Next::ClaimAgain);
        let full = Next::Wait {
            listen: false,
            until: WaitFor::Poll,
        };
        assert_eq!(next(Some(true), 4, 4), full);
        assert_eq!(next(Some(false), 4, 4), full);
        assert_eq!(next(None, 4, 4), full);
        assert_eq!(
            next(Some(false), 0, 4),
            Next::Wait {
                listen: true,
                until: WaitFor::NextDue
            }
        );
        // A failed settle waits a whole poll interval, still listening for work.
        assert_eq!(
            next(None, 1, 4),
            Next::Wait {
                listen: true,
                until: WaitFor::Poll
            }
        );
    }

    #[test]
    fn an_idle_pool_wakes_for_the_next_due_job_but_never_waits_zero() {
        let poll = Duration::from_millis(500);
        assert_eq!(until_due(poll, None, 1_000), poll);
        assert_eq!(
            until_due(poll, Some(1_200), 1_000),
            Duration::from_millis(200)
        );
        assert_eq!(until_due(poll, Some(9_000), 1_000), poll);
        assert_eq!(until_due(poll, Some(900), 1_000), Duration::from_millis(1));
    }

    #[test]
    fn the_drain_writes_ends_first_and_stops_when_nothing_is_left() {
        assert_eq!(drain(true, 2), Drain::WriteEnds);
        assert_eq!(drain(true, 0), Drain::WriteEnds);
        assert_eq!(drain(false, 2), Drain::AwaitJobs);
        assert_eq!(drain(false, 0), Drain::Done);
    }
}
