//! How a run waits out a model outage, decided from its state alone.
//!
//! When the model cannot be reached (its client used up its retries, or its circuit is
//! open), the job is deferred: requeued for later without spending an attempt and without
//! holding a worker slot. It comes back when the provider is expected back — the breaker's
//! next probe or the provider's `retry-after` when known, else after a backoff that doubles
//! per wait — and never later than the moment the agent's outage limit runs out, so that a run
//! fails promptly once the outage has lasted that long. The outage's start is logged (in the
//! `model_unavailable` events), so the limit holds across jobs, crashes and daemons.

use std::time::Duration;

use crate::state::Outage;

/// The shortest wait: a probe is already in flight, or the provider asked for none.
const MIN_WAIT_MS: i64 = 200;

/// The longest single wait, whatever the provider asked for.
const MAX_WAIT_MS: i64 = 5 * 60 * 1000;

/// The backoff's first step and cap when nothing says when to try again.
const BACKOFF_BASE_MS: i64 = 1000;
const BACKOFF_CAP_MS: i64 = 60 * 1000;

/// What to do about an unreachable model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Plan {
    /// Defer the job until `until`; the outage began at `since`.
    Wait { since: i64, until: i64 },
    /// The outage has lasted `lasted_ms`, past the limit: fail the run.
    Fail { lasted_ms: i64 },
}

/// The plan at `now` for a run whose current outage (if any) is `outage`, with an outage
/// limit of `limit_ms` and the provider's hint `retry_in`.
pub(super) fn plan(
    outage: Option<&Outage>,
    now: i64,
    limit_ms: i64,
    retry_in: Option<Duration>,
) -> Plan {
    let since = outage.map_or(now, |o| o.since);
    let lasted_ms = now.saturating_sub(since);
    if lasted_ms >= limit_ms {
        return Plan::Fail { lasted_ms };
    }
    let deferrals = outage.map_or(0, |o| o.deferrals);
    let wait = match retry_in {
        Some(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        None => backoff_ms(deferrals),
    }
    .clamp(MIN_WAIT_MS, MAX_WAIT_MS);
    let until = now.saturating_add(wait).min(since.saturating_add(limit_ms));
    Plan::Wait { since, until }
}

/// `min(cap, base·2^n)`.
fn backoff_ms(n: u32) -> i64 {
    BACKOFF_BASE_MS
        .saturating_mul(1_i64 << n.min(20))
        .min(BACKOFF_CAP_MS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outage(since: i64, deferrals: u32) -> Outage {
        Outage {
            since,
            deferrals,
            last_error: "HTTP 529".into(),
        }
    }

    const HOUR: i64 = 3_600_000;

    #[test]
    fn the_first_wait_starts_the_outage_and_follows_the_hint() {
        let got = plan(None, 10_000, HOUR, Some(Duration::from_secs(30)));
        assert_eq!(
            got,
            Plan::Wait {
                since: 10_000,
                until: 40_000
            }
        );
    }

    #[test]
    fn without_a_hint_the_wait_doubles_up_to_a_cap() {
        let waits: Vec<i64> = (0..9)
            .map(|n| match plan(Some(&outage(0, n)), 0, HOUR, None) {
                Plan::Wait { until, .. } => until,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            waits,
            [1000, 2000, 4000, 8000, 16000, 32000, 60000, 60000, 60000]
        );
    }

    #[test]
    fn waits_are_clamped_and_never_pass_the_limit() {
        let short = plan(None, 0, HOUR, Some(Duration::ZERO));
        assert_eq!(
            short,
            Plan::Wait {
                since: 0,
                until: MIN_WAIT_MS
            }
        );
        let long = plan(None, 0, HOUR, Some(Duration::from_secs(86_400)));
        assert_eq!(
            long,
            Plan::Wait {
                since: 0,
                until: MAX_WAIT_MS
            }
        );
        // Ten seconds before the limit, a thirty-second hint wakes the run at the limit.
        let near = plan(
            Some(&outage(0, 3)),
            HOUR - 10_000,
            HOUR,
            Some(Duration::from_secs(30)),
        );
        assert_eq!(
            near,
            Plan::Wait {
                since: 0,
                until: HOUR
            }
        );
    }

    #[test]
    fn an_outage_past_the_limit_fails_the_run() {
        assert_eq!(
            plan(Some(&outage(5, 40)), HOUR + 5, HOUR, None),
            Plan::Fail { lasted_ms: HOUR }
        );
    }
}
