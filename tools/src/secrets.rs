//! Secrets referenced by name: resolution, `{{secret:NAME}}` substitution and redaction.
//!
//! Guarantees: a secret's value is only ever handed out by [`SecretResolver::substitute`] /
//! [`SecretResolver::resolve`]; [`SecretResolver::redact`] replaces every occurrence of every
//! non-empty value with `[REDACTED:NAME]` (a value containing another is replaced whole);
//! `Debug` and every error message name secrets but never show a value; an unknown name is an
//! error listing the names that exist, never an empty string silently sent.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, LazyLock};

use regex::Regex;

static PLACEHOLDER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\{\{\s*secret:([A-Za-z0-9_.\-]+)\s*\}\}").expect("static regex is valid")
});

/// Why a placeholder could not be filled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("unknown secret `{name}`; available secrets: {}", list(.known))]
    Unknown { name: String, known: Vec<String> },
}

fn list(names: &[String]) -> String {
    if names.is_empty() {
        "(none)".to_string()
    } else {
        names.join(", ")
    }
}

struct Inner {
    values: BTreeMap<String, String>,
    /// Matches any non-empty value, longest first; `None` when there is none.
    matcher: Option<regex::bytes::Regex>,
    /// Value bytes → name, for the redaction marker.
    by_value: HashMap<Vec<u8>, String>,
    /// Length in bytes of the longest value.
    longest: usize,
}

/// Secret values by name, shared cheaply between contexts (clone is an `Arc` clone).
#[derive(Clone)]
pub struct SecretResolver {
    inner: Arc<Inner>,
}

impl Default for SecretResolver {
    fn default() -> Self {
        Self::from_map(BTreeMap::<String, String>::new())
    }
}

impl fmt::Debug for SecretResolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretResolver")
            .field("names", &self.names())
            .finish_non_exhaustive()
    }
}

impl SecretResolver {
    /// Secrets from an explicit name → value map.
    pub fn from_map<I, K, V>(map: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        let values: BTreeMap<String, String> =
            map.into_iter().map(|(k, v)| (k.into(), v.into())).collect();
        let mut ordered: Vec<(&String, &String)> =
            values.iter().filter(|(_, v)| !v.is_empty()).collect();
        ordered.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(b.0)));
        let matcher = if ordered.is_empty() {
            None
        } else {
            let pattern = ordered
                .iter()
                .map(|(_, v)| regex::escape(v))
                .collect::<Vec<_>>()
                .join("|");
            Some(
                regex::bytes::RegexBuilder::new(&pattern)
                    .size_limit(64 << 20)
                    .build()
                    .expect("escaped literals always form a valid regex"),
            )
        };
        let by_value = ordered
            .iter()
            .map(|(k, v)| (v.as_bytes().to_vec(), (*k).clone()))
            .collect();
        let longest = ordered.first().map_or(0, |(_, v)| v.len());
        SecretResolver {
            inner: Arc::new(Inner {
                values,
                matcher,
                by_value,
                longest,
            }),
        }
    }

    /// Secrets read from the daemon's environment, one variable per name. Names that are
    /// not set are left out (using one is then an "unknown secret" error).
    pub fn from_env<I, S>(names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self::from_map(names.into_iter().filter_map(|name| {
            let name = name.as_ref();
            std::env::var(name).ok().map(|v| (name.to_string(), v))
        }))
    }

    /// Names of the secrets available (sorted).
    pub fn names(&self) -> Vec<String> {
        self.inner.values.keys().cloned().collect()
    }

    pub fn is_empty(&self) -> bool {
        self.inner.values.is_empty()
    }

    /// The value of one secret.
    pub fn resolve(&self, name: &str) -> Result<&str, SecretError> {
        self.inner
            .values
            .get(name)
            .map(String::as_str)
            .ok_or_else(|| SecretError::Unknown {
                name: name.to_string(),
                known: self.names(),
            })
    }

    /// Whether `text` contains a `{{secret:NAME}}` placeholder.
    pub fn has_placeholder(text: &str) -> bool {
        PLACEHOLDER.is_match(text)
    }

    /// Replace every `{{secret:NAME}}` in `text` with the secret's value.
    pub fn substitute(&self, text: &str) -> Result<String, SecretError> {
        let mut out = String::with_capacity(text.len());
        let mut last = 0;
        for caps in PLACEHOLDER.captures_iter(text) {
            let whole = caps.get(0).expect("group 0 always matches");
            out.push_str(&text[last..whole.start()]);
            out.push_str(self.resolve(&caps[1])?);
            last = whole.end();
        }
        out.push_str(&text[last..]);
        Ok(out)
    }

    /// `text` with every secret value replaced by `[REDACTED:NAME]`.
    pub fn redact(&self, text: &str) -> String {
        match self.redact_bytes_if_needed(text.as_bytes()) {
            // Replacing whole UTF-8 substrings of valid UTF-8 with ASCII keeps it valid.
            Some(bytes) => String::from_utf8(bytes)
                .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
            None => text.to_string(),
        }
    }

    /// Like [`redact`](Self::redact) for raw bytes (artifacts may not be UTF-8).
    pub fn redact_bytes(&self, bytes: &[u8]) -> Vec<u8> {
        self.redact_bytes_if_needed(bytes)
            .unwrap_or_else(|| bytes.to_vec())
    }

    /// Redacts a stream piece by piece: returns the redacted text of the longest prefix of
    /// `pending` that no secret can still straddle, and that prefix's length in bytes (the
    /// caller keeps the rest and appends the next piece to it). With `at_end`, all of
    /// `pending` is taken. At most (longest value − 1) bytes are held back, and a value split
    /// across pieces — or spanning lines — is redacted like in one piece.
    pub fn redact_stream_prefix(&self, pending: &[u8], at_end: bool) -> (Vec<u8>, usize) {
        let Some(matcher) = self.inner.matcher.as_ref() else {
            return (pending.to_vec(), pending.len());
        };
        let hold = if at_end {
            0
        } else {
            self.inner.longest.saturating_sub(1)
        };
        let mut cut = pending.len().saturating_sub(hold);
        for m in matcher.find_iter(pending) {
            if m.start() >= cut {
                break;
            }
            // A whole value across the cut: take it, so it is replaced whole.
            cut = cut.max(m.end());
        }
        (self.redact_bytes(&pending[..cut]), cut)
    }

    /// `None` when nothing in `bytes` needs redacting.
    fn redact_bytes_if_needed(&self, bytes: &[u8]) -> Option<Vec<u8>> {
        let matcher = self.inner.matcher.as_ref()?;
        if !matcher.is_match(bytes) {
            return None;
        }
        let replaced = matcher.replace_all(bytes, |caps: &regex::bytes::Captures<'_>| {
            let name = self
                .inner
                .by_value
                .get(&caps[0])
                .map(String::as_str)
                .unwrap_or("secret");
            format!("[REDACTED:{name}]").into_bytes()
        });
        Some(replaced.into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn substitutes_and_redacts_longest_first() {
        let s =
            SecretResolver::from_map([("TOKEN", "abc123"), ("LONG", "xxabc123yy"), ("EMPTY", "")]);
        assert_eq!(
            s.substitute("Bearer {{secret:TOKEN}}").unwrap(),
            "Bearer abc123"
        );
        assert_eq!(s.substitute("{{ secret:LONG }}!").unwrap(), "xxabc123yy!");
        assert_eq!(
            s.redact("a xxabc123yy b abc123 c"),
            "a [REDACTED:LONG] b [REDACTED:TOKEN] c"
        );
        assert_eq!(s.redact("nothing here"), "nothing here");
        let err = s.substitute("{{secret:NOPE}}").unwrap_err().to_string();
        assert!(err.contains("NOPE") && err.contains("TOKEN"), "{err}");
        assert!(!format!("{s:?}").contains("abc123"));
    }

    #[test]
    fn a_stream_redacts_values_split_across_pieces_and_lines() {
        let s = SecretResolver::from_map([("KEY", "line1\nline2"), ("TOKEN", "abc123")]);
        let stream = b"x line1\nline2 y abc123 z abc".to_vec();
        // Every way of cutting the stream in two gives the one-piece redaction.
        let whole = s.redact_bytes(&stream);
        for split in 0..=stream.len() {
            let mut pending = Vec::new();
            let mut out = Vec::new();
            for (piece, last) in [(&stream[..split], false), (&stream[split..], true)] {
                pending.extend_from_slice(piece);
                let (done, used) = s.redact_stream_prefix(&pending, last);
                out.extend(done);
                pending.drain(..used);
            }
            assert!(pending.is_empty());
            assert_eq!(out, whole, "split at {split}");
        }
        assert_eq!(
            String::from_utf8(whole).unwrap(),
            "x [REDACTED:KEY] y [REDACTED:TOKEN] z abc"
        );
        let none = SecretResolver::default();
        assert_eq!(
            none.redact_stream_prefix(b"abc", false),
            (b"abc".to_vec(), 3)
        );
    }
}
