//! Secrets bound to hosts: which `{{secret:NAME}}` may be sent where.
//!
//! Guarantees: a secret configured with `hosts` ([`SecretSpec`]) is only ever placed in a
//! request whose host (and port) matches one of those hosts, by the same rules as the HTTP
//! allowlist ([`HttpAllowlist`]: exact names, `*.suffix` for subdomains, `host:port`, and a
//! port-less entry meaning the scheme's default port). [`SecretBindings::check`] decides this
//! from the request's texts alone, before anything is sent, and its refusal names the secret,
//! the hosts it may go to and says that the request was not sent. A secret without `hosts`
//! may go to any allow-listed host (binding is recommended). The configuration form is parsed
//! by hand so that a wrong shape gets an error saying both accepted forms.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use crate::context::HttpAllowlist;
use crate::secrets::PLACEHOLDER;

/// Characters a secret name may have, so that `{{secret:NAME}}` can refer to it.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// One `runtime.secrets` entry: `"NAME"` or `{ name = "NAME", hosts = ["api.example.com"] }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretSpec {
    /// The environment variable holding the value, and the name in `{{secret:NAME}}`.
    pub name: String,
    /// The hosts the secret may be sent to; `None`: any allow-listed host.
    pub hosts: Option<Vec<String>>,
}

impl SecretSpec {
    /// A secret that may go to any allow-listed host.
    pub fn unbound(name: impl Into<String>) -> Self {
        SecretSpec {
            name: name.into(),
            hosts: None,
        }
    }

    /// A secret that may only go to `hosts`.
    pub fn bound<I, S>(name: impl Into<String>, hosts: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        SecretSpec {
            name: name.into(),
            hosts: Some(hosts.into_iter().map(Into::into).collect()),
        }
    }

    /// Checks the name and the hosts; the error is a sentence naming the secret.
    pub fn validate(&self) -> Result<(), SecretSpecError> {
        let name = || self.name.clone();
        if !valid_name(&self.name) {
            return Err(SecretSpecError::BadName { name: name() });
        }
        let Some(hosts) = &self.hosts else {
            return Ok(());
        };
        if hosts.is_empty() {
            return Err(SecretSpecError::NoHosts { name: name() });
        }
        for host in hosts {
            let h = host.trim();
            if h.is_empty()
                || h.contains("://")
                || h.contains('/')
                || h.contains(char::is_whitespace)
            {
                return Err(SecretSpecError::NotAHost {
                    name: name(),
                    host: host.clone(),
                });
            }
        }
        Ok(())
    }
}

/// Why a `runtime.secrets` entry is refused; `Display` is a sentence naming the secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretSpecError {
    #[error(
        "secret name `{name}` is not usable in {{{{secret:NAME}}}}; use letters, digits, `_`, \
         `.` and `-` only"
    )]
    BadName { name: String },
    #[error(
        "secret `{name}` has an empty `hosts` list, so it could never be sent; list the hosts it \
         may go to, or write just \"{name}\" to allow every allow-listed host"
    )]
    NoHosts { name: String },
    #[error(
        "secret `{name}`: host `{host}` is not a host; write it like an http_allowlist entry \
         (`api.github.com`, `*.example.com`, `host:8443`), without scheme or path"
    )]
    NotAHost { name: String, host: String },
}

/// A request that would send secret `name` where it may not go; `Display` says where it may
/// go, that nothing was sent, and what to do instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "secret `{name}` may only be sent to {}, not to `{target}`; the request was not sent. Send \
     it to one of those hosts, or leave {{{{secret:{name}}}}} out of this request",
    .allowed.join(", ")
)]
pub struct Misdirected {
    pub name: String,
    /// The hosts it may go to (the entries of its binding).
    pub allowed: Vec<String>,
    /// Where the request was going: `host`, or `host:port` off the scheme's default port.
    pub target: String,
}

impl<'de> Deserialize<'de> for SecretSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct SpecVisitor;

        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Table {
            name: String,
            hosts: Option<Vec<String>>,
        }

        impl<'de> Visitor<'de> for SpecVisitor {
            type Value = SecretSpec;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a secret: the name of an environment variable (\"GITHUB_TOKEN\") or a \
                     table { name = \"GITHUB_TOKEN\", hosts = [\"api.github.com\"] }",
                )
            }

            fn visit_str<E: de::Error>(self, name: &str) -> Result<SecretSpec, E> {
                Ok(SecretSpec::unbound(name))
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<SecretSpec, A::Error> {
                let table = Table::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(SecretSpec {
                    name: table.name,
                    hosts: table.hosts,
                })
            }
        }

        deserializer.deserialize_any(SpecVisitor)
    }
}

/// Which secrets are bound to which hosts; shared cheaply between contexts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SecretBindings {
    bound: Arc<BTreeMap<String, HttpAllowlist>>,
}

impl SecretBindings {
    /// The bindings of the specs that have `hosts`; the others stay unbound.
    pub fn from_specs<'a>(specs: impl IntoIterator<Item = &'a SecretSpec>) -> Self {
        SecretBindings {
            bound: Arc::new(
                specs
                    .into_iter()
                    .filter_map(|s| {
                        let hosts = s.hosts.as_ref()?;
                        Some((s.name.clone(), HttpAllowlist::new(hosts.iter().cloned())))
                    })
                    .collect(),
            ),
        }
    }

    /// The hosts `name` may be sent to, if it is bound.
    pub fn hosts(&self, name: &str) -> Option<&HttpAllowlist> {
        self.bound.get(name)
    }

    /// Names of the `{{secret:NAME}}` placeholders in `text`, in order of appearance.
    pub fn placeholders(text: &str) -> Vec<&str> {
        PLACEHOLDER
            .captures_iter(text)
            .filter_map(|c| c.get(1).map(|m| m.as_str()))
            .collect()
    }

    /// Whether every secret used in `texts` may go to `host` on `port` (`default_port` is the
    /// URL scheme's). The error says which secret, where it may go, and that nothing was sent.
    pub fn check<'a>(
        &self,
        texts: impl IntoIterator<Item = &'a str>,
        host: &str,
        port: u16,
        default_port: u16,
    ) -> Result<(), Misdirected> {
        for text in texts {
            for name in Self::placeholders(text) {
                let Some(allowed) = self.hosts(name) else {
                    continue;
                };
                if allowed.matches(host, port, default_port) {
                    continue;
                }
                let target = if port == default_port {
                    host.to_string()
                } else {
                    format!("{host}:{port}")
                };
                return Err(Misdirected {
                    name: name.to_string(),
                    allowed: allowed.entries().to_vec(),
                    target,
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SecretResolver;

    fn bindings() -> SecretBindings {
        SecretBindings::from_specs(&[
            SecretSpec::bound("GH", ["api.github.com"]),
            SecretSpec::bound("SVC", ["*.svc.test", "127.0.0.1:8080"]),
            SecretSpec::unbound("FREE"),
        ])
    }

    #[test]
    fn a_bound_secret_goes_only_to_its_hosts_and_ports() {
        let b = bindings();
        assert_eq!(
            b.check(["Bearer {{secret:GH}}"], "api.github.com", 443, 443),
            Ok(())
        );
        assert_eq!(
            b.check(["{{ secret:GH }}"], "API.GITHUB.COM", 80, 80),
            Ok(())
        );
        let err = b
            .check(["x", "{{secret:GH}}"], "evil.example", 443, 443)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(
                "secret `GH` may only be sent to api.github.com, not to `evil.example`; the \
                 request was not sent"
            ),
            "{err}"
        );
        assert_eq!(
            err,
            "secret `GH` may only be sent to api.github.com, not to `evil.example`; the request \
             was not sent. Send it to one of those hosts, or leave {{secret:GH}} out of this \
             request"
        );
        let err = b
            .check(["{{secret:GH}}"], "api.github.com", 8443, 443)
            .unwrap_err()
            .to_string();
        assert!(err.contains("not to `api.github.com:8443`"), "{err}");
        assert_eq!(b.check(["{{secret:SVC}}"], "a.svc.test", 443, 443), Ok(()));
        assert!(b.check(["{{secret:SVC}}"], "svc.test", 443, 443).is_err());
        assert_eq!(b.check(["{{secret:SVC}}"], "127.0.0.1", 8080, 80), Ok(()));
        assert!(b.check(["{{secret:SVC}}"], "127.0.0.1", 8081, 80).is_err());
        // Unbound and unknown names are not this check's business.
        assert_eq!(
            b.check(["{{secret:FREE}} {{secret:NOPE}}"], "x.test", 443, 443),
            Ok(())
        );
    }

    #[test]
    fn placeholders_are_found_exactly_where_the_resolver_fills_them() {
        let resolver = SecretResolver::from_map([("A", "1"), ("B.c-d_e", "2")]);
        for text in [
            "{{secret:A}}",
            "x {{ secret:B.c-d_e }} y {{secret:A}}",
            "{secret:A}",
            "{{secret:}}",
            "{{secret:A B}}",
            "{{Secret:A}}",
            "none",
        ] {
            let names = SecretBindings::placeholders(text);
            assert_eq!(
                !names.is_empty(),
                SecretResolver::has_placeholder(text),
                "{text}"
            );
            let filled = resolver.substitute(text).unwrap_or_default();
            for name in names {
                assert!(!filled.contains(&format!("secret:{name}")), "{text}");
            }
        }
    }

    #[test]
    fn specs_parse_in_both_forms_and_a_wrong_shape_says_what_is_accepted() {
        #[derive(Deserialize, Debug)]
        struct Doc {
            secrets: Vec<SecretSpec>,
        }
        let doc: Doc = serde_json::from_value(serde_json::json!({
            "secrets": ["PLAIN", {"name": "GH", "hosts": ["api.github.com"]}, {"name": "N"}]
        }))
        .unwrap();
        assert_eq!(
            doc.secrets,
            [
                SecretSpec::unbound("PLAIN"),
                SecretSpec::bound("GH", ["api.github.com"]),
                SecretSpec::unbound("N"),
            ]
        );
        let err = serde_json::from_value::<Doc>(serde_json::json!({"secrets": [42]}))
            .unwrap_err()
            .to_string();
        assert!(err.contains("the name of an environment variable"), "{err}");
        assert!(
            err.contains("hosts = [\\\"api.github.com\\\"]")
                || err.contains("hosts = [\"api.github.com\"]"),
            "{err}"
        );
        let err = serde_json::from_value::<Doc>(
            serde_json::json!({"secrets": [{"name": "GH", "host": ["x"]}]}),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("unknown field `host`"), "{err}");
    }

    #[test]
    fn validation_refuses_unusable_names_and_hosts() {
        assert_eq!(
            SecretSpec::bound("GH", ["api.github.com:443"]).validate(),
            Ok(())
        );
        for (spec, expected) in [
            (SecretSpec::unbound("HAS SPACE"), "not usable"),
            (
                SecretSpec::bound("GH", Vec::<String>::new()),
                "empty `hosts`",
            ),
            (
                SecretSpec::bound("GH", ["https://api.github.com"]),
                "without scheme or path",
            ),
            (
                SecretSpec::bound("GH", ["api.github.com/repos"]),
                "not a host",
            ),
        ] {
            let err = spec.validate().unwrap_err().to_string();
            assert!(err.contains(expected), "{spec:?}: {err}");
        }
        assert_eq!(
            SecretSpec::unbound("HAS SPACE")
                .validate()
                .unwrap_err()
                .to_string(),
            "secret name `HAS SPACE` is not usable in {{secret:NAME}}; use letters, digits, `_`, \
             `.` and `-` only"
        );
    }
}
