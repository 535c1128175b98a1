//! The spans of a run's trace, one constructor each, so every attribute name is written in
//! one place. Each is a `tracing` span of the target [`TARGET`]: the running code enters it
//! (`Instrument`), and what it calls makes its spans children of it; when the OTLP layer is
//! not installed the span is disabled and these functions cost next to nothing.

use opentelemetry::trace::{SpanContext, TraceContextExt, TraceState};
use tracing::Span;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::{RunTrace, TARGET};

/// The longest model-chosen text (a tool call's id) put in an attribute.
const MAX_MODEL_TEXT: usize = 128;

/// The span of one job of a run: a child of the run span, whatever runs it. `kind` is the
/// job's kind (`start`, `resume`, …); [`record_job_outcome`] sets its outcome at the end.
pub fn job_span(
    run: &RunTrace,
    run_id: &str,
    job_id: i64,
    attempt: i64,
    kind: &str,
    agent: &str,
) -> Span {
    let span = tracing::info_span!(
        target: TARGET,
        "job",
        otel.name = %format_args!("job {kind}"),
        nightshift.run.id = run_id,
        nightshift.job.id = job_id,
        nightshift.job.attempt = attempt,
        nightshift.job.kind = kind,
        nightshift.agent = agent,
        nightshift.job.outcome = Empty,
        otel.status_code = Empty,
    );
    if !span.is_disabled() {
        let run_span = SpanContext::new(
            run.trace_id,
            run.span_id,
            run.flags(),
            true,
            TraceState::default(),
        );
        // Fails only when the span is not recorded by the OTLP layer: nothing to parent then.
        let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(run_span));
    }
    span
}

/// Sets what the runtime made of the job (`done`, `retry`, `park`, …); `failed` marks the
/// span's status as an error.
pub fn record_job_outcome(span: &Span, outcome: &str, failed: bool) {
    span.record("nightshift.job.outcome", outcome);
    span.record("otel.status_code", if failed { "error" } else { "ok" });
}

/// The span of one model call through an agent's chain (fallbacks included), named after the
/// chain's first model: `provider` is the provider's kind (`anthropic`, `openai`,
/// `scripted`). [`record_model_reply`] fills in the reply.
pub fn model_call_span(provider: &str, model: &str) -> Span {
    tracing::info_span!(
        target: TARGET,
        "model_call",
        otel.name = %format_args!("chat {model}"),
        otel.kind = "client",
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = provider,
        gen_ai.request.model = model,
        gen_ai.response.model = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        gen_ai.usage.cache_read.input_tokens = Empty,
        gen_ai.usage.cache_creation.input_tokens = Empty,
        gen_ai.response.finish_reasons = Empty,
        nightshift.cost_usd = Empty,
        nightshift.model.retries = Empty,
        error.type = Empty,
        otel.status_code = Empty,
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
pub fn record_model_reply(span: &Span, reply: Result<ModelReply<'_>, &str>) {
    match reply {
        Ok(r) => {
            span.record("gen_ai.response.model", r.model);
            span.record("gen_ai.usage.input_tokens", r.input_tokens);
            span.record("gen_ai.usage.output_tokens", r.output_tokens);
            span.record("gen_ai.usage.cache_read.input_tokens", r.cache_read_tokens);
            span.record(
                "gen_ai.usage.cache_creation.input_tokens",
                r.cache_write_tokens,
            );
            span.record("gen_ai.response.finish_reasons", r.finish_reason);
            span.record("nightshift.cost_usd", r.cost_usd);
            span.record("nightshift.model.retries", r.retries);
            span.record("otel.status_code", "ok");
        }
        Err(kind) => {
            span.record("error.type", kind);
            span.record("otel.status_code", "error");
        }
    }
}

/// The span of one tool call: `tool` is the tool's name when the agent was given it, else
/// `unknown`; `call_id` is the model's id for the call (cut to 128 characters); `class` its
/// durability class. [`record_tool_outcome`] sets the outcome.
pub fn tool_call_span(tool: &str, call_id: &str, class: &str) -> Span {
    let call_id = cut(call_id);
    tracing::info_span!(
        target: TARGET,
        "tool_call",
        otel.name = %format_args!("execute_tool {tool}"),
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = tool,
        gen_ai.tool.call.id = call_id,
        nightshift.tool.class = class,
        nightshift.tool.outcome = Empty,
        otel.status_code = Empty,
    )
}

/// Sets a tool call's outcome (`ok`, `error`, `refused_input`, `denied`, `refused`,
/// `interrupted`); every outcome but `ok` marks the span's status as an error.
pub fn record_tool_outcome(span: &Span, outcome: &str) {
    span.record("nightshift.tool.outcome", outcome);
    span.record(
        "otel.status_code",
        if outcome == "ok" { "ok" } else { "error" },
    );
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
    fn spans_without_the_otlp_layer_are_disabled() {
        let run = RunTrace::of("0192f1d2-7a3b-7c4d-8e5f-a0b1c2d3e4f5", None);
        assert!(job_span(&run, "r", 1, 1, "start", "a").is_disabled());
        assert!(model_call_span("anthropic", "m").is_disabled());
        assert!(tool_call_span("t", "c", "read_only").is_disabled());
    }
}
