//! A property test of the agent loop: the real runtime on a real store, driven through
//! generated sequences of hostile replies (tool calls with fresh, duplicate, missing and reused
//! ids; replies cut off at `max_tokens` with or without calls; empty and non-empty
//! `pause_turn`s; replies that filled the context window, which compact; unknown stop
//! reasons; outages) and generated crash points (a model call or a tool execution that
//! never returns; the job is aborted and reclaimed after its lease, as when a daemon dies).
//!
//! After each case it checks the loop's promises:
//! - each `side_effect` call executed at most once, and read-only/idempotent calls re-run only
//!   after a crash, always with the key they started with;
//! - every tool call the log asked for answered at most once, and exactly once in a run that
//!   succeeded; no result answers a call that was never asked;
//! - every request the model received passed `conversation::check`;
//! - the run reached a terminal state within a bounded number of jobs and events.
//!
//! Cases: `NIGHTSHIFT_PROPTEST_CASES` (default 40 on SQLite, a quarter of that on PostgreSQL).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use nightshift_agent::{
    AgentDef, AgentRuntime, ModelFailure, ModelGateway, RunEvent, ToolBox, ToolCall, ToolClass,
    ToolOutput,
};
use nightshift_llm::{ContentBlock, ModelRequest, ModelResponse, StopReason, ToolSpec};
use nightshift_store::{NewRun, RunStatus};
use nightshift_tests::{Backend, TestDb};
use nightshift_worker::{Handler, JobContext, apply_outcome};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::json;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::fakes::{
    LEASE, agent, fake_durability, fake_specs, logged_events, refuse_invalid, reply, text,
};

#[derive(Debug, Clone, Copy)]
enum Id {
    Fresh,
    SameAsPrevious,
    Missing,
    Reused,
}

#[derive(Debug, Clone)]
enum Answer {
    Tools(Vec<(Id, &'static str)>),
    CutOff { text: bool, calls: usize },
    Pause { text: bool },
    ContextFull,
    UnknownStop,
    Unavailable,
}

#[derive(Debug, Clone)]
struct Case {
    answers: Vec<Answer>,
    /// Operations (model calls and tool executions, counted from 0 across jobs) that crash.
    crashes: BTreeSet<usize>,
}

fn answer() -> impl Strategy<Value = Answer> {
    let id = prop_oneof![
        Just(Id::Fresh),
        Just(Id::SameAsPrevious),
        Just(Id::Missing),
        Just(Id::Reused)
    ];
    let tool = prop_oneof![Just("read"), Just("put"), Just("send")];
    prop_oneof![
        4 => prop::collection::vec((id, tool), 1..4).prop_map(Answer::Tools),
        1 => (any::<bool>(), 0..3usize).prop_map(|(text, calls)| Answer::CutOff { text, calls }),
        1 => any::<bool>().prop_map(|text| Answer::Pause { text }),
        1 => Just(Answer::ContextFull),
        1 => Just(Answer::UnknownStop),
        1 => Just(Answer::Unavailable),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(answer(), 1..7),
        prop::collection::btree_set(0..24usize, 0..4),
    )
        .prop_map(|(answers, crashes)| Case { answers, crashes })
}

/// The model's answer for `answer` number `i`.
fn render(i: usize, answer: &Answer) -> Result<ModelResponse, ModelFailure> {
    let call = |j: usize, id: String, name: &str| ContentBlock::ToolUse {
        id,
        name: name.into(),
        input: json!({"arg": format!("{i}.{j}")}),
        unparsed: None,
    };
    Ok(match answer {
        Answer::Tools(calls) => {
            let mut blocks = Vec::new();
            let mut previous = format!("toolu_{i}_0");
            for (j, (kind, name)) in calls.iter().enumerate() {
                let id = match kind {
                    Id::Fresh => format!("toolu_{i}_{j}"),
                    Id::SameAsPrevious => previous.clone(),
                    Id::Missing => String::new(),
                    Id::Reused => "call_0".into(),
                };
                previous = id.clone();
                blocks.push(call(j, id, name));
            }
            reply(blocks, StopReason::ToolUse)
        }
        Answer::CutOff { text: t, calls } => {
            let mut blocks = if *t {
                vec![text("I was saying")]
            } else {
                vec![]
            };
            blocks.extend((0..*calls).map(|j| call(j, format!("cut_{i}_{j}"), "send")));
            reply(blocks, StopReason::MaxTokens)
        }
        Answer::Pause { text: t } => {
            let blocks = if *t { vec![text("thinking")] } else { vec![] };
            reply(blocks, StopReason::PauseTurn)
        }
        // It is followed by the compaction's summary call, which takes the next answer.
        Answer::ContextFull => reply(
            vec![text("a long answer"), call(0, format!("full_{i}"), "send")],
            StopReason::ModelContextWindowExceeded,
        ),
        Answer::UnknownStop => reply(
            vec![text("hm")],
            StopReason::Other("weird_new_reason".into()),
        ),
        Answer::Unavailable => {
            return Err(ModelFailure::Unavailable {
                error: "HTTP 529 overloaded_error: Overloaded".into(),
                retry_in: Some(Duration::from_secs(1)),
            });
        }
    })
}

/// Counts operations and hangs the ones chosen to crash.
struct Ops {
    next: AtomicUsize,
    crashes: BTreeSet<usize>,
    crashed: Notify,
}

impl Ops {
    /// Returns once the operation may go on; never, for one chosen to crash.
    async fn step(&self) {
        let op = self.next.fetch_add(1, Ordering::SeqCst);
        if self.crashes.contains(&op) {
            self.crashed.notify_one();
            std::future::pending::<()>().await;
        }
    }
}

struct CrashModel {
    answers: Mutex<VecDeque<Result<ModelResponse, ModelFailure>>>,
    ops: Arc<Ops>,
    invalid: Mutex<Vec<String>>,
}

impl ModelGateway for CrashModel {
    fn call<'a>(
        &'a self,
        _agent: &'a AgentDef,
        req: &'a ModelRequest,
        _cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ModelResponse, ModelFailure>> {
        Box::pin(async move {
            refuse_invalid(req, &self.invalid)?;
            self.ops.step().await; // a crash here loses the reply: it is asked for again
            self.answers
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or_else(|| Ok(reply(vec![text("done")], StopReason::EndTurn)))
        })
    }
}

/// `read` (read-only), `put` (idempotent) and `send` (side effect), each recording its
/// execution (name, idempotency key) before it can crash.
struct LedgerTools {
    ops: Arc<Ops>,
    ledger: Mutex<Vec<(String, String)>>,
}

impl ToolBox for LedgerTools {
    fn specs(&self, _agent: &AgentDef) -> Vec<ToolSpec> {
        fake_specs()
    }

    fn durability(&self, _agent: &AgentDef, name: &str, _input: &serde_json::Value) -> ToolClass {
        fake_durability(name)
    }

    fn call<'a>(
        &'a self,
        _agent: &'a AgentDef,
        call: ToolCall<'a>,
        _cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            self.ledger
                .lock()
                .unwrap()
                .push((call.name.to_string(), call.idempotency_key.to_string()));
            self.ops.step().await; // a crash here: the effect happened, its result is lost
            ToolOutput::ok(format!("{} ok", call.name))
        })
    }
}

#[test]
fn the_loop_keeps_its_promises_whatever_the_replies_and_crashes() {
    let cases: u32 = std::env::var("NIGHTSHIFT_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    for (backend, cases) in [
        (Backend::Sqlite, cases),
        (Backend::Postgres, (cases / 4).max(1)),
    ] {
        let mut runner = TestRunner::new(Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        });
        let result = runner.run(&case(), |case| {
            rt.block_on(async {
                let Some(db) = TestDb::new(backend, "loop_property").await else {
                    return Ok(()); // PostgreSQL not available: said once per case
                };
                let outcome = check_case(&db, &case).await;
                db.cleanup().await;
                outcome
            })
        });
        if let Err(e) = result {
            panic!("{backend:?}: {e}");
        }
    }
}

async fn check_case(db: &TestDb, case: &Case) -> Result<(), TestCaseError> {
    let (store, clock) = db.manual().await;
    let ops = Arc::new(Ops {
        next: AtomicUsize::new(0),
        crashes: case.crashes.clone(),
        crashed: Notify::new(),
    });
    let model = Arc::new(CrashModel {
        answers: Mutex::new(
            case.answers
                .iter()
                .enumerate()
                .map(|(i, a)| render(i, a))
                .collect(),
        ),
        ops: ops.clone(),
        invalid: Mutex::new(Vec::new()),
    });
    let tools = Arc::new(LedgerTools {
        ops: ops.clone(),
        ledger: Mutex::new(Vec::new()),
    });
    let runtime = Arc::new(AgentRuntime::new(
        [agent(json!({}))],
        model.clone(),
        tools.clone(),
    ));
    let mut new_run = NewRun::new("helper", "go");
    new_run.job.max_attempts = 3;
    let run_id = store.enqueue(&new_run).await.unwrap().run_id;

    let mut jobs = 0;
    let status = loop {
        let run = store.run(&run_id).await.unwrap().unwrap();
        if run.status.is_terminal() {
            break run.status;
        }
        prop_assert!(
            jobs < 60,
            "no terminal state after {jobs} jobs: {:?}",
            run.status
        );
        let Some(lease) = store.claim("w", None, 1, LEASE).await.unwrap().pop() else {
            clock.advance(Duration::from_secs(60)); // past any wait and any lease
            continue;
        };
        jobs += 1;
        let handler = runtime.clone();
        let ctx = JobContext::new(lease.clone());
        let mut task = tokio::spawn(async move { handler.handle(ctx).await });
        tokio::select! {
            outcome = &mut task => {
                apply_outcome(&lease, &outcome.unwrap(), &Default::default()).await.unwrap();
            }
            () = ops.crashed.notified() => {
                task.abort();
                let _ = task.await;
                clock.advance(LEASE + Duration::from_secs(1));
            }
        }
    };

    let events = logged_events(&store, &run_id).await;
    let invalid = model.invalid.lock().unwrap().clone();
    prop_assert!(invalid.is_empty(), "invalid requests: {invalid:?}");
    let bound = 12 + 10 * (case.answers.len() + 1) + 2 * case.crashes.len();
    prop_assert!(
        events.len() <= bound,
        "{} events (bound {bound})",
        events.len()
    );

    // Calls asked for, results given, and the key each call started with.
    let mut asked = BTreeSet::new();
    let mut answered: BTreeMap<String, usize> = BTreeMap::new();
    let mut key_of: BTreeMap<String, String> = BTreeMap::new();
    for e in &events {
        match e {
            RunEvent::AssistantMessage {
                message,
                stop_reason: StopReason::ToolUse,
                ..
            } => {
                for t in message.tool_uses() {
                    prop_assert!(asked.insert(t.id.to_string()), "id {} used twice", t.id);
                }
            }
            RunEvent::ToolStarted {
                call_id,
                idempotency_key,
                ..
            } => {
                prop_assert!(
                    key_of
                        .insert(call_id.clone(), idempotency_key.clone())
                        .is_none()
                );
            }
            RunEvent::ToolResult { call_id, .. } => {
                prop_assert!(
                    asked.contains(call_id),
                    "a result for unknown call {call_id}"
                );
                *answered.entry(call_id.clone()).or_default() += 1;
            }
            _ => {}
        }
    }
    prop_assert!(
        answered.values().all(|n| *n == 1),
        "answered more than once: {answered:?}"
    );
    if status == RunStatus::Succeeded {
        prop_assert_eq!(answered.len(), asked.len(), "every call answered");
    }
    let keys: BTreeSet<&String> = key_of.values().collect();
    prop_assert_eq!(keys.len(), key_of.len(), "each call has its own key");

    // Executions: side effects at most once; re-runs only after crashes, with the same key.
    let ledger = tools.ledger.lock().unwrap().clone();
    let mut runs: BTreeMap<(String, String), usize> = BTreeMap::new();
    for (name, key) in &ledger {
        prop_assert!(
            keys.contains(key),
            "{name} ran with a key no call started with"
        );
        *runs.entry((name.clone(), key.clone())).or_default() += 1;
    }
    for ((name, key), n) in &runs {
        let most = if name == "send" {
            1
        } else {
            1 + case.crashes.len()
        };
        prop_assert!(*n <= most, "{name} {key} ran {n} times");
    }
    Ok(())
}
