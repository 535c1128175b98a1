//! Who is calling the API: the tokens `serve` accepts, each with a name and a role.
//!
//! The main token (`server.token_env`, or the `api-token` file) is `admin`, an operator.
//! `[[server.tokens]]` adds more, each read from its own environment variable: an `operator`
//! may do everything, a `read_only` token only `GET`s (a write is answered 403 naming the
//! token). A request's token is compared with every accepted token in constant time, all of
//! them, so the time taken says nothing about which one was near. The caller's name is what
//! the audit trail records as who acted (`token:NAME`).

use std::sync::Arc;

use subtle::ConstantTimeEq;

use crate::config::NamedToken;
pub use crate::config::TokenRole;

/// The name of the main token.
pub(crate) const ADMIN: &str = "admin";

/// The tokens the API accepts.
#[derive(Clone)]
pub struct ApiTokens {
    tokens: Arc<Vec<Accepted>>,
}

struct Accepted {
    name: String,
    secret: String,
    role: TokenRole,
}

impl std::fmt::Debug for ApiTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.tokens.iter().map(|t| t.name.as_str()).collect();
        f.debug_struct("ApiTokens").field("names", &names).finish()
    }
}

/// A caller the API recognised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Caller {
    pub name: String,
    pub role: TokenRole,
}

impl Caller {
    /// How the audit trail names this caller.
    pub(crate) fn actor(&self) -> String {
        format!("token:{}", self.name)
    }
}

impl ApiTokens {
    /// Only the main token.
    pub fn single(main: impl Into<String>) -> ApiTokens {
        ApiTokens::new(main.into(), Vec::new())
    }

    /// The main token and the `[[server.tokens]]`, whose values are read from their
    /// variables (checked set at start; an unset or empty one is an error naming it).
    pub(crate) fn from_config(main: String, named: &[NamedToken]) -> anyhow::Result<ApiTokens> {
        let mut more = Vec::with_capacity(named.len());
        for t in named {
            let secret = std::env::var(&t.token_env).unwrap_or_default();
            let secret = secret.trim().to_string();
            if secret.is_empty() {
                anyhow::bail!(
                    "server.tokens.{}.token_env: the environment variable {} is not set",
                    t.name,
                    t.token_env
                );
            }
            more.push((t.name.clone(), secret, t.role));
        }
        Ok(ApiTokens::new(main, more))
    }

    /// `main` as `admin`, an operator, and `more` as `(name, token, role)`.
    pub fn new(main: String, more: Vec<(String, String, TokenRole)>) -> ApiTokens {
        let mut tokens = vec![Accepted {
            name: ADMIN.to_string(),
            secret: main,
            role: TokenRole::Operator,
        }];
        tokens.extend(
            more.into_iter()
                .map(|(name, secret, role)| Accepted { name, secret, role }),
        );
        ApiTokens {
            tokens: Arc::new(tokens),
        }
    }

    /// The main token (what the dashboard signs in with).
    pub(crate) fn main(&self) -> Arc<String> {
        Arc::new(self.tokens[0].secret.clone())
    }

    /// The caller `given` is the token of, if any. Every token is compared, in constant time.
    pub(crate) fn identify(&self, given: &str) -> Option<Caller> {
        let mut found = None;
        for t in self.tokens.iter() {
            let same = bool::from(given.as_bytes().ct_eq(t.secret.as_bytes()));
            if same && found.is_none() && !given.is_empty() {
                found = Some(Caller {
                    name: t.name.clone(),
                    role: t.role,
                });
            }
        }
        found
    }
}

/// Whether `role` may make a request with `method`.
pub(crate) fn allows(role: TokenRole, method: &axum::http::Method) -> bool {
    use axum::http::Method;
    match role {
        TokenRole::Operator => true,
        TokenRole::ReadOnly => matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Method;

    #[test]
    fn each_token_is_its_caller_and_a_read_only_one_only_reads() {
        let tokens = ApiTokens::new(
            "main-secret-token".into(),
            vec![
                ("ci".into(), "ci-secret-token".into(), TokenRole::Operator),
                (
                    "grafana".into(),
                    "ro-secret-token".into(),
                    TokenRole::ReadOnly,
                ),
            ],
        );
        let name = |t: &str| tokens.identify(t).map(|c| (c.name, c.role));
        assert_eq!(
            name("main-secret-token"),
            Some(("admin".into(), TokenRole::Operator))
        );
        assert_eq!(
            name("ci-secret-token"),
            Some(("ci".into(), TokenRole::Operator))
        );
        assert_eq!(
            name("ro-secret-token"),
            Some(("grafana".into(), TokenRole::ReadOnly))
        );
        assert_eq!(name("ro-secret-toke"), None);
        assert_eq!(name(""), None);
        assert!(allows(TokenRole::ReadOnly, &Method::GET));
        assert!(!allows(TokenRole::ReadOnly, &Method::POST));
        assert!(!allows(TokenRole::ReadOnly, &Method::PATCH));
        assert!(!allows(TokenRole::ReadOnly, &Method::DELETE));
        assert!(allows(TokenRole::Operator, &Method::DELETE));
        assert_eq!(
            tokens.identify("ci-secret-token").unwrap().actor(),
            "token:ci"
        );
    }
}
