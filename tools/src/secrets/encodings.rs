//! The forms a secret's value takes when it is encoded, for [`super::Redactor`].
//!
//! For a value of at least [`MIN_VARIANT_LEN`] bytes, [`patterns`] gives regular expressions
//! (for `regex::bytes`) that match, besides the exact bytes:
//!
//! - **base64** and **base64url**: the whole value's encoding with and without `=` padding,
//!   and, for each of the three byte alignments a value can have inside a larger encoded
//!   text, its *aligned core* — the encoding of the whole 3-byte groups that lie inside the
//!   value. A line break (`\n` or `\r\n`) may stand between any two characters (`base64`
//!   wraps at 76 columns, PEM at 64).
//! - **hex**, in any letter case.
//! - **URL percent-encoding**: each byte either as itself or as `%XX` (either case), a
//!   space also as `+`, so every encoder's choice of reserved characters is covered.
//! - **JSON string escaping**: each character either as itself (where JSON allows it), as its
//!   short escape (`\"`, `\\`, `\/`, `\b`, `\f`, `\n`, `\r`, `\t`) or as `\uXXXX` (a UTF-16
//!   surrogate pair above U+FFFF).
//! - the value **reversed** (by characters).
//!
//! No form shorter than [`MIN_VARIANT_LEN`] characters is made (it would redact innocent
//! text); a shorter value is matched exactly only. [`forms`] lists concrete encoded strings
//! for tests and sweeps.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};

/// Values shorter than this (in bytes) and encoded forms shorter than this (in characters)
/// are not matched in encoded form.
pub const MIN_VARIANT_LEN: usize = 8;

/// One regular expression and the longest text it can match, in bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Pattern {
    pub regex: String,
    pub max_len: usize,
}

/// The patterns matching `value` and its encoded forms, the longest first.
pub(super) fn patterns(value: &str) -> Vec<Pattern> {
    let mut out = vec![Pattern {
        regex: regex::escape(value),
        max_len: value.len(),
    }];
    if value.len() < MIN_VARIANT_LEN {
        return out;
    }
    for text in base64_forms(value.as_bytes()) {
        // A line break may stand between any two characters.
        let regex = text
            .chars()
            .map(|c| regex::escape(&c.to_string()))
            .collect::<Vec<_>>()
            .join(r"(?:\r?\n)?");
        out.push(Pattern {
            regex,
            max_len: text.len() * 3,
        });
    }
    out.push(Pattern {
        regex: format!("(?i:{})", hex::encode(value)),
        max_len: value.len() * 2,
    });
    out.push(url_pattern(value));
    out.push(json_pattern(value));
    out.extend(url_parts(value));
    let reversed: String = value.chars().rev().collect();
    if reversed != value {
        out.push(Pattern {
            regex: regex::escape(&reversed),
            max_len: reversed.len(),
        });
    }
    out.sort_by(|a, b| b.max_len.cmp(&a.max_len).then(a.regex.cmp(&b.regex)));
    out.dedup();
    out
}

/// For a secret that is a URL (a webhook whose address is its credential): the forms a server
/// or an HTTP client shows of it — the URL as normalised (`https://h:443/p` → `https://h/p`),
/// and its path with the query, which error pages and redirects echo without the host — when
/// that part is long enough to be the secret rather than ordinary text.
fn url_parts(value: &str) -> Vec<Pattern> {
    let Ok(url) = url::Url::parse(value) else {
        return Vec::new();
    };
    if !matches!(url.scheme(), "http" | "https") {
        return Vec::new();
    }
    let mut tail = url.path().to_string();
    if let Some(query) = url.query() {
        tail.push('?');
        tail.push_str(query);
    }
    let mut forms = vec![url.as_str().to_string()];
    if tail.trim_matches('/').len() >= MIN_VARIANT_LEN {
        forms.push(tail.trim_end_matches('/').to_string());
    }
    forms
        .into_iter()
        .filter(|f| f != value)
        .map(|f| Pattern {
            regex: regex::escape(&f),
            max_len: f.len(),
        })
        .collect()
}

/// The base64 and base64url texts to match: whole (padded and not) and the aligned cores.
fn base64_forms(bytes: &[u8]) -> Vec<String> {
    let mut forms = Vec::new();
    for (padded, bare) in [(STANDARD, STANDARD_NO_PAD), (URL_SAFE, URL_SAFE_NO_PAD)] {
        forms.push(padded.encode(bytes));
        forms.push(bare.encode(bytes));
        for core in aligned_cores(bytes) {
            forms.push(bare.encode(core));
        }
    }
    forms.retain(|f| f.len() >= MIN_VARIANT_LEN);
    forms.sort();
    forms.dedup();
    forms
}

/// For each of the three alignments: the whole 3-byte groups that lie inside `bytes` when
/// it starts `skip` bytes before a group boundary of the surrounding text.
pub(super) fn aligned_cores(bytes: &[u8]) -> Vec<&[u8]> {
    (0..3)
        .filter_map(|skip| {
            let rest = bytes.len().checked_sub(skip)?;
            let core = &bytes[skip..skip + rest / 3 * 3];
            (!core.is_empty()).then_some(core)
        })
        .collect()
}

fn byte_literal(b: u8) -> String {
    if b.is_ascii() {
        regex::escape(&(b as char).to_string())
    } else {
        format!(r"(?-u:\x{b:02X})")
    }
}

fn url_pattern(value: &str) -> Pattern {
    let regex = value
        .bytes()
        .map(|b| {
            let pct = format!("%(?i:{b:02X})");
            if b == b' ' {
                format!(r"(?: |\+|{pct})")
            } else {
                format!("(?:{}|{pct})", byte_literal(b))
            }
        })
        .collect();
    Pattern {
        regex,
        max_len: value.len() * 3,
    }
}

fn json_pattern(value: &str) -> Pattern {
    let mut regex = String::new();
    let mut max_len = 0;
    for c in value.chars() {
        let mut alts = Vec::new();
        if c != '"' && c != '\\' && c >= ' ' {
            alts.push(regex::escape(&c.to_string()));
        }
        let short = match c {
            '"' => Some(r#"\\""#),
            '\\' => Some(r"\\\\"),
            '/' => Some(r"\\/"),
            '\u{8}' => Some(r"\\b"),
            '\u{c}' => Some(r"\\f"),
            '\n' => Some(r"\\n"),
            '\r' => Some(r"\\r"),
            '\t' => Some(r"\\t"),
            _ => None,
        };
        alts.extend(short.map(str::to_string));
        let mut units = [0u16; 2];
        let escaped: String = c
            .encode_utf16(&mut units)
            .iter()
            .map(|u| format!(r"\\u(?i:{u:04X})"))
            .collect();
        max_len += 6 * c.len_utf16();
        alts.push(escaped);
        regex.push_str(&format!("(?:{})", alts.join("|")));
    }
    Pattern { regex, max_len }
}

/// Concrete encoded forms of `value` (label, text) as common tools write them: what a
/// sweep looks for. Empty for a value shorter than [`MIN_VARIANT_LEN`].
pub fn forms(value: &str) -> Vec<(&'static str, String)> {
    if value.len() < MIN_VARIANT_LEN {
        return Vec::new();
    }
    let bytes = value.as_bytes();
    let mut out = vec![
        ("base64", STANDARD.encode(bytes)),
        ("base64 unpadded", STANDARD_NO_PAD.encode(bytes)),
        ("base64url", URL_SAFE.encode(bytes)),
        ("base64url unpadded", URL_SAFE_NO_PAD.encode(bytes)),
        ("hex", hex::encode(bytes)),
        ("HEX", hex::encode_upper(bytes)),
        ("url", percent_encode(value, false)),
        ("url form", percent_encode(value, true)),
        ("json", json_escape(value)),
        ("reversed", value.chars().rev().collect()),
    ];
    for core in aligned_cores(bytes) {
        out.push(("base64 core", STANDARD_NO_PAD.encode(core)));
        out.push(("base64url core", URL_SAFE_NO_PAD.encode(core)));
    }
    out.retain(|(_, text)| text.len() >= MIN_VARIANT_LEN);
    out
}

/// Percent-encoding of everything but RFC 3986's unreserved characters; with `plus`, a
/// space is `+` (HTML forms).
pub fn percent_encode(value: &str, plus: bool) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            b' ' if plus => "+".to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `value` as it appears between the quotes of a JSON string (serde_json's escaping).
pub fn json_escape(value: &str) -> String {
    let quoted = serde_json::to_string(value).expect("a string always serialises");
    quoted[1..quoted.len() - 1].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_values_are_matched_exactly_only() {
        assert_eq!(patterns("abc1234").len(), 1);
        assert!(forms("abc1234").is_empty());
        assert!(patterns("abc12345").len() > 5);
    }

    #[test]
    fn cores_cover_the_three_alignments() {
        let cores = aligned_cores(b"abcdefgh");
        assert_eq!(cores, vec![&b"abcdef"[..], &b"bcdefg"[..], &b"cdefgh"[..]]);
        assert_eq!(aligned_cores(b"ab"), Vec::<&[u8]>::new());
    }

    #[test]
    fn every_pattern_compiles_and_its_max_len_bounds_its_form() {
        let value = "pa ss/\"wörd\\\n+x😀";
        for p in patterns(value) {
            regex::bytes::Regex::new(&p.regex).unwrap();
        }
        let longest = patterns(value)[0].max_len;
        for (label, text) in forms(value) {
            assert!(text.len() <= longest, "{label}: {text}");
        }
    }
}
