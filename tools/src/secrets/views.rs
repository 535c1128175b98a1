//! Decoded views of a text, each with the way back to the text's own bytes: where a secret is
//! escaped or wrapped, its windows are found in the view and the bytes they came from are
//! redacted in the text.
//!
//! - [`json_unescaped`]: JSON string escapes decoded (`\"`, `\\`, `\/`, `\b`, `\f`, `\n`,
//!   `\r`, `\t`, `\uXXXX` with surrogate pairs); any other backslash is kept as it is.
//! - [`percent_decoded`]: `%XX` (either case) decoded; a `+` stays (its form-encoding windows
//!   are matched directly).
//! - [`joined_lines`]: a run of 16 or more base64 characters ended by a line break (`\n` or
//!   `\r\n`) joined to the run after it: `base64` wraps at 76 columns, PEM at 64.
//!
//! A window that holds no escape or break is found in the text itself, so a view keeps only
//! *islands*: each escape (or break) with [`REACH`] bytes each side, a byte no window holds
//! between islands. Each view is `None` when the text has nothing to decode, so plain text
//! costs one quick scan per view. A view byte maps back to the text bytes it came from; the
//! bytes of one decoded character share their escape's range.

/// The most text bytes one view byte is decoded from (`\u00XX` for one byte).
pub(super) const MAX_ESCAPE: usize = 6;

/// How far from an escape or a line break a window can start or end, in view bytes: the
/// longest window (16 hex digits) less one.
const REACH: usize = 2 * super::encodings::WINDOW - 1;

/// A decoded view: islands of the text around its escapes, decoded, and the way back.
#[derive(Debug, Default)]
pub(super) struct View {
    pub bytes: Vec<u8>,
    /// In view order: view bytes `view..view + view_len` come from text bytes
    /// `text..text + text_len`, byte for byte when `same`, else as one escape.
    anchors: Vec<Anchor>,
}

#[derive(Debug, Clone, Copy)]
struct Anchor {
    view: usize,
    text: usize,
    text_len: usize,
    same: bool,
}

impl View {
    fn copy(&mut self, text: &[u8], from: usize, to: usize) {
        if from < to {
            self.anchors.push(Anchor {
                view: self.bytes.len(),
                text: from,
                text_len: to - from,
                same: true,
            });
            self.bytes.extend_from_slice(&text[from..to]);
        }
    }

    fn decoded(&mut self, decoded: &[u8], at: usize, len: usize) {
        self.anchors.push(Anchor {
            view: self.bytes.len(),
            text: at,
            text_len: len,
            same: false,
        });
        self.bytes.extend_from_slice(decoded);
    }

    /// A byte no window holds, where text was left out.
    fn gap(&mut self, at: usize) {
        self.decoded(&[0], at, 0);
    }

    fn anchor(&self, at: usize) -> &Anchor {
        let i = self.anchors.partition_point(|a| a.view <= at);
        &self.anchors[i - 1]
    }

    /// The text range the view's `start..end` was decoded from.
    pub fn source(&self, start: usize, end: usize) -> (usize, usize) {
        let first = self.anchor(start);
        let from = if first.same {
            first.text + (start - first.view)
        } else {
            first.text
        };
        let last = self.anchor(end - 1);
        let to = if last.same {
            last.text + (end - last.view)
        } else {
            last.text + last.text_len
        };
        (from, to)
    }
}

/// One escape (or line break): text bytes `at..at + len` decode to `bytes[..n]`.
#[derive(Debug, Clone, Copy)]
struct Escape {
    at: usize,
    len: usize,
    bytes: [u8; 4],
    n: usize,
}

impl Escape {
    fn byte(at: usize, len: usize, b: u8) -> Self {
        Escape {
            at,
            len,
            bytes: [b, 0, 0, 0],
            n: 1,
        }
    }
}

/// The islands of `text` around `escapes` (in text order, not overlapping): each escape with
/// up to [`REACH`] text bytes each side. A window holding an escape lies inside one island:
/// its bytes beside or between its escapes are at most [`REACH`] plain ones.
fn islands(text: &[u8], escapes: &[Escape]) -> Option<View> {
    let mut view = View::default();
    let mut i = 0;
    while i < escapes.len() {
        let start = escapes[i].at.saturating_sub(REACH);
        let mut j = i;
        while j + 1 < escapes.len()
            && escapes[j + 1].at <= escapes[j].at + escapes[j].len + 2 * REACH
        {
            j += 1;
        }
        let end = (escapes[j].at + escapes[j].len + REACH).min(text.len());
        view.gap(start);
        let mut at = start;
        for e in &escapes[i..=j] {
            view.copy(text, at, e.at);
            view.decoded(&e.bytes[..e.n], e.at, e.len);
            at = e.at + e.len;
        }
        view.copy(text, at, end);
        i = j + 1;
    }
    (!escapes.is_empty()).then_some(view)
}

/// Every view of `text` that differs from it.
pub(super) fn all(text: &[u8]) -> Vec<View> {
    [
        json_unescaped(text),
        percent_decoded(text),
        joined_lines(text),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The text around its JSON string escapes, decoded; `None` without one.
pub(super) fn json_unescaped(text: &[u8]) -> Option<View> {
    let mut escapes = Vec::new();
    let mut i = 0;
    while let Some(k) = text[i..].iter().position(|&b| b == b'\\') {
        let at = i + k;
        let Some(&next) = text.get(at + 1) else {
            break;
        };
        let short = match next {
            b'"' => Some(b'"'),
            b'\\' => Some(b'\\'),
            b'/' => Some(b'/'),
            b'b' => Some(0x08),
            b'f' => Some(0x0c),
            b'n' => Some(b'\n'),
            b'r' => Some(b'\r'),
            b't' => Some(b'\t'),
            _ => None,
        };
        if let Some(decoded) = short {
            escapes.push(Escape::byte(at, 2, decoded));
            i = at + 2;
        } else if let Some((c, len)) = unicode_escape(&text[at..]) {
            let mut bytes = [0u8; 4];
            let n = c.encode_utf8(&mut bytes).len();
            escapes.push(Escape { at, len, bytes, n });
            i = at + len;
        } else {
            i = at + 1;
        }
    }
    islands(text, &escapes)
}

/// The character a `\uXXXX` (or a surrogate pair `\uXXXX\uXXXX`) at the start of `text`
/// stands for, and the escape's length.
fn unicode_escape(text: &[u8]) -> Option<(char, usize)> {
    let unit = |at: usize| -> Option<u32> {
        let esc = text.get(at..at + 6)?;
        if &esc[..2] != b"\\u" {
            return None;
        }
        u32::from_str_radix(std::str::from_utf8(&esc[2..]).ok()?, 16).ok()
    };
    let high = unit(0)?;
    if (0xD800..0xDC00).contains(&high) {
        let low = unit(6).filter(|low| (0xDC00..0xE000).contains(low))?;
        let c = char::from_u32(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))?;
        return Some((c, 12));
    }
    Some((char::from_u32(high)?, 6))
}

/// The text around its `%XX` escapes, decoded; `None` without one.
pub(super) fn percent_decoded(text: &[u8]) -> Option<View> {
    let mut escapes = Vec::new();
    let mut i = 0;
    while let Some(k) = text[i..].iter().position(|&b| b == b'%') {
        let at = i + k;
        let decoded = text
            .get(at + 1..at + 3)
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match decoded {
            Some(b) => {
                escapes.push(Escape::byte(at, 3, b));
                i = at + 3;
            }
            None => i = at + 1,
        }
    }
    islands(text, &escapes)
}

fn is_base64(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'-' | b'_' | b'=')
}

/// The text around each line break that ends a run of at least 16 base64 characters and is
/// followed by another (a wrapped line), the break left out; `None` without one.
pub(super) fn joined_lines(text: &[u8]) -> Option<View> {
    let mut escapes = Vec::new();
    let mut i = 0;
    while let Some(k) = text[i..].iter().position(|&b| b == b'\n') {
        let nl = i + k;
        i = nl + 1;
        let end = if nl > 0 && text[nl - 1] == b'\r' {
            nl - 1
        } else {
            nl
        };
        let long_run = end > REACH && text[end - REACH - 1..end].iter().all(|&b| is_base64(b));
        if long_run && text.get(nl + 1).copied().is_some_and(is_base64) {
            escapes.push(Escape {
                at: end,
                len: nl + 1 - end,
                bytes: [0; 4],
                n: 0,
            });
        }
    }
    islands(text, &escapes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text_of(view: &View) -> String {
        String::from_utf8_lossy(&view.bytes).into_owned()
    }

    #[test]
    fn json_escapes_are_decoded_and_map_back_to_their_escape() {
        let raw = br#"a\"b\\n\u00e9\ud83d\ude00\x"#;
        let view = json_unescaped(raw).unwrap();
        assert_eq!(text_of(&view), "\0a\"b\\né😀\\x");
        // The é's two bytes come from `\u00e9`.
        let e = view.bytes.iter().position(|&b| b == 0xc3).unwrap();
        assert_eq!(view.source(e, e + 2), (7, 13));
        assert_eq!(view.source(1, 3), (0, 3));
        assert!(json_unescaped(b"no escapes").is_none());
    }

    #[test]
    fn only_islands_around_escapes_are_kept() {
        let raw = format!(
            "{}\\n{}\\t{}",
            "a".repeat(40),
            "b".repeat(40),
            "c".repeat(5)
        );
        let view = json_unescaped(raw.as_bytes()).unwrap();
        let expect = format!(
            "\0{}\n{}\0{}\t{}",
            "a".repeat(15),
            "b".repeat(15),
            "b".repeat(15),
            "c".repeat(5)
        );
        assert_eq!(text_of(&view), expect);
        assert_eq!(view.source(1, 17), (25, 42));
    }

    #[test]
    fn percent_escapes_are_decoded_in_either_case_and_plus_stays() {
        let view = percent_decoded(b"a%2fb%2Fc+d%zz%4").unwrap();
        assert_eq!(text_of(&view), "\0a/b/c+d%zz%4");
        assert_eq!(view.source(2, 3), (1, 4));
        assert!(percent_decoded(b"100% sure").is_none());
    }

    #[test]
    fn wrapped_base64_lines_are_joined_and_short_lines_are_not() {
        let line = "QUJDREVGR0hJSktMTU5PUFFS";
        let raw = format!("key: {line}\r\nREVG\nR0g= done\nnext line");
        let view = joined_lines(raw.as_bytes()).unwrap();
        assert_eq!(text_of(&view), format!("\0{}REVG\nR0g= done\n", &line[9..]));
        assert_eq!(view.source(15, 17), (28, 32), "across the \\r\\n");
        assert!(joined_lines(b"one line\nand another\n").is_none());
    }
}
