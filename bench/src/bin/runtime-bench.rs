//! # runtime-bench
//!
//! Measures the agent runtime's durability costs and prints one table:
//! 1. **WAL overhead per tool call**: a loop of no-op tool calls, each logged as `tool_started`
//!    and `tool_result` under the job's lease (and folded into the run state), against the
//!    same loop folding the state in memory without the writes; µs per call, on SQLite
//!    (WAL, `synchronous=FULL`) and PostgreSQL.
//! 2. **Checkpoints** of 10, 100 and 1,000-message conversations (text and tool results of a
//!    realistic mix of sizes): the document's size, encode and decode time.
//! 3. **Resume latency**: claim → first model request, for a run whose newest checkpoint holds
//!    10, 100 or 1,000 messages with a few events after it, through the real
//!    [`AgentRuntime`] (load checkpoint, fold events, build the request).
//! 4. **Storage of a long run** ([`nightshift_bench::long_run`]): a scripted run of 100, 300
//!    and 1,000 turns with distinct ~4 KB tool outputs through the real runtime: what it
//!    stores (events, blobs, checkpoints) against what its content gzips to, per turn, and
//!    its resume latency after its worker died (claim → next model request).
//!
//! Usage: `cargo run --release -p nightshift-bench --bin runtime-bench [-- --sqlite-only |
//! --postgres-only] [--long-run-only]`. PostgreSQL comes from `NIGHTSHIFT_BENCH_PG_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`), each measurement in a fresh schema.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;
use futures::future::BoxFuture;
use nightshift_agent::checkpoint;
use nightshift_agent::events::RunEvent;
use nightshift_agent::{
    AgentConfig, AgentDef, AgentRuntime, ModelFailure, ModelGateway, RunState, ToolBox, ToolCall,
    ToolClass, ToolOutput,
};
use nightshift_llm::{
    ContentBlock, Message, ModelRequest, ModelResponse, Role, StopReason, ToolSpec, Usage,
};
use nightshift_store::{ManualClock, NewRun, Store, StoreConfig, SystemClock};
use nightshift_worker::{Handler, JobContext};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const LEASE: Duration = Duration::from_secs(300);

#[tokio::main]
async fn main() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let backends = nightshift_bench::backends(dir.path(), "rt").await;

    if !std::env::args().any(|a| a == "--long-run-only") {
        durability_costs(&backends).await?;
    }
    long_runs(&backends).await
}

/// The WAL, checkpoint and resume tables (1–3).
async fn durability_costs(backends: &[(&'static str, StoreConfig)]) -> Result<()> {
    println!("## WAL overhead per tool call (no-op tool, 500 calls)");
    println!(
        "{:<12} {:>16} {:>16} {:>16}",
        "backend", "with WAL µs/call", "no WAL µs/call", "WAL cost µs/call"
    );
    for (name, config) in backends {
        let (with, without) = wal_overhead(config, 500).await?;
        println!(
            "{name:<12} {with:>16.1} {without:>16.2} {:>16.1}",
            with - without
        );
    }

    println!();
    println!("## Checkpoints (the versioned JSON document; how it is stored: table 4)");
    println!(
        "{:<10} {:>12} {:>12} {:>12}",
        "messages", "bytes", "encode µs", "decode µs"
    );
    for n in [10, 100, 1000] {
        let state = conversation(n);
        let (doc, encode_us) = time_avg(20, || checkpoint::encode(&state));
        let (_, decode_us) = time_avg(20, || checkpoint::decode(&doc).expect("decodes"));
        println!(
            "{n:<10} {:>12} {encode_us:>12.0} {decode_us:>12.0}",
            doc.len()
        );
    }

    println!();
    println!("## Resume latency: claim → first model request (median of 5)");
    println!("{:<12} {:>10} {:>14}", "backend", "messages", "latency ms");
    for (name, config) in backends {
        for n in [10, 100, 1000] {
            let ms = resume_latency(config, n).await?;
            println!("{name:<12} {n:>10} {ms:>14.2}");
        }
    }
    Ok(())
}

/// Table 4: long scripted runs, their storage and their resume.
async fn long_runs(backends: &[(&'static str, StoreConfig)]) -> Result<()> {
    println!();
    println!(
        "## Storage of a long run: per turn ~300 B of prose and a distinct ~4 KB tool output; \
         window = the agent's context window (none: it never compacts; 100k: it compacts at \
         80% of it); content gzip = the gzip of every event's payload once (the run's log: \
         each message, input, output and summary); resume = claim → next model request after \
         the worker died (median of 3)"
    );
    let header = [
        "backend",
        "window",
        "turns",
        "events",
        "blobs",
        "stored bytes",
        "per turn",
        "content gzip",
        "stored/content",
        "checkpoints",
        "resume ms",
        "resume / 100",
    ];
    println!("| {} |", header.join(" | "));
    println!("|{}|", header.map(|_| "---").join("|"));
    for (name, config) in backends {
        for window in [None, Some(100_000)] {
            long_run_rows(name, config, window).await?;
        }
    }
    Ok(())
}

/// The rows of one backend and window: 100, 300 and 1,000 turns.
async fn long_run_rows(name: &str, config: &StoreConfig, window: Option<u64>) -> Result<()> {
    let shown = window.map_or("none".to_string(), |w| format!("{}k", w / 1000));
    let mut base = None;
    for turns in [100, 300, 1000] {
        let clock = ManualClock::starting_now();
        let store = fresh_store_with(config, Arc::new(clock.clone())).await?;
        let run = nightshift_bench::long_run::measure(&store, &clock, turns, 3, window).await?;
        store.close().await;
        let mut resumes = run.resumes_ms.clone();
        resumes.sort_by(|a, b| a.total_cmp(b));
        let resume = resumes[resumes.len() / 2];
        let base = *base.get_or_insert(resume);
        let stored = run.storage.stored_bytes();
        println!(
            "| {name} | {shown} | {turns} | {} | {} | {stored} | {} | {} | {:.2}x | {} | {resume:.2} | {:.2}x |",
            run.storage.events,
            run.storage.blobs,
            stored / turns as i64,
            run.content_gzip,
            stored as f64 / run.content_gzip as f64,
            run.storage.checkpoints,
            resume / base,
        );
    }
    Ok(())
}

async fn fresh_store(config: &StoreConfig) -> Result<Store> {
    fresh_store_with(config, Arc::new(SystemClock)).await
}

async fn fresh_store_with(
    config: &StoreConfig,
    clock: Arc<dyn nightshift_store::Clock>,
) -> Result<Store> {
    let mut config = config.clone();
    if let Some(schema) = &config.schema {
        config.schema = Some(format!("{schema}_{}", uuid_suffix()));
    } else {
        config.url = config.url.replace(".db", &format!("_{}.db", uuid_suffix()));
    }
    let store = Store::connect(&config, clock).await?;
    store.migrate().await?;
    Ok(store)
}

fn uuid_suffix() -> String {
    format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

fn time_avg<T>(n: u32, mut f: impl FnMut() -> T) -> (T, f64) {
    let start = Instant::now();
    let mut last = f();
    for _ in 1..n {
        last = f();
    }
    (last, start.elapsed().as_secs_f64() * 1e6 / f64::from(n))
}

/// µs per no-op tool call with the WAL writes, and without them.
async fn wal_overhead(config: &StoreConfig, calls: usize) -> Result<(f64, f64)> {
    let store = fresh_store(config).await?;
    store.enqueue(&NewRun::new("bench", "p")).await?;
    let lease = store.claim("bench", None, 1, LEASE).await?.remove(0);
    let mut state = RunState::default();
    let tool_round = |i: usize| {
        let id = format!("toolu_{i}");
        (
            RunEvent::AssistantMessage {
                message: Message {
                    role: Role::Assistant,
                    content: vec![ContentBlock::ToolUse {
                        id: id.clone(),
                        name: "noop".into(),
                        input: json!({}),
                        unparsed: None,
                    }],
                },
                stop_reason: StopReason::ToolUse,
                usage: Usage::default(),
                model: "m".into(),
                cost_usd: 0.0,
                latency_ms: None,
                retries: 0,
            },
            RunEvent::ToolStarted {
                call_id: id.clone(),
                name: "noop".into(),
                input: json!({}),
                durability: ToolClass::ReadOnly,
                idempotency_key: format!("r:{id}"),
            },
            RunEvent::ToolResult {
                call_id: id,
                content: "ok".into(),
                is_error: false,
                interrupted: false,
            },
        )
    };
    // With the WAL: the reply is folded in memory (its cost belongs to the model call), the
    // tool's intent and result are appended under the lease, then folded.
    let mut seq = 0;
    let mut wal = Duration::ZERO;
    for i in 0..calls {
        let (reply, started, result) = tool_round(i);
        seq = lease.append_event(reply.kind(), &reply.payload()).await?;
        state.apply(seq, &reply)?;
        let t = Instant::now();
        for event in [started, result] {
            seq = lease.append_event(event.kind(), &event.payload()).await?;
            state.apply(seq, &event)?;
        }
        wal += t.elapsed();
    }
    // Without: the same events folded in memory only.
    let mut mem = RunState::default();
    let mut mem_seq = 0;
    let mut plain = Duration::ZERO;
    for i in 0..calls {
        let (reply, started, result) = tool_round(i);
        mem_seq += 1;
        mem.apply(mem_seq, &reply)?;
        let t = Instant::now();
        for event in [started, result] {
            mem_seq += 1;
            let _payload = event.payload();
            mem.apply(mem_seq, &event)?;
        }
        plain += t.elapsed();
    }
    let _ = seq;
    store.close().await;
    let per = |d: Duration| d.as_secs_f64() * 1e6 / calls as f64;
    Ok((per(wal), per(plain)))
}

/// A conversation of `n` messages: a prompt, then rounds of a reply with a tool call and its
/// result, sized like real work (replies of ~300 bytes, results from 100 bytes to 4 KB).
fn conversation(n: usize) -> RunState {
    let mut state = RunState::default();
    let mut seq = 0;
    let mut apply = |state: &mut RunState, e: RunEvent| {
        seq += 1;
        state.apply(seq, &e).expect("folds");
    };
    apply(
        &mut state,
        RunEvent::UserMessage {
            message: Message::user_text(
                "Review the change in src/parser.rs and fix what the tests report.",
            ),
        },
    );
    let mut i = 0;
    while state.messages.len() < n {
        let id = format!("toolu_{i:04}");
        let prose =
            "I will read the next part of the file to see how the tokens are consumed. ".repeat(4);
        apply(
            &mut state,
            RunEvent::AssistantMessage {
                message: Message {
                    role: Role::Assistant,
                    content: vec![
                        ContentBlock::Text { text: prose },
                        ContentBlock::ToolUse {
                            id: id.clone(),
                            name: "read_file".into(),
                            input: json!({"path": format!("src/mod_{i}.rs"), "offset": i * 40, "limit": 40}),
                            unparsed: None,
                        },
                    ],
                },
                stop_reason: StopReason::ToolUse,
                usage: Usage {
                    input_tokens: 1200 + i as u64,
                    output_tokens: 90,
                    ..Usage::default()
                },
                model: "claude-x".into(),
                cost_usd: 0.001,
                latency_ms: None,
                retries: 0,
            },
        );
        let lines: String = (0..(2 + (i * 7) % 60))
            .map(|l| {
                format!(
                    "{:>6}\tlet token_{l} = lexer.next_token()?; // step {i}\n",
                    l + 1
                )
            })
            .collect();
        apply(
            &mut state,
            RunEvent::ToolResult {
                call_id: id,
                content: lines,
                is_error: false,
                interrupted: false,
            },
        );
        i += 1;
    }
    state
}

struct FirstRequest {
    at: Mutex<Option<Instant>>,
}

impl ModelGateway for FirstRequest {
    fn call<'a>(
        &'a self,
        _agent: &'a AgentDef,
        _req: &'a ModelRequest,
        _cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ModelResponse, ModelFailure>> {
        Box::pin(async move {
            self.at.lock().unwrap().get_or_insert_with(Instant::now);
            Ok(ModelResponse {
                id: "m".into(),
                model: "m".into(),
                content: vec![ContentBlock::Text {
                    text: "done".into(),
                }],
                stop_reason: StopReason::EndTurn,
                usage: Usage::default(),
                rate_limits: Default::default(),
                retries: 0,
            })
        })
    }
}

struct NoTools;

impl ToolBox for NoTools {
    fn specs(&self, _agent: &AgentDef) -> Vec<ToolSpec> {
        Vec::new()
    }
    fn durability(&self, _agent: &AgentDef, _name: &str, _input: &serde_json::Value) -> ToolClass {
        ToolClass::ReadOnly
    }
    fn call<'a>(
        &'a self,
        _agent: &'a AgentDef,
        _call: ToolCall<'a>,
        _cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async { ToolOutput::ok(String::new()) })
    }
}

/// Median ms from claim to the first model request, for a run whose checkpoint holds `n`
/// messages and that has a few events after it.
async fn resume_latency(config: &StoreConfig, n: usize) -> Result<f64> {
    let agent: AgentConfig = serde_json::from_value(
        json!({"name": "bench", "provider": "p", "model": "m", "budgets": {"max_turns": 1_000_000}}),
    )?;
    let def = agent
        .resolve(std::path::Path::new("."))
        .map_err(anyhow::Error::msg)?;
    let mut samples = Vec::new();
    for _ in 0..5 {
        let store = fresh_store(config).await?;
        store.enqueue(&NewRun::new("bench", "p")).await?;
        let lease = store.claim("seed", None, 1, LEASE).await?.remove(0);
        // Seed: a checkpoint holding a conversation of n messages, then events after it.
        let started = RunEvent::RunStarted {
            agent: "bench".into(),
            agent_hash: def.hash.clone(),
        };
        let seq = lease
            .append_event(started.kind(), &started.payload())
            .await?;
        let mut cp = conversation(n);
        cp.agent_hash = Some(def.hash.clone());
        cp.through_seq = seq;
        lease
            .write_checkpoint(seq, checkpoint::FORMAT_VERSION, &checkpoint::encode(&cp))
            .await?;
        for i in 0..3 {
            let note = RunEvent::UserMessage {
                message: Message::user_text(format!("note {i}")),
            };
            lease.append_event(note.kind(), &note.payload()).await?;
        }
        lease.release("seeded").await?;
        let gateway = Arc::new(FirstRequest {
            at: Mutex::new(None),
        });
        let runtime = AgentRuntime::new([def.clone()], gateway.clone(), Arc::new(NoTools));
        let start = Instant::now();
        let lease = store.claim("bench", None, 1, LEASE).await?.remove(0);
        runtime.handle(JobContext::new(lease)).await;
        let first = gateway
            .at
            .lock()
            .unwrap()
            .expect("a model request was made");
        samples.push((first - start).as_secs_f64() * 1e3);
        store.close().await;
    }
    samples.sort_by(|a, b| a.total_cmp(b));
    Ok(samples[samples.len() / 2])
}
