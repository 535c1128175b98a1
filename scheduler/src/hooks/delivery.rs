//! One delivery, step by step: each step of the module doc of [`super`] is a function here.
//!
//! The decisions are pure functions of the hook, the headers and the body — [`parse`] (step
//! 2), [`pick_route`] (step 3), [`plan_enqueue`] (the request step 4 checks and step 5
//! enqueues), [`refusal`] (what a refused enqueue leaves behind), [`route_runs`] (the record
//! step 5 writes) and [`answer`] (step 6's reply) — and the I/O that carries them out
//! ([`deliver`]: verify, check, claim, enqueue, record; look up a delivery it would not take)
//! only calls them in order. So a redelivery decides exactly what the first delivery decided,
//! and each decision is tested without a store.

use std::sync::Arc;

use nightshift_store::{
    DeliveryRun, DeliveryTaken, DeliveryWork, Enqueued, Trigger,
    WebhookDeliveryStatus as ClaimStatus,
};

use super::config::FieldSource;
use super::route::{CompiledRoute, Rendered};
use super::{
    Accepted, DeliveryOutcome, Headers, Hook, MAX_DELIVERY_ID_BYTES, Refused, RouteKind,
    SignatureScheme,
};
use crate::{Intake, IntakeError, ResumeRequest, RunRequest};

/// What the body of an authentic request is.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Parsed {
    /// Slack's `url_verification` handshake: the challenge to echo back.
    Challenge(String),
    /// A delivery to route.
    Delivery(Delivery),
}

/// An authentic delivery, parsed: its id, its event name (empty when the hook has no event
/// source) and its body.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Delivery {
    pub id: String,
    pub event: String,
    pub json: Arc<serde_json::Value>,
    /// The request's W3C `traceparent`, if any: a run it starts continues that trace.
    pub trace_parent: Option<String>,
}

/// Which route takes a delivery.
#[derive(Debug)]
pub(crate) enum Routed<'h> {
    /// GitHub's `ping` that no route takes: answered 200, nothing enqueued.
    Ping,
    /// A delivery no route takes, on a hook that ignores those: answered 200.
    Ignored,
    /// The first matching route, with its templates rendered for this delivery.
    Take(&'h CompiledRoute, Rendered),
}

/// What step 5 enqueues, through the intake.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Enqueue {
    Start(RunRequest),
    Resume(ResumeRequest),
    /// Cancel the unfinished runs of this concurrency key.
    Cancel {
        key: String,
    },
}

/// Takes one delivery to `hook`: checks it, routes it and enqueues what its route says (see
/// the module doc of [`super`] for the steps and guarantees). `header` looks a request header
/// up by name. Counts the outcome on the hook.
pub async fn deliver(
    intake: &Intake,
    hook: &Hook,
    header: &Headers<'_>,
    body: &[u8],
) -> Result<Accepted, Refused> {
    let result = deliver_inner(intake, hook, header, body).await;
    let outcome = match &result {
        Ok(a) if a.ping => DeliveryOutcome::Ping,
        Ok(a) if a.ignored => DeliveryOutcome::Ignored,
        Ok(a) if a.redelivery => DeliveryOutcome::Duplicate,
        Ok(_) => DeliveryOutcome::Accepted,
        Err(e) => {
            tracing::info!(hook = %hook.name, error = %e, "webhook delivery refused");
            e.outcome()
        }
    };
    hook.counters.count(outcome);
    nightshift_telemetry::webhook_delivery(&hook.name, outcome.as_str());
    result
}

async fn deliver_inner(
    intake: &Intake,
    hook: &Hook,
    header: &Headers<'_>,
    body: &[u8],
) -> Result<Accepted, Refused> {
    let store = intake.store();
    hook.verifier
        .verify(header, body, store.now())
        .map_err(|e| Refused::Unauthorized(e.to_string()))?;
    let d = match parse(hook, header, body)? {
        Parsed::Challenge(challenge) => return Ok(challenge_answer(hook, challenge)),
        Parsed::Delivery(d) => d,
    };
    // Copies of this delivery in this process wait here for each other (see `in_flight`).
    let _held = hook.in_flight.hold(&d.id).await;
    // Steps 3 and 4 decide what a new delivery enqueues, and a redelivery's take (step 5)
    // finds its row done and answers from it. Only a delivery these steps would not take
    // looks its row up first, so one done before is still answered as a redelivery.
    let (route, work) = match route_and_check(intake, hook, &d).await {
        Ok(Ok(taken)) => taken,
        not_taken => {
            if let Some(done) = done_before(store, hook, &d).await? {
                return answer(hook, &d, done.runs.as_deref(), true);
            }
            // Not done before: GitHub's `ping` or an ignored delivery is answered, a
            // refusal returned.
            return match not_taken {
                Ok(Err(untaken)) => Ok(untaken_answer(hook, d, untaken)),
                Ok(Ok(_)) => unreachable!("a taken delivery is matched above"),
                Err(refused) => Err(refused),
            };
        }
    };
    // Step 5 in one commit: claim, enqueue, record (see `Store::take_webhook_delivery`); a
    // delivery done before is counted and answered from its row.
    let taken = store
        .take_webhook_delivery(&hook.name, &d.id, &d.event, work, &route.name)
        .await
        .map_err(|e| refusal(route, e.into()))?;
    match taken {
        // A redelivery, or a concurrent copy that finished first.
        DeliveryTaken::Done(row) => answer(hook, &d, row.runs.as_deref(), true),
        DeliveryTaken::Enqueued(enqueued) => Ok(accepted(hook, route, d, enqueued)),
    }
}

/// What a delivery no route takes is answered with instead of a refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Untaken {
    Ping,
    Ignored,
}

/// Steps 3 and 4: the route that takes `d` and the work it enqueues, checked by the intake;
/// `Err(untaken)` for GitHub's `ping` or an ignored delivery that no route takes.
async fn route_and_check<'h>(
    intake: &Intake,
    hook: &'h Hook,
    d: &Delivery,
) -> Result<Result<(&'h CompiledRoute, DeliveryWork), Untaken>, Refused> {
    let (route, rendered) = match pick_route(hook, d)? {
        Routed::Ping => return Ok(Err(Untaken::Ping)),
        Routed::Ignored => return Ok(Err(Untaken::Ignored)),
        Routed::Take(route, rendered) => (route, rendered),
    };
    let work = match plan_enqueue(hook, route, d, rendered) {
        Enqueue::Start(req) => intake.check_run(&req).map(DeliveryWork::Start),
        Enqueue::Resume(req) => intake.check_resume(req).await.map(DeliveryWork::Resume),
        Enqueue::Cancel { key } if key.is_empty() || key.len() > 255 => Err(IntakeError::Invalid(
            "the rendered concurrency_key must be 1-255 bytes".into(),
        )),
        Enqueue::Cancel { key } => Ok(DeliveryWork::Cancel { key }),
    }
    .map_err(|e| refusal(route, e))?;
    Ok(Ok((route, work)))
}

/// For a delivery that steps 3 and 4 would not take: its row when it was done before, with
/// this arrival counted. A read first, so that a delivery refused again and again (an event
/// no route takes) never waits for the writer.
async fn done_before(
    store: &nightshift_store::Store,
    hook: &Hook,
    d: &Delivery,
) -> Result<Option<nightshift_store::WebhookDelivery>, Refused> {
    let seen = store.webhook_delivery(&hook.name, &d.id).await?;
    if !seen.is_some_and(|row| row.status == ClaimStatus::Done) {
        return Ok(None);
    }
    Ok(store.webhook_redelivery(&hook.name, &d.id).await?)
}

/// Step 6's answer for a delivery whose run was enqueued and recorded.
fn accepted(hook: &Hook, route: &CompiledRoute, d: Delivery, enqueued: Enqueued) -> Accepted {
    let runs = route_runs(route, &enqueued);
    match runs.first() {
        Some(first) if route.kind != RouteKind::Cancel => {
            tracing::info!(hook = %hook.name, delivery = %d.id, event = %d.event,
                           route = %route.name, run_id = %first.run_id,
                           duplicate = first.duplicate, "webhook delivery accepted");
        }
        _ => {
            let cancelled: Vec<&str> = runs.iter().map(|r| r.run_id.as_str()).collect();
            tracing::info!(hook = %hook.name, delivery = %d.id, event = %d.event,
                           route = %route.name, cancelled = ?cancelled,
                           "webhook delivery accepted: runs cancelled");
        }
    }
    Accepted {
        hook: hook.name.clone(),
        delivery: d.id,
        event: d.event,
        redelivery: false,
        ping: false,
        ignored: false,
        challenge: None,
        runs,
    }
}

/// Step 2: the body as JSON, Slack's handshake, the delivery id and the event name.
pub(crate) fn parse(hook: &Hook, header: &Headers<'_>, body: &[u8]) -> Result<Parsed, Refused> {
    let json: serde_json::Value = serde_json::from_slice(body).map_err(|e| {
        Refused::BadRequest(format!(
            "the body is not valid JSON ({e}); send the payload as application/json"
        ))
    })?;
    if hook.scheme == SignatureScheme::Slack
        && json["type"] == "url_verification"
        && let Some(challenge) = json["challenge"].as_str()
    {
        // Slack checks a new Events API URL with a signed challenge; it carries no event id.
        return Ok(Parsed::Challenge(challenge.to_string()));
    }
    let id = read_source(&hook.delivery_source, header, &json)
        .filter(|d| !d.is_empty())
        .ok_or_else(|| {
            Refused::BadRequest(format!(
                "no delivery id in {}; each delivery needs a unique id there so redeliveries \
                 are recognised",
                describe(&hook.delivery_source)
            ))
        })?;
    if id.len() > MAX_DELIVERY_ID_BYTES {
        return Err(Refused::BadRequest(format!(
            "the delivery id is {} bytes; the limit is {MAX_DELIVERY_ID_BYTES}",
            id.len()
        )));
    }
    let event = match &hook.event_source {
        Some(src) => read_source(src, header, &json).unwrap_or_default(),
        None => String::new(),
    };
    Ok(Parsed::Delivery(Delivery {
        id,
        event,
        json: Arc::new(json),
        trace_parent: header("traceparent"),
    }))
}

/// Step 3: the first route whose event and conditions match, rendered; GitHub's `ping`
/// when none does; else refused.
pub(crate) fn pick_route<'h>(hook: &'h Hook, d: &Delivery) -> Result<Routed<'h>, Refused> {
    let route = hook.routes.iter().find(|r| r.matches(&d.event, &d.json));
    let Some(route) = route else {
        if hook.scheme == SignatureScheme::Github && d.event == "ping" {
            // GitHub pings a webhook when it is added; a 422 would show the setup as broken.
            return Ok(Routed::Ping);
        }
        if hook.unmatched == super::config::Unmatched::Ignore {
            tracing::debug!(hook = %hook.name, event = %d.event, delivery = %d.id,
                            "no route takes this delivery; ignored");
            return Ok(Routed::Ignored);
        }
        return Err(Refused::Unmatched(format!(
            "no route of hook '{}' matches event '{}' with this payload (routes: {}); \
             nothing was enqueued — add a route if this delivery should start something",
            hook.name,
            d.event,
            hook.route_names().join(", ")
        )));
    };
    let rendered = route
        .render(&hook.name, &d.event, &d.id, &d.json)
        .map_err(|e| Refused::Invalid(e.to_string()))?;
    Ok(Routed::Take(route, rendered))
}

/// The request of step 5: the rendered prompt with Nightshift's trace line, and an
/// idempotency key that is a pure function of the delivery.
pub(crate) fn plan_enqueue(
    hook: &Hook,
    route: &CompiledRoute,
    d: &Delivery,
    rendered: Rendered,
) -> Enqueue {
    let prompt = format!(
        "{}\n\n[webhook {} delivery={} event={}]",
        rendered.prompt.trim_end(),
        hook.name,
        d.id,
        d.event
    );
    let key = rendered
        .idempotency_key
        .unwrap_or_else(|| format!("webhook:{}:{}:{}", hook.name, route.name, d.id));
    match route.kind {
        RouteKind::Start => {
            let mut req = RunRequest::new(
                route.agent.clone().unwrap_or_default(),
                prompt,
                Trigger::Webhook,
            );
            req.idempotency_key = Some(key);
            req.trace_parent = d.trace_parent.clone();
            if hook.scheme == SignatureScheme::Github {
                req.context = github_context(&d.json);
            }
            if let Some(checkout) = rendered.checkout {
                let context = req.context.get_or_insert_with(|| serde_json::json!({}));
                context["workspace"] = checkout;
            }
            req.lane = route.lane.clone();
            req.priority = route.priority;
            if let Some(ck) = rendered.concurrency_key {
                req.concurrency_key = Some(ck);
                req.concurrency_policy = Some(route.policy);
            }
            Enqueue::Start(req)
        }
        RouteKind::Cancel => Enqueue::Cancel {
            key: rendered.concurrency_key.unwrap_or_default(),
        },
        RouteKind::Resume => Enqueue::Resume(ResumeRequest {
            concurrency_key: rendered.concurrency_key.unwrap_or_default(),
            message: prompt,
            idempotency_key: Some(key),
        }),
    }
}

/// What a GitHub delivery tells its run about the pull request or issue it is about:
/// `{"github": {"repo", "number", "head_sha", "installation_id"}}`, each field only when the
/// payload has it (`number` of the pull request, else of the issue; `head_sha` of the pull
/// request's head). `None` without a repository.
pub(crate) fn github_context(json: &serde_json::Value) -> Option<serde_json::Value> {
    let repo = json.pointer("/repository/full_name")?.as_str()?;
    let mut gh = serde_json::Map::new();
    gh.insert("repo".into(), repo.into());
    let number = json
        .pointer("/pull_request/number")
        .or_else(|| json.pointer("/issue/number"))
        .and_then(serde_json::Value::as_u64);
    if let Some(n) = number {
        gh.insert("number".into(), n.into());
    }
    if let Some(sha) = json
        .pointer("/pull_request/head/sha")
        .and_then(|v| v.as_str())
    {
        gh.insert("head_sha".into(), sha.into());
    }
    if let Some(id) = json
        .pointer("/installation/id")
        .and_then(serde_json::Value::as_u64)
    {
        gh.insert("installation_id".into(), id.into());
    }
    Some(serde_json::json!({ "github": gh }))
}

/// What the intake's refusal `e` of `route`'s enqueue answers.
pub(crate) fn refusal(route: &CompiledRoute, e: IntakeError) -> Refused {
    if let IntakeError::Store(e) = e {
        return Refused::Store(e);
    }
    let m = format!("route '{}': {e}; nothing was enqueued", route.name);
    match e {
        IntakeError::NotFound(_) => Refused::NoRun(m),
        _ => Refused::Invalid(m),
    }
}

/// The runs a delivery taken by `route` made, as the store recorded them and as answered.
pub(crate) fn route_runs(route: &CompiledRoute, enqueued: &Enqueued) -> Vec<DeliveryRun> {
    let kind = match route.kind {
        RouteKind::Start => "start",
        RouteKind::Resume => "resume",
        RouteKind::Cancel => "cancel",
    };
    nightshift_store::delivery_runs(&route.name, kind, enqueued)
}

/// The answer for a delivery whose runs were recorded (`runs`, JSON; none when absent);
/// for a `redelivery`, every run is marked a duplicate.
pub(crate) fn answer(
    hook: &Hook,
    d: &Delivery,
    runs: Option<&str>,
    redelivery: bool,
) -> Result<Accepted, Refused> {
    let mut runs: Vec<DeliveryRun> = serde_json::from_str(runs.unwrap_or("[]"))
        .map_err(|e| nightshift_store::Error::Corrupt(format!("webhook runs: {e}")))?;
    if redelivery {
        runs.iter_mut().for_each(|r| r.duplicate = true);
    }
    Ok(Accepted {
        hook: hook.name.clone(),
        delivery: d.id.clone(),
        event: d.event.clone(),
        redelivery,
        ping: false,
        ignored: false,
        challenge: None,
        runs,
    })
}

fn challenge_answer(hook: &Hook, challenge: String) -> Accepted {
    Accepted {
        hook: hook.name.clone(),
        delivery: String::new(),
        event: "url_verification".into(),
        redelivery: false,
        ping: true,
        ignored: false,
        challenge: Some(challenge),
        runs: Vec::new(),
    }
}

fn untaken_answer(hook: &Hook, d: Delivery, untaken: Untaken) -> Accepted {
    Accepted {
        hook: hook.name.clone(),
        delivery: d.id,
        event: d.event,
        redelivery: false,
        ping: untaken == Untaken::Ping,
        ignored: untaken == Untaken::Ignored,
        challenge: None,
        runs: Vec::new(),
    }
}

fn read_source(
    src: &FieldSource,
    header: &dyn Fn(&str) -> Option<String>,
    body: &serde_json::Value,
) -> Option<String> {
    if let Some(h) = &src.header {
        return header(h).map(|v| v.trim().to_string());
    }
    let v = body.pointer(src.pointer.as_deref()?)?;
    match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn describe(src: &FieldSource) -> String {
    match (&src.header, &src.pointer) {
        (Some(h), _) => format!("the {h} header"),
        (_, Some(p)) => format!("the body at {p}"),
        _ => "nowhere".into(),
    }
}

#[cfg(test)]
#[path = "delivery_tests.rs"]
mod tests;
