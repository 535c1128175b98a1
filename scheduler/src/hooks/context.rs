//! The template context of a delivery, as a view of its parsed body: a route's templates
//! read the fields they name, and nothing of the body is copied or converted for them.
//!
//! What a template sees is what a conversion of the whole body would give (and did give
//! before this view): the body's top-level fields, `payload` (the whole body) and `webhook`
//! (`name`, `event`, `delivery`), the last two winning over body fields of the same name.
//! Objects are maps (iterable by key, in the body's key order), arrays are sequences, JSON
//! numbers become integers when they are integers and floats otherwise, `null` is `none`. A
//! field the body lacks is undefined, so the strict environment refuses it as before.
//!
//! Why: a GitHub payload is tens of kilobytes and a route reads a handful of fields; copying
//! the body into a map of its own and converting every node into a template value for each
//! delivery cost more CPU than the rest of its intake together.

use std::sync::Arc;

use minijinja::value::{Enumerator, Object, ObjectRepr, Value};
use serde_json::Value as Json;

/// The context of one delivery's templates.
#[derive(Debug)]
pub(crate) struct DeliveryContext {
    body: Arc<Json>,
    webhook: Value,
}

impl DeliveryContext {
    /// The context for `body`, delivered to hook `hook` as `event` with id `delivery`.
    pub(crate) fn value(body: Arc<Json>, hook: &str, event: &str, delivery: &str) -> Value {
        let webhook = Value::from_pairs([
            ("name", Value::from(hook)),
            ("event", Value::from(event)),
            ("delivery", Value::from(delivery)),
        ]);
        Value::from_object(DeliveryContext { body, webhook })
    }
}

/// The names the context has besides the body's own fields.
const OWN: [&str; 2] = ["payload", "webhook"];

impl Object for DeliveryContext {
    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        match key.as_str()? {
            "payload" => Some(view(&self.body, Vec::new())),
            "webhook" => Some(self.webhook.clone()),
            field => {
                self.body.get(field)?;
                Some(view(&self.body, vec![Step::Key(field.to_string())]))
            }
        }
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        let fields = self.body.as_object().into_iter().flat_map(|m| m.keys());
        let mut keys: Vec<Value> = fields
            .filter(|k| !OWN.contains(&k.as_str()))
            .map(|k| Value::from(k.as_str()))
            .collect();
        keys.extend(OWN.iter().map(|k| Value::from(*k)));
        Enumerator::Values(keys)
    }
}

/// One step from a node to a child.
#[derive(Debug, Clone)]
enum Step {
    Key(String),
    Index(usize),
}

/// An object or array inside a body: the body and the path to it.
#[derive(Debug)]
struct JsonView {
    body: Arc<Json>,
    path: Vec<Step>,
}

impl JsonView {
    /// The node this view stands for (always there: views are made for nodes found).
    fn node(&self) -> &Json {
        let mut node: &Json = &self.body;
        for step in &self.path {
            node = match step {
                Step::Key(k) => node.get(k.as_str()),
                Step::Index(i) => node.get(*i),
            }
            .unwrap_or(&Json::Null);
        }
        node
    }

    fn child(&self, step: Step) -> Value {
        let mut path = self.path.clone();
        path.push(step);
        view(&self.body, path)
    }
}

/// The template value of the node at `path` in `body`: scalars as values, objects and
/// arrays as views.
fn view(body: &Arc<Json>, path: Vec<Step>) -> Value {
    let v = JsonView {
        body: body.clone(),
        path,
    };
    match v.node() {
        Json::Null => Value::from(()),
        Json::Bool(b) => Value::from(*b),
        Json::Number(n) => number(n),
        Json::String(s) => Value::from(s.as_str()),
        Json::Array(_) | Json::Object(_) => Value::from_object(v),
    }
}

/// A JSON number as a template number: an integer (up to 128 bits, exactly) when it is one,
/// else a float. Never through `minijinja::value::Serde`: with `serde_json`'s
/// `arbitrary_precision` a number serialises as a one-field map.
fn number(n: &serde_json::Number) -> Value {
    if let Some(i) = n.as_i64() {
        Value::from(i)
    } else if let Some(u) = n.as_u64() {
        Value::from(u)
    } else if let Some(i) = n.as_i128() {
        Value::from(i)
    } else if let Some(u) = n.as_u128() {
        Value::from(u)
    } else {
        Value::from(n.as_f64().unwrap_or(f64::NAN))
    }
}

/// `json` converted whole into a template value, by the rules of the view (for contexts
/// small enough to convert, such as a run's stored context).
pub(crate) fn template_value(json: &Json) -> Value {
    match json {
        Json::Null => Value::from(()),
        Json::Bool(b) => Value::from(*b),
        Json::Number(n) => number(n),
        Json::String(s) => Value::from(s.as_str()),
        Json::Array(items) => Value::from(items.iter().map(template_value).collect::<Vec<_>>()),
        Json::Object(map) => {
            Value::from_pairs(map.iter().map(|(k, v)| (k.as_str(), template_value(v))))
        }
    }
}

impl Object for JsonView {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        match self.node() {
            Json::Array(_) => ObjectRepr::Seq,
            _ => ObjectRepr::Map,
        }
    }

    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        match self.node() {
            Json::Object(map) => {
                let k = key.as_str()?;
                map.get(k)?;
                Some(self.child(Step::Key(k.to_string())))
            }
            Json::Array(items) => {
                let i = key.as_usize()?;
                (i < items.len()).then(|| self.child(Step::Index(i)))
            }
            _ => None,
        }
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        match self.node() {
            Json::Object(map) => {
                Enumerator::Values(map.keys().map(|k| Value::from(k.as_str())).collect())
            }
            Json::Array(items) => Enumerator::Seq(items.len()),
            _ => Enumerator::Empty,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use minijinja::{Environment, UndefinedBehavior};
    use serde_json::json;

    /// Renders `source` over the view and over the whole body converted.
    fn both(source: &str, body: &Json) -> (Result<String, String>, Result<String, String>) {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        env.add_template("t", source).unwrap();
        let t = env.get_template("t").unwrap();
        let lazy = DeliveryContext::value(Arc::new(body.clone()), "gh", "push", "d-1");
        let mut eager = body.as_object().cloned().unwrap_or_default();
        eager.insert("payload".into(), body.clone());
        eager.insert(
            "webhook".into(),
            json!({"name": "gh", "event": "push", "delivery": "d-1"}),
        );
        let eager = template_value(&Json::Object(eager));
        let out = |ctx: &Value| t.render(ctx).map_err(|e| e.kind().to_string());
        (out(&lazy), out(&eager))
    }

    #[test]
    fn numbers_render_as_they_were_sent() {
        let body: Json = serde_json::from_str(
            r#"{"id": 123456789012345678901234567890, "neg": -98765432109876543210, "n": 7, "r": 0.5}"#,
        )
        .unwrap();
        let (lazy, eager) = both(
            "{{ id }} {{ neg }} {{ n + 1 }} {{ r }} {{ payload.id }}",
            &body,
        );
        let want = "123456789012345678901234567890 -98765432109876543210 8 0.5 \
                    123456789012345678901234567890";
        assert_eq!(lazy.as_deref(), Ok(want));
        assert_eq!(eager.as_deref(), Ok(want));
    }

    #[test]
    fn the_view_renders_what_the_converted_body_renders() {
        let body = json!({
            "action": "opened",
            "number": 7,
            "big": 18446744073709551615u64,
            "ratio": 0.5,
            "nothing": null,
            "draft": false,
            "pull_request": {"title": "Fix it", "labels": [{"name": "a"}, {"name": "b"}],
                             "head": {"sha": "abc"}},
            "payload": "shadowed by the whole body",
            "webhook": "shadowed too",
        });
        for source in [
            "{{ action }} #{{ number }} {{ big }} {{ ratio }} {{ nothing }} {{ draft }}",
            "{{ pull_request.title }} {{ pull_request['head'].sha }} {{ payload.pull_request.head.sha }}",
            "{{ pull_request.labels | map(attribute='name') | join(',') }} {{ pull_request.labels | length }}",
            "{% for l in pull_request.labels %}{{ loop.index }}={{ l.name }};{% endfor %}",
            "{% for k in pull_request %}{{ k }},{% endfor %}",
            "{% for k, v in pull_request.head | items %}{{ k }}={{ v }}{% endfor %}",
            "{{ pull_request.labels[1].name }} {{ pull_request.labels[-1].name }}",
            "{{ webhook.name }}/{{ webhook.event }}/{{ webhook.delivery }} {{ payload.webhook }}",
            "{{ pull_request.head | tojson }} {{ pull_request.labels | tojson }}",
            "{% if pull_request.draft is defined %}d{% else %}n{% endif %}{{ 'x' if draft else 'y' }}",
            "{{ pull_request.labels | first | tojson }} {{ payload | length }}",
            "{{ pull_request.nope }}",
            "{{ missing }}",
            "{{ pull_request.labels[5].name }}",
        ] {
            let (lazy, eager) = both(source, &body);
            assert_eq!(lazy, eager, "{source}");
        }
    }

    #[test]
    fn a_body_that_is_not_an_object_still_has_payload_and_webhook() {
        for body in [json!([1, 2]), json!("text"), json!(null)] {
            let (lazy, eager) = both("{{ payload | tojson }} {{ webhook.event }}", &body);
            assert_eq!(lazy, eager, "{body}");
        }
    }
}
