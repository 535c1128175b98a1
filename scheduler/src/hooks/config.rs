//! `[[hooks]]` in `nightshift.toml`: what each webhook endpoint accepts and what it enqueues.
//!
//! Parsing refuses unknown keys; [`HookConfig::validate`] refuses what parses but cannot work
//! (a missing `secret_env`, an `hmac` table on a GitHub hook, a template with a syntax error,
//! a start route without an agent) with a [`ConfigError`] naming the key. Secrets are referenced by
//! the NAME of an environment variable; their values are read only when the daemon starts
//! (see [`super::HookSet::build`]) and never stored or logged.

use std::collections::BTreeSet;

use serde::Deserialize;

use super::error::ConfigError;
use super::route::CompiledRoute;

/// The largest body a hook accepts by default (1 MiB).
pub const DEFAULT_MAX_BODY_BYTES: usize = 1 << 20;
/// The most a hook may be configured to accept (GitHub sends at most 25 MB).
pub const MAX_BODY_BYTES_LIMIT: usize = 25 << 20;
/// How far a signed timestamp may be from the store's clock by default, in seconds.
pub const DEFAULT_TOLERANCE_SECONDS: u64 = 300;

/// One `[[hooks]]` entry: the endpoint `POST /hooks/{name}`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookConfig {
    /// The path segment: `/hooks/{name}`. Unique; letters, digits, `-`, `_`, `.`.
    pub name: String,
    /// How deliveries are authenticated. Required: `none` must be said explicitly.
    pub signature: SignatureScheme,
    /// The NAME of the environment variable holding the shared secret (never the value).
    /// Required unless `signature = "none"`.
    #[serde(default)]
    pub secret_env: Option<String>,
    /// `signature = "hmac"` only: which header, algorithm and encoding.
    #[serde(default)]
    pub hmac: Option<HmacConfig>,
    /// `stripe` and `slack` only: how far the signed timestamp may be from now (default 300).
    #[serde(default)]
    pub tolerance_seconds: Option<u64>,
    /// Bodies larger than this are refused with 413. Default 1 MiB, at most 25 MiB.
    #[serde(default = "default_max_body")]
    pub max_body_bytes: usize,
    /// Where the delivery id is. Default: `X-GitHub-Delivery` (github), `/id` (stripe),
    /// `/event_id` (slack); required for `hmac` and `none`.
    #[serde(default)]
    pub delivery_id: Option<FieldSource>,
    /// Where the event name is. Default: `X-GitHub-Event` (github), `/type` (stripe); for
    /// other schemes optional (the event is then empty and routes must not name one).
    #[serde(default)]
    pub event: Option<FieldSource>,
    /// `[[hooks.routes]]`: the first route that matches a delivery decides what it enqueues.
    #[serde(default)]
    pub routes: Vec<RouteConfig>,
    /// What a delivery no route takes is answered: `refuse` (default, 422) or `ignore` (200,
    /// `"ignored": true`, for senders such as GitHub that send every action of a subscribed
    /// event and show a 422 as a failed delivery).
    #[serde(default)]
    pub unmatched: Unmatched,
}

/// How a hook answers a delivery that no route takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unmatched {
    /// 422, saying no route matches (logged and counted as `unmatched`).
    #[default]
    Refuse,
    /// 200 with `"ignored": true`, nothing enqueued or recorded (counted as `ignored`).
    Ignore,
}

fn default_max_body() -> usize {
    DEFAULT_MAX_BODY_BYTES
}

/// How a hook authenticates deliveries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SignatureScheme {
    /// `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>`.
    Github,
    /// Any HMAC of the raw body in one header (see [`HmacConfig`]).
    Hmac,
    /// `Stripe-Signature: t=<unix>,v1=<hex HMAC-SHA256 of "{t}.{body}">`, within the tolerance.
    Stripe,
    /// `X-Slack-Request-Timestamp: <unix>` and `X-Slack-Signature: v0=<hex HMAC-SHA256 of
    /// "v0:{ts}:{body}">`, within the tolerance.
    Slack,
    /// No authentication at all (only when set explicitly).
    None,
}

impl SignatureScheme {
    /// The name config uses.
    pub fn name(self) -> &'static str {
        match self {
            SignatureScheme::Github => "github",
            SignatureScheme::Hmac => "hmac",
            SignatureScheme::Stripe => "stripe",
            SignatureScheme::Slack => "slack",
            SignatureScheme::None => "none",
        }
    }
}

/// `[hooks.hmac]`: a generic HMAC signature header.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HmacConfig {
    /// The header carrying the signature, e.g. `X-Signature`.
    pub header: String,
    /// `sha256` (default), `sha1` or `sha512`.
    #[serde(default)]
    pub algorithm: HmacAlgorithm,
    /// Text before the digest in the header, e.g. `sha256=`. Default none.
    #[serde(default)]
    pub prefix: String,
    /// `hex` (default) or `base64`.
    #[serde(default)]
    pub encoding: DigestEncoding,
}

/// The hash under an HMAC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HmacAlgorithm {
    Sha1,
    #[default]
    Sha256,
    Sha512,
}

/// How a digest is written in a header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DigestEncoding {
    #[default]
    Hex,
    Base64,
}

/// Where a value of a delivery is found: `{ header = "X-Request-Id" }` or
/// `{ pointer = "/id" }` (an RFC 6901 JSON pointer into the body).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldSource {
    #[serde(default)]
    pub header: Option<String>,
    #[serde(default)]
    pub pointer: Option<String>,
}

impl FieldSource {
    /// A header source.
    pub fn header(name: &str) -> Self {
        FieldSource {
            header: Some(name.into()),
            pointer: None,
        }
    }

    /// A JSON pointer source.
    pub fn pointer(pointer: &str) -> Self {
        FieldSource {
            header: None,
            pointer: Some(pointer.into()),
        }
    }

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

/// What a route makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RouteKind {
    /// A fresh run of `agent` with the rendered `prompt`.
    #[default]
    Start,
    /// A new message (the rendered `prompt`) for the newest unfinished run whose concurrency
    /// key is the rendered `concurrency_key`.
    Resume,
    /// Cancels every unfinished run whose concurrency key is the rendered `concurrency_key` (a
    /// closed pull request stops its review); nothing when none is unfinished.
    Cancel,
}

/// What to do while an earlier run holds the concurrency key (the store applies it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyName {
    #[default]
    Queue,
    Skip,
    Supersede,
    Debounce,
}

/// One `[[hooks.routes]]` entry.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// Unique within the hook; part of derived idempotency keys and of every response.
    pub name: String,
    /// The event(s) this route takes: a name or a list of names. Absent: any event.
    #[serde(default)]
    pub event: Option<serde_json::Value>,
    /// Conditions on the JSON body, all of which must hold: `"dotted.path" = value` (equal)
    /// or `path = [a, b]` (one of). Nested tables are paths too (`pull_request.draft = false`).
    #[serde(default, rename = "match")]
    pub conditions: serde_json::Map<String, serde_json::Value>,
    /// `start` (default), `resume` or `cancel`.
    #[serde(default)]
    pub kind: RouteKind,
    /// `start`: the agent to run.
    #[serde(default)]
    pub agent: Option<String>,
    /// Template of the prompt (`start`) or message (`resume`). Nightshift appends a line
    /// `[webhook <hook> delivery=<id> event=<event>]` to it. Not for `cancel`.
    #[serde(default)]
    pub prompt: String,
    /// Template of the idempotency key. Default `webhook:<hook>:<route>:<delivery id>`.
    #[serde(default)]
    pub idempotency_key: Option<String>,
    /// Template of a concurrency key: `start`, the new run's; `resume`, the key of the run to
    /// continue; `cancel`, the key whose unfinished runs are cancelled.
    #[serde(default)]
    pub concurrency_key: Option<String>,
    /// `start`: queue (default), skip, supersede or debounce; needs `concurrency_key`.
    #[serde(default)]
    pub concurrency_policy: Option<PolicyName>,
    /// `debounce` only: the window in seconds.
    #[serde(default)]
    pub debounce_seconds: Option<u64>,
    /// `start`: the lane.
    #[serde(default)]
    pub lane: Option<String>,
    /// `start`: the priority (higher runs first).
    #[serde(default)]
    pub priority: Option<i64>,
    /// The older name of a `resume` or `cancel` route's `concurrency_key`, still read.
    #[serde(default)]
    pub run_key: Option<String>,
}

fn name_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
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

    /// The delivery id source, with the scheme's default.
    pub fn delivery_source(&self) -> Option<FieldSource> {
        self.delivery_id
            .clone()
            .or_else(|| self.default_delivery_id())
    }

    fn default_delivery_id(&self) -> Option<FieldSource> {
        match self.signature {
            SignatureScheme::Github => Some(FieldSource::header("X-GitHub-Delivery")),
            SignatureScheme::Stripe => Some(FieldSource::pointer("/id")),
            SignatureScheme::Slack => Some(FieldSource::pointer("/event_id")),
            SignatureScheme::Hmac | SignatureScheme::None => None,
        }
    }

    /// The event source, with the scheme's default.
    pub fn event_source(&self) -> Option<FieldSource> {
        self.event.clone().or(match self.signature {
            SignatureScheme::Github => Some(FieldSource::header("X-GitHub-Event")),
            SignatureScheme::Stripe => Some(FieldSource::pointer("/type")),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(extra: serde_json::Value) -> HookConfig {
        let mut base = serde_json::json!({
            "name": "h",
            "signature": "github",
            "secret_env": "S",
            "routes": [{"name": "r", "agent": "a", "prompt": "p"}],
        });
        for (k, v) in extra.as_object().unwrap() {
            base[k] = v.clone();
        }
        serde_json::from_value(base).unwrap()
    }

    #[test]
    fn each_scheme_has_its_default_delivery_id_and_event() {
        let gh = hook(serde_json::json!({}));
        assert_eq!(
            (gh.delivery_source(), gh.event_source()),
            (
                Some(FieldSource::header("X-GitHub-Delivery")),
                Some(FieldSource::header("X-GitHub-Event"))
            )
        );
        let stripe = hook(serde_json::json!({"signature": "stripe"}));
        assert_eq!(
            (stripe.delivery_source(), stripe.event_source()),
            (
                Some(FieldSource::pointer("/id")),
                Some(FieldSource::pointer("/type"))
            )
        );
        let slack = hook(serde_json::json!({"signature": "slack"}));
        assert_eq!(
            slack.delivery_source(),
            Some(FieldSource::pointer("/event_id"))
        );
        assert_eq!(slack.event_source(), None);
        assert!(gh.validate(&["a"]).is_ok());
    }

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
