//! A long scripted run through the real agent runtime, for `runtime-bench`'s storage table:
//! what a run of N turns with distinct ~4 KB tool outputs leaves in the store, against what
//! its content gzips to, and how long it takes to resume after its worker died.
//!
//! The model is scripted in process: turn `k` replies with ~300 bytes of prose and one call
//! of the read-only tool `produce`, whose output is ~4 KB of words in an order of their own
//! (distinct per turn, but in the same language, as real tool output is). It reports as input
//! tokens a quarter of the request's bytes, so with a context window the run compacts as a
//! real one would (the summary it writes is ~1 KB); without one the whole conversation is
//! every request. After N turns the
//! model never answers: the bench drops the job there, as a crash would, waits for its lease
//! to expire, and claims it again; resume latency is from that claim to the next model
//! request, through the real load (newest checkpoint, events after it).

use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;
use futures::future::BoxFuture;
use nightshift_agent::runtime::SUMMARY_REQUEST;
use nightshift_agent::{
    AgentConfig, AgentDef, AgentRuntime, ModelFailure, ModelGateway, ToolBox, ToolCall, ToolClass,
    ToolOutput,
};
use nightshift_llm::{ContentBlock, ModelRequest, ModelResponse, StopReason, ToolSpec, Usage};
use nightshift_store::{ManualClock, NewRun, RunStorage, Store};
use nightshift_worker::{Handler, JobContext};
use serde_json::json;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The lease a bench job holds; once it is dropped, the store's clock is moved past it.
const LEASE: Duration = Duration::from_secs(3600);

pub use nightshift_store_conformance::content::words;

/// Replies with a tool call for `turns` turns, then never answers (until cancelled), noting
/// when each call came.
struct Script {
    turns: usize,
    /// Model calls made for the run's turns (summaries not counted).
    calls: AtomicUsize,
    stalled: Notify,
    last_call: std::sync::Mutex<Option<Instant>>,
}

impl ModelGateway for Script {
    fn call<'a>(
        &'a self,
        _agent: &'a AgentDef,
        req: &'a ModelRequest,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ModelResponse, ModelFailure>> {
        Box::pin(async move {
            *self.last_call.lock().unwrap() = Some(Instant::now());
            let input_tokens = serde_json::to_string(&req.messages).map_or(0, |s| s.len() / 4);
            let usage = Usage {
                input_tokens: input_tokens as u64,
                output_tokens: 100,
                ..Usage::default()
            };
            if asks_for_summary(req) {
                return Ok(ModelResponse {
                    id: "msg_summary".into(),
                    model: "m".into(),
                    content: vec![ContentBlock::Text {
                        text: format!("Summary: {}", words(u64::MAX / 3, 1000)),
                    }],
                    stop_reason: StopReason::EndTurn,
                    usage,
                    rate_limits: Default::default(),
                    retries: 0,
                });
            }
            let k = self.calls.fetch_add(1, Ordering::SeqCst);
            if k >= self.turns {
                self.stalled.notify_one();
                cancel.cancelled().await;
                return Err(ModelFailure::Cancelled);
            }
            Ok(ModelResponse {
                id: format!("msg_{k}"),
                model: "m".into(),
                content: vec![
                    ContentBlock::Text {
                        text: format!("Turn {k}. {}", words(k as u64 + 1_000_000, 300)),
                    },
                    ContentBlock::ToolUse {
                        id: format!("toolu_{k:05}"),
                        name: "produce".into(),
                        input: json!({"part": k}),
                        unparsed: None,
                    },
                ],
                stop_reason: StopReason::ToolUse,
                usage,
                rate_limits: Default::default(),
                retries: 0,
            })
        })
    }
}

/// Whether `req` asks for the compaction's summary (its last user text is the request).
fn asks_for_summary(req: &ModelRequest) -> bool {
    req.messages
        .last()
        .is_some_and(|m| m.text().contains(SUMMARY_REQUEST))
}

/// One read-only tool whose output is ~4 KB of distinct words.
struct Produce;

impl ToolBox for Produce {
    fn specs(&self, _agent: &AgentDef) -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "produce".into(),
            description: "Prints the next part.".into(),
            input_schema: json!({"type": "object", "properties": {"part": {"type": "integer"}}}),
        }]
    }
    fn durability(&self, _agent: &AgentDef, _name: &str, _input: &serde_json::Value) -> ToolClass {
        ToolClass::ReadOnly
    }
    fn call<'a>(
        &'a self,
        _agent: &'a AgentDef,
        call: ToolCall<'a>,
        _cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, ToolOutput> {
        let part = call.input["part"].as_u64().unwrap_or(0);
        Box::pin(async move { ToolOutput::ok(words(part, 4096)) })
    }
}

/// What a long run left in the store.
#[derive(Debug, Clone)]
pub struct LongRun {
    pub turns: usize,
    pub storage: RunStorage,
    /// The gzip size of every event's payload once, newline-joined: the run's log, which
    /// holds each message, input, output and summary once — its unique content.
    pub content_gzip: usize,
    /// Resume latencies, claim → next model request, in ms.
    pub resumes_ms: Vec<f64>,
}

fn gzip_len(text: &str) -> usize {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(text.as_bytes()).expect("writing to memory");
    gz.finish().expect("writing to memory").len()
}

/// Runs `turns` scripted turns on `store` (whose clock is `clock`), then drops and resumes
/// the run `resumes` times. `window`: the agent's context window in tokens (`None`: so large
/// that the run never compacts).
pub async fn measure(
    store: &Store,
    clock: &ManualClock,
    turns: usize,
    resumes: usize,
    window: Option<u64>,
) -> Result<LongRun> {
    let agent: AgentConfig = serde_json::from_value(json!({
        "name": "bench", "provider": "p", "model": "m",
        "budgets": {"max_turns": 1_000_000},
        "context": {"window_tokens": window.unwrap_or(1_000_000_000)}
    }))?;
    let def = agent
        .resolve(std::path::Path::new("."))
        .map_err(anyhow::Error::msg)?;
    let script = Arc::new(Script {
        turns,
        calls: AtomicUsize::new(0),
        stalled: Notify::new(),
        last_call: std::sync::Mutex::new(None),
    });
    let runtime = Arc::new(AgentRuntime::new([def], script.clone(), Arc::new(Produce)));
    let new = NewRun::new("bench", "Go.").max_attempts(resumes as i64 + 10);
    let run_id = store.enqueue(&new).await?.run_id;
    let mut resumes_ms = Vec::new();
    for attempt in 0..=resumes {
        let lease = store
            .claim("bench", None, 1, LEASE)
            .await?
            .pop()
            .ok_or_else(|| anyhow::anyhow!("the run's job was not claimable"))?;
        let claimed = Instant::now();
        let job = {
            let runtime = runtime.clone();
            tokio::spawn(async move { runtime.handle(JobContext::new(lease)).await })
        };
        script.stalled.notified().await;
        if attempt > 0 {
            let at = script.last_call.lock().unwrap().expect("a call was made");
            resumes_ms.push((at - claimed).as_secs_f64() * 1e3);
        }
        // The worker dies: its job is dropped where it waits for the model.
        job.abort();
        let _ = job.await;
        clock.advance(LEASE + Duration::from_secs(1));
    }
    let storage = store.run_storage(&run_id).await?;
    let log: Vec<String> = store
        .events(&run_id, 0)
        .await?
        .into_iter()
        .map(|e| e.payload)
        .collect();
    Ok(LongRun {
        turns,
        storage,
        content_gzip: gzip_len(&log.join("\n")),
        resumes_ms,
    })
}
