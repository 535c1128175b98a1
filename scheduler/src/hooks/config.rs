//! `[[hooks]]` in `nightshift.toml`: what each webhook endpoint accepts and what it enqueues.
//!
//! Parsing refuses unknown keys; [`HookConfig::validate`] (in `check.rs`) refuses what parses
//! but cannot work (a missing `secret_env`, an `hmac` table on a GitHub hook, a template with
//! a syntax error, a start route without an agent) with a [`ConfigError`](super::ConfigError)
//! naming the key. Secrets are referenced by the NAME of an environment variable; their
//! values are read only when the daemon starts (see [`super::HookSet::build`]) and never
//! stored or logged.

mod check;

use serde::Deserialize;

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

impl HookConfig {
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

    pub(super) fn hook(extra: serde_json::Value) -> HookConfig {
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
}
