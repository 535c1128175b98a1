//! The errors of webhook configuration, verification and rendering. A [`ConfigError`] is a
//! `[[hooks]]` value the daemon refuses to start with (its `Display` names the key, like
//! `hooks.gh.routes.review.agent`, and says what to do); a [`SignatureError`] is a delivery
//! whose signature does not check (refused as unauthorized before its body is parsed); a
//! [`RenderError`] is a delivery whose payload a route's template cannot render (the delivery
//! is refused, nothing is enqueued); a [`CheckoutTemplateError`] is an agent's checkout
//! templates failing on a run's stored context. None of them ever holds a secret.

/// A `[[hooks]]` entry that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The value at key `at` is refused; `rule` is worded to follow the key ("is missing: …",
    /// "must be …").
    #[error("{at} {rule}")]
    Value { at: String, rule: String },
    /// The keys of the table at `at` do not fit together (or a list in it repeats a name);
    /// `problem` says how and what to do.
    #[error("{at}: {problem}")]
    Table { at: String, problem: String },
    /// The environment variable that should hold hook `hook`'s secret is unset or empty.
    #[error(
        "hooks.{hook}.secret_env: the environment variable {var} is not set (or empty); export \
         the webhook secret as {var} before starting"
    )]
    SecretUnset { hook: String, var: String },
    /// Hook `hook`'s signature verifier cannot be built.
    #[error("hooks.{hook}: {source}")]
    Verifier {
        hook: String,
        #[source]
        source: VerifierError,
    },
}

impl ConfigError {
    /// The value at `at` is refused because of `rule`.
    pub(crate) fn value(at: impl Into<String>, rule: impl Into<String>) -> Self {
        ConfigError::Value {
            at: at.into(),
            rule: rule.into(),
        }
    }

    /// The table at `at` is refused because of `problem`.
    pub(crate) fn table(at: impl Into<String>, problem: impl Into<String>) -> Self {
        ConfigError::Table {
            at: at.into(),
            problem: problem.into(),
        }
    }
}

/// What [`super::Verifier::new`] lacks for its scheme.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifierError {
    #[error("this scheme needs a secret")]
    NoSecret,
    #[error("signature = \"hmac\" needs [hooks.hmac]")]
    NoHmacTable,
}

/// Why a delivery's signature does not check ([`super::signature::Verifier::verify`]). The
/// message says what was missing or wrong and never echoes the secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// A header the scheme signs with is missing or blank.
    #[error("the {header} header is missing; sign each delivery")]
    Missing { header: String },
    /// A scheme's own header is not of its shape.
    #[error("{header} must look like {shape}")]
    Shape {
        header: &'static str,
        shape: &'static str,
    },
    /// The configured `hmac` header does not start with its prefix.
    #[error("the {header} header must start with '{prefix}'")]
    Prefix { header: String, prefix: String },
    /// The signature is not the body's under the hook's secret.
    #[error(
        "the {what} does not match the body; check that the sender's webhook secret is the one \
         in this hook's secret_env"
    )]
    Mismatch { what: String },
    /// The signed timestamp is not a number of seconds.
    #[error("the signed timestamp '{timestamp}' is not a Unix time in seconds")]
    NotATime { timestamp: String },
    /// The signed timestamp is further from the store's clock than the tolerance.
    #[error(
        "the signed timestamp is {skew} s away from now (tolerance {tolerance_s} s): a replayed \
         or stale delivery, or a clock that is off; sign it afresh"
    )]
    Stale { skew: i64, tolerance_s: i64 },
}

/// An agent's checkout template that failed on a run's stored context
/// ([`super::checkout::CheckoutTemplates::render_over`]).
#[derive(Debug, thiserror::Error)]
pub enum CheckoutTemplateError {
    /// Rendering failed (a path the context lacks, a filter that failed); `source` is
    /// minijinja's error.
    #[error("the {name} template {template:?} failed: {source:#}")]
    Failed {
        name: &'static str,
        template: String,
        #[source]
        source: minijinja::Error,
    },
    /// It rendered only whitespace.
    #[error("the {name} template {template:?} rendered nothing")]
    Empty {
        name: &'static str,
        template: String,
    },
}

/// A route's template could not render a delivery.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// The template failed on this payload (a path it reads is missing, a filter failed).
    /// `missing` lists the dotted paths it reads that this delivery lacks (sorted), when that
    /// is why; otherwise the message is minijinja's.
    #[error(
        "route '{route}': the {template} template failed on this delivery: {}",
        template_problem(source, missing)
    )]
    Template {
        route: String,
        template: String,
        #[source]
        source: minijinja::Error,
        missing: Vec<String>,
    },
    /// A key template rendered only whitespace.
    #[error("route '{route}': the {template} template rendered an empty key")]
    EmptyKey { route: String, template: String },
}

/// What went wrong in a [`RenderError::Template`]: the missing paths, or minijinja's words.
fn template_problem(source: &minijinja::Error, missing: &[String]) -> String {
    match missing {
        [] => format!("{source:#}"),
        [one] => format!("{one} is not in the payload"),
        many => format!("{} are not in the payload", many.join(", ")),
    }
}
