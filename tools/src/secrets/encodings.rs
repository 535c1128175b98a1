//! The forms a secret's value takes when it is printed or encoded, as the literal *windows*
//! [`super::windows`] looks for: a secret is found by any 8-byte run of it, not only whole.
//!
//! For a value of at least [`WINDOW`] bytes, [`windows`] gives every [`WINDOW`]-byte window of:
//!
//! - the value itself, and for a value that is an `http(s)` URL (a webhook whose address is
//!   its credential) the URL as normalised (`https://h:443/p` → `https://h/p`) and its path
//!   with the query, which error pages and redirects echo without the host; for a value with a
//!   space, the value with `+` for each space (form encoding);
//! - the value **reversed** (by characters);
//! - its **hex** (every 16 hex digits that encode 8 of its bytes, in any letter case);
//! - its **base64** and **base64url**, for each of the three byte alignments a value can have
//!   inside a larger encoded text: every 8 characters that encode two whole 3-byte groups of
//!   the value (any 8 bytes of the value hold two such groups whatever its alignment), and the
//!   last 8 characters of each unpadded encoding.
//!
//! Escaped forms are found by matching the same windows in decoded views of the text
//! ([`super::views`]): **URL percent-encoding** (`%XX`, either case), **JSON string escaping**
//! (short escapes and `\uXXXX`, surrogate pairs too) and base64 **wrapped** across lines.
//!
//! A value shorter than [`WINDOW`] bytes is matched whole and exactly only: its encoded forms
//! or pieces would redact innocent text. [`forms`] lists concrete encoded strings for tests and
//! sweeps.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};

/// The run of a secret that must never pass: every window of this many bytes of a value (and
/// of each of its forms) is matched. Values shorter than this are matched whole and exactly.
pub const WINDOW: usize = 8;

/// One literal text to find, and whether letter case matters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Window {
    pub bytes: Vec<u8>,
    pub any_case: bool,
}

/// Every window to find for `value`: see the module docs.
pub(super) fn windows(value: &str) -> Vec<Window> {
    let bytes = value.as_bytes();
    let mut out = Vec::new();
    if bytes.len() < WINDOW {
        if !bytes.is_empty() {
            out.push(exact(bytes));
        }
        return out;
    }
    let mut plain = vec![value.to_string()];
    plain.extend(url_parts(value));
    if value.contains(' ') {
        plain.push(value.replace(' ', "+"));
    }
    plain.push(value.chars().rev().collect());
    for text in &plain {
        out.extend(slide(text.as_bytes(), WINDOW, 1).map(exact));
    }
    let hex = hex::encode(bytes);
    out.extend(slide(hex.as_bytes(), 2 * WINDOW, 2).map(|w| Window {
        bytes: w.to_vec(),
        any_case: true,
    }));
    for engine in [STANDARD_NO_PAD, URL_SAFE_NO_PAD] {
        for skip in 0..3 {
            let encoded = engine.encode(&bytes[skip..]);
            out.extend(slide(encoded.as_bytes(), WINDOW, 4).map(exact));
        }
    }
    out.sort_by(|a, b| a.bytes.cmp(&b.bytes).then(a.any_case.cmp(&b.any_case)));
    out.dedup();
    out
}

fn exact(bytes: &[u8]) -> Window {
    Window {
        bytes: bytes.to_vec(),
        any_case: false,
    }
}

/// The `width`-byte windows of `text` starting every `step` bytes, and the last `width`
/// bytes (when the steps do not end there); nothing when `text` is shorter than `width`.
fn slide(text: &[u8], width: usize, step: usize) -> impl Iterator<Item = &[u8]> {
    let last = text.len().checked_sub(width);
    let stepped = last
        .into_iter()
        .flat_map(move |last| (0..=last).step_by(step));
    let tail = last.filter(|last| last % step != 0);
    stepped.chain(tail).map(move |at| &text[at..at + width])
}

/// For a secret that is a URL: the forms a server or an HTTP client shows of it — the URL as
/// normalised, and its path with the query — when they differ from the value.
fn url_parts(value: &str) -> Vec<String> {
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
    if tail.trim_matches('/').len() >= WINDOW {
        forms.push(tail.trim_end_matches('/').to_string());
    }
    forms.retain(|f| f != value);
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

/// Concrete encoded forms of `value` (label, text) as common tools write them: what a
/// sweep looks for. Empty for a value shorter than [`WINDOW`].
pub fn forms(value: &str) -> Vec<(&'static str, String)> {
    if value.len() < WINDOW {
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
    out.retain(|(_, text)| text.len() >= WINDOW);
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

    fn has(windows: &[Window], text: &str) -> bool {
        windows.iter().any(|w| w.bytes == text.as_bytes())
    }

    #[test]
    fn short_values_are_matched_whole_and_exactly_only() {
        assert_eq!(windows("abc1234"), vec![exact(b"abc1234")]);
        assert!(windows("").is_empty());
        assert!(forms("abc1234").is_empty());
    }

    #[test]
    fn every_8_byte_run_of_the_value_and_its_reversal_is_a_window() {
        let w = windows("0123456789ab");
        for run in ["01234567", "12345678", "456789ab", "ba987654", "76543210"] {
            assert!(has(&w, run), "{run}");
        }
        assert!(!has(&w, "0123456"), "7 bytes are not a window");
    }

    #[test]
    fn hex_windows_are_8_bytes_at_byte_boundaries_in_any_case() {
        let w = windows("abcdefghij");
        let hex: Vec<&Window> = w.iter().filter(|w| w.any_case).collect();
        assert_eq!(hex.len(), 3, "{hex:?}");
        assert!(has(&w, &hex::encode("bcdefghi")));
    }

    #[test]
    fn base64_windows_cover_two_whole_groups_at_every_alignment() {
        let value = "secret-value-0123456789";
        let w = windows(value);
        for skip in 0..3 {
            let core = &aligned_cores(value.as_bytes())[skip];
            let encoded = STANDARD_NO_PAD.encode(core);
            for at in (0..encoded.len() - 7).step_by(4) {
                assert!(has(&w, &encoded[at..at + 8]), "{skip} {at}");
            }
            let url = URL_SAFE_NO_PAD.encode(core);
            assert!(has(&w, &url[..8]));
        }
    }

    #[test]
    fn a_url_secret_adds_its_normalised_form_and_its_path() {
        let w = windows("https://hooks.example.com:443/T0/B1/secretpart");
        assert!(has(&w, "ple.com/"), "normalised without the port");
        assert!(has(&w, "/T0/B1/s"));
        let spaced = windows("pass word phrase");
        assert!(has(&spaced, "pass+wor"));
    }

    #[test]
    fn cores_cover_the_three_alignments() {
        let cores = aligned_cores(b"abcdefgh");
        assert_eq!(cores, vec![&b"abcdef"[..], &b"bcdefg"[..], &b"cdefgh"[..]]);
        assert_eq!(aligned_cores(b"ab"), Vec::<&[u8]>::new());
    }
}
