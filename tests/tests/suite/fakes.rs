//! The in-test fakes behind the agent runtime's ports — a scripted model that replies by
//! turn and records every request's bytes, tools of each durability class that record their
//! calls — and a harness that runs one job at a time on a manual clock, or crashes one
//! mid-step. Shared by the `agent` and `wakeup` modules.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use nightshift_agent::runtime::SUMMARY_REQUEST;
use nightshift_agent::{
    AgentConfig, AgentDef, AgentRuntime, ModelFailure, ModelGateway, RunEvent, ToolBox, ToolCall,
    ToolClass, ToolOutput,
};
use nightshift_llm::{
    ContentBlock, Message, ModelRequest, ModelResponse, Role, StopReason, ToolSpec, Usage,
};
use nightshift_store::{Backoff, LeasedJob, ManualClock, NewRun, RunStatus, Store};
use nightshift_tests::TestDb;
use nightshift_worker::{Handler, JobContext, apply_outcome};
use serde_json::json;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

pub(crate) fn usage(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        ..Usage::default()
    }
}

pub(crate) fn reply(content: Vec<ContentBlock>, stop: StopReason) -> ModelResponse {
    ModelResponse {
        id: "msg".into(),
        model: "scripted-1".into(),
        content,
        stop_reason: stop,
        usage: usage(10, 5),
        rate_limits: Default::default(),
        retries: 0,
    }
}

pub(crate) fn text(t: &str) -> ContentBlock {
    ContentBlock::Text { text: t.into() }
}

pub(crate) fn call(id: &str, name: &str) -> ContentBlock {
    ContentBlock::ToolUse {
        id: id.into(),
        name: name.into(),
        input: json!({ "arg": id }),
        unparsed: None,
    }
}

/// A call of `name` with `input`.
pub(crate) fn call_with(id: &str, name: &str, input: serde_json::Value) -> ContentBlock {
    ContentBlock::ToolUse {
        id: id.into(),
        name: name.into(),
        input,
        unparsed: None,
    }
}

/// Replies by the number of assistant messages in the request (so a resumed run gets the
/// reply it would have got), records every request's bytes, and can stall one call.
#[derive(Default)]
pub(crate) struct ScriptModel {
    pub(crate) replies: Vec<ModelResponse>,
    pub(crate) summary: Option<String>,
    /// How the summary reply stops (default `end_turn`).
    pub(crate) summary_stop: Option<StopReason>,
    pub(crate) too_long: bool,
    pub(crate) requests: Mutex<Vec<String>>,
    pub(crate) answered: AtomicUsize,
    pub(crate) stall_at: Mutex<Option<usize>>,
    pub(crate) stalled: Notify,
    /// Work to do while answering request `.0` (a message sent while the model thinks).
    pub(crate) during: Mutex<Vec<(usize, BoxFuture<'static, ()>)>>,
}

impl ScriptModel {
    pub(crate) fn new(replies: Vec<ModelResponse>) -> Arc<Self> {
        Arc::new(Self {
            replies,
            ..Self::default()
        })
    }

    pub(crate) fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }

    pub(crate) fn request(&self, i: usize) -> ModelRequest {
        serde_json::from_str(&self.requests()[i]).unwrap()
    }

    /// Runs `work` to its end while answering request `index`, before the reply goes back.
    pub(crate) fn during(&self, index: usize, work: impl Future<Output = ()> + Send + 'static) {
        self.during.lock().unwrap().push((index, Box::pin(work)));
    }
}

/// Whether `req` is a compaction's request: its last block is the summary request (joined to
/// the last user message when the conversation ends with one, so that roles alternate).
pub(crate) fn asks_for_summary(req: &ModelRequest) -> bool {
    let last_block = req.messages.last().and_then(|m| m.content.last());
    matches!(last_block, Some(ContentBlock::Text { text }) if text == SUMMARY_REQUEST)
}

impl ModelGateway for ScriptModel {
    fn call<'a>(
        &'a self,
        _agent: &'a AgentDef,
        req: &'a ModelRequest,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ModelResponse, ModelFailure>> {
        Box::pin(async move {
            if let Err(v) = nightshift_llm::conversation::check(req) {
                return Err(ModelFailure::Fatal(format!("invalid request: {v}")));
            }
            let bytes = serde_json::to_string(req).unwrap();
            let index = self.requests.lock().unwrap().len();
            self.requests.lock().unwrap().push(bytes);
            let work = {
                let mut during = self.during.lock().unwrap();
                during
                    .iter()
                    .position(|(at, _)| *at == index)
                    .map(|i| during.remove(i).1)
            };
            if let Some(work) = work {
                work.await;
            }
            if *self.stall_at.lock().unwrap() == Some(index) {
                self.stalled.notify_one();
                cancel.cancelled().await;
                return Err(ModelFailure::Cancelled);
            }
            if asks_for_summary(req) {
                let summary = self.summary.clone().unwrap_or_else(|| "summary".into());
                let stop = self.summary_stop.clone().unwrap_or(StopReason::EndTurn);
                return Ok(reply(vec![text(&summary)], stop));
            }
            if self.too_long {
                return Err(ModelFailure::ContextTooLong("prompt is too long".into()));
            }
            let turn = req
                .messages
                .iter()
                .filter(|m| m.role == Role::Assistant)
                .count();
            let r = self
                .replies
                .get(turn)
                .cloned()
                .ok_or_else(|| ModelFailure::Fatal(format!("script has no reply {turn}")))?;
            self.answered.fetch_add(1, Ordering::SeqCst);
            Ok(r)
        })
    }
}

/// Tools by name: `read` (read-only), `put` (idempotent), `send` (side effect). Records each
/// call's name and idempotency key; can stall one tool until the task is aborted.
#[derive(Default)]
pub(crate) struct FakeTools {
    pub(crate) calls: Mutex<Vec<(String, String)>>,
    pub(crate) stall: Mutex<Option<String>>,
    pub(crate) stalled: Notify,
    /// Tools whose next call answers "unresolved" (its outcome not known), once each.
    pub(crate) unresolved: Mutex<Vec<String>>,
    /// What each MCP server lists now: listed for a run whose log lacks the server, or
    /// (once) after its name is put in `mcp_changed`.
    pub(crate) mcp: Mutex<Vec<nightshift_agent::McpListing>>,
    pub(crate) mcp_changed: Mutex<Vec<String>>,
    /// How many listings were handed to the loop.
    pub(crate) mcp_listed: AtomicUsize,
}

impl FakeTools {
    pub(crate) fn calls(&self) -> Vec<(String, String)> {
        self.calls.lock().unwrap().clone()
    }
}

/// The fake tools' specs: `put`, `read` and `send`, each taking any object.
pub(crate) fn fake_specs() -> Vec<ToolSpec> {
    ["put", "read", "send"]
        .iter()
        .map(|n| ToolSpec {
            name: n.to_string(),
            description: format!("the {n} tool"),
            input_schema: json!({"type": "object"}),
        })
        .collect()
}

/// `read` is read-only, `put` idempotent, anything else a side effect.
pub(crate) fn fake_durability(name: &str) -> ToolClass {
    match name {
        "read" => ToolClass::ReadOnly,
        "put" => ToolClass::Idempotent,
        _ => ToolClass::SideEffect,
    }
}

/// A run's log, parsed.
pub(crate) async fn logged_events(store: &Store, run_id: &str) -> Vec<RunEvent> {
    store
        .events(run_id, 0)
        .await
        .unwrap()
        .iter()
        .map(|e| RunEvent::parse(&e.event_type, &e.payload).unwrap())
        .collect()
}

/// Records an invalid request in `invalid` and answers it as a provider would (a 400).
pub(crate) fn refuse_invalid(
    req: &ModelRequest,
    invalid: &Mutex<Vec<String>>,
) -> Result<(), ModelFailure> {
    nightshift_llm::conversation::check(req).map_err(|v| {
        invalid.lock().unwrap().push(v.to_string());
        ModelFailure::Fatal(format!("HTTP 400: invalid request: {v}"))
    })
}

impl ToolBox for FakeTools {
    fn mcp_listings<'a>(
        &'a self,
        _agent: &'a AgentDef,
        _run: nightshift_agent::RunStart<'a>,
        listed: Vec<String>,
        _cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<Vec<nightshift_agent::McpListing>, nightshift_agent::PrepareError>>
    {
        let changed = std::mem::take(&mut *self.mcp_changed.lock().unwrap());
        let due: Vec<_> = self
            .mcp
            .lock()
            .unwrap()
            .iter()
            .filter(|l| !listed.contains(&l.server) || changed.contains(&l.server))
            .cloned()
            .collect();
        self.mcp_listed.fetch_add(due.len(), Ordering::SeqCst);
        Box::pin(async move { Ok(due) })
    }

    fn specs(&self, _agent: &AgentDef) -> Vec<ToolSpec> {
        fake_specs()
    }

    fn durability(&self, _agent: &AgentDef, name: &str, _input: &serde_json::Value) -> ToolClass {
        fake_durability(name)
    }

    /// An input with a `bad` key breaks every tool's schema.
    fn check_input(
        &self,
        _agent: &AgentDef,
        name: &str,
        input: &serde_json::Value,
    ) -> Result<(), String> {
        match input.get("bad") {
            Some(_) => Err(format!(
                "input for `{name}` does not match its schema: at (root): additional property \
                 \"bad\" is not allowed"
            )),
            None => Ok(()),
        }
    }

    fn call<'a>(
        &'a self,
        _agent: &'a AgentDef,
        call: ToolCall<'a>,
        _cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            self.calls
                .lock()
                .unwrap()
                .push((call.name.to_string(), call.idempotency_key.to_string()));
            let stall = self.stall.lock().unwrap().clone();
            if stall.as_deref() == Some(call.name) {
                self.stalled.notify_one();
                std::future::pending::<()>().await;
            }
            let mut unresolved = self.unresolved.lock().unwrap();
            if let Some(at) = unresolved.iter().position(|n| n == call.name) {
                unresolved.remove(at);
                return ToolOutput::unresolved(format!(
                    "{} may or may not have been done: no answer",
                    call.name
                ));
            }
            drop(unresolved);
            ToolOutput::ok(format!("{} says {}", call.name, call.input["arg"]))
        })
    }
}

pub(crate) fn agent(config: serde_json::Value) -> AgentDef {
    let mut base = json!({"name": "helper", "provider": "scripted", "model": "scripted-1",
                          "system": "You help."});
    base.as_object_mut()
        .unwrap()
        .extend(config.as_object().unwrap().clone());
    let cfg: AgentConfig = serde_json::from_value(base).unwrap();
    cfg.resolve(std::path::Path::new(".")).unwrap()
}

pub(crate) struct Harness {
    pub(crate) store: Store,
    pub(crate) clock: ManualClock,
    pub(crate) runtime: Arc<AgentRuntime>,
}

pub(crate) const LEASE: Duration = Duration::from_secs(30);

impl Harness {
    pub(crate) async fn new(
        db: &TestDb,
        agent: AgentDef,
        model: Arc<ScriptModel>,
        tools: Arc<FakeTools>,
    ) -> Self {
        let (store, clock) = db.manual().await;
        let runtime = Arc::new(AgentRuntime::new([agent], model, tools));
        Harness {
            store,
            clock,
            runtime,
        }
    }

    pub(crate) async fn enqueue(&self, agent: &str, prompt: &str) -> String {
        self.store
            .enqueue(&NewRun::new(agent, prompt))
            .await
            .unwrap()
            .run_id
    }

    pub(crate) async fn claim(&self) -> LeasedJob {
        self.store
            .claim("w", None, 1, LEASE)
            .await
            .unwrap()
            .remove(0)
    }

    /// Runs one job to its outcome and records it as the pool would.
    pub(crate) async fn run_once(&self) -> nightshift_worker::JobOutcome {
        let lease = self.claim().await;
        let outcome = self.runtime.handle(JobContext::new(lease.clone())).await;
        apply_outcome(&lease, &outcome, &Backoff::default())
            .await
            .unwrap();
        outcome
    }

    /// Starts a job, waits for `stalled`, then aborts the task (a crash: nothing more is
    /// written) and moves the clock past the lease so the job can be reclaimed.
    pub(crate) async fn crash_when(&self, stalled: &Notify) {
        let lease = self.claim().await;
        let runtime = self.runtime.clone();
        let task = tokio::spawn(async move { runtime.handle(JobContext::new(lease)).await });
        tokio::time::timeout(Duration::from_secs(10), stalled.notified())
            .await
            .expect("the run reached the stall point");
        task.abort();
        let _ = task.await;
        self.clock.advance(LEASE + Duration::from_secs(1));
    }

    pub(crate) async fn events(&self, run_id: &str) -> Vec<RunEvent> {
        logged_events(&self.store, run_id).await
    }

    pub(crate) async fn kinds(&self, run_id: &str) -> Vec<&'static str> {
        self.events(run_id)
            .await
            .iter()
            .map(RunEvent::kind)
            .collect()
    }

    pub(crate) async fn status(&self, run_id: &str) -> (RunStatus, Option<String>, Option<String>) {
        let run = self.store.run(run_id).await.unwrap().unwrap();
        (run.status, run.result, run.error)
    }
}

pub(crate) fn tool_results(msg: &Message) -> Vec<(String, String, bool)> {
    msg.content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolResult {
                tool_use_id,
                content,
                is_error,
            } => Some((tool_use_id.clone(), content.clone(), *is_error)),
            _ => None,
        })
        .collect()
}
