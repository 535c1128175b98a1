//! The agent loop, in process, against replies a hostile or broken provider sends: duplicate,
//! missing and reused tool-call ids, empty replies, inputs that break a tool's schema, long
//! outages, and logs written by older versions that hold duplicate ids. Every request the
//! model receives is checked against `nightshift_llm::conversation::check`, and a request
//! that breaks it fails the run (so each test also proves the requests stayed valid).
//!
//! The property test at the end drives the same loop through generated sequences of such
//! replies and generated crash points.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use nightshift_agent::{AgentDef, AgentRuntime, ModelFailure, ModelGateway, RunEvent};
use nightshift_llm::{ContentBlock, ModelRequest, ModelResponse, StopReason};
use nightshift_store::{JobState, ManualClock, NewRun, RunStatus, Store};
use nightshift_tests::{TestDb, on_both_backends};
use nightshift_worker::{Handler, JobContext, JobOutcome, apply_outcome};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::fakes::{FakeTools, LEASE, agent, logged_events, refuse_invalid, reply, text};

on_both_backends! {
    two_calls_with_one_id_in_a_reply_each_run_once => duplicate_ids_in_one_reply;
    a_provider_id_reused_in_a_later_turn_gets_its_own_key => reused_ids_across_turns;
    empty_replies_never_reach_the_provider => empty_replies;
    an_input_that_breaks_the_schema_never_starts => schema_violation;
    an_outage_waits_without_spending_attempts_and_resumes => outage_resumes;
    an_outage_past_the_limit_fails_with_the_real_cause => outage_past_limit;
    a_log_with_duplicate_ids_from_an_older_version_fails_instead_of_spinning => old_duplicate_log;
    a_log_with_one_id_in_every_turn_from_an_older_version_resumes => old_reused_id_log;
}

/// Answers each call with the next scripted answer, whatever the request; refuses (as a
/// provider would) any request that breaks the conversation rules, and records them all.
#[derive(Default)]
pub(crate) struct SequenceModel {
    answers: Mutex<VecDeque<Result<ModelResponse, ModelFailure>>>,
    pub(crate) requests: Mutex<Vec<ModelRequest>>,
    pub(crate) invalid: Mutex<Vec<String>>,
}

impl SequenceModel {
    pub(crate) fn new(answers: Vec<Result<ModelResponse, ModelFailure>>) -> Arc<Self> {
        Arc::new(Self {
            answers: Mutex::new(answers.into()),
            ..Self::default()
        })
    }
}

impl ModelGateway for SequenceModel {
    fn call<'a>(
        &'a self,
        _agent: &'a AgentDef,
        req: &'a ModelRequest,
        _cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ModelResponse, ModelFailure>> {
        Box::pin(async move {
            self.requests.lock().unwrap().push(req.clone());
            refuse_invalid(req, &self.invalid)?;
            self.answers.lock().unwrap().pop_front().unwrap_or_else(|| {
                Ok(reply(
                    vec![text("nothing more to say")],
                    StopReason::EndTurn,
                ))
            })
        })
    }
}

pub(crate) struct Loop {
    pub(crate) store: Store,
    pub(crate) clock: ManualClock,
    pub(crate) runtime: Arc<AgentRuntime>,
    pub(crate) model: Arc<SequenceModel>,
    pub(crate) tools: Arc<FakeTools>,
}

impl Loop {
    pub(crate) async fn new(db: &TestDb, def: AgentDef, model: Arc<SequenceModel>) -> Loop {
        let (store, clock) = db.manual().await;
        let tools = Arc::new(FakeTools::default());
        let runtime = Arc::new(AgentRuntime::new([def], model.clone(), tools.clone()));
        Loop {
            store,
            clock,
            runtime,
            model,
            tools,
        }
    }

    pub(crate) async fn enqueue(&self, max_attempts: i64) -> String {
        let mut run = NewRun::new("helper", "go");
        run.job.max_attempts = max_attempts;
        self.store.enqueue(&run).await.unwrap().run_id
    }

    /// Claims the next due job (if any) and runs it to its outcome, recorded as the pool does.
    pub(crate) async fn step(&self) -> Option<JobOutcome> {
        let lease = self.store.claim("w", None, 1, LEASE).await.unwrap().pop()?;
        let outcome = self.runtime.handle(JobContext::new(lease.clone())).await;
        apply_outcome(&lease, &outcome, &Default::default())
            .await
            .unwrap();
        Some(outcome)
    }

    pub(crate) async fn events(&self, run_id: &str) -> Vec<RunEvent> {
        logged_events(&self.store, run_id).await
    }

    /// Writes `events` after a prompt of "go", as an older version did under a lease of its
    /// own, then lets that daemon die: its lease expires.
    async fn write_as_an_older_version(&self, events: Vec<RunEvent>) {
        let lease = self
            .store
            .claim("old", None, 1, LEASE)
            .await
            .unwrap()
            .remove(0);
        let start = [
            RunEvent::RunStarted {
                agent: "helper".into(),
                agent_hash: "old".into(),
            },
            RunEvent::UserMessage {
                message: nightshift_llm::Message::user_text("go"),
            },
        ];
        for e in start.iter().chain(&events) {
            lease.append_event(e.kind(), &e.payload()).await.unwrap();
        }
        self.clock.advance(LEASE + Duration::from_secs(1));
    }

    async fn run(&self, run_id: &str) -> nightshift_store::Run {
        self.store.run(run_id).await.unwrap().unwrap()
    }
}

pub(crate) fn tool_use(id: &str, name: &str, input: serde_json::Value) -> ContentBlock {
    ContentBlock::ToolUse {
        id: id.into(),
        name: name.into(),
        input,
        unparsed: None,
    }
}

fn started_ids(events: &[RunEvent]) -> Vec<(String, String)> {
    events
        .iter()
        .filter_map(|e| match e {
            RunEvent::ToolStarted {
                call_id,
                idempotency_key,
                ..
            } => Some((call_id.clone(), idempotency_key.clone())),
            _ => None,
        })
        .collect()
}

async fn duplicate_ids_in_one_reply(db: &TestDb) {
    let model = SequenceModel::new(vec![
        Ok(reply(
            vec![
                tool_use("toolu_1", "send", json!({"arg": "a"})),
                tool_use("toolu_1", "send", json!({"arg": "b"})),
            ],
            StopReason::ToolUse,
        )),
        Ok(reply(vec![text("sent both")], StopReason::EndTurn)),
    ]);
    let l = Loop::new(db, agent(json!({})), model).await;
    let run_id = l.enqueue(3).await;
    assert!(matches!(l.step().await, Some(JobOutcome::Done(_))));

    let run = l.run(&run_id).await;
    assert_eq!(run.status, RunStatus::Succeeded, "{:?}", run.error);
    let calls = l.tools.calls();
    assert_eq!(
        calls.len(),
        2,
        "each side effect ran exactly once: {calls:?}"
    );
    assert_ne!(calls[0].1, calls[1].1, "each call has its own key");
    let events = l.events(&run_id).await;
    let ids = started_ids(&events);
    assert_eq!(ids.len(), 2);
    assert_ne!(ids[0].0, ids[1].0, "the second call got a runtime id");
    assert!(events.len() < 15, "a bounded log: {} events", events.len());
    // The reply after the tools carried both calls, each answered once.
    let second = &l.model.requests.lock().unwrap()[1];
    let results: Vec<_> = second
        .messages
        .last()
        .unwrap()
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolResult { tool_use_id, .. } => Some(tool_use_id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(results, vec![ids[0].0.clone(), ids[1].0.clone()]);
    assert!(l.model.invalid.lock().unwrap().is_empty());
}

async fn reused_ids_across_turns(db: &TestDb) {
    let pay = |amount: i64| {
        Ok(reply(
            vec![tool_use("call_0", "send", json!({"amount": amount}))],
            StopReason::ToolUse,
        ))
    };
    let model = SequenceModel::new(vec![
        pay(5),
        pay(7),
        Ok(reply(vec![text("paid twice")], StopReason::EndTurn)),
    ]);
    let l = Loop::new(db, agent(json!({})), model).await;
    let run_id = l.enqueue(3).await;
    l.step().await;
    assert_eq!(l.run(&run_id).await.status, RunStatus::Succeeded);
    let calls = l.tools.calls();
    assert_eq!(calls.len(), 2);
    assert_ne!(
        calls[0].1, calls[1].1,
        "two different payments never share an idempotency key"
    );
    let ids = started_ids(&l.events(&run_id).await);
    assert_eq!(ids[0].0, "call_0", "a provider id new to the run is kept");
    assert_ne!(ids[1].0, "call_0", "a reused one is replaced");
    assert!(l.model.invalid.lock().unwrap().is_empty());
}

async fn empty_replies(db: &TestDb) {
    let cut_tool_only = reply(vec![], StopReason::MaxTokens);
    let empty_pause = reply(vec![], StopReason::PauseTurn);
    let kept_call = reply(
        vec![text("let me"), tool_use("t1", "send", json!({}))],
        StopReason::MaxTokens,
    );
    let model = SequenceModel::new(vec![
        Ok(cut_tool_only),
        Ok(empty_pause.clone()),
        Ok(empty_pause),
        Ok(kept_call),
        Ok(reply(vec![text("done")], StopReason::EndTurn)),
    ]);
    let l = Loop::new(db, agent(json!({})), model).await;
    let run_id = l.enqueue(3).await;
    l.step().await;
    let run = l.run(&run_id).await;
    assert_eq!(run.status, RunStatus::Succeeded, "{:?}", run.error);
    assert_eq!(run.result.as_deref(), Some("done"));
    assert_eq!(l.model.requests.lock().unwrap().len(), 5);
    assert!(
        l.model.invalid.lock().unwrap().is_empty(),
        "{:?}",
        l.model.invalid.lock().unwrap()
    );
    assert!(l.tools.calls().is_empty(), "no call of a cut-off reply ran");
}

async fn schema_violation(db: &TestDb) {
    let model = SequenceModel::new(vec![
        Ok(reply(
            vec![
                tool_use("a", "send", json!({"bad": 1})),
                tool_use("b", "send", json!({"arg": "ok"})),
            ],
            StopReason::ToolUse,
        )),
        Ok(reply(vec![text("done")], StopReason::EndTurn)),
    ]);
    let l = Loop::new(db, agent(json!({})), model).await;
    let run_id = l.enqueue(3).await;
    l.step().await;
    assert_eq!(l.run(&run_id).await.status, RunStatus::Succeeded);
    assert_eq!(l.tools.calls().len(), 1, "only the valid call ran");
    let events = l.events(&run_id).await;
    let started = started_ids(&events);
    assert_eq!(started.len(), 1, "the refused call never started");
    assert_eq!(started[0].0, "b");
    let refused = events.iter().find_map(|e| match e {
        RunEvent::ToolResult {
            call_id,
            content,
            is_error,
            ..
        } if call_id == "a" => Some((content.clone(), *is_error)),
        _ => None,
    });
    let (content, is_error) = refused.expect("the refused call has a result");
    assert!(
        is_error && content.contains("does not match its schema"),
        "{content}"
    );
}

fn overloaded() -> Result<ModelResponse, ModelFailure> {
    Err(ModelFailure::Unavailable {
        error: "model m is unavailable: HTTP 529 overloaded_error: Overloaded".into(),
        retry_in: Some(Duration::from_secs(30)),
    })
}

async fn outage_resumes(db: &TestDb) {
    let mut answers: Vec<_> = (0..4).map(|_| overloaded()).collect();
    answers.push(Ok(reply(vec![text("back")], StopReason::EndTurn)));
    let l = Loop::new(db, agent(json!({})), SequenceModel::new(answers)).await;
    // One attempt only: any attempt the outage spent would dead-letter the job.
    let run_id = l.enqueue(1).await;
    for wait in 0..4 {
        let outcome = l.step().await.expect("the job is due");
        let JobOutcome::Defer { until, error } = outcome else {
            panic!("wait {wait}: {outcome:?}");
        };
        assert!(error.contains("HTTP 529"), "{error}");
        assert_eq!(until, l.store.now() + 30_000, "it waits for the next probe");
        let run = l.run(&run_id).await;
        assert_eq!(run.status, RunStatus::Queued);
        let job = &l.store.jobs_of_run(&run_id).await.unwrap()[0];
        assert_eq!(
            (job.status, job.attempts),
            (JobState::Queued, 0),
            "no attempt spent"
        );
        assert!(l.step().await.is_none(), "nothing is due before the probe");
        l.clock.advance(Duration::from_secs(30));
    }
    assert!(matches!(l.step().await, Some(JobOutcome::Done(_))));
    let run = l.run(&run_id).await;
    assert_eq!(run.status, RunStatus::Succeeded, "{:?}", run.error);
    let waits: Vec<_> = l
        .events(&run_id)
        .await
        .into_iter()
        .filter_map(|e| match e {
            RunEvent::ModelUnavailable { error, since, .. } => Some((error, since)),
            _ => None,
        })
        .collect();
    assert_eq!(waits.len(), 4);
    assert!(waits.iter().all(|(e, _)| e.contains("Overloaded")));
    assert!(
        waits.iter().all(|(_, since)| *since == waits[0].1),
        "one outage, one start"
    );
}

async fn outage_past_limit(db: &TestDb) {
    let answers: Vec<_> = (0..50).map(|_| overloaded()).collect();
    let def = agent(json!({"outage_limit_seconds": 100}));
    let l = Loop::new(db, def, SequenceModel::new(answers)).await;
    let run_id = l.enqueue(1).await;
    let mut deferrals = 0;
    loop {
        match l.step().await {
            Some(JobOutcome::Defer { .. }) => deferrals += 1,
            Some(JobOutcome::Done(_)) => break,
            Some(other) => panic!("{other:?}"),
            None => l.clock.advance(Duration::from_secs(30)),
        }
        assert!(deferrals < 10, "the limit ends the waiting");
    }
    assert_eq!(
        deferrals, 4,
        "waits at 0, 30, 60 and 90 s; the limit at 100 s"
    );
    let run = l.run(&run_id).await;
    assert_eq!(run.status, RunStatus::Failed);
    let error = run.error.unwrap();
    assert!(
        error.contains("HTTP 529 overloaded_error: Overloaded") && error.contains("outage limit"),
        "{error}"
    );
}

async fn old_duplicate_log(db: &TestDb) {
    let l = Loop::new(db, agent(json!({})), SequenceModel::new(vec![])).await;
    let run_id = l.enqueue(3).await;
    // A log as an older version wrote it: one reply with two calls sharing an id.
    l.write_as_an_older_version(vec![RunEvent::AssistantMessage {
        message: nightshift_llm::Message {
            role: nightshift_llm::Role::Assistant,
            content: vec![
                tool_use("dup", "send", json!({})),
                tool_use("dup", "send", json!({})),
            ],
        },
        stop_reason: StopReason::ToolUse,
        usage: Default::default(),
        model: "m".into(),
        cost_usd: 0.0,
        latency_ms: None,
        retries: 0,
    }])
    .await;
    let outcome = l.step().await.expect("reclaimed");
    assert!(matches!(outcome, JobOutcome::Done(_)), "{outcome:?}");
    let run = l.run(&run_id).await;
    assert_eq!(run.status, RunStatus::Failed);
    assert!(run.error.unwrap().contains("share the id dup"));
    assert!(l.tools.calls().is_empty(), "nothing ran, nothing repeated");
}

async fn old_reused_id_log(db: &TestDb) {
    let model = SequenceModel::new(vec![Ok(reply(vec![text("resumed")], StopReason::EndTurn))]);
    let l = Loop::new(db, agent(json!({})), model).await;
    let run_id = l.enqueue(3).await;
    // A log as an older version wrote it for a server without ids: `call_0` in every turn.
    let turn = |n: u32| RunEvent::AssistantMessage {
        message: nightshift_llm::Message {
            role: nightshift_llm::Role::Assistant,
            content: vec![tool_use("call_0", "read", json!({"arg": n}))],
        },
        stop_reason: StopReason::ToolUse,
        usage: Default::default(),
        model: "m".into(),
        cost_usd: 0.0,
        latency_ms: None,
        retries: 0,
    };
    let result = RunEvent::ToolResult {
        call_id: "call_0".into(),
        content: "ok".into(),
        is_error: false,
        interrupted: false,
    };
    l.write_as_an_older_version(vec![turn(1), result.clone(), turn(2), result])
        .await;
    l.step().await.expect("reclaimed");
    let run = l.run(&run_id).await;
    assert_eq!(run.status, RunStatus::Succeeded, "{:?}", run.error);
    assert!(
        l.model.invalid.lock().unwrap().is_empty(),
        "the resumed request is valid: {:?}",
        l.model.invalid.lock().unwrap()
    );
}
