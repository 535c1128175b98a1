//! The spans of a run's trace, one constructor each, so every attribute name is written in
//! one place. A [`TraceSpan`] is an OpenTelemetry span in its context: the code it covers
//! runs inside [`TraceSpan::wrap`], and the spans made meanwhile (on any thread the future
//! is polled on) are its children. When traces are off every constructor returns an empty
//! span that records nothing, at the cost of one check.

use std::future::Future;

use opentelemetry::trace::{
    FutureExt, SpanContext, SpanKind, Status, TraceContextExt, TraceState, Tracer,
};
use opentelemetry::{Context, KeyValue, StringValue};

use super::RunTrace;
use super::export::tracer;

/// The longest model-chosen text (a tool call's id) put in an attribute.
const MAX_MODEL_TEXT: usize = 128;

/// A started span (or nothing, when traces are off). It ends at [`TraceSpan::end`], or when
/// dropped.
#[derive(Debug, Clone)]
pub struct TraceSpan {
    cx: Context,
}

impl TraceSpan {
    fn off() -> TraceSpan {
        TraceSpan { cx: Context::new() }
    }

    /// Starts a span named `name` under `parent`.
    fn start(
        parent: &Context,
        name: String,
        kind: SpanKind,
        attributes: Vec<KeyValue>,
    ) -> TraceSpan {
        let Some(tracer) = tracer() else {
            return TraceSpan::off();
        };
        let span = tracer
            .span_builder(name)
            .with_kind(kind)
            .with_attributes(attributes)
            .start_with_context(tracer, parent);
        TraceSpan {
            cx: parent.with_span(span),
        }
    }

    /// `f`, run inside this span: spans started while it runs are its children.
    pub fn wrap<F: Future>(&self, f: F) -> impl Future<Output = F::Output> {
        f.with_context(self.cx.clone())
    }

    fn set(&self, key: &'static str, value: impl Into<opentelemetry::Value>) {
        self.cx.span().set_attribute(KeyValue::new(key, value));
    }

    fn status(&self, ok: bool) {
        self.cx
            .span()
            .set_status(if ok { Status::Ok } else { Status::error("") });
    }

    /// Ends the span now.
    pub fn end(self) {
        self.cx.span().end();
    }
}

/// An attribute of a count (OpenTelemetry integers are signed 64-bit).
fn count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The span of one job of a run: a child of the run span, whatever daemon runs it. `kind` is
/// the job's kind (`start`, `resume`, …); [`record_job_outcome`] sets its outcome.
pub fn job_span(
    run: &RunTrace,
    run_id: &str,
    job_id: i64,
    attempt: i64,
    kind: &str,
    agent: &str,
) -> TraceSpan {
    if tracer().is_none() {
        return TraceSpan::off();
    }
    let run_span = SpanContext::new(
        run.trace_id,
        run.span_id,
        run.flags(),
        true,
        TraceState::default(),
    );
    TraceSpan::start(
        &Context::new().with_remote_span_context(run_span),
        format!("job {kind}"),
        SpanKind::Internal,
        vec![
            KeyValue::new("nightshift.run.id", run_id.to_string()),
            KeyValue::new("nightshift.job.id", job_id),
            KeyValue::new("nightshift.job.attempt", attempt),
            KeyValue::new("nightshift.job.kind", kind.to_string()),
            KeyValue::new("nightshift.agent", agent.to_string()),
        ],
    )
}

/// Sets what the runtime made of the job (`done`, `retry`, `park`, …); `failed` marks the
/// span's status as an error.
pub fn record_job_outcome(span: &TraceSpan, outcome: &str, failed: bool) {
    span.set("nightshift.job.outcome", outcome.to_string());
    span.status(!failed);
}

/// The span of one model call through an agent's chain (fallbacks included), a child of the
/// current span (the job's), named after the chain's first model: `provider` is the
/// provider's kind (`anthropic`, `openai`, `scripted`). [`record_model_reply`] fills in the
/// reply.
pub fn model_call_span(provider: &str, model: &str) -> TraceSpan {
    if tracer().is_none() {
        return TraceSpan::off();
    }
    TraceSpan::start(
        &Context::current(),
        format!("chat {model}"),
        SpanKind::Client,
        vec![
            KeyValue::new("gen_ai.operation.name", "chat"),
            KeyValue::new("gen_ai.provider.name", provider.to_string()),
            KeyValue::new("gen_ai.request.model", model.to_string()),
        ],
    )
}

/// A model's reply, as its span records it.
#[derive(Debug, Clone, Copy)]
pub struct ModelReply<'a> {
    /// The model that answered (a fallback's, or a dated snapshot of the one asked).
    pub model: &'a str,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    /// The provider's stop reason (`end_turn`, `tool_use`, `max_tokens`, …).
    pub finish_reason: &'a str,
    pub cost_usd: f64,
    /// Failed attempts retried before this reply.
    pub retries: u32,
}

/// Records the call's reply, or the kind of its failure (`unavailable`, `fatal`, …).
pub fn record_model_reply(span: &TraceSpan, reply: Result<ModelReply<'_>, &str>) {
    match reply {
        Ok(r) => {
            span.set("gen_ai.response.model", r.model.to_string());
            span.set("gen_ai.usage.input_tokens", count(r.input_tokens));
            span.set("gen_ai.usage.output_tokens", count(r.output_tokens));
            span.set(
                "gen_ai.usage.cache_read.input_tokens",
                count(r.cache_read_tokens),
            );
            span.set(
                "gen_ai.usage.cache_creation.input_tokens",
                count(r.cache_write_tokens),
            );
            span.set(
                "gen_ai.response.finish_reasons",
                opentelemetry::Value::Array(
                    vec![StringValue::from(r.finish_reason.to_string())].into(),
                ),
            );
            span.set("nightshift.cost_usd", r.cost_usd);
            span.set("nightshift.model.retries", i64::from(r.retries));
            span.status(true);
        }
        Err(kind) => {
            span.set("error.type", kind.to_string());
            span.status(false);
        }
    }
}

/// The span of one tool call, a child of the current span (the job's): `tool` is the tool's
/// name when the agent was given it, else `unknown`; `call_id` is the model's id for the call
/// (cut to 128 characters); `class` its durability class. [`record_tool_outcome`] sets the
/// outcome.
pub fn tool_call_span(tool: &str, call_id: &str, class: &str) -> TraceSpan {
    if tracer().is_none() {
        return TraceSpan::off();
    }
    TraceSpan::start(
        &Context::current(),
        format!("execute_tool {tool}"),
        SpanKind::Internal,
        vec![
            KeyValue::new("gen_ai.operation.name", "execute_tool"),
            KeyValue::new("gen_ai.tool.name", tool.to_string()),
            KeyValue::new("gen_ai.tool.call.id", cut(call_id).to_string()),
            KeyValue::new("nightshift.tool.class", class.to_string()),
        ],
    )
}

/// Sets a tool call's outcome (`ok`, `error`, `refused_input`, `denied`, `refused`,
/// `interrupted`, `unresolved`, `await_approval`); `ok` and `await_approval` are not errors.
pub fn record_tool_outcome(span: &TraceSpan, outcome: &str) {
    span.set("nightshift.tool.outcome", outcome.to_string());
    span.status(matches!(outcome, "ok" | "await_approval"));
}

fn cut(text: &str) -> &str {
    match text.char_indices().nth(MAX_MODEL_TEXT) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_chosen_text_is_cut_on_a_character_boundary() {
        assert_eq!(cut("call_1"), "call_1");
        let long = "é".repeat(200);
        assert_eq!(cut(&long).chars().count(), MAX_MODEL_TEXT);
    }

    #[test]
    fn spans_without_the_exporter_record_nothing() {
        let run = RunTrace::of("0192f1d2-7a3b-7c4d-8e5f-a0b1c2d3e4f5", None);
        for span in [
            job_span(&run, "r", 1, 1, "start", "a"),
            model_call_span("anthropic", "m"),
            tool_call_span("t", "c", "read_only"),
        ] {
            assert!(!span.cx.has_active_span());
            record_tool_outcome(&span, "ok");
            span.end();
        }
    }
}
