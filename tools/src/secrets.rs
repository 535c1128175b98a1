//! Secrets referenced by name: resolution, `{{secret:NAME}}` substitution and redaction.
//!
//! Guarantees: a secret's value is only ever handed out by [`SecretResolver::substitute`] /
//! [`SecretResolver::resolve`], and only for the secrets the resolver was made with
//! (`runtime.secrets`); values added with [`SecretResolver::with_redact_only`] (the daemon's
//! own keys and tokens) are redacted but can never be substituted. A [`Redactor`] replaces
//! every occurrence of every non-empty value — and, for values of 8 bytes or more, of its
//! encoded forms (base64/base64url with their aligned cores, hex, URL and JSON escaping,
//! reversed; see [`encodings`]) — with `[REDACTED:NAME]`, the longest match first (a value
//! containing another is replaced whole). `Debug` and every error message name secrets but
//! never show a value; an unknown name is an error listing the names that exist, never an
//! empty string silently sent.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, LazyLock};

use regex::Regex;

pub mod encodings;

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
    /// One group per secret (the longest possible match first), each an alternation of the
    /// value's forms; `None` when there is no value.
    matcher: Option<regex::bytes::Regex>,
    /// Group index − 1 → the secret's name, for the marker.
    names: Vec<String>,
    /// The longest text any form can match, in bytes.
    longest: usize,
    /// What the matcher was built from (to build a larger one).
    secrets: Vec<(String, Vec<encodings::Pattern>)>,
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

/// Replaces secret values and their encoded forms with `[REDACTED:NAME]`. Cheap to clone
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
        let secrets: Vec<(String, Vec<encodings::Pattern>)> = by_value
            .into_iter()
            .map(|(value, name)| (name, encodings::patterns(&value)))
            .collect();
        Self::from_patterns(secrets)
    }

    /// A redactor for each (name, patterns) — the patterns of one secret's forms, the
    /// longest first.
    fn from_patterns(mut secrets: Vec<(String, Vec<encodings::Pattern>)>) -> Self {
        secrets.sort_by(|a, b| b.1[0].max_len.cmp(&a.1[0].max_len).then(a.0.cmp(&b.0)));
        let longest = secrets.first().map_or(0, |(_, p)| p[0].max_len);
        let matcher = (!secrets.is_empty()).then(|| {
            let pattern = secrets
                .iter()
                .map(|(_, patterns)| {
                    let alts: Vec<&str> = patterns.iter().map(|p| p.regex.as_str()).collect();
                    format!("({})", alts.join("|"))
                })
                .collect::<Vec<_>>()
                .join("|");
            regex::bytes::RegexBuilder::new(&pattern)
                .size_limit(256 << 20)
                .dfa_size_limit(64 << 20)
                .build()
                .expect("patterns of escaped literals and token shapes form a valid regex")
        });
        Redactor {
            inner: Arc::new(RedactInner {
                matcher,
                names: secrets.iter().map(|(name, _)| name.clone()).collect(),
                longest,
                secrets,
            }),
        }
    }

    /// This redactor, also redacting every text of the given shapes: secrets minted while
    /// the daemon runs (GitHub installation tokens), known by their form, not their value.
    pub fn with_shapes(&self, shapes: &[TokenShape]) -> Redactor {
        let mut secrets = self.inner.secrets.clone();
        secrets.extend(shapes.iter().map(|s| {
            (
                s.name.to_string(),
                vec![encodings::Pattern {
                    regex: s.regex.to_string(),
                    max_len: s.max_len,
                }],
            )
        }));
        Self::from_patterns(secrets)
    }

    /// Whether there is nothing to redact.
    pub fn is_empty(&self) -> bool {
        self.inner.matcher.is_none()
    }

    /// The longest text a secret or one of its forms can take, in bytes: a stream redactor
    /// holds back at most one byte less.
    pub fn longest_match(&self) -> usize {
        self.inner.longest
    }

    /// `text` with every secret value, and every covered encoding of one, replaced by
    /// `[REDACTED:NAME]`.
    pub fn redact(&self, text: &str) -> String {
        match self.redact_bytes_if_needed(text.as_bytes()) {
            // Replacing whole matches with ASCII can split a multi-byte character only where
            // a match ended inside one (a reversed or encoded form); mend those lossily.
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
    /// `pending` that no secret (or encoded form) can still straddle, and that prefix's
    /// length in bytes (the caller keeps the rest and appends the next piece to it). With
    /// `at_end`, all of `pending` is taken. At most ([`longest_match`](Self::longest_match)
    /// − 1) bytes are held back, and a value split across pieces — or spanning lines — is
    /// redacted like in one piece.
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
            // A whole match across the cut: take it, so it is replaced whole.
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
            let name = caps
                .iter()
                .skip(1)
                .position(|g| g.is_some())
                .and_then(|i| self.inner.names.get(i))
                .map(String::as_str)
                .unwrap_or("secret");
            format!("[REDACTED:{name}]").into_bytes()
        });
        Some(replaced.into_owned())
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
mod tests {
    #[test]
    fn token_shapes_are_redacted_beside_known_values() {
        let r = Redactor::new([("KEY", "s3cret-value")]).with_shapes(&GITHUB_TOKEN_SHAPES);
        let text = "key s3cret-value, token ghs_16C7e42F292c6912E7710c838347Ae178B4a, \
                    pat github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz, \
                    short ghs_abc, word ghost_town";
        assert_eq!(
            r.redact(text),
            "key [REDACTED:KEY], token [REDACTED:GITHUB_TOKEN], pat [REDACTED:GITHUB_TOKEN], \
             short ghs_abc, word ghost_town"
        );
        assert!(r.longest_match() >= 255);
    }

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

    /// splitmix64: a fixed, seeded sequence, so a failure is reproducible.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
        fn text(&mut self, alphabet: &[char], len: usize) -> String {
            (0..len)
                .map(|_| alphabet[self.below(alphabet.len())])
                .collect()
        }
    }

    /// Secrets draw from letters, digits and the characters encoders treat specially.
    const SECRET_CHARS: &[char] = &[
        'a', 'b', 'k', 'Q', 'Z', '0', '7', '9', '-', '_', '+', '/', '=', ' ', '"', '\\', '\n', '%',
        '&', 'é', '€',
    ];
    // Disjoint from the secrets' characters, so no piece of a secret's form arises by chance.
    const FILLER_CHARS: &[char] = &['x', 'y', '.'];

    fn windows(text: &str, n: usize) -> impl Iterator<Item = &str> {
        let bytes = text.as_bytes();
        (0..=bytes.len().saturating_sub(n))
            .filter(move |&i| bytes.len() >= n && text.is_char_boundary(i))
            .filter_map(move |i| text.get(i..i + n))
    }

    /// The guarantee, for random secrets (8–48 characters) at random offsets inside random
    /// text: take E(prefix + secret + suffix) for each covered encoding E, redact it, and no
    /// 8-character substring of the secret's *core* in that encoding is left — the core
    /// being E(secret) for hex, URL, form, JSON and reversed, and for base64/base64url the
    /// encoding of the whole 3-byte groups inside the secret at that offset (the 1–3
    /// characters beside it also depend on the neighbouring bytes and may stay). Also: the
    /// secret itself leaves no 8-character substring, and redacting the text as a stream in
    /// random pieces gives the same result.
    #[test]
    fn no_8_char_piece_of_any_encoding_survives_at_any_offset() {
        use base64::Engine as _;
        use base64::engine::general_purpose::{STANDARD, URL_SAFE, URL_SAFE_NO_PAD};
        let mut rng = Rng(14);
        for round in 0..300 {
            let len = 8 + rng.below(41);
            let secret = rng.text(SECRET_CHARS, len);
            let r = Redactor::new([("S", secret.clone())]);
            let (before, after) = (rng.below(8), rng.below(8));
            let prefix = rng.text(FILLER_CHARS, before);
            let suffix = rng.text(FILLER_CHARS, after);
            let whole = format!("{prefix}{secret}{suffix}");
            let skip = (3 - prefix.len() % 3) % 3;
            let sb = secret.as_bytes();
            let core = &sb[skip..skip + (sb.len() - skip) / 3 * 3];
            let mut wrapped = STANDARD.encode(whole.as_bytes()).into_bytes();
            let wrapped: String = wrapped
                .chunks_mut(76)
                .map(|l| format!("{}\n", String::from_utf8_lossy(l)))
                .collect();
            let cases: Vec<(&str, String, String)> = vec![
                ("plain", whole.clone(), secret.clone()),
                (
                    "base64",
                    STANDARD.encode(&whole),
                    STANDARD.encode(core).replace('=', ""),
                ),
                (
                    "base64 wrapped",
                    wrapped,
                    STANDARD.encode(core).replace('=', ""),
                ),
                (
                    "base64url",
                    URL_SAFE.encode(&whole),
                    URL_SAFE_NO_PAD.encode(core),
                ),
                (
                    "base64url bare",
                    URL_SAFE_NO_PAD.encode(&whole),
                    URL_SAFE_NO_PAD.encode(core),
                ),
                ("hex", hex::encode(&whole), hex::encode(&secret)),
                ("HEX", hex::encode_upper(&whole), hex::encode_upper(&secret)),
                (
                    "url",
                    encodings::percent_encode(&whole, false),
                    encodings::percent_encode(&secret, false),
                ),
                (
                    "form",
                    encodings::percent_encode(&whole, true),
                    encodings::percent_encode(&secret, true),
                ),
                (
                    "json",
                    encodings::json_escape(&whole),
                    encodings::json_escape(&secret),
                ),
                (
                    "reversed",
                    whole.chars().rev().collect(),
                    secret.chars().rev().collect(),
                ),
            ];
            for (label, text, secret_form) in cases {
                let out = r.redact(&text);
                let normalised = if label == "base64 wrapped" {
                    out.replace('\n', "")
                } else {
                    out.clone()
                };
                for piece in windows(&secret_form, 8) {
                    assert!(
                        !normalised.contains(piece),
                        "round {round}, {label}: {piece:?} of {secret:?} survives in {out:?}"
                    );
                }
                assert!(
                    out.contains("[REDACTED:S]"),
                    "round {round}, {label}: {out:?}"
                );
                // The same text as a stream, cut in random pieces.
                let bytes = text.as_bytes();
                let (mut pending, mut streamed) = (Vec::new(), Vec::new());
                let mut at = 0;
                while at < bytes.len() {
                    let take = (1 + rng.below(40)).min(bytes.len() - at);
                    pending.extend_from_slice(&bytes[at..at + take]);
                    at += take;
                    let (done, used) = r.redact_stream_prefix(&pending, at == bytes.len());
                    streamed.extend(done);
                    pending.drain(..used);
                }
                assert!(pending.is_empty());
                assert_eq!(
                    String::from_utf8_lossy(&streamed),
                    out,
                    "round {round}, {label}: streamed"
                );
            }
        }
    }

    #[test]
    fn short_secrets_are_redacted_exactly_and_innocent_text_is_kept() {
        let r = Redactor::new([("PIN", "4711")]);
        assert_eq!(r.redact("pin 4711!"), "pin [REDACTED:PIN]!");
        // Its hex (34373131) and base64 (NDcxMQ) are too short to redact without false hits.
        assert_eq!(r.redact("34373131 NDcxMQ"), "34373131 NDcxMQ");
        let r = Redactor::new([("K", "sk-live-0123456789")]);
        let innocent = "the quick brown fox 0123 sk-live 2f2f";
        assert_eq!(r.redact(innocent), innocent);
        assert_eq!(r.longest_match(), "sk-live-0123456789".len() * 6);
    }

    #[test]
    fn redact_only_values_are_redacted_but_never_substituted() {
        let s = SecretResolver::from_map([("GITHUB_TOKEN", "ghp_abcdefgh12345")])
            .with_redact_only([("NIGHTSHIFT_API_TOKEN", "tok-0123456789abcdef")]);
        assert_eq!(s.names(), vec!["GITHUB_TOKEN".to_string()]);
        let err = s
            .substitute("{{secret:NIGHTSHIFT_API_TOKEN}}")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("unknown secret `NIGHTSHIFT_API_TOKEN`"),
            "{err}"
        );
        assert!(!err.contains("tok-0123"), "{err}");
        assert_eq!(
            s.redact("a tok-0123456789abcdef b ghp_abcdefgh12345"),
            "a [REDACTED:NIGHTSHIFT_API_TOKEN] b [REDACTED:GITHUB_TOKEN]"
        );
        let mut v = serde_json::json!({"x": ["tok-0123456789abcdef"], "tok-0123456789abcdef": 1});
        s.redactor().redact_json(&mut v);
        assert_eq!(
            v,
            serde_json::json!({"x": ["[REDACTED:NIGHTSHIFT_API_TOKEN]"],
                               "[REDACTED:NIGHTSHIFT_API_TOKEN]": 1})
        );
        let debug = format!("{s:?}");
        assert!(
            debug.contains("NIGHTSHIFT_API_TOKEN") && !debug.contains("tok-0"),
            "{debug}"
        );
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
