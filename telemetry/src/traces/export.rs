//! The OTLP export: [`install`] builds the exporter, the batch processor and the tracer
//! provider once per process; the span constructors take the tracer from [`tracer`] (none:
//! traces are off); [`run_ended`] writes a run's own span (its ids are chosen, not generated,
//! so it is handed to the processor directly); [`shutdown`] flushes.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status, TraceState, TracerProvider};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchSpanProcessor, SdkTracer, SdkTracerProvider, Span, SpanData, SpanExporter, SpanProcessor,
};

use super::RunTrace;

/// How long [`shutdown`] waits for the last spans to be sent.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// The process's exporter, once installed.
struct Installed {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    processor: Arc<BatchSpanProcessor>,
    scope: InstrumentationScope,
}

static INSTALLED: OnceLock<Installed> = OnceLock::new();

/// Why the exporter could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TracesError {
    #[error(
        "telemetry.otlp_endpoint {endpoint:?} is not an http:// or https:// URL; write the \
         collector's OTLP/HTTP address, such as \"http://127.0.0.1:4318\""
    )]
    NotHttp { endpoint: String },
    #[error("telemetry.otlp_endpoint {endpoint:?}: {message}")]
    Exporter { endpoint: String, message: String },
    #[error("the OTLP exporter is already installed in this process")]
    AlreadyInstalled,
}

/// The URL spans are POSTed to: `endpoint` with `/v1/traces` appended (as
/// `OTEL_EXPORTER_OTLP_ENDPOINT` is read), unless it already ends so.
pub fn traces_url(endpoint: &str) -> Result<String, TracesError> {
    let trimmed = endpoint.trim();
    if !(trimmed.starts_with("http://") || trimmed.starts_with("https://")) {
        return Err(TracesError::NotHttp {
            endpoint: endpoint.to_string(),
        });
    }
    let base = trimmed.trim_end_matches('/');
    Ok(if base.ends_with("/v1/traces") {
        base.to_string()
    } else {
        format!("{base}/v1/traces")
    })
}

/// Sets up the export of traces to the OTLP/HTTP collector at `endpoint` (see
/// [`traces_url`]), as `service_name`, for the rest of the process. Headers (a hosted
/// collector's key) come from `OTEL_EXPORTER_OTLP_HEADERS`; batch sizes and the export
/// interval from the SDK's `OTEL_BSP_*` variables (default: every 5 s). Call it where a
/// TLS crypto provider is installed (reqwest is built without one).
pub fn install(endpoint: &str, service_name: &str) -> Result<(), TracesError> {
    let url = traces_url(endpoint)?;
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(url.clone())
        .with_timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| TracesError::Exporter {
            endpoint: url.clone(),
            message: e.to_string(),
        })?;
    let resource = Resource::builder()
        .with_service_name(service_name.to_string())
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .build();
    exporter.set_resource(&resource);
    let processor = Arc::new(BatchSpanProcessor::builder(exporter).build());
    let provider = SdkTracerProvider::builder()
        .with_span_processor(SharedProcessor(processor.clone()))
        .with_resource(resource)
        .build();
    let scope = InstrumentationScope::builder("nightshift")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build();
    let tracer = provider.tracer_with_scope(scope.clone());
    INSTALLED
        .set(Installed {
            provider,
            tracer,
            processor,
            scope,
        })
        .map_err(|_| TracesError::AlreadyInstalled)
}

/// The process's tracer, when traces are exported.
pub(super) fn tracer() -> Option<&'static SdkTracer> {
    INSTALLED.get().map(|i| &i.tracer)
}

/// Sends what is queued and stops the exporter (waits at most a few seconds). Nothing when
/// traces are not installed.
pub fn shutdown() {
    if let Some(installed) = INSTALLED.get()
        && let Err(e) = installed.provider.shutdown_with_timeout(SHUTDOWN_TIMEOUT)
    {
        tracing::warn!(error = %e, "sending the last trace spans failed");
    }
}

/// A run's end, as its span records it.
#[derive(Debug, Clone)]
pub struct RunEnded<'a> {
    pub run_id: &'a str,
    pub agent: &'a str,
    /// How it was started (`api`, `webhook`, `schedule`, …).
    pub trigger: &'a str,
    /// Its final status (`succeeded`, `failed`, `cancelled`, `superseded`, …).
    pub status: &'a str,
    /// When it was created (milliseconds since the epoch): the span's start.
    pub created_at_ms: i64,
}

/// Writes the run span of `run` (created then, ended now), when traces are installed and the
/// trace is sampled. Its id is the one every job span of the run names as parent.
pub fn run_ended(run: &RunTrace, ended: &RunEnded<'_>) {
    let Some(installed) = INSTALLED.get() else {
        return;
    };
    if !run.sampled {
        return;
    }
    let start = UNIX_EPOCH + Duration::from_millis(u64::try_from(ended.created_at_ms).unwrap_or(0));
    let end = SystemTime::now().max(start);
    let failed = ended.status == "failed";
    installed.processor.on_end(SpanData {
        span_context: SpanContext::new(
            run.trace_id,
            run.span_id,
            run.flags(),
            false,
            TraceState::default(),
        ),
        parent_span_id: run.parent.unwrap_or(SpanId::INVALID),
        parent_span_is_remote: run.parent.is_some(),
        span_kind: SpanKind::Internal,
        name: format!("run {}", ended.agent).into(),
        start_time: start,
        end_time: end,
        attributes: vec![
            KeyValue::new("nightshift.run.id", ended.run_id.to_string()),
            KeyValue::new("nightshift.agent", ended.agent.to_string()),
            KeyValue::new("nightshift.run.trigger", ended.trigger.to_string()),
            KeyValue::new("nightshift.run.status", ended.status.to_string()),
        ],
        dropped_attributes_count: 0,
        events: Default::default(),
        links: Default::default(),
        status: if failed {
            Status::error(ended.status.to_string())
        } else {
            Status::Ok
        },
        instrumentation_scope: installed.scope.clone(),
    });
}

/// The batch processor, shared between the provider (spans from `tracing`) and
/// [`run_ended`] (spans written whole).
#[derive(Debug)]
struct SharedProcessor(Arc<BatchSpanProcessor>);

impl SpanProcessor for SharedProcessor {
    fn on_start(&self, span: &mut Span, cx: &opentelemetry::Context) {
        self.0.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        self.0.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_traces_url_is_the_endpoint_with_the_signal_path() {
        assert_eq!(
            traces_url("http://127.0.0.1:4318").unwrap(),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            traces_url("https://otel.example.com/otlp/").unwrap(),
            "https://otel.example.com/otlp/v1/traces"
        );
        assert_eq!(
            traces_url("http://c:4318/v1/traces").unwrap(),
            "http://c:4318/v1/traces"
        );
        let e = traces_url("127.0.0.1:4317").unwrap_err().to_string();
        assert!(
            e.contains("telemetry.otlp_endpoint") && e.contains("http://"),
            "{e}"
        );
    }
}
