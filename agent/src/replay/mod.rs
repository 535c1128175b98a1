//! Replay: a run's loop driven again, offline, against its recording — the real runtime
//! ([`AgentRuntime`]: the real fold, the real request building, the real tool round) over a
//! throwaway SQLite store in a temporary directory, with a model that answers each call from
//! the recorded replies in order and tools that answer each call with its recorded result
//! (nothing runs, nothing is sent).
//!
//! One machine serves both directions: [`Mode::Record`] (`nightshift runs export`) keeps the
//! request of every model call; [`Mode::Compare`] (`nightshift replay`) compares every
//! request with the recorded one and stops at the first that differs ([`compare`] says which
//! part). Parks replay too: a wakeup resumes at the time its reminder was written, an
//! approval gets the recorded decision (or times out), an outage waits until its recorded
//! end, and a message sent to the run is sent again once the model answer it followed is
//! given. What replay does not reproduce (a background task's end) is reported as [`DivergenceKind::Unreplayable`] with its turn — never passed silently.
//!
//! How it fails: a divergence is a result, not an error (the loop is stopped at once: every
//! later model call fails); [`ReplayError`] is only for the scratch store.

mod compare;
mod divergence;
mod fakes;
mod file;
mod script;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use nightshift_store::config::StoreConfig;
use nightshift_store::{Backoff, ConcurrencyPolicy, ManualClock, NewRun, Store};
use nightshift_tools::Redactor;
use nightshift_worker::{Handler, JobContext, JobOutcome, apply_outcome};

pub use compare::{Difference, Part, compare};
pub use divergence::{Divergence, DivergenceKind};
pub use file::{CallPurpose, FORMAT, FileError, RecordedCall, RecordedEvent, Recording, VERSION};

use crate::config::AgentDef;
use crate::ports::ToolBox;
use crate::runtime::AgentRuntime;
use fakes::{RecordedModel, RecordedTools, Tape};
use script::{Resume, Script};

/// How long a replayed job's lease lasts (the clock only moves when replay moves it).
const LEASE: Duration = Duration::from_secs(24 * 3600);

/// What a replay does with the requests the loop builds.
#[derive(Debug, Clone)]
pub enum Mode {
    /// Keep them (export).
    Record,
    /// Compare each with the recorded one, in order (replay).
    Compare(Vec<RecordedCall>),
}

/// What a replay did.
#[derive(Debug, Clone)]
pub struct Replayed {
    /// The model calls the loop made, with their requests, up to any divergence.
    pub model_calls: Vec<RecordedCall>,
    /// The tool calls answered from the recording.
    pub tool_calls: usize,
    /// The first place the loop left the recording, if it did.
    pub divergence: Option<Divergence>,
}

/// Replay could not run at all.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("replay could not make its scratch directory: {0}")]
    Scratch(#[from] std::io::Error),
    #[error("replay's scratch store failed: {0}")]
    Store(#[from] nightshift_store::Error),
}

/// Drives `agent`'s loop on `input` against `events` (a run's recorded events, in order).
/// `live` gives the tool specs, classes and input checks; `redactor` redacts what the loop
/// logs, as the daemon's does.
pub async fn run_loop(
    agent: AgentDef,
    live: Arc<dyn ToolBox>,
    redactor: Redactor,
    input: &str,
    events: &[RecordedEvent],
    mode: Mode,
) -> Result<Replayed, ReplayError> {
    let script = Script::from_events(events, &agent.config.model);
    let dir = tempfile::Builder::new()
        .prefix("nightshift-replay")
        .tempdir()?;
    let clock = ManualClock::new(script.start);
    let config = StoreConfig {
        url: format!("sqlite://{}", dir.path().join("replay.db").display()),
        ..StoreConfig::default()
    };
    let store = Store::connect(&config, Arc::new(clock.clone())).await?;
    let result = drive_on(&store, &clock, agent, live, redactor, input, script, mode).await;
    store.close().await;
    result
}

#[allow(clippy::too_many_arguments)]
async fn drive_on(
    store: &Store,
    clock: &ManualClock,
    agent: AgentDef,
    live: Arc<dyn ToolBox>,
    redactor: Redactor,
    input: &str,
    script: Script,
    mode: Mode,
) -> Result<Replayed, ReplayError> {
    store.migrate().await?;
    let jobs = script.answers.len() + script.resumes.len() + 8;
    let tape = Arc::new(Mutex::new(Tape {
        script,
        expected: match mode {
            Mode::Record => None,
            Mode::Compare(calls) => Some(calls),
        },
        made: Vec::new(),
        tool_calls: 0,
        turns: 0,
        divergence: None,
    }));
    let name = agent.config.name.clone();
    // Keyed, so that the recorded messages can be sent to it while a job of it runs.
    let new = NewRun::new(name, input)
        .max_attempts(1_000)
        .concurrency("replay", ConcurrencyPolicy::Queue);
    let run_id = store.enqueue(&new).await?.run_id;
    // A message taken before the first model call is there before the first job.
    fakes::send_messages(store, &run_id, &tape, 0).await?;
    let model = RecordedModel {
        tape: tape.clone(),
        clock: clock.clone(),
        store: store.clone(),
        run_id: run_id.clone(),
    };
    let tools = RecordedTools {
        tape: tape.clone(),
        live,
    };
    let runtime =
        AgentRuntime::new([agent], Arc::new(model), Arc::new(tools)).with_redactor(redactor);
    drive(store, clock, &runtime, &tape, &run_id, jobs).await?;
    let tape = tape.lock().expect("replay tape");
    Ok(Replayed {
        model_calls: tape.made.clone(),
        tool_calls: tape.tool_calls,
        divergence: tape.divergence.clone(),
    })
}

/// Claims and runs the run's jobs until it ends, diverges, or runs out of `jobs`.
async fn drive(
    store: &Store,
    clock: &ManualClock,
    runtime: &AgentRuntime,
    tape: &Mutex<Tape>,
    run_id: &str,
    jobs: usize,
) -> Result<(), ReplayError> {
    let diverge = |kind: DivergenceKind| tape.lock().expect("replay tape").diverge(kind);
    for _ in 0..jobs {
        let Some(lease) = store.claim("replay", None, 1, LEASE).await?.pop() else {
            diverge(DivergenceKind::Parked {
                replayed: "left the run waiting with nothing due".into(),
                recorded: "goes on".into(),
            });
            return Ok(());
        };
        let outcome = runtime.handle(JobContext::new(lease.clone())).await;
        apply_outcome(&lease, &outcome, &Backoff::default()).await?;
        if tape.lock().expect("replay tape").divergence.is_some() {
            return Ok(());
        }
        let resume = || tape.lock().expect("replay tape").script.resumes.pop_front();
        match next(outcome, resume) {
            Next::Ended { status } => {
                let mut t = tape.lock().expect("replay tape");
                let (made, recorded) = (t.made.len(), t.script.answers.len());
                if made < recorded || !t.script.resumes.is_empty() {
                    t.diverge(DivergenceKind::EndedEarly {
                        status,
                        made,
                        recorded,
                    });
                }
                return Ok(());
            }
            Next::Resume { at, wake } => {
                clock.set(at);
                if wake {
                    store.wake_now(run_id).await?;
                }
            }
            Next::Decide {
                call_id,
                approved,
                reason,
            } => {
                store
                    .decide_approval(run_id, &call_id, approved, reason.as_deref())
                    .await?
            }
            Next::Diverge(kind) => {
                diverge(kind);
                return Ok(());
            }
        }
    }
    diverge(DivergenceKind::Stopped {
        error: format!("the run did not end within {jobs} jobs"),
    });
    Ok(())
}

/// What the driver does after a job, decided from its outcome and, when the run parked, the
/// recording's next resume (taken from `resume`).
#[derive(Debug, Clone, PartialEq)]
enum Next {
    /// The run ended with `status`.
    Ended { status: String },
    /// Move the clock to `at` and claim again; `wake`: wake the sleeping run early first.
    Resume { at: i64, wake: bool },
    /// Decide the call's approval as recorded, then claim again.
    Decide {
        call_id: String,
        approved: bool,
        reason: Option<String>,
    },
    /// The loop left the recording.
    Diverge(DivergenceKind),
}

fn next(outcome: JobOutcome, resume: impl FnOnce() -> Option<Resume>) -> Next {
    match outcome {
        JobOutcome::Done(end) => Next::Ended {
            status: end.run_status().as_str().to_string(),
        },
        JobOutcome::Park { until, .. } => match resume() {
            Some(Resume::Wakeup { now }) => Next::Resume {
                at: now,
                wake: now < until,
            },
            other => Next::Diverge(DivergenceKind::Parked {
                replayed: "went to sleep until its wakeup".into(),
                recorded: recorded_park(other.as_ref()),
            }),
        },
        JobOutcome::AwaitApproval { call_id, until, .. } => match resume() {
            Some(Resume::Approval {
                call_id: decided,
                timed_out: true,
                ..
            }) if decided == call_id => Next::Resume {
                at: until,
                wake: false,
            },
            Some(Resume::Approval {
                call_id: decided,
                approved,
                reason,
                ..
            }) if decided == call_id => Next::Decide {
                call_id,
                approved,
                reason,
            },
            other => Next::Diverge(DivergenceKind::Parked {
                replayed: format!("asked for approval of call {call_id}"),
                recorded: recorded_park(other.as_ref()),
            }),
        },
        JobOutcome::Defer { until, .. } => Next::Resume {
            at: until,
            wake: false,
        },
        JobOutcome::Retry { error, .. } => Next::Diverge(DivergenceKind::Stopped {
            error: format!("the replayed job failed and would be retried: {error}"),
        }),
    }
}

/// What the recording did where the loop parked.
fn recorded_park(resume: Option<&Resume>) -> String {
    match resume {
        None => "does not park there".into(),
        Some(Resume::Wakeup { .. }) => "slept until a wakeup there".into(),
        Some(Resume::Approval { call_id, .. }) => {
            format!("waited for approval of call {call_id} there")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn approval(call_id: &str, approved: bool, timed_out: bool) -> Resume {
        Resume::Approval {
            call_id: call_id.into(),
            approved,
            reason: None,
            timed_out,
        }
    }

    fn asks(call_id: &str) -> JobOutcome {
        JobOutcome::AwaitApproval {
            call_id: call_id.into(),
            until: 50,
            payload: String::new(),
        }
    }

    #[test]
    fn a_park_is_resumed_as_recorded_or_is_a_divergence() {
        let sleep = || JobOutcome::Park {
            until: 100,
            payload: String::new(),
        };
        let early = next(sleep(), || Some(Resume::Wakeup { now: 40 }));
        assert_eq!(early, Next::Resume { at: 40, wake: true });
        let due = next(sleep(), || Some(Resume::Wakeup { now: 100 }));
        assert_eq!(
            due,
            Next::Resume {
                at: 100,
                wake: false
            }
        );
        let decided = next(asks("c1"), || Some(approval("c1", true, false)));
        assert!(
            matches!(decided, Next::Decide { approved: true, .. }),
            "{decided:?}"
        );
        let timed_out = next(asks("c1"), || Some(approval("c1", false, true)));
        assert_eq!(
            timed_out,
            Next::Resume {
                at: 50,
                wake: false
            }
        );
        let other_call = next(asks("c2"), || Some(approval("c1", true, false)));
        assert!(matches!(
            other_call,
            Next::Diverge(DivergenceKind::Parked { .. })
        ));
        let not_recorded = next(sleep(), || None);
        match not_recorded {
            Next::Diverge(DivergenceKind::Parked { recorded, .. }) => {
                assert_eq!(recorded, "does not park there")
            }
            other => panic!("{other:?}"),
        }
        let ended = next(JobOutcome::succeeded("ok"), || {
            panic!("an end takes no resume")
        });
        assert_eq!(
            ended,
            Next::Ended {
                status: "succeeded".into()
            }
        );
    }
}
