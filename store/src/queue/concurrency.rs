//! What an enqueue with a concurrency key does about the key's other unfinished runs: a pure
//! decision ([`plan_concurrency`]), carried out by [`super::enqueue_run`].

use crate::clock::Millis;
use crate::model::ConcurrencyPolicy;
use crate::queue::ActiveRun;
use crate::states::RunStatus;

/// What to do with a new run of a concurrency key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Plan {
    /// Insert the run with its start job due at `run_at`, after superseding these runs.
    Insert {
        run_at: Millis,
        supersede: Vec<String>,
    },
    /// Insert nothing: `holder` already holds the key (the `skip` policy).
    Skip { holder: String },
}

/// Whether [`plan_concurrency`] under `policy` depends on the key's other runs. `queue` decides
/// nothing from them (the queue holds its job while another job of the key runs), so its
/// enqueue neither reads them nor takes the key's lock: one round trip fewer, and concurrent
/// enqueues of the key do not wait for each other.
pub(crate) fn reads_other_runs(policy: &ConcurrencyPolicy) -> bool {
    !matches!(policy, ConcurrencyPolicy::Queue)
}

/// Decides for a new run due at `run_at` under `policy`, given the key's other unfinished
/// runs (`active`, oldest first):
/// - `queue`: insert; the queue runs the key's runs one at a time;
/// - `skip`: insert nothing while any run holds the key (the newest is returned);
/// - `supersede`: insert, ending every other unfinished run of the key;
/// - `debounce`: insert due `window_ms` from now at the earliest, ending the key's runs that
///   are queued and never started (a run that started is left to finish).
pub(crate) fn plan_concurrency(
    policy: &ConcurrencyPolicy,
    active: &[ActiveRun],
    run_at: Millis,
    now: Millis,
) -> Plan {
    let ids = |runs: &mut dyn Iterator<Item = &ActiveRun>| runs.map(|r| r.id.clone()).collect();
    match policy {
        ConcurrencyPolicy::Queue => Plan::Insert {
            run_at,
            supersede: Vec::new(),
        },
        ConcurrencyPolicy::Skip => match active.last() {
            Some(holder) => Plan::Skip {
                holder: holder.id.clone(),
            },
            None => Plan::Insert {
                run_at,
                supersede: Vec::new(),
            },
        },
        ConcurrencyPolicy::Supersede => Plan::Insert {
            run_at,
            supersede: ids(&mut active.iter()),
        },
        ConcurrencyPolicy::Debounce { window_ms } => Plan::Insert {
            run_at: run_at.max(now.saturating_add(*window_ms)),
            supersede: ids(&mut active
                .iter()
                .filter(|r| r.status == RunStatus::Queued && r.started_at.is_none())),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(id: &str, status: RunStatus, started_at: Option<Millis>) -> ActiveRun {
        ActiveRun {
            id: id.into(),
            status,
            started_at,
        }
    }

    fn active() -> Vec<ActiveRun> {
        vec![
            run("old-running", RunStatus::Running, Some(5)),
            run("queued-retry", RunStatus::Queued, Some(7)),
            run("fresh", RunStatus::Queued, None),
        ]
    }

    #[test]
    fn queue_inserts_beside_the_holders() {
        let plan = plan_concurrency(&ConcurrencyPolicy::Queue, &active(), 100, 50);
        assert_eq!(
            plan,
            Plan::Insert {
                run_at: 100,
                supersede: vec![]
            }
        );
    }

    #[test]
    fn only_queue_decides_without_the_other_runs() {
        let policies = [
            ConcurrencyPolicy::Queue,
            ConcurrencyPolicy::Skip,
            ConcurrencyPolicy::Supersede,
            ConcurrencyPolicy::Debounce { window_ms: 1_000 },
        ];
        for policy in policies {
            let with = plan_concurrency(&policy, &active(), 100, 50);
            let without = plan_concurrency(&policy, &[], 100, 50);
            // Skipping the read is sound exactly when the read could not change the plan.
            assert_eq!(reads_other_runs(&policy), with != without, "{policy:?}");
        }
    }

    #[test]
    fn skip_returns_the_newest_holder_and_inserts_when_the_key_is_free() {
        let plan = plan_concurrency(&ConcurrencyPolicy::Skip, &active(), 100, 50);
        assert_eq!(
            plan,
            Plan::Skip {
                holder: "fresh".into()
            }
        );
        let plan = plan_concurrency(&ConcurrencyPolicy::Skip, &[], 100, 50);
        assert_eq!(
            plan,
            Plan::Insert {
                run_at: 100,
                supersede: vec![]
            }
        );
    }

    #[test]
    fn supersede_ends_every_other_unfinished_run() {
        let plan = plan_concurrency(&ConcurrencyPolicy::Supersede, &active(), 100, 50);
        let all = vec!["old-running".into(), "queued-retry".into(), "fresh".into()];
        assert_eq!(
            plan,
            Plan::Insert {
                run_at: 100,
                supersede: all
            }
        );
    }

    #[test]
    fn debounce_delays_and_ends_only_runs_that_never_started() {
        let policy = ConcurrencyPolicy::Debounce { window_ms: 1_000 };
        let plan = plan_concurrency(&policy, &active(), 100, 50);
        let fresh = vec!["fresh".to_string()];
        assert_eq!(
            plan,
            Plan::Insert {
                run_at: 1_050,
                supersede: fresh
            }
        );
        // A start already due later than the window keeps its time.
        let plan = plan_concurrency(&policy, &[], 5_000, 50);
        assert_eq!(
            plan,
            Plan::Insert {
                run_at: 5_000,
                supersede: vec![]
            }
        );
    }
}
