//! Matching a delivery to a route and rendering what the route enqueues.
//!
//! Guarantees: matching is a pure function of the event name and the JSON body (no I/O), and
//! rendering is a pure function of the body, the event and the delivery id, so a redelivery
//! renders the same prompt and keys as the first delivery did. Templates are minijinja with
//! strict undefined: a path that is not in the payload is an error naming the route and the
//! template, never an empty string. Templates are compiled when the config is loaded, so a
//! syntax error stops the daemon from starting instead of failing the first delivery.
//! Compiling refuses a route with a [`ConfigError`]; rendering a delivery fails with a
//! [`RenderError`].

use std::sync::Arc;

use minijinja::{Environment, UndefinedBehavior};
use serde_json::Value as Json;

use super::checkout::{self, CheckoutTemplates};
use super::config::{PolicyName, RouteConfig, RouteKind};
use super::context::DeliveryContext;
use super::error::{ConfigError, RenderError};
use nightshift_store::ConcurrencyPolicy;

/// One condition on the body.
#[derive(Debug, Clone)]
enum Condition {
    /// The value at the path equals this one.
    Eq(Json),
    /// The value at the path equals one of these.
    In(Vec<Json>),
    /// The value at the path is a string holding this text (`{ contains = "@bot" }`).
    Contains(String),
    /// The value at the path is a string this regular expression finds a match in
    /// (`{ matches = "(?i)^/review\\b" }`).
    Matches(regex::Regex),
}

/// The operators a `match` table may hold instead of a value: `path = { contains = "…" }`.
const OPERATORS: [&str; 2] = ["contains", "matches"];

/// The operator condition of a one-key table whose key is an operator, if it is one.
fn operator(
    map: &serde_json::Map<String, Json>,
    key: &str,
) -> Option<Result<Condition, ConfigError>> {
    let (op, value) = map.iter().next().filter(|_| map.len() == 1)?;
    if !OPERATORS.contains(&op.as_str()) {
        return None;
    }
    let at = format!("{key}.{op}");
    let Some(text) = value.as_str().filter(|t| !t.is_empty()) else {
        return Some(Err(ConfigError::value(
            at,
            "must be a non-empty string, e.g. contains = \"@nightshift-bot\"",
        )));
    };
    Some(match op.as_str() {
        "contains" => Ok(Condition::Contains(text.to_string())),
        _ => regex::Regex::new(text)
            .map(Condition::Matches)
            .map_err(|e| ConfigError::value(at, format!("is not a regular expression: {e}"))),
    })
}

/// A validated route with its templates compiled.
#[derive(Debug)]
pub struct CompiledRoute {
    pub name: String,
    pub kind: RouteKind,
    events: Option<Vec<String>>,
    conditions: Vec<(String, Condition)>,
    pub agent: Option<String>,
    pub lane: Option<String>,
    pub priority: Option<i64>,
    pub policy: ConcurrencyPolicy,
    templates: Environment<'static>,
    /// The agent's checkout templates (compiled into `templates`), when it has them.
    checkout: Option<CheckoutTemplates>,
}

/// What a matched route renders for one delivery.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    pub prompt: String,
    pub idempotency_key: Option<String>,
    /// `start`: the new run's concurrency key; `resume`, `cancel`: the key of the runs they
    /// act on.
    pub concurrency_key: Option<String>,
    /// The run's `workspace` context value (`{repo, ref, depth}`), when its agent checks out.
    pub checkout: Option<Json>,
}

const TEMPLATES: [&str; 3] = ["prompt", "idempotency_key", "concurrency_key"];

/// Flattens `match` into (dotted path, condition); nested tables extend the path.
fn flatten(
    prefix: &str,
    map: &serde_json::Map<String, Json>,
    out: &mut Vec<(String, Condition)>,
    at: &str,
) -> Result<(), ConfigError> {
    for (key, value) in map {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        match value {
            Json::Object(inner) => match operator(inner, &format!("{at}.match.{path}")) {
                Some(cond) => out.push((path, cond?)),
                None => flatten(&path, inner, out, at)?,
            },
            Json::Array(items) => {
                if items.is_empty() || items.iter().any(|i| i.is_object() || i.is_array()) {
                    return Err(ConfigError::table(
                        format!("{at}.match.{path}"),
                        "a list must hold one or more plain values (strings, numbers, booleans)",
                    ));
                }
                out.push((path, Condition::In(items.clone())));
            }
            scalar => out.push((path, Condition::Eq(scalar.clone()))),
        }
    }
    Ok(())
}

/// The value at a dotted path (`pull_request.head.sha`, `commits.0.id`).
pub fn lookup<'a>(body: &'a Json, path: &str) -> Option<&'a Json> {
    path.split('.').try_fold(body, |v, seg| match v {
        Json::Object(m) => m.get(seg),
        Json::Array(a) => seg.parse::<usize>().ok().and_then(|i| a.get(i)),
        _ => None,
    })
}

fn same(a: &Json, b: &Json) -> bool {
    match (a, b) {
        (Json::Number(x), Json::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

impl CompiledRoute {
    /// Checks a route's keys and compiles its templates; `at` names it in errors.
    pub fn compile(route: &RouteConfig, at: &str) -> Result<CompiledRoute, ConfigError> {
        let key = |name: &str| format!("{at}.{name}");
        let events = match &route.event {
            None => None,
            Some(Json::String(s)) => Some(vec![s.clone()]),
            Some(Json::Array(a)) if !a.is_empty() && a.iter().all(Json::is_string) => Some(
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect(),
            ),
            Some(_) => {
                return Err(ConfigError::value(
                    key("event"),
                    "must be an event name or a list of them, e.g. \"pull_request\"",
                ));
            }
        };
        let mut conditions = Vec::new();
        flatten("", &route.conditions, &mut conditions, at)?;
        // `resume` and `cancel` name their runs by `concurrency_key` too; `run_key` is that
        // key's older name there, still read.
        let runs_key = match (route.kind, &route.concurrency_key, &route.run_key) {
            (RouteKind::Start, ck, _) => ck.as_ref(),
            (_, Some(_), Some(_)) => {
                return Err(ConfigError::value(
                    key("run_key"),
                    "is the older name of concurrency_key: give concurrency_key only",
                ));
            }
            (_, ck, rk) => ck.as_ref().or(rk.as_ref()),
        };
        let start_only = [
            ("agent", route.agent.is_some()),
            ("concurrency_policy", route.concurrency_policy.is_some()),
            ("debounce_seconds", route.debounce_seconds.is_some()),
            ("lane", route.lane.is_some()),
            ("priority", route.priority.is_some()),
        ];
        if route.kind != RouteKind::Cancel && route.prompt.trim().is_empty() {
            return Err(ConfigError::value(
                key("prompt"),
                "is missing: the template of the prompt (start) or message (resume)",
            ));
        }
        let policy = match route.kind {
            RouteKind::Start => {
                if route.agent.is_none() {
                    return Err(ConfigError::value(
                        key("agent"),
                        "is missing: name the agent to start",
                    ));
                }
                if route.run_key.is_some() {
                    return Err(ConfigError::value(
                        key("run_key"),
                        "is the older name of a resume or cancel route's concurrency_key; a \
                         start route sets concurrency_key",
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
                        ConcurrencyPolicy::Debounce {
                            window_ms: i64::try_from(s * 1000).unwrap_or(i64::MAX),
                        }
                    }
                    (PolicyName::Debounce, _) => {
                        return Err(ConfigError::value(
                            key("debounce_seconds"),
                            "must be 1 to 86400 with concurrency_policy = \"debounce\"",
                        ));
                    }
                    (_, Some(_)) => {
                        return Err(ConfigError::value(
                            key("debounce_seconds"),
                            "applies only to concurrency_policy = \"debounce\"",
                        ));
                    }
                    (PolicyName::Queue, None) => ConcurrencyPolicy::Queue,
                    (PolicyName::Skip, None) => ConcurrencyPolicy::Skip,
                    (PolicyName::Supersede, None) => ConcurrencyPolicy::Supersede,
                }
            }
            RouteKind::Cancel => {
                if let Some((name, _)) = start_only.iter().find(|(_, set)| *set) {
                    return Err(ConfigError::value(
                        key(name),
                        "applies only to kind = \"start\"; a cancel route cancels the runs \
                         whose concurrency key is concurrency_key",
                    ));
                }
                for (name, set) in [
                    ("prompt", !route.prompt.is_empty()),
                    ("idempotency_key", route.idempotency_key.is_some()),
                ] {
                    if set {
                        return Err(ConfigError::value(
                            key(name),
                            "applies only to kinds \"start\" and \"resume\"; a cancel route \
                             enqueues nothing",
                        ));
                    }
                }
                if runs_key.is_none() {
                    return Err(ConfigError::value(
                        key("concurrency_key"),
                        "is missing: a cancel route cancels every unfinished run whose \
                         concurrency key it renders",
                    ));
                }
                ConcurrencyPolicy::Queue
            }
            RouteKind::Resume => {
                if let Some((name, _)) = start_only.iter().find(|(_, set)| *set) {
                    return Err(ConfigError::value(
                        key(name),
                        "applies only to kind = \"start\"; a resume route continues the run \
                         found by concurrency_key",
                    ));
                }
                if runs_key.is_none() {
                    return Err(ConfigError::value(
                        key("concurrency_key"),
                        "is missing: a resume route continues the newest unfinished run whose \
                         concurrency key it renders",
                    ));
                }
                ConcurrencyPolicy::Queue
            }
        };
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
        Ok(CompiledRoute {
            name: route.name.clone(),
            kind: route.kind,
            events,
            conditions,
            agent: route.agent.clone(),
            lane: route.lane.clone(),
            priority: route.priority,
            policy,
            templates,
            checkout: None,
        })
    }

    /// Has the route render `checkout` (its agent's) into the context of the runs it starts.
    pub fn with_checkout(
        mut self,
        checkout: &CheckoutTemplates,
        at: &str,
    ) -> Result<CompiledRoute, ConfigError> {
        if self.kind == RouteKind::Start {
            checkout.add_to(&mut self.templates, at)?;
            self.checkout = Some(checkout.clone());
        }
        Ok(self)
    }

    /// The events this route takes; `None` for any event.
    pub fn events(&self) -> Option<&[String]> {
        self.events.as_deref()
    }

    /// Whether a delivery of `event` with `body` takes this route: its event is one of the
    /// route's (when it names any) and every condition holds. A missing path never matches.
    pub fn matches(&self, event: &str, body: &Json) -> bool {
        if let Some(events) = &self.events
            && !events.iter().any(|e| e == event)
        {
            return false;
        }
        self.conditions.iter().all(|(path, cond)| {
            let Some(v) = lookup(body, path) else {
                return false;
            };
            match cond {
                Condition::Eq(want) => same(v, want),
                Condition::In(list) => list.iter().any(|want| same(v, want)),
                Condition::Contains(text) => v.as_str().is_some_and(|s| s.contains(text.as_str())),
                Condition::Matches(re) => v.as_str().is_some_and(|s| re.is_match(s)),
            }
        })
    }

    /// Renders the route's templates. The context is the body's top-level fields, plus
    /// `payload` (the whole body) and `webhook` (`name`, `event`, `delivery`).
    pub fn render(
        &self,
        hook: &str,
        event: &str,
        delivery: &str,
        body: &Arc<Json>,
    ) -> Result<Rendered, RenderError> {
        let ctx = DeliveryContext::value(body.clone(), hook, event, delivery);
        let render = |name: &str| -> Result<Option<String>, RenderError> {
            let Ok(t) = self.templates.get_template(name) else {
                return Ok(None);
            };
            t.render(&ctx)
                .map(Some)
                .map_err(|source| RenderError::Template {
                    route: self.name.clone(),
                    template: name.to_string(),
                    missing: if matches!(source.kind(), minijinja::ErrorKind::UndefinedError) {
                        let whole = whole_context(hook, event, delivery, body);
                        missing_paths(&self.templates, &t, &whole)
                    } else {
                        Vec::new()
                    },
                    source,
                })
        };
        let key = |name: &str| -> Result<Option<String>, RenderError> {
            match render(name)? {
                None => Ok(None),
                Some(k) if k.trim().is_empty() => Err(RenderError::EmptyKey {
                    route: self.name.clone(),
                    template: name.to_string(),
                }),
                Some(k) => Ok(Some(k.trim().to_string())),
            }
        };
        let checkout = match &self.checkout {
            None => None,
            Some(c) => match (key(checkout::REPO)?, key(checkout::REF)?) {
                (Some(repo), Some(git_ref)) => Some(c.rendered(&repo, &git_ref)),
                _ => None,
            },
        };
        Ok(Rendered {
            prompt: render("prompt")?.unwrap_or_default(),
            idempotency_key: key("idempotency_key")?,
            concurrency_key: key("concurrency_key")?,
            checkout,
        })
    }
}

/// The context [`DeliveryContext`] is a view of, as one JSON document (for error messages).
fn whole_context(hook: &str, event: &str, delivery: &str, body: &Json) -> Json {
    let mut ctx = match body {
        Json::Object(m) => m.clone(),
        _ => serde_json::Map::new(),
    };
    ctx.insert("payload".into(), body.clone());
    ctx.insert(
        "webhook".into(),
        serde_json::json!({"name": hook, "event": event, "delivery": delivery}),
    );
    Json::Object(ctx)
}

/// The dotted paths `template` reads (`pull_request.head.sha`) that `ctx` lacks, sorted. A
/// path that starts at a loop variable or a `set` name, or at one of minijinja's global
/// functions, is not counted, nor one that goes on past a string or number (minijinja's
/// analysis cannot tell an attribute from a method there). Paths through an index (`labels[0].name`) are not seen by
/// minijinja's analysis; their failure keeps minijinja's own message.
fn missing_paths(env: &Environment, template: &minijinja::Template, ctx: &Json) -> Vec<String> {
    let mut missing: Vec<String> = template
        .undeclared_variables(true)
        .into_iter()
        .filter(|path| {
            let root = path.split('.').next().unwrap_or_default();
            !env.globals().any(|(g, _)| g == root)
        })
        .filter(|path| lacks_key(ctx, path))
        .collect();
    missing.sort();
    missing
}

/// Whether dotted `path` stops at an object (or list) that lacks its next key (index).
fn lacks_key(ctx: &Json, path: &str) -> bool {
    let mut at = ctx;
    for segment in path.split('.') {
        let next = match at {
            Json::Object(m) => m.get(segment),
            Json::Array(a) => segment.parse::<usize>().ok().and_then(|i| a.get(i)),
            _ => return false,
        };
        match next {
            Some(v) => at = v,
            None => return true,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn route(extra: Json) -> RouteConfig {
        let mut base = json!({
            "name": "review",
            "event": "pull_request",
            "agent": "reviewer",
            "prompt": "Review PR #{{ pull_request.number }}: {{ pull_request.title }}",
        });
        base.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        serde_json::from_value(base).unwrap()
    }

    fn pr(action: &str, draft: bool) -> Json {
        json!({"action": action, "number": 7,
               "pull_request": {"number": 7, "title": "Fix it", "draft": draft,
                                "head": {"sha": "abc"}},
               "repository": {"full_name": "octo/hello"}})
    }

    #[test]
    fn events_equality_lists_and_dotted_paths_all_must_hold() {
        let r = CompiledRoute::compile(
            &route(json!({"match": {
                "action": ["opened", "synchronize", "reopened"],
                "pull_request": {"draft": false},
                "repository.full_name": "octo/hello",
            }})),
            "hooks.gh.routes.review",
        )
        .unwrap();
        assert!(r.matches("pull_request", &Arc::new(pr("opened", false))));
        assert!(r.matches("pull_request", &pr("synchronize", false)));
        assert!(
            !r.matches("pull_request", &pr("closed", false)),
            "not in list"
        );
        assert!(!r.matches("pull_request", &pr("opened", true)), "draft");
        assert!(
            !r.matches("issues", &Arc::new(pr("opened", false))),
            "other event"
        );
        assert!(
            !r.matches("pull_request", &json!({"action": "opened"})),
            "missing paths never match"
        );
        let numbers = CompiledRoute::compile(
            &route(json!({"match": {"pull_request.number": 7, "commits.0.id": "c1"}})),
            "x",
        )
        .unwrap();
        let mut body = pr("opened", false);
        body["commits"] = json!([{"id": "c1"}]);
        assert!(numbers.matches("pull_request", &body));
        body["commits"] = json!([{"id": "c2"}]);
        assert!(!numbers.matches("pull_request", &body));
    }

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
    fn a_route_can_require_a_mention_or_a_pattern_in_a_field() {
        let comment = |body: &str| {
            json!({"action": "created", "issue": {"number": 7},
                   "comment": {"body": body, "user": {"login": "alice"}}})
        };
        let mention = CompiledRoute::compile(
            &route(json!({"match": {"action": "created",
                                    "comment": {"body": {"contains": "@nightshift-bot"}}}})),
            "hooks.gh.routes.comment",
        )
        .unwrap();
        assert!(mention.matches("pull_request", &comment("@nightshift-bot look again")));
        assert!(mention.matches("pull_request", &comment("thanks @nightshift-bot!")));
        assert!(
            !mention.matches("pull_request", &comment("LGTM")),
            "no mention"
        );
        assert!(
            !mention.matches(
                "pull_request",
                &json!({"action": "created", "comment": {"body": 7}})
            ),
            "a field that is not a string never matches"
        );
        let command = CompiledRoute::compile(
            &route(json!({"match": {"comment.body": {"matches": "(?i)^/review\\b"}}})),
            "x",
        )
        .unwrap();
        assert!(command.matches("pull_request", &comment("/Review please")));
        assert!(!command.matches("pull_request", &comment("please /review")));
        assert!(!command.matches("pull_request", &comment("/reviewed")));
        for (conditions, expect) in [
            (
                json!({"comment.body": {"matches": "(unclosed"}}),
                "x.match.comment.body.matches",
            ),
            (
                json!({"comment.body": {"contains": ""}}),
                "non-empty string",
            ),
            (json!({"comment.body": {"contains": 3}}), "non-empty string"),
        ] {
            let err = CompiledRoute::compile(&route(json!({"match": conditions})), "x")
                .unwrap_err()
                .to_string();
            assert!(err.contains(expect), "{expect}: {err}");
        }
    }

    #[test]
    fn templates_render_from_the_payload_and_undefined_is_an_error() {
        let r = CompiledRoute::compile(
            &route(json!({
                "concurrency_key": "pr-{{ repository.full_name }}-{{ pull_request.number }}",
                "idempotency_key": "{{ webhook.name }}:{{ webhook.delivery }}",
            })),
            "x",
        )
        .unwrap();
        let out = r
            .render("gh", "pull_request", "d-1", &Arc::new(pr("opened", false)))
            .unwrap();
        assert_eq!(out.prompt, "Review PR #7: Fix it");
        assert_eq!(out.concurrency_key.as_deref(), Some("pr-octo/hello-7"));
        assert_eq!(out.idempotency_key.as_deref(), Some("gh:d-1"));
        let typo = CompiledRoute::compile(
            &route(json!({"prompt": "Review {{ pull_request.nubmer }}"})),
            "x",
        )
        .unwrap();
        let err = typo
            .render("gh", "pull_request", "d", &Arc::new(pr("opened", false)))
            .unwrap_err();
        assert!(
            matches!(&err, RenderError::Template { route, template, .. }
                if route == "review" && template == "prompt"),
            "{err:?}"
        );
        assert!(
            std::error::Error::source(&err).is_some(),
            "keeps minijinja's error"
        );
        assert_eq!(
            err.to_string(),
            "route 'review': the prompt template failed on this delivery: \
             pull_request.nubmer is not in the payload"
        );
        let blank_key =
            CompiledRoute::compile(&route(json!({"concurrency_key": " {{ '' }} "})), "x").unwrap();
        let err = blank_key
            .render("gh", "pull_request", "d", &Arc::new(pr("opened", false)))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "route 'review': the concurrency_key template rendered an empty key"
        );
    }

    #[test]
    fn a_failed_render_names_the_paths_missing_from_this_delivery() {
        let render = |extra: Json, body: &Json| {
            CompiledRoute::compile(&route(extra), "x")
                .unwrap()
                .render("gh", "pull_request", "d", &Arc::new(body.clone()))
                .map(|r| r.prompt)
                .map_err(|e| e.to_string())
        };
        let body = pr("opened", false);
        // Deep paths, `payload.` paths, several at once, in a key template too.
        assert_eq!(
            render(
                json!({"prompt": "{{ pull_request.head.shaa }} {{ payload.sender.login }}"}),
                &body
            )
            .unwrap_err(),
            "route 'review': the prompt template failed on this delivery: \
             payload.sender.login, pull_request.head.shaa are not in the payload"
        );
        assert_eq!(
            render(
                json!({"concurrency_key": "{{ repository.owner.id }}"}),
                &body
            )
            .unwrap_err(),
            "route 'review': the concurrency_key template failed on this delivery: \
             repository.owner.id is not in the payload"
        );
        // Loop variables, globals and paths that exist are not named; the path is named as the
        // template reads it.
        let with_labels = json!({
            "pull_request": {"number": 7, "title": "Fix it",
                             "labels": [{"name": "bug"}]},
            "repository": {"full_name": "octo/hello"},
        });
        assert_eq!(
            render(
                json!({"prompt": "{% for l in pull_request.labels %}{{ l.name }}{% endfor %}\
                                  {% for i in range(1) %}{{ pull_request.title | upper }}{{ pull_request.labels | length }}\
                                  {% endfor %}{{ pull_request.head.ref }}"}),
                &with_labels
            )
            .unwrap_err(),
            "route 'review': the prompt template failed on this delivery: \
             pull_request.head.ref is not in the payload"
        );
        // A path behind a branch this delivery does not take is not a failure.
        assert_eq!(
            render(
                json!({"prompt": "{% if pull_request.draft %}{{ pull_request.nope }}{% endif %}\
                                  PR {{ pull_request.number }}"}),
                &body
            )
            .unwrap(),
            "PR 7"
        );
        // A failure that is not a missing path keeps minijinja's words.
        let err = render(json!({"prompt": "{{ pull_request.title + 1 }}"}), &body).unwrap_err();
        assert!(
            err.starts_with("route 'review': the prompt template failed on this delivery: ")
                && !err.contains("not in the payload")
                && err.contains("invalid operation"),
            "{err}"
        );
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
