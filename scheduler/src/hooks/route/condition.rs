//! A route's conditions on a delivery's body (`[hooks.routes.match]`), and how they hold.
//!
//! Guarantees: a `match` table is read into (dotted path, condition) pairs when the config is
//! loaded — nested tables extend the path, a list is "one of", a one-key table whose key is
//! an operator (`contains`, `matches`) is that operator — and anything else (an empty list, a
//! list of tables, an empty or invalid operand) is refused naming its key. Whether a
//! condition holds is a pure function of the body: a path the body lacks never holds, and
//! numbers are equal by value (`7` and `7.0`).

use serde_json::Value as Json;

use crate::hooks::error::ConfigError;

/// One condition on the body.
#[derive(Debug, Clone)]
pub(super) enum Condition {
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

/// Flattens `match` into (dotted path, condition); nested tables extend the path.
pub(super) fn flatten(
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

impl Condition {
    /// Whether the value `v` at the condition's path satisfies it.
    pub(super) fn holds(&self, v: &Json) -> bool {
        match self {
            Condition::Eq(want) => same(v, want),
            Condition::In(list) => list.iter().any(|want| same(v, want)),
            Condition::Contains(text) => v.as_str().is_some_and(|s| s.contains(text.as_str())),
            Condition::Matches(re) => v.as_str().is_some_and(|s| re.is_match(s)),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::hooks::route::CompiledRoute;
    use crate::hooks::route::tests::route;
    use serde_json::json;

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
}
