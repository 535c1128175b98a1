//! Secrets referenced by name: resolution, `{{secret:NAME}}` substitution and redaction.
//!
//! Guarantees: a secret's value is only ever handed out by [`SecretResolver::substitute`] /
//! [`SecretResolver::resolve`], and only for the secrets the resolver was made with
//! (`runtime.secrets`); values added with [`SecretResolver::with_redact_only`] (the daemon's
//! own keys and tokens) are redacted but can never be substituted. A [`Redactor`] lets no run
//! of [`encodings::WINDOW`] (8) or more consecutive bytes of a value through — nor of its encoded forms
//! (base64/base64url with their aligned cores, hex, reversed; URL and JSON escaping and base64
//! wrapped across lines, found in decoded views; see [`encodings`]): every byte such a window
//! covers is replaced, each maximal covered span by one `[REDACTED:NAME]`. A value shorter
//! than 8 bytes is replaced where it appears whole. A stream ([`StreamRedactor`]) holds back
//! only what a window could still straddle, so how the output is split does not let a run
//! through. `Debug` and every error message name secrets but never show a value; an unknown
//! name is an error listing the names that exist, never an empty string silently sent.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, LazyLock};

use regex::Regex;

pub mod encodings;
mod spans;
mod stream;
mod views;
mod windows;

pub use stream::StreamRedactor;

/// `{{secret:NAME}}`; group 1 is the name. Also what `secret_hosts` reads bindings by.
pub(crate) static PLACEHOLDER: LazyLock<Regex> = LazyLock::new(|| {
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

struct RedactInner {
    matcher: windows::WindowMatcher,
    /// Owner number → the secret's name, for the marker.
    names: Vec<String>,
    /// What the matcher was built from (to build a larger one): (name, value), and shapes.
    values: Vec<(String, String)>,
    shapes: Vec<TokenShape>,
}

/// A secret known by its form: a regular expression (without capture groups) every such
/// secret matches, and the longest text it can match, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenShape {
    /// The name in `[REDACTED:NAME]`.
    pub name: &'static str,
    pub regex: &'static str,
    pub max_len: usize,
}

/// GitHub's tokens as GitHub documents their forms: installation (`ghs_`), user-to-server
/// (`ghu_`), OAuth (`gho_`), refresh (`ghr_`) and classic personal (`ghp_`) tokens, and
/// fine-grained personal tokens (`github_pat_`).
pub const GITHUB_TOKEN_SHAPES: [TokenShape; 2] = [
    TokenShape {
        name: "GITHUB_TOKEN",
        regex: r"gh[opsur]_[A-Za-z0-9]{36,251}",
        max_len: 255,
    },
    TokenShape {
        name: "GITHUB_TOKEN",
        regex: r"github_pat_[A-Za-z0-9_]{22,244}",
        max_len: 255,
    },
];

/// Replaces every run of 8 or more bytes of a secret value, or of one of its encoded forms,
/// with `[REDACTED:NAME]` (see the module docs). Cheap to clone
/// (an `Arc`); knows values but never hands one out.
#[derive(Clone)]
pub struct Redactor {
    inner: Arc<RedactInner>,
}

impl Default for Redactor {
    fn default() -> Self {
        Self::new(Vec::<(String, String)>::new())
    }
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names = self.inner.names.clone();
        names.sort();
        names.dedup();
        f.debug_struct("Redactor")
            .field("names", &names)
            .finish_non_exhaustive()
    }
}

impl Redactor {
    /// A redactor for these (name, value) pairs; empty values are ignored, and a value
    /// listed under two names is marked with the first name in sorted order.
    pub fn new<I, K, V>(pairs: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        let mut by_value: BTreeMap<String, String> = BTreeMap::new();
        for (k, v) in pairs {
            let (k, v) = (k.into(), v.into());
            if v.is_empty() {
                continue;
            }
            match by_value.get(&v) {
                Some(existing) if *existing <= k => {}
                _ => {
                    by_value.insert(v, k);
                }
            }
        }
        let values = by_value
            .into_iter()
            .map(|(value, name)| (name, value))
            .collect();
        Self::build(values, Vec::new())
    }

    /// A redactor for (name, value) pairs — each value names itself, the longest first, so a
    /// window shared with a shorter value is marked with the longer one's name — and shapes.
    fn build(values: Vec<(String, String)>, shapes: Vec<TokenShape>) -> Self {
        let mut values = values;
        values.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));
        let mut names: Vec<String> = values.iter().map(|(name, _)| name.clone()).collect();
        let owned: Vec<&str> = values.iter().map(|(_, v)| v.as_str()).collect();
        let shape_list: Vec<(&str, usize, u32)> = shapes
            .iter()
            .enumerate()
            .map(|(i, s)| (s.regex, s.max_len, (names.len() + i) as u32))
            .collect();
        names.extend(shapes.iter().map(|s| s.name.to_string()));
        let matcher = windows::WindowMatcher::new(&owned, &shape_list);
        Redactor {
            inner: Arc::new(RedactInner {
                matcher,
                names,
                values,
                shapes,
            }),
        }
    }

    /// This redactor, also redacting every text of the given shapes: secrets minted while
    /// the daemon runs (GitHub installation tokens), known by their form, not their value.
    pub fn with_shapes(&self, shapes: &[TokenShape]) -> Redactor {
        let mut all = self.inner.shapes.clone();
        all.extend_from_slice(shapes);
        Self::build(self.inner.values.clone(), all)
    }

    /// Whether there is nothing to redact.
    pub fn is_empty(&self) -> bool {
        self.inner.matcher.is_empty()
    }

    /// The most bytes one match can cover (a window decoded from its longest escapes, or a
    /// token shape's longest text): a stream holds back one byte less.
    pub fn longest_match(&self) -> usize {
        self.inner.matcher.reach()
    }

    /// `text` with every covered byte replaced (see the module docs).
    pub fn redact(&self, text: &str) -> String {
        match self.redact_bytes_if_needed(text.as_bytes()) {
            // A covered span may end inside a multi-byte character (a window is 8 bytes, not
            // 8 characters); mend those lossily.
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

    /// Redacts every string (and object key) inside a JSON value, in place.
    pub fn redact_json(&self, value: &mut serde_json::Value) {
        use serde_json::Value;
        if self.is_empty() {
            return;
        }
        match value {
            Value::String(s) => {
                if let Some(bytes) = self.redact_bytes_if_needed(s.as_bytes()) {
                    *s = String::from_utf8_lossy(&bytes).into_owned();
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| self.redact_json(v)),
            Value::Object(map) => {
                let entries = std::mem::take(map);
                for (k, mut v) in entries {
                    self.redact_json(&mut v);
                    map.insert(self.redact(&k), v);
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }

    /// Redacts a stream piece by piece: returns the redacted text of the longest prefix of
    /// `pending` that no match can still straddle, and that prefix's length in bytes (the
    /// caller keeps the rest and appends the next piece to it). With `at_end`, all of
    /// `pending` is taken. A value split across pieces — or spanning lines — is redacted like
    /// in one piece. To emit everything held mid-stream (a quiet task), use a
    /// [`StreamRedactor`], which remembers what came before.
    pub fn redact_stream_prefix(&self, pending: &[u8], at_end: bool) -> (Vec<u8>, usize) {
        self.redact_after(pending, 0, at_end)
    }

    /// Decides `text[seen..]`, where `text[..seen]` was already written (it is only context:
    /// a match reaching out of it still covers the new bytes): the redacted bytes up to the
    /// cut, and the cut.
    fn redact_after(&self, text: &[u8], seen: usize, at_end: bool) -> (Vec<u8>, usize) {
        if self.is_empty() {
            return (text[seen..].to_vec(), text.len());
        }
        let segments = spans::segments(self.inner.matcher.find(text));
        let cut = if at_end {
            text.len()
        } else {
            let hold = self.longest_match().saturating_sub(1);
            let cut = text.len().saturating_sub(hold).max(seen);
            spans::safe_cut(text, &segments, seen, cut)
        };
        let out = spans::replace(text, &segments, &self.inner.names, seen, cut);
        (out, cut)
    }

    /// `None` when nothing in `bytes` needs redacting.
    fn redact_bytes_if_needed(&self, bytes: &[u8]) -> Option<Vec<u8>> {
        if self.is_empty() {
            return None;
        }
        let hits = self.inner.matcher.find(bytes);
        if hits.is_empty() {
            return None;
        }
        let segments = spans::segments(hits);
        Some(spans::replace(
            bytes,
            &segments,
            &self.inner.names,
            0,
            bytes.len(),
        ))
    }
}

/// Secret values by name, shared cheaply between contexts (clone is an `Arc` clone), and the
/// [`Redactor`] for them plus any redact-only values.
#[derive(Clone)]
pub struct SecretResolver {
    values: Arc<BTreeMap<String, String>>,
    redactor: Redactor,
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
            .field("redactor", &self.redactor)
            .finish()
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
        let redactor = Redactor::new(values.iter().map(|(k, v)| (k.clone(), v.clone())));
        SecretResolver {
            values: Arc::new(values),
            redactor,
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

    /// The same secrets, also redacting every text of the given shapes (see
    /// [`Redactor::with_shapes`]).
    pub fn with_redacted_shapes(self, shapes: &[TokenShape]) -> Self {
        SecretResolver {
            redactor: self.redactor.with_shapes(shapes),
            values: self.values,
        }
    }

    /// The same substitutable secrets, redacting `extra` (name, value) pairs as well: values
    /// the daemon holds that no placeholder may ever name (provider keys, the API token,
    /// hook and notify secrets).
    pub fn with_redact_only<I, K, V>(self, extra: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        let mut all: Vec<(String, String)> = self
            .values
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        all.extend(extra.into_iter().map(|(k, v)| (k.into(), v.into())));
        SecretResolver {
            values: self.values,
            redactor: Redactor::new(all),
        }
    }

    /// The redactor for every value this resolver knows, substitutable or not.
    pub fn redactor(&self) -> &Redactor {
        &self.redactor
    }

    /// Names of the secrets available for substitution (sorted).
    pub fn names(&self) -> Vec<String> {
        self.values.keys().cloned().collect()
    }

    /// Whether no secret is available for substitution.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The value of one secret.
    pub fn resolve(&self, name: &str) -> Result<&str, SecretError> {
        self.values
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

    /// See [`Redactor::redact`].
    pub fn redact(&self, text: &str) -> String {
        self.redactor.redact(text)
    }

    /// See [`Redactor::redact_bytes`].
    pub fn redact_bytes(&self, bytes: &[u8]) -> Vec<u8> {
        self.redactor.redact_bytes(bytes)
    }

    /// See [`Redactor::redact_stream_prefix`].
    pub fn redact_stream_prefix(&self, pending: &[u8], at_end: bool) -> (Vec<u8>, usize) {
        self.redactor.redact_stream_prefix(pending, at_end)
    }
}

#[cfg(test)]
mod tests;
