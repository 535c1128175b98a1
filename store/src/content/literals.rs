//! The long string literals of a JSON text, taken out and put back byte for byte.
//!
//! A stored document (an event's payload, a checkpoint) keeps its structure and short strings
//! in a *skeleton*; every string value at least [`LONG_LITERAL`] bytes long (as written,
//! escapes included) is stored once as a blob, and the skeleton holds a reference in its
//! place: the string literal `"\u0001#<blob id>"`. Work is done on the text, never on a
//! parsed value, so what comes back is exactly the text that went in — key order, number
//! spelling and escapes included, which the byte-stable model requests depend on.
//!
//! What it guarantees:
//! - **Exact.** `join(skeleton(text, ids), blobs) == text` for every JSON text, whatever its
//!   strings hold.
//! - **Unambiguous.** A literal of the original text that begins with the escape `\u0001`
//!   is written with one more `\u0001` in front, and only references begin with a single
//!   one, so no string a model or a tool wrote can pass for a reference.
//! - **Keys stay.** Object keys are never taken out (they are escaped like values).
//!
//! The text must be JSON as `serde_json` writes it or any other valid JSON; a text whose
//! string never closes is refused as corrupt when joined, and split leaves it whole.

use std::ops::Range;

/// String literals at least this many bytes long (between the quotes, as written) are
/// stored as blobs; shorter ones stay in the skeleton.
pub const LONG_LITERAL: usize = 256;

/// How a reference or an escaped literal begins (the JSON escape of U+0001).
const MARK: &str = "\\u0001";

/// One string literal of a JSON text: the range of its content between the quotes, and
/// whether it is an object key.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Literal {
    content: Range<usize>,
    key: bool,
}

/// Every string literal of `text`, in order. A literal that never closes ends the scan.
fn literals(text: &str) -> Vec<Literal> {
    let bytes = text.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'"' {
            i += 1;
            continue;
        }
        let start = i + 1;
        let mut j = start;
        while j < bytes.len() && bytes[j] != b'"' {
            j += if bytes[j] == b'\\' { 2 } else { 1 };
        }
        if j >= bytes.len() {
            break;
        }
        let mut after = j + 1;
        while after < bytes.len() && bytes[after].is_ascii_whitespace() {
            after += 1;
        }
        found.push(Literal {
            content: start..j,
            key: bytes.get(after) == Some(&b':'),
        });
        i = j + 1;
    }
    found
}

/// The long string values of `text` (the content between their quotes, as written), in
/// order: what [`skeleton`] replaces, given one blob id for each.
pub fn long_values(text: &str) -> Vec<&str> {
    literals(text)
        .into_iter()
        .filter(|l| !l.key && l.content.len() >= LONG_LITERAL)
        .map(|l| &text[l.content])
        .collect()
}

/// `text` with its long string values (those [`long_values`] returned, in the same order)
/// replaced by references to `ids`, and every literal that begins with `\u0001` escaped.
///
/// # Panics
/// When `ids` is shorter than [`long_values`] of `text`: a caller's bug.
pub fn skeleton(text: &str, ids: &[i64]) -> String {
    let mut out = String::with_capacity(text.len().min(4096));
    let mut ids = ids.iter();
    let mut copied = 0;
    for lit in literals(text) {
        out.push_str(&text[copied..lit.content.start]);
        let content = &text[lit.content.clone()];
        if !lit.key && content.len() >= LONG_LITERAL {
            let id = ids.next().expect("one blob id for each long value");
            out.push_str(MARK);
            out.push('#');
            out.push_str(&id.to_string());
        } else {
            if content.starts_with(MARK) {
                out.push_str(MARK);
            }
            out.push_str(content);
        }
        copied = lit.content.end;
    }
    out.push_str(&text[copied..]);
    out
}

/// Why a skeleton could not be joined.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JoinError {
    /// A literal begins with the mark but is neither an escape nor a reference.
    #[error("a stored document holds a damaged reference: {0:?}")]
    BadReference(String),
    /// A reference names a blob that was not supplied.
    #[error("a stored document refers to blob {0}, which is missing")]
    Missing(i64),
}

/// What a literal of a skeleton stands for.
enum Read<'a> {
    /// Text to copy as it is.
    Text(&'a str),
    /// A blob's content.
    Blob(i64),
}

fn read(content: &str) -> Result<Read<'_>, JoinError> {
    let Some(rest) = content.strip_prefix(MARK) else {
        return Ok(Read::Text(content));
    };
    if rest.starts_with(MARK) {
        return Ok(Read::Text(rest));
    }
    rest.strip_prefix('#')
        .and_then(|id| id.parse().ok())
        .map(Read::Blob)
        .ok_or_else(|| JoinError::BadReference(content.chars().take(40).collect()))
}

/// The blob ids `skeleton` refers to, in order (repeats kept).
pub fn references(skeleton: &str) -> Result<Vec<i64>, JoinError> {
    let mut ids = Vec::new();
    for lit in literals(skeleton) {
        if let Read::Blob(id) = read(&skeleton[lit.content])? {
            ids.push(id);
        }
    }
    Ok(ids)
}

/// The text `skeleton` was made from, with each reference replaced by its blob's content
/// from `blob`.
pub fn join<'b>(
    skeleton: &str,
    blob: impl Fn(i64) -> Option<&'b str>,
) -> Result<String, JoinError> {
    let mut out = String::with_capacity(skeleton.len());
    let mut copied = 0;
    for lit in literals(skeleton) {
        out.push_str(&skeleton[copied..lit.content.start]);
        match read(&skeleton[lit.content.clone()])? {
            Read::Text(text) => out.push_str(text),
            Read::Blob(id) => out.push_str(blob(id).ok_or(JoinError::Missing(id))?),
        }
        copied = lit.content.end;
    }
    out.push_str(&skeleton[copied..]);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Splits `text` with ids 1, 2, … and joins it back.
    fn round_trip(text: &str) -> (String, String) {
        let longs = long_values(text);
        let ids: Vec<i64> = (1..=longs.len() as i64).collect();
        let blobs: HashMap<i64, &str> = ids.iter().copied().zip(longs).collect();
        let skel = skeleton(text, &ids);
        let back = join(&skel, |id| blobs.get(&id).copied()).unwrap();
        (skel, back)
    }

    #[test]
    fn long_values_become_references_and_come_back_exactly() {
        let long = "x".repeat(LONG_LITERAL);
        let text = format!(
            r#"{{"type":"tool_result","content":"{long}","z":{{"{long}":"{long}\n"}},"n":1.50}}"#
        );
        let (skel, back) = round_trip(&text);
        assert_eq!(back, text);
        assert_eq!(
            skel,
            format!(
                r#"{{"type":"tool_result","content":"\u0001#1","z":{{"{long}":"\u0001#2"}},"n":1.50}}"#
            ),
            "values taken out, the long key kept"
        );
        assert_eq!(references(&skel).unwrap(), [1, 2]);
    }

    #[test]
    fn a_literal_that_looks_like_a_reference_is_escaped_not_followed() {
        let text = r#"{"a":"\u0001#7","\u0001k":"\u0001\u0001x","b":"\\u0001#7"}"#;
        let (skel, back) = round_trip(text);
        assert_eq!(back, text);
        assert!(references(&skel).unwrap().is_empty(), "{skel}");
        let lied = r#"{"a":"\u0001#7"}"#;
        assert_eq!(
            join(lied, |_| None),
            Err(JoinError::Missing(7)),
            "a reference of the store's own is followed"
        );
        assert!(matches!(
            join(r#"{"a":"\u0001nope"}"#, |_| None),
            Err(JoinError::BadReference(_))
        ));
    }

    #[test]
    fn escapes_quotes_and_whitespace_are_kept_as_written() {
        let long = format!("{}\\\"\\\\ü\\u0000", "y".repeat(LONG_LITERAL));
        let text = format!("[ \"{long}\" , {{ \"k\" : \"{long}\" }} , \"\" ]");
        let (skel, back) = round_trip(&text);
        assert_eq!(back, text);
        assert_eq!(skel, "[ \"\\u0001#1\" , { \"k\" : \"\\u0001#2\" } , \"\" ]");
    }

    /// Random JSON documents (strings of every kind, nested) round-trip exactly.
    #[test]
    fn random_documents_round_trip() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(44);
        let pieces = [
            "a", "\u{1}", "\"", "\\", "\n", "ü", "#", "\u{0}", "\\u0001", ":", " ",
        ];
        for _ in 0..300 {
            let mut value = serde_json::Map::new();
            for k in 0..rng.random_range(0..6) {
                let len = rng.random_range(0..2 * LONG_LITERAL / 3);
                let s: String = (0..len)
                    .map(|_| pieces[rng.random_range(0..pieces.len())])
                    .collect();
                let key = if k % 2 == 0 {
                    s.clone()
                } else {
                    format!("k{k}")
                };
                value.insert(key, serde_json::json!([s, {"in": s}]));
            }
            let text = serde_json::to_string(&value).unwrap();
            let (_, back) = round_trip(&text);
            assert_eq!(back, text);
        }
    }

    #[test]
    fn an_unclosed_string_is_left_whole() {
        let text = format!("{{\"a\":\"{}", "z".repeat(400));
        assert!(long_values(&text).is_empty());
        assert_eq!(skeleton(&text, &[]), text);
    }
}
