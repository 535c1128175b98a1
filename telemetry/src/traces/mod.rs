//! # Traces
//!
//! OpenTelemetry traces of runs, exported over OTLP/HTTP (protobuf) when
//! `[telemetry] otlp_endpoint` is set. One trace per run, across its jobs and daemons:
//!
//! ```text
//! run <agent>                      the run, from its creation to its end (written when it ends)
//! ├── job start                    one per job: attempt, outcome
//! │   ├── chat <model>             one per model call: GenAI attributes (model, tokens, stop reason)
//! │   └── execute_tool <tool>      one per tool call: name, class, outcome
//! └── job resume                   a later job (a wakeup, an approval), perhaps on another daemon
//! ```
//!
//! Which trace and which run span are decided by [`RunTrace`] from the run's id and the
//! `traceparent` stored with it, so they are the same whichever daemon runs a job and however
//! often it crashed. A run started by a request carrying `traceparent` continues the sender's
//! trace; its notices carry the run span's `traceparent` onward.
//!
//! ## Guarantees
//!
//! - **Only what is safe to send.** Spans carry names, ids, counts, classes and outcomes;
//!   never a prompt, a tool's input or output, a model's text or an error message (those can
//!   hold secrets; the error's *kind* is sent as `error.type`). Log lines are not attached to
//!   spans. A tool name the agent was not given is sent as `unknown`.
//! - **Nothing when off.** Without [`install`] every span constructor returns an empty span
//!   that records nothing. The spans are made with the OpenTelemetry API, apart from the
//!   `tracing` spans of the log, so the log's lines and their `job{…}` span stay as they are.
//! - **Export never blocks a job.** Finished spans go to a bounded queue that a background
//!   thread of the SDK exports in batches; when the collector is down spans are dropped, not
//!   waited for. [`shutdown`] flushes what is queued when the daemon stops.
//!
//! The attribute names follow OpenTelemetry's semantic conventions for GenAI
//! (`gen_ai.operation.name`, `gen_ai.provider.name`, `gen_ai.request.model`,
//! `gen_ai.response.model`, `gen_ai.usage.input_tokens`, `gen_ai.usage.output_tokens`,
//! `gen_ai.response.finish_reasons`, `gen_ai.tool.name`, `gen_ai.tool.call.id`); ours are
//! under `nightshift.`.

mod context;
mod export;
mod spans;

pub use context::{RunTrace, TraceParent};
pub use export::{RunEnded, TracesError, install, run_ended, shutdown, traces_url};
pub use spans::{
    ModelReply, TraceSpan, job_span, model_call_span, record_job_outcome, record_model_reply,
    record_tool_outcome, tool_call_span,
};
