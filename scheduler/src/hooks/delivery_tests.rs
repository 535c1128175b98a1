//! The deciders of a delivery, without a store: parsing, routing, the enqueue request, what a
//! refusal leaves, and the recorded answer.

use super::*;
use crate::hooks::HookSet;
use nightshift_store::ConcurrencyPolicy;
use serde_json::json;

/// A hook built from `config` (JSON of a `[[hooks]]` entry) with agent `a`, secret `S=s`.
fn hook(config: serde_json::Value) -> std::sync::Arc<Hook> {
    let c: super::super::HookConfig = serde_json::from_value(config).unwrap();
    let set = HookSet::build(std::slice::from_ref(&c), &["a"], |_| Some("s".into())).unwrap();
    set.get(&c.name).unwrap()
}

fn github(routes: serde_json::Value) -> std::sync::Arc<Hook> {
    hook(json!({"name": "gh", "signature": "github", "secret_env": "S", "routes": routes}))
}

fn headers<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + Sync + 'a {
    move |name: &str| {
        pairs
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.to_string())
    }
}

fn delivery(id: &str, event: &str, json: serde_json::Value) -> Delivery {
    Delivery {
        trace_parent: None,
        id: id.into(),
        event: event.into(),
        json: std::sync::Arc::new(json),
    }
}

fn parsed(hook: &Hook, pairs: &[(&str, &str)], body: &str) -> Result<Parsed, Refused> {
    parse(hook, &headers(pairs), body.as_bytes())
}

fn start_route() -> serde_json::Value {
    json!([{"name": "r", "agent": "a", "prompt": "PR {{ number }}"}])
}

#[test]
fn github_reads_the_delivery_id_and_event_from_its_headers() {
    let h = github(start_route());
    let got = parsed(
        &h,
        &[("X-GitHub-Delivery", " d-1 "), ("X-GitHub-Event", "push")],
        r#"{"number": 7}"#,
    )
    .unwrap();
    assert_eq!(
        got,
        Parsed::Delivery(delivery("d-1", "push", json!({"number": 7})))
    );
}

#[test]
fn a_body_that_is_not_json_or_lacks_an_id_is_a_bad_request() {
    let h = github(start_route());
    let not_json = parsed(&h, &[("X-GitHub-Delivery", "d")], "{nope").unwrap_err();
    assert!(
        matches!(&not_json, Refused::BadRequest(m) if m.contains("not valid JSON")),
        "{not_json}"
    );
    let no_id = parsed(&h, &[("X-GitHub-Event", "push")], "{}").unwrap_err();
    assert!(
        matches!(&no_id, Refused::BadRequest(m) if m.contains("the X-GitHub-Delivery header")),
        "{no_id}"
    );
    let empty_id = parsed(&h, &[("X-GitHub-Delivery", "  ")], "{}").unwrap_err();
    assert!(matches!(empty_id, Refused::BadRequest(_)));
    let long = "x".repeat(MAX_DELIVERY_ID_BYTES + 1);
    let too_long = parsed(&h, &[("X-GitHub-Delivery", &long)], "{}").unwrap_err();
    assert!(
        matches!(&too_long, Refused::BadRequest(m) if m.contains("the limit is 100")),
        "{too_long}"
    );
}

#[test]
fn a_numeric_id_in_the_body_is_read_as_text_and_a_missing_event_is_empty() {
    let h = hook(json!({"name": "n", "signature": "none",
        "delivery_id": {"pointer": "/id"}, "routes": start_route()}));
    let got = parsed(&h, &[], r#"{"id": 42}"#).unwrap();
    assert_eq!(got, Parsed::Delivery(delivery("42", "", json!({"id": 42}))));
}

#[test]
fn slacks_url_verification_is_a_challenge_and_no_delivery() {
    let h = hook(
        json!({"name": "sl", "signature": "slack", "secret_env": "S",
        "routes": start_route()}),
    );
    let got = parsed(
        &h,
        &[],
        r#"{"type": "url_verification", "challenge": "c-9"}"#,
    )
    .unwrap();
    assert_eq!(got, Parsed::Challenge("c-9".into()));
    // The same body on another scheme is an ordinary delivery (here: without an id).
    let gh = github(start_route());
    let body = r#"{"type": "url_verification", "challenge": "c-9"}"#;
    assert!(matches!(
        parsed(&gh, &[], body),
        Err(Refused::BadRequest(_))
    ));
}

#[test]
fn the_first_matching_route_takes_the_delivery_rendered() {
    let h = github(json!([
        {"name": "first", "event": "push", "agent": "a", "prompt": "one {{ n }}"},
        {"name": "second", "event": "push", "agent": "a", "prompt": "two"},
    ]));
    let d = delivery("d", "push", json!({"n": 3}));
    let Routed::Take(route, rendered) = pick_route(&h, &d).unwrap() else {
        panic!("no route taken");
    };
    assert_eq!(
        (route.name.as_str(), rendered.prompt.as_str()),
        ("first", "one 3")
    );
}

#[test]
fn an_untaken_github_ping_is_answered_and_anything_else_unmatched_is_refused() {
    let h = github(json!([{"name": "r", "event": "push", "agent": "a", "prompt": "p"}]));
    assert!(matches!(
        pick_route(&h, &delivery("d", "ping", json!({}))),
        Ok(Routed::Ping)
    ));
    let other = pick_route(&h, &delivery("d", "issues", json!({}))).unwrap_err();
    assert!(
        matches!(&other, Refused::Unmatched(m) if m.contains("event 'issues'") && m.contains("routes: r")),
        "{other}"
    );
    // Only GitHub's ping is special.
    let plain = hook(
        json!({"name": "n", "signature": "none", "delivery_id": {"pointer": "/id"},
        "event": {"pointer": "/type"},
        "routes": [{"name": "r", "event": "push", "agent": "a", "prompt": "p"}]}),
    );
    assert!(matches!(
        pick_route(&plain, &delivery("d", "ping", json!({}))),
        Err(Refused::Unmatched(_))
    ));
    // A ping that a route takes is routed like any event.
    let takes_ping = github(json!([{"name": "r", "event": "ping", "agent": "a", "prompt": "p"}]));
    assert!(matches!(
        pick_route(&takes_ping, &delivery("d", "ping", json!({}))),
        Ok(Routed::Take(..))
    ));
}

#[test]
fn a_hook_that_ignores_unmatched_deliveries_answers_them_without_a_refusal() {
    let h = hook(
        json!({"name": "gh", "signature": "github", "secret_env": "S",
        "unmatched": "ignore",
        "routes": [{"name": "r", "event": "pull_request", "match": {"action": "opened"},
                    "agent": "a", "prompt": "p"}]}),
    );
    assert!(matches!(
        pick_route(
            &h,
            &delivery("d", "pull_request", json!({"action": "labeled"}))
        ),
        Ok(Routed::Ignored)
    ));
    assert!(matches!(
        pick_route(&h, &delivery("d", "ping", json!({}))),
        Ok(Routed::Ping)
    ));
    assert!(matches!(
        pick_route(
            &h,
            &delivery("d", "pull_request", json!({"action": "opened"}))
        ),
        Ok(Routed::Take(..))
    ));
    let bad: Result<super::super::HookConfig, _> = serde_json::from_value(json!({
        "name": "gh", "signature": "github", "secret_env": "S", "unmatched": "drop"}));
    let err = bad.unwrap_err().to_string();
    assert!(err.contains("refuse") && err.contains("ignore"), "{err}");
}

#[test]
fn a_template_that_fails_on_the_payload_is_invalid() {
    let h = github(start_route());
    let err = pick_route(&h, &delivery("d", "push", json!({}))).unwrap_err();
    assert!(
        matches!(&err, Refused::Invalid(m) if m.contains("prompt template")),
        "{err}"
    );
}

fn take<'h>(h: &'h Hook, d: &Delivery) -> (&'h CompiledRoute, Rendered) {
    match pick_route(h, d).unwrap() {
        Routed::Take(route, rendered) => (route, rendered),
        Routed::Ping | Routed::Ignored => panic!("not taken"),
    }
}

#[test]
fn a_start_carries_the_trace_line_and_a_key_derived_from_the_delivery() {
    let h = github(json!([{"name": "r", "agent": "a", "prompt": "PR {{ n }}\n",
        "lane": "fast", "priority": 5,
        "concurrency_key": "pr-{{ n }}", "concurrency_policy": "supersede"}]));
    let d = delivery("d-7", "push", json!({"n": 3}));
    let (route, rendered) = take(&h, &d);
    let Enqueue::Start(req) = plan_enqueue(&h, route, &d, rendered) else {
        panic!("not a start");
    };
    assert_eq!(req.agent, "a");
    assert_eq!(req.prompt, "PR 3\n\n[webhook gh delivery=d-7 event=push]");
    assert_eq!(req.trigger, Trigger::Webhook);
    assert_eq!(req.idempotency_key.as_deref(), Some("webhook:gh:r:d-7"));
    assert_eq!((req.lane.as_deref(), req.priority), (Some("fast"), Some(5)));
    assert_eq!(req.concurrency_key.as_deref(), Some("pr-3"));
    assert_eq!(req.concurrency_policy, Some(ConcurrencyPolicy::Supersede));
}

#[test]
fn a_resume_continues_the_rendered_concurrency_key_under_the_routes_key_template() {
    // `concurrency_key`, and `run_key`, its older name, still read.
    for key in ["concurrency_key", "run_key"] {
        let h = github(json!([{"name": "r", "kind": "resume", "prompt": "more",
            key: "pr-{{ n }}", "idempotency_key": "k-{{ n }}"}]));
        let d = delivery("d", "push", json!({"n": 4}));
        let (route, rendered) = take(&h, &d);
        assert_eq!(
            plan_enqueue(&h, route, &d, rendered),
            Enqueue::Resume(ResumeRequest {
                concurrency_key: "pr-4".into(),
                message: "more\n\n[webhook gh delivery=d event=push]".into(),
                idempotency_key: Some("k-4".into()),
            }),
            "{key}"
        );
    }
}

#[test]
fn a_refusal_names_the_route_and_keeps_store_errors_as_they_are() {
    let h = github(start_route());
    let route = &h.routes[0];
    let store = refusal(
        route,
        IntakeError::Store(nightshift_store::Error::Conflict("x".into())),
    );
    assert!(matches!(store, Refused::Store(_)));
    let no_run = refusal(route, IntakeError::NotFound("no run".into()));
    assert!(matches!(&no_run, Refused::NoRun(m) if m == "route 'r': no run; nothing was enqueued"));
    let invalid = refusal(route, IntakeError::Invalid("bad".into()));
    assert!(matches!(invalid, Refused::Invalid(_)));
}

#[test]
fn the_recorded_run_answers_a_redelivery_as_duplicates() {
    let h = github(start_route());
    let run = route_runs(
        &h.routes[0],
        &Enqueued {
            run_id: "run-1".into(),
            job_id: 9,
            duplicate: false,
            skipped: false,
            superseded: vec!["run-0".into()],
            superseded_idle: vec!["run-0".into()],
            cancelled: Vec::new(),
            cancelled_idle: Vec::new(),
        },
    )
    .remove(0);
    assert_eq!((run.kind.as_str(), run.job_id), ("start", 9));
    let recorded = serde_json::to_string(std::slice::from_ref(&run)).unwrap();
    let d = delivery("d", "push", json!({}));
    let again = answer(&h, &d, Some(&recorded), true).unwrap();
    assert!(again.redelivery && !again.ping);
    assert_eq!(
        again.runs,
        vec![DeliveryRun {
            duplicate: true,
            ..run
        }]
    );
    let none = answer(&h, &d, None, true).unwrap();
    assert!(none.runs.is_empty());
    assert!(matches!(
        answer(&h, &d, Some("not json"), true),
        Err(Refused::Store(nightshift_store::Error::Corrupt(_)))
    ));
}

#[test]
fn building_names_an_unset_secret_and_a_hook_defined_twice() {
    let c: super::super::HookConfig = serde_json::from_value(
        json!({"name": "gh", "signature": "github", "secret_env": "GH_SECRET",
               "routes": [{"name": "r", "agent": "a", "prompt": "p"}]}),
    )
    .unwrap();
    let err = HookSet::build(std::slice::from_ref(&c), &["a"], |_| None).unwrap_err();
    assert_eq!(
        err,
        crate::hooks::ConfigError::SecretUnset {
            hook: "gh".into(),
            var: "GH_SECRET".into()
        }
    );
    assert!(
        err.to_string()
            .starts_with("hooks.gh.secret_env: the environment variable GH_SECRET is not set"),
        "{err}"
    );
    let twice = HookSet::build(&[c.clone(), c], &["a"], |_| Some("s".into())).unwrap_err();
    assert_eq!(
        twice.to_string(),
        "hooks: 'gh' is defined twice; hook names must be unique"
    );
}

#[test]
fn a_github_delivery_tells_its_run_the_repository_number_head_and_installation() {
    let pr = json!({
        "action": "synchronize",
        "pull_request": {"number": 42, "head": {"sha": "c48f1b3e", "ref": "fix"}},
        "repository": {"full_name": "octo-org/hello-world"},
        "installation": {"id": 51234567}
    });
    assert_eq!(
        github_context(&pr),
        Some(
            json!({"github": {"repo": "octo-org/hello-world", "number": 42,
                               "head_sha": "c48f1b3e", "installation_id": 51234567}})
        )
    );
    let comment = json!({
        "issue": {"number": 7, "pull_request": {}},
        "repository": {"full_name": "octo-org/hello-world"}
    });
    assert_eq!(
        github_context(&comment),
        Some(json!({"github": {"repo": "octo-org/hello-world", "number": 7}}))
    );
    assert_eq!(github_context(&json!({"zen": "Keep it simple."})), None);
}
