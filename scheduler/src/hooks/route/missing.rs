//! Naming what a delivery lacks when a route's template fails on it.
//!
//! Guarantees: the paths named are those the template reads and this delivery's context
//! lacks, sorted, as the template spells them; loop variables, `set` names, minijinja's
//! globals and paths that go on past a string or a number are never named, and a path
//! behind a branch the delivery does not take is not a failure at all. Pure: no I/O.

use minijinja::Environment;
use serde_json::Value as Json;

/// The context [`DeliveryContext`] is a view of, as one JSON document (for error messages).
pub(super) fn whole_context(hook: &str, event: &str, delivery: &str, body: &Json) -> Json {
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
pub(super) fn missing_paths(
    env: &Environment,
    template: &minijinja::Template,
    ctx: &Json,
) -> Vec<String> {
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
