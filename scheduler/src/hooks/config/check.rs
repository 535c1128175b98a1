//! Checking a `[[hooks]]` entry when the config is loaded: [`HookConfig::validate`], one
//! check per concern, in the order a reader meets the keys (name, authentication, limits,
//! sources, routes).
//!
//! Guarantees: what parses but cannot work — a name that is not a path segment, a missing or
//! inline secret, an `hmac` table on another scheme, a tolerance or body limit out of range, a
//! delivery id or event source that is not one header or one JSON pointer, no routes, a
//! repeated route name, a route naming an event the hook has no source for or an agent that
//! is not configured — is refused with a [`ConfigError`] naming the key and saying what to
//! write. Nothing here reads the environment: secrets' values are read when the daemon starts.

use std::collections::BTreeSet;

use super::MAX_BODY_BYTES_LIMIT;
use super::{FieldSource, HookConfig, RouteConfig, RouteKind, SignatureScheme};
use crate::hooks::error::ConfigError;
use crate::hooks::route::CompiledRoute;

fn name_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

impl FieldSource {
    fn validate(&self, key: &str) -> Result<(), ConfigError> {
        match (&self.header, &self.pointer) {
            (Some(h), None) if !h.trim().is_empty() => Ok(()),
            (None, Some(p)) if p.starts_with('/') => Ok(()),
            (None, Some(p)) => Err(ConfigError::value(
                format!("{key}.pointer"),
                format!("'{p}' is not a JSON pointer; it starts with '/', e.g. \"/id\""),
            )),
            _ => Err(ConfigError::table(
                key,
                "give exactly one of header = \"…\" or pointer = \"/…\"",
            )),
        }
    }
}

impl HookConfig {
    /// Checks everything that can be checked without the environment; compiles the templates.
    /// `agents` are the configured agent names (start routes must name one of them).
    pub fn validate(&self, agents: &[&str]) -> Result<(), ConfigError> {
        self.compile(agents).map(|_| ())
    }

    /// Validates and compiles the routes: one check per concern, in the order a reader
    /// meets the keys (name, authentication, limits, sources, routes).
    pub(crate) fn compile(&self, agents: &[&str]) -> Result<Vec<CompiledRoute>, ConfigError> {
        if !name_ok(&self.name) {
            return Err(ConfigError::table(
                "hooks",
                format!(
                    "name '{}' is not allowed; use 1-64 letters, digits, '-', '_' or '.'",
                    self.name
                ),
            ));
        }
        let at = format!("hooks.{}", self.name);
        self.check_secret(&at)?;
        self.check_hmac(&at)?;
        self.check_limits(&at)?;
        self.check_sources(&at)?;
        self.compile_routes(&at, agents)
    }

    /// `secret_env`: present exactly when something is checked, and a variable's name.
    fn check_secret(&self, at: &str) -> Result<(), ConfigError> {
        let key = format!("{at}.secret_env");
        match (self.signature, &self.secret_env) {
            (SignatureScheme::None, Some(_)) => Err(ConfigError::value(
                key,
                "is set but signature = \"none\" checks nothing; remove secret_env or choose a \
                 signature scheme",
            )),
            (SignatureScheme::None, None) => Ok(()),
            (_, None) => Err(ConfigError::value(
                key,
                "is missing: name the environment variable that holds the webhook secret, e.g. \
                 secret_env = \"GITHUB_WEBHOOK_SECRET\"",
            )),
            (_, Some(env)) if env.trim().is_empty() || env.contains('=') => {
                Err(ConfigError::value(
                    key,
                    format!(
                        "'{env}' is not an environment variable name (give the variable's name, \
                         never the secret itself)"
                    ),
                ))
            }
            _ => Ok(()),
        }
    }

    /// `[hooks.hmac]`: required by, and only for, `signature = "hmac"`.
    fn check_hmac(&self, at: &str) -> Result<(), ConfigError> {
        match (self.signature, &self.hmac) {
            (SignatureScheme::Hmac, None) => Err(ConfigError::table(
                at,
                "signature = \"hmac\" needs a [hooks.hmac] table with at least header = \"…\"",
            )),
            (SignatureScheme::Hmac, Some(h)) if h.header.trim().is_empty() => {
                Err(ConfigError::value(
                    format!("{at}.hmac.header"),
                    "is empty; name the signature header",
                ))
            }
            (SignatureScheme::Hmac, Some(_)) | (_, None) => Ok(()),
            (other, Some(_)) => Err(ConfigError::value(
                format!("{at}.hmac"),
                format!(
                    "applies only to signature = \"hmac\" (this hook uses \"{}\")",
                    other.name()
                ),
            )),
        }
    }

    /// `tolerance_seconds` (timestamped schemes only) and `max_body_bytes`, in range.
    fn check_limits(&self, at: &str) -> Result<(), ConfigError> {
        if let Some(t) = self.tolerance_seconds {
            let key = format!("{at}.tolerance_seconds");
            if !matches!(
                self.signature,
                SignatureScheme::Stripe | SignatureScheme::Slack
            ) {
                return Err(ConfigError::value(
                    key,
                    "applies only to the timestamped schemes stripe and slack",
                ));
            }
            if !(1..=86_400).contains(&t) {
                return Err(ConfigError::value(
                    key,
                    format!("= {t} is out of range; use 1 to 86400"),
                ));
            }
        }
        if !(1..=MAX_BODY_BYTES_LIMIT).contains(&self.max_body_bytes) {
            return Err(ConfigError::value(
                format!("{at}.max_body_bytes"),
                format!(
                    "= {} is out of range; use 1 to {MAX_BODY_BYTES_LIMIT} (GitHub sends at most \
                     25 MB)",
                    self.max_body_bytes
                ),
            ));
        }
        Ok(())
    }

    /// `delivery_id` (given, or the scheme's default) and `event`, each one well-formed source.
    fn check_sources(&self, at: &str) -> Result<(), ConfigError> {
        match &self.delivery_id {
            Some(src) => src.validate(&format!("{at}.delivery_id"))?,
            None if self.default_delivery_id().is_none() => {
                return Err(ConfigError::value(
                    format!("{at}.delivery_id"),
                    "is missing: say where each delivery's unique id is, e.g. delivery_id = \
                     { header = \"X-Request-Id\" } or { pointer = \"/id\" }; redeliveries are \
                     recognised by it",
                ));
            }
            None => {}
        }
        if let Some(src) = &self.event {
            src.validate(&format!("{at}.event"))?;
        }
        Ok(())
    }

    /// `[[hooks.routes]]`: at least one, names unique, each checked against the hook and
    /// compiled.
    fn compile_routes(&self, at: &str, agents: &[&str]) -> Result<Vec<CompiledRoute>, ConfigError> {
        if self.routes.is_empty() {
            return Err(ConfigError::value(
                at,
                "has no routes; add a [[hooks.routes]] saying what a delivery starts",
            ));
        }
        let mut seen = BTreeSet::new();
        let mut compiled = Vec::new();
        for route in &self.routes {
            if !seen.insert(route.name.as_str()) {
                return Err(ConfigError::table(
                    format!("{at}.routes"),
                    format!(
                        "'{}' is defined twice; route names must be unique",
                        route.name
                    ),
                ));
            }
            let route_at = format!("{at}.routes.{}", route.name);
            self.check_route(route, at, &route_at, agents)?;
            compiled.push(CompiledRoute::compile(route, &route_at)?);
        }
        Ok(compiled)
    }

    /// What a route needs from its hook: a valid name, an event source when it names an
    /// event, and a configured agent.
    fn check_route(
        &self,
        route: &RouteConfig,
        at: &str,
        route_at: &str,
        agents: &[&str],
    ) -> Result<(), ConfigError> {
        if !name_ok(&route.name) {
            return Err(ConfigError::table(
                format!("{at}.routes"),
                format!(
                    "name '{}' is not allowed; use 1-64 letters, digits, '-', '_' or '.'",
                    route.name
                ),
            ));
        }
        if route.event.is_some() && self.event_source().is_none() {
            return Err(ConfigError::table(
                format!("{route_at}.event"),
                format!(
                    "this hook has no event source; set {at}.event = {{ header = \"…\" }} or \
                     {{ pointer = \"/…\" }}"
                ),
            ));
        }
        if let (RouteKind::Start, Some(agent)) = (route.kind, &route.agent) {
            crate::intake::check_agent(agents, agent)
                .map_err(|e| ConfigError::table(format!("{route_at}.agent"), e.to_string()))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::config::tests::hook;

    #[test]
    fn what_cannot_work_is_refused_naming_the_key() {
        let cases = [
            (
                serde_json::json!({"signature": "none"}),
                "signature = \"none\" checks nothing",
            ),
            (
                serde_json::json!({"signature": "none", "secret_env": null}),
                "hooks.h.delivery_id is missing",
            ),
            (
                serde_json::json!({"tolerance_seconds": 60}),
                "tolerance_seconds applies only",
            ),
            (
                serde_json::json!({"signature": "slack", "tolerance_seconds": 0}),
                "tolerance_seconds = 0",
            ),
            (
                serde_json::json!({"hmac": {"header": "X-Sig"}}),
                "hooks.h.hmac applies only",
            ),
            (
                serde_json::json!({"secret_env": "whsec_abc=1"}),
                "never the secret itself",
            ),
            (
                serde_json::json!({"delivery_id": {"pointer": "id"}}),
                "hooks.h.delivery_id.pointer 'id'",
            ),
            (
                serde_json::json!({"delivery_id": {"header": "A", "pointer": "/b"}}),
                "exactly one of",
            ),
            (serde_json::json!({"name": "a/b"}), "name 'a/b'"),
            (serde_json::json!({"routes": []}), "has no routes"),
            (
                serde_json::json!({"signature": "slack", "routes": [
                    {"name": "r", "event": "app_mention", "agent": "a", "prompt": "p"}]}),
                "this hook has no event source",
            ),
            (
                serde_json::json!({"routes": [{"name": "r", "agent": "a", "prompt": "p"},
                                              {"name": "r", "agent": "a", "prompt": "q"}]}),
                "'r' is defined twice",
            ),
        ];
        for (extra, expect) in cases {
            let err = hook(extra).validate(&["a"]).unwrap_err().to_string();
            assert!(err.contains(expect), "{expect}: {err}");
        }
    }

    #[test]
    fn each_concern_is_checked_on_its_own() {
        let hmac = |h: serde_json::Value| {
            hook(serde_json::json!({"signature": "hmac", "hmac": h,
            "delivery_id": {"header": "X-Id"}}))
        };
        assert!(
            hmac(serde_json::json!({"header": "X-Sig"}))
                .check_hmac("at")
                .is_ok()
        );
        let empty = hmac(serde_json::json!({"header": " "})).check_hmac("at");
        assert!(
            empty
                .unwrap_err()
                .to_string()
                .contains("at.hmac.header is empty")
        );
        let missing = hook(serde_json::json!({"signature": "hmac"})).check_hmac("at");
        assert!(
            missing
                .unwrap_err()
                .to_string()
                .contains("needs a [hooks.hmac] table")
        );
        let gh = hook(serde_json::json!({}));
        assert!(gh.check_secret("at").is_ok() && gh.check_limits("at").is_ok());
        let no_secret = hook(serde_json::json!({"secret_env": null})).check_secret("at");
        assert!(
            no_secret
                .unwrap_err()
                .to_string()
                .contains("at.secret_env is missing")
        );
        let huge = hook(serde_json::json!({"max_body_bytes": MAX_BODY_BYTES_LIMIT + 1}));
        assert!(
            huge.check_limits("at")
                .unwrap_err()
                .to_string()
                .contains("max_body_bytes")
        );
        let bad_event = hook(serde_json::json!({"event": {"pointer": "type"}}));
        assert!(
            bad_event
                .check_sources("at")
                .unwrap_err()
                .to_string()
                .contains("at.event.pointer")
        );
    }

    #[test]
    fn a_route_must_have_a_valid_name_and_a_configured_agent() {
        let routes = |r: serde_json::Value| hook(serde_json::json!({"routes": [r]}));
        let bad_name = routes(serde_json::json!({"name": "a b", "agent": "a", "prompt": "p"}));
        assert!(
            bad_name
                .validate(&["a"])
                .unwrap_err()
                .to_string()
                .contains("name 'a b' is not allowed")
        );
        let unknown = routes(serde_json::json!({"name": "r", "agent": "z", "prompt": "p"}));
        let err = unknown.validate(&["a", "b"]).unwrap_err().to_string();
        assert!(
            err.contains("hooks.h.routes.r.agent: agent 'z' is not configured (configured: a, b)"),
            "{err}"
        );
        assert!(
            unknown
                .validate(&[])
                .unwrap_err()
                .to_string()
                .contains("(configured: none)")
        );
        let compiled = hook(serde_json::json!({"routes": [
            {"name": "one", "agent": "a", "prompt": "p"},
            {"name": "two", "agent": "a", "prompt": "q"}]}))
        .compile(&["a"])
        .unwrap();
        let names: Vec<&str> = compiled.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["one", "two"], "routes keep their order");
    }
}
