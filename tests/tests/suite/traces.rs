//! Traces as a collector receives them: `nightshift serve` with `[telemetry] otlp_endpoint`
//! pointing at an OTLP/HTTP receiver in this test, which decodes every export request
//! (protobuf, OpenTelemetry's own message types). A webhook delivery carrying `traceparent`
//! starts a run that calls a tool, sleeps one second (a wakeup: a second job) and ends; an
//! API run without `traceparent` ends at once. Then:
//!
//! - the webhook run's spans are in the sender's trace: its run span is the child of the
//!   sender's span, both job spans (start, resume) are children of the run span, the model
//!   and tool calls children of their job, with the GenAI attributes (model, tokens, stop
//!   reason) and the tool's name, class and outcome;
//! - the API run's trace id is its run id, and its run span has no parent;
//! - the run's notice carried the run span's `traceparent` onward;
//! - no span carries the prompt or the tool's output.

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use nightshift_store::RunStatus;
use nightshift_telemetry::traces::RunTrace;
use nightshift_tests::config_text::{agent_with, command_tool, q};
use nightshift_tests::http::post_json;
use nightshift_tests::{TestDb, eventually, on_both_backends};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::{Value, json};

use crate::crash::{text_turn, tool_turn};
use crate::process::{API_TOKEN, Proc, free_port, nightshift_bin};

on_both_backends! {
    a_run_is_one_trace_across_its_jobs_and_continues_the_senders => run_is_one_trace;
}

/// The sender's trace context on the webhook delivery.
const SENDER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const SENDER_SPAN: &str = "00f067aa0ba902b7";
const NOTIFY_SECRET_ENV: &str = "NIGHTSHIFT_TRACES_TEST_NOTIFY_SECRET";
/// What the tool prints: it must not reach any span.
const TOOL_OUTPUT: &str = "looked-at-the-secret-plans";

/// What the receiver got: every span (with its resource's `service.name`) and the
/// `traceparent` of every notice.
#[derive(Default)]
struct Received {
    spans: Vec<(String, Span)>,
    notice_traceparents: Vec<String>,
}

type Shared = Arc<Mutex<Received>>;

async fn export(State(got): State<Shared>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let kind = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    assert_eq!(kind, "application/x-protobuf", "OTLP/HTTP protobuf");
    let request = ExportTraceServiceRequest::decode(body).expect("an OTLP export request");
    let mut got = got.lock().unwrap();
    for resource in request.resource_spans {
        let service = resource
            .resource
            .as_ref()
            .and_then(|r| r.attributes.iter().find(|a| a.key == "service.name"))
            .and_then(|a| a.value.as_ref())
            .and_then(|v| match &v.value {
                Some(Any::StringValue(s)) => Some(s.clone()),
                _ => None,
            })
            .unwrap_or_default();
        for scope in resource.scope_spans {
            for span in scope.spans {
                got.spans.push((service.clone(), span));
            }
        }
    }
    StatusCode::OK
}

async fn notice(State(got): State<Shared>, headers: HeaderMap) -> StatusCode {
    let tp = headers
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("(none)")
        .to_string();
    got.lock().unwrap().notice_traceparents.push(tp);
    StatusCode::OK
}

/// The receiver on a loopback port: `POST /v1/traces` (OTLP) and `POST /notices`.
async fn receiver() -> (String, Shared) {
    let got = Shared::default();
    let app = Router::new()
        .route("/v1/traces", post(export))
        .route("/notices", post(notice))
        .with_state(got.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{address}"), got)
}

fn config(db: &TestDb, dir: &std::path::Path, receiver: &str, api_port: u16) -> String {
    let traced = agent_with(
        dir,
        "traced",
        &["look", "schedule_wakeup"],
        json!([
            {"content": [{"type": "tool_use", "id": "call_look", "name": "look", "input": {}}],
             "stop_reason": "tool_use", "usage": {"input_tokens": 120, "output_tokens": 12,
             "cache_read_input_tokens": 5}},
            tool_turn("call_sleep", "schedule_wakeup", json!({"delay_seconds": 1, "reason": "nap"})),
            {"content": [{"type": "text", "text": "all done"}], "stop_reason": "end_turn",
             "usage": {"input_tokens": 200, "output_tokens": 20}},
        ]),
        &format!(
            "[agents.wakeups]\nmin_delay_seconds = 1\n\n\
             [[agents.notify]]\nurl = {}\nsecret_env = {}\nmax_attempts = 1\n\n",
            q(&format!("{receiver}/notices")),
            q(NOTIFY_SECRET_ENV)
        ),
    );
    let quick = agent_with(dir, "quick", &[], json!([text_turn("quick")]), "");
    format!(
        "[database]\nurl = {}\n{}\n\
         [server]\naddress = \"127.0.0.1:{api_port}\"\n\n\
         [worker]\nslots = 2\nheartbeat_ms = 200\nlease_ms = 2000\npoll_interval_ms = 100\n\n\
         [runtime]\ndata_dir = \"data\"\n\n[sandbox]\nmode = \"off\"\n\n\
         [telemetry]\notlp_endpoint = {}\nservice_name = \"traces-test\"\n\n\
         {traced}{quick}{look}\
         [[hooks]]\nname = \"gh\"\nsignature = \"none\"\ndelivery_id = {{ pointer = \"/id\" }}\n\n\
         [[hooks.routes]]\nname = \"all\"\nagent = \"traced\"\nprompt = \"hook {{{{ id }}}}\"\n\n",
        q(&db.config.url),
        db.config
            .schema
            .as_ref()
            .map(|s| format!("schema = {}", q(s)))
            .unwrap_or_default(),
        q(receiver),
        look = command_tool("look", "read_only", &format!("echo {TOOL_OUTPUT}")),
    )
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A span's attributes as text (strings, integers, doubles; arrays of strings joined by `,`).
fn attrs(span: &Span) -> HashMap<String, String> {
    span.attributes
        .iter()
        .filter_map(|a| {
            let v = match a.value.as_ref()?.value.as_ref()? {
                Any::StringValue(s) => s.clone(),
                Any::IntValue(i) => i.to_string(),
                Any::DoubleValue(d) => d.to_string(),
                Any::BoolValue(b) => b.to_string(),
                Any::ArrayValue(items) => items
                    .values
                    .iter()
                    .filter_map(|v| match &v.value {
                        Some(Any::StringValue(s)) => Some(s.as_str()),
                        _ => None,
                    })
                    .collect::<Vec<_>>()
                    .join(","),
                _ => return None,
            };
            Some((a.key.clone(), v))
        })
        .collect()
}

/// The spans received so far in trace `trace_id`.
fn spans_of(got: &Shared, trace_id: &str) -> Vec<Span> {
    got.lock()
        .unwrap()
        .spans
        .iter()
        .filter(|(_, s)| hex(&s.trace_id) == trace_id)
        .map(|(_, s)| s.clone())
        .collect()
}

/// Waits until the run span of `run_id` (in `trace_id`) and `jobs` job spans have come.
async fn trace_of(got: &Shared, trace_id: &str, run_id: &str, jobs: usize) -> Vec<Span> {
    let run_span = RunTrace::of(run_id, None).span_id.to_string();
    eventually(
        Duration::from_secs(30),
        "the run's spans at the receiver",
        || async {
            let spans = spans_of(got, trace_id);
            let has_run = spans.iter().any(|s| hex(&s.span_id) == run_span);
            let job_spans = spans.iter().filter(|s| s.name.starts_with("job ")).count();
            (has_run && job_spans >= jobs).then_some(spans)
        },
    )
    .await
}

fn named<'a>(spans: &'a [Span], name: &str) -> Vec<&'a Span> {
    spans.iter().filter(|s| s.name == name).collect()
}

async fn run_is_one_trace(db: &TestDb) {
    let (receiver, got) = receiver().await;
    let dir = tempfile::tempdir().unwrap();
    let api_port = free_port();
    let cfg = dir.path().join("nightshift.toml");
    std::fs::write(&cfg, config(db, dir.path(), &receiver, api_port)).unwrap();
    let mut serve = Proc {
        child: Command::new(nightshift_bin())
            .arg("--config")
            .arg(&cfg)
            .arg("serve")
            .env("NIGHTSHIFT_API_TOKEN", API_TOKEN)
            .env(NOTIFY_SECRET_ENV, "notify-secret")
            // The SDK's batch interval: export every 100 ms instead of every 5 s.
            .env("OTEL_BSP_SCHEDULE_DELAY", "100")
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn nightshift serve"),
    };
    let api = format!("http://127.0.0.1:{api_port}");
    let http = nightshift_llm::http::build_client(nightshift_llm::HttpTimeouts::default()).unwrap();
    crate::process::wait_for_api(&http, &api).await;
    let store = db.store().await;

    // A webhook delivery in the sender's trace.
    let sender = format!("00-{SENDER_TRACE}-{SENDER_SPAN}-01");
    let delivered: Value = http
        .post(format!("{api}/hooks/gh"))
        .header("traceparent", &sender)
        .json(&json!({"id": "delivery-1"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let hook_run = delivered["runs"][0]["run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("a run: {delivered}"))
        .to_string();
    // An API run without one.
    let api_run = create_run(
        &http,
        &api,
        json!({"agent": "quick", "prompt": "the secret prompt"}),
    )
    .await;
    for run_id in [&hook_run, &api_run] {
        eventually(Duration::from_secs(60), "the runs to succeed", || async {
            let run = store.run(run_id).await.ok()??;
            (run.status == RunStatus::Succeeded).then_some(())
        })
        .await;
    }
    let stored = store.run(&hook_run).await.unwrap().unwrap();
    assert_eq!(stored.trace_parent.as_deref(), Some(sender.as_str()));

    // The webhook run: the sender's trace, two jobs.
    let spans = trace_of(&got, SENDER_TRACE, &hook_run, 2).await;
    let run_trace = RunTrace::of(&hook_run, Some(&sender));
    let runs = named(&spans, "run traced");
    assert_eq!(runs.len(), 1, "one run span: {spans:#?}");
    let run = runs[0];
    assert_eq!(hex(&run.span_id), run_trace.span_id.to_string());
    assert_eq!(
        hex(&run.parent_span_id),
        SENDER_SPAN,
        "continues the sender's span"
    );
    let a = attrs(run);
    assert_eq!(a["nightshift.run.id"], hook_run);
    assert_eq!(a["nightshift.run.status"], "succeeded");
    assert_eq!(a["nightshift.run.trigger"], "webhook");
    assert!(run.start_time_unix_nano <= run.end_time_unix_nano);

    let mut jobs: Vec<&Span> = spans
        .iter()
        .filter(|s| s.name.starts_with("job "))
        .collect();
    jobs.sort_by_key(|s| s.start_time_unix_nano);
    assert_eq!(
        jobs.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
        ["job start", "job resume"],
        "one span per job"
    );
    let stored_jobs = store.jobs_of_run(&hook_run).await.unwrap();
    for (span, outcome) in jobs.iter().zip(["park", "done"]) {
        assert_eq!(
            hex(&span.parent_span_id),
            hex(&run.span_id),
            "a job is the run's child"
        );
        let a = attrs(span);
        assert_eq!(a["nightshift.run.id"], hook_run);
        assert_eq!(a["nightshift.agent"], "traced");
        assert_eq!(a["nightshift.job.outcome"], outcome);
        assert!(
            stored_jobs
                .iter()
                .any(|j| j.id.to_string() == a["nightshift.job.id"]),
            "{a:?}"
        );
    }
    let (start, resume) = (hex(&jobs[0].span_id), hex(&jobs[1].span_id));

    let calls = named(&spans, "chat scripted-1");
    assert_eq!(calls.len(), 3, "three model calls: {calls:#?}");
    let first = calls
        .iter()
        .find(|s| attrs(s)["gen_ai.usage.input_tokens"] == "120")
        .expect("the first call's span");
    assert_eq!(
        hex(&first.parent_span_id),
        start,
        "a call is its job's child"
    );
    let a = attrs(first);
    assert_eq!(a["gen_ai.operation.name"], "chat");
    assert_eq!(a["gen_ai.provider.name"], "scripted");
    assert_eq!(a["gen_ai.request.model"], "scripted-1");
    assert_eq!(a["gen_ai.response.model"], "scripted-1");
    assert_eq!(a["gen_ai.usage.output_tokens"], "12");
    assert_eq!(a["gen_ai.usage.cache_read.input_tokens"], "5");
    assert_eq!(a["gen_ai.response.finish_reasons"], "tool_use");
    let last = calls
        .iter()
        .find(|s| attrs(s)["gen_ai.usage.input_tokens"] == "200")
        .expect("the last call's span");
    assert_eq!(
        hex(&last.parent_span_id),
        resume,
        "the last call ran in the resume job"
    );
    assert_eq!(attrs(last)["gen_ai.response.finish_reasons"], "end_turn");

    let tools = named(&spans, "execute_tool look");
    assert_eq!(tools.len(), 1, "{spans:#?}");
    assert_eq!(hex(&tools[0].parent_span_id), start);
    let a = attrs(tools[0]);
    assert_eq!(a["gen_ai.operation.name"], "execute_tool");
    assert_eq!(a["gen_ai.tool.name"], "look");
    assert_eq!(a["gen_ai.tool.call.id"], "call_look");
    assert_eq!(a["nightshift.tool.class"], "read_only");
    assert_eq!(a["nightshift.tool.outcome"], "ok");
    let sleeps = named(&spans, "execute_tool schedule_wakeup");
    assert_eq!(sleeps.len(), 1);
    assert_eq!(hex(&sleeps[0].parent_span_id), start);

    // The API run: a trace of its own, named by the run id.
    let own = own_trace_id(&api_run);
    let spans = trace_of(&got, &own, &api_run, 1).await;
    let run = named(&spans, "run quick")[0];
    assert!(run.parent_span_id.is_empty(), "a root span: {run:#?}");
    assert_eq!(attrs(run)["nightshift.run.trigger"], "api");

    // A run cancelled while queued has its run span too: no job ran, so the daemon that
    // cancelled it writes it (with no job span under it).
    let later = create_run(
        &http,
        &api,
        json!({"agent": "quick", "prompt": "later", "delay_seconds": 3600}),
    )
    .await;
    let cancelled = http
        .post(format!("{api}/v1/runs/{later}/cancel"))
        .bearer_auth(API_TOKEN)
        .send()
        .await
        .unwrap();
    assert!(cancelled.status().is_success());
    let spans = trace_of(&got, &own_trace_id(&later), &later, 0).await;
    assert_eq!(spans.len(), 1, "the run span alone: {spans:#?}");
    let a = attrs(&spans[0]);
    assert_eq!(spans[0].name, "run quick");
    assert_eq!(a["nightshift.run.status"], "cancelled");
    assert_eq!(a["nightshift.run.id"], later);

    // The notice carried the run span onward.
    eventually(Duration::from_secs(30), "the notice", || async {
        let got = got.lock().unwrap();
        (!got.notice_traceparents.is_empty()).then_some(())
    })
    .await;
    assert_eq!(
        got.lock().unwrap().notice_traceparents,
        [run_trace.traceparent()]
    );

    for (service, span) in &got.lock().unwrap().spans {
        assert_eq!(service, "traces-test");
        let text = format!("{span:?}");
        assert!(
            !text.contains(TOOL_OUTPUT),
            "a tool's output in a span: {text}"
        );
        assert!(
            !text.contains("secret prompt"),
            "a prompt in a span: {text}"
        );
    }
    serve.signal("TERM");
    assert!(serve.wait_exit(Duration::from_secs(20)).await.success());
}

/// Starts a run with `POST /v1/runs` (`body`); its id.
async fn create_run(http: &reqwest::Client, api: &str, body: Value) -> String {
    let (_, created) = post_json(http, &format!("{api}/v1/runs"), API_TOKEN, &body).await;
    created["run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("a run id: {created}"))
        .to_string()
}

/// A run's own trace id: its UUID's 32 hex digits.
fn own_trace_id(run_id: &str) -> String {
    run_id.replace('-', "")
}
