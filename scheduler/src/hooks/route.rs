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
//!
//! Compiling is in `compile.rs`, the `match` conditions in `condition.rs`, and the naming of
//! the paths a failed render lacks in `missing.rs`.

mod compile;
mod condition;
mod missing;

use std::sync::Arc;

use minijinja::Environment;
use serde_json::Value as Json;

use super::checkout::{self, CheckoutTemplates};
use super::config::RouteKind;
use super::context::DeliveryContext;
use super::error::{ConfigError, RenderError};
use condition::Condition;
use missing::{missing_paths, whole_context};
use nightshift_store::ConcurrencyPolicy;

pub use condition::lookup;

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

impl CompiledRoute {
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
            cond.holds(v)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::config::RouteConfig;
    use serde_json::json;

    pub(super) fn route(extra: Json) -> RouteConfig {
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

    pub(super) fn pr(action: &str, draft: bool) -> Json {
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
}
