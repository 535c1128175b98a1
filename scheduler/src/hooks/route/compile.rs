//! Compiling a `[[hooks.routes]]` entry when the config is loaded: its keys checked and its
//! templates compiled, one step per concern, in the order the checks have always run.
//!
//! Guarantees: a route that cannot work — an `event` that is not a name or list of names, a
//! `match` that is not plain values or one operator, a key its kind does not take, a missing
//! `agent`, `prompt` or `concurrency_key`, a concurrency policy without its key, a debounce
//! window out of range, a template with a syntax error — is refused with a [`ConfigError`]
//! naming the key (`hooks.gh.routes.review.agent`), so the daemon does not start with it
//! rather than failing its first delivery.

use minijinja::{Environment, UndefinedBehavior};
use serde_json::Value as Json;

use super::condition::flatten;
use super::{CompiledRoute, TEMPLATES};
use crate::hooks::config::{PolicyName, RouteConfig, RouteKind};
use crate::hooks::error::ConfigError;
use nightshift_store::ConcurrencyPolicy;

impl CompiledRoute {
    /// Checks a route's keys and compiles its templates; `at` names it in errors.
    pub fn compile(route: &RouteConfig, at: &str) -> Result<CompiledRoute, ConfigError> {
        let key = |name: &str| format!("{at}.{name}");
        let events = events(route, at)?;
        let mut conditions = Vec::new();
        flatten("", &route.conditions, &mut conditions, at)?;
        let runs_key = runs_key(route, at)?;
        if route.kind != RouteKind::Cancel && route.prompt.trim().is_empty() {
            return Err(ConfigError::value(
                key("prompt"),
                "is missing: the template of the prompt (start) or message (resume)",
            ));
        }
        let policy = match route.kind {
            RouteKind::Start => start_policy(route, at)?,
            RouteKind::Cancel => {
                check_cancel(route, runs_key, at)?;
                ConcurrencyPolicy::Queue
            }
            RouteKind::Resume => {
                check_resume(route, runs_key, at)?;
                ConcurrencyPolicy::Queue
            }
        };
        Ok(CompiledRoute {
            name: route.name.clone(),
            kind: route.kind,
            events,
            conditions,
            agent: route.agent.clone(),
            lane: route.lane.clone(),
            priority: route.priority,
            policy,
            templates: templates(route, runs_key, at)?,
            checkout: None,
        })
    }
}

/// `event`: absent (any event), a name, or a non-empty list of names.
fn events(route: &RouteConfig, at: &str) -> Result<Option<Vec<String>>, ConfigError> {
    match &route.event {
        None => Ok(None),
        Some(Json::String(s)) => Ok(Some(vec![s.clone()])),
        Some(Json::Array(a)) if !a.is_empty() && a.iter().all(Json::is_string) => Ok(Some(
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect(),
        )),
        Some(_) => Err(ConfigError::value(
            format!("{at}.event"),
            "must be an event name or a list of them, e.g. \"pull_request\"",
        )),
    }
}

/// The template of the concurrency key the route renders. `resume` and `cancel` name their
/// runs by `concurrency_key` too; `run_key` is that key's older name there, still read (both
/// at once is refused).
fn runs_key<'r>(route: &'r RouteConfig, at: &str) -> Result<Option<&'r String>, ConfigError> {
    match (route.kind, &route.concurrency_key, &route.run_key) {
        (RouteKind::Start, ck, _) => Ok(ck.as_ref()),
        (_, Some(_), Some(_)) => Err(ConfigError::value(
            format!("{at}.run_key"),
            "is the older name of concurrency_key: give concurrency_key only",
        )),
        (_, ck, rk) => Ok(ck.as_ref().or(rk.as_ref())),
    }
}

/// The keys only a `start` route takes, and whether each is set.
fn start_only(route: &RouteConfig) -> [(&'static str, bool); 5] {
    [
        ("agent", route.agent.is_some()),
        ("concurrency_policy", route.concurrency_policy.is_some()),
        ("debounce_seconds", route.debounce_seconds.is_some()),
        ("lane", route.lane.is_some()),
        ("priority", route.priority.is_some()),
    ]
}

/// A `start` route's concurrency policy: it names its agent, sets `concurrency_key` (not the
/// older `run_key`) when it sets a policy, and a debounce window only for `debounce`.
fn start_policy(route: &RouteConfig, at: &str) -> Result<ConcurrencyPolicy, ConfigError> {
    let key = |name: &str| format!("{at}.{name}");
    if route.agent.is_none() {
        return Err(ConfigError::value(
            key("agent"),
            "is missing: name the agent to start",
        ));
    }
    if route.run_key.is_some() {
        return Err(ConfigError::value(
            key("run_key"),
            "is the older name of a resume or cancel route's concurrency_key; a start route \
             sets concurrency_key",
        ));
    }
    let name = route.concurrency_policy.unwrap_or_default();
    if route.concurrency_key.is_none() && route.concurrency_policy.is_some() {
        return Err(ConfigError::value(
            key("concurrency_policy"),
            "needs concurrency_key (the runs it applies to)",
        ));
    }
    match (name, route.debounce_seconds) {
        (PolicyName::Debounce, Some(s)) if (1..=86_400).contains(&s) => {
            Ok(ConcurrencyPolicy::Debounce {
                window_ms: i64::try_from(s * 1000).unwrap_or(i64::MAX),
            })
        }
        (PolicyName::Debounce, _) => Err(ConfigError::value(
            key("debounce_seconds"),
            "must be 1 to 86400 with concurrency_policy = \"debounce\"",
        )),
        (_, Some(_)) => Err(ConfigError::value(
            key("debounce_seconds"),
            "applies only to concurrency_policy = \"debounce\"",
        )),
        (PolicyName::Queue, None) => Ok(ConcurrencyPolicy::Queue),
        (PolicyName::Skip, None) => Ok(ConcurrencyPolicy::Skip),
        (PolicyName::Supersede, None) => Ok(ConcurrencyPolicy::Supersede),
    }
}

/// A `cancel` route takes none of a start's keys, no prompt or idempotency key (it enqueues
/// nothing), and needs the concurrency key of the runs it cancels.
fn check_cancel(
    route: &RouteConfig,
    runs_key: Option<&String>,
    at: &str,
) -> Result<(), ConfigError> {
    let key = |name: &str| format!("{at}.{name}");
    if let Some((name, _)) = start_only(route).iter().find(|(_, set)| *set) {
        return Err(ConfigError::value(
            key(name),
            "applies only to kind = \"start\"; a cancel route cancels the runs whose \
             concurrency key is concurrency_key",
        ));
    }
    for (name, set) in [
        ("prompt", !route.prompt.is_empty()),
        ("idempotency_key", route.idempotency_key.is_some()),
    ] {
        if set {
            return Err(ConfigError::value(
                key(name),
                "applies only to kinds \"start\" and \"resume\"; a cancel route enqueues \
                 nothing",
            ));
        }
    }
    if runs_key.is_none() {
        return Err(ConfigError::value(
            key("concurrency_key"),
            "is missing: a cancel route cancels every unfinished run whose concurrency key it \
             renders",
        ));
    }
    Ok(())
}

/// A `resume` route takes none of a start's keys and needs the concurrency key of the run it
/// continues.
fn check_resume(
    route: &RouteConfig,
    runs_key: Option<&String>,
    at: &str,
) -> Result<(), ConfigError> {
    let key = |name: &str| format!("{at}.{name}");
    if let Some((name, _)) = start_only(route).iter().find(|(_, set)| *set) {
        return Err(ConfigError::value(
            key(name),
            "applies only to kind = \"start\"; a resume route continues the run found by \
             concurrency_key",
        ));
    }
    if runs_key.is_none() {
        return Err(ConfigError::value(
            key("concurrency_key"),
            "is missing: a resume route continues the newest unfinished run whose concurrency \
             key it renders",
        ));
    }
    Ok(())
}

/// The route's templates (prompt, idempotency key, concurrency key: those it has), compiled
/// with strict undefined; an empty one or one with a syntax error is refused.
fn templates(
    route: &RouteConfig,
    runs_key: Option<&String>,
    at: &str,
) -> Result<Environment<'static>, ConfigError> {
    let key = |name: &str| format!("{at}.{name}");
    let mut templates = Environment::new();
    templates.set_undefined_behavior(UndefinedBehavior::Strict);
    let sources = [
        Some(&route.prompt).filter(|p| !p.is_empty()),
        route.idempotency_key.as_ref(),
        runs_key,
    ];
    for (name, source) in TEMPLATES.iter().zip(sources) {
        if let Some(source) = source {
            if source.trim().is_empty() {
                return Err(ConfigError::value(key(name), "is empty"));
            }
            templates
                .add_template_owned(*name, source.clone())
                .map_err(|e| {
                    ConfigError::value(key(name), format!("is not a valid template: {e:#}"))
                })?;
        }
    }
    Ok(templates)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::route::tests::route;
    use serde_json::json;

    #[test]
    fn a_cancel_route_needs_a_concurrency_key_and_takes_nothing_a_start_takes() {
        let cancel = |extra: Json| {
            let mut r = json!({"name": "closed", "event": "pull_request", "kind": "cancel"});
            r.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            let r: RouteConfig = serde_json::from_value(r).unwrap();
            CompiledRoute::compile(&r, "hooks.gh.routes.closed")
        };
        let ok = cancel(json!({"concurrency_key": "pr-{{ pull_request.number }}"})).unwrap();
        assert_eq!(ok.kind, RouteKind::Cancel);
        // `run_key`, the older name, is still read; both at once is refused.
        assert!(cancel(json!({"run_key": "pr-{{ pull_request.number }}"})).is_ok());
        for (extra, expect) in [
            (
                json!({}),
                "hooks.gh.routes.closed.concurrency_key is missing",
            ),
            (
                json!({"run_key": "k", "concurrency_key": "k"}),
                "routes.closed.run_key is the older name of concurrency_key",
            ),
            (json!({"run_key": "k", "agent": "a"}), "routes.closed.agent"),
            (
                json!({"run_key": "k", "prompt": "p"}),
                "routes.closed.prompt",
            ),
            (
                json!({"run_key": "k", "idempotency_key": "i"}),
                "routes.closed.idempotency_key",
            ),
        ] {
            let err = cancel(extra).unwrap_err().to_string();
            assert!(err.contains(expect), "{expect}: {err}");
        }
    }

    #[test]
    fn bad_routes_are_refused_at_load_naming_the_key() {
        let cases = [
            (
                json!({"prompt": "{{ unclosed"}),
                "x.prompt is not a valid template",
            ),
            (json!({"agent": null}), "x.agent is missing"),
            (
                json!({"concurrency_policy": "skip"}),
                "needs concurrency_key",
            ),
            (
                json!({"concurrency_key": "k", "concurrency_policy": "debounce"}),
                "debounce_seconds must be",
            ),
            (
                json!({"kind": "resume", "agent": "reviewer"}),
                "x.agent applies only",
            ),
            (
                json!({"kind": "resume", "agent": null}),
                "x.concurrency_key is missing",
            ),
            (json!({"event": 5}), "x.event must be"),
            (json!({"match": {"action": []}}), "x.match.action"),
        ];
        for (extra, expect) in cases {
            let err = CompiledRoute::compile(&route(extra), "x")
                .unwrap_err()
                .to_string();
            assert!(err.contains(expect), "{expect}: {err}");
        }
    }
}
