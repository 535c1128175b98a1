//! Redaction of a stream written piece by piece (a background task's log, a command's
//! captured output): [`StreamRedactor`] writes what no window can still straddle and holds
//! back the rest until more arrives, and it remembers the bytes it already wrote, so a secret
//! whose print pauses mid-value — written in two pieces with a [`flush`](StreamRedactor::flush)
//! between — is still found by the windows that cross the pause.
//!
//! Guarantees: without `flush`, the output is byte for byte what redacting the whole stream
//! at once gives, however it is split; with `flush`, no run of [`super::WINDOW`] bytes of a
//! secret (or of an encoded form's window) passes either — at most the bytes before the
//! pause that are too few to be a window stay, the rest is replaced. Holds back at most
//! [`Redactor::longest_match`] − 1 bytes (more only while a match or an escape straddles the
//! cut, never more than 64 KiB).

use super::Redactor;

/// A stream's redaction state: bytes held back, and the tail of what was written.
#[derive(Debug, Clone)]
pub struct StreamRedactor {
    redactor: Redactor,
    /// The newest bytes already decided (raw, as they came), for windows that cross into
    /// what comes next.
    written: Vec<u8>,
    /// Bytes not decided yet.
    pending: Vec<u8>,
}

impl StreamRedactor {
    pub fn new(redactor: Redactor) -> Self {
        StreamRedactor {
            redactor,
            written: Vec::new(),
            pending: Vec::new(),
        }
    }

    /// Adds `bytes`; returns what can be written now, redacted.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<u8> {
        self.pending.extend_from_slice(bytes);
        self.decide(false)
    }

    /// Everything held back, redacted, though the stream goes on (it has been quiet): what
    /// comes next is still matched together with it.
    pub fn flush(&mut self) -> Vec<u8> {
        self.decide(true)
    }

    /// Whether bytes are held back.
    pub fn is_holding(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Drops what is held back (the stream is cut here and the rest never comes); returns
    /// how many bytes that was.
    pub fn discard(&mut self) -> usize {
        std::mem::take(&mut self.pending).len()
    }

    fn decide(&mut self, all: bool) -> Vec<u8> {
        if self.redactor.is_empty() {
            return std::mem::take(&mut self.pending);
        }
        let seen = self.written.len();
        let mut text = std::mem::take(&mut self.written);
        text.extend_from_slice(&self.pending);
        let (out, cut) = self.redactor.redact_after(&text, seen, all);
        // Keep enough of what was decided for any window (and any escape it starts in) that
        // crosses into the next bytes.
        let keep = self.redactor.longest_match() + super::views::MAX_ESCAPE;
        self.pending = text.split_off(cut);
        text.drain(..cut.saturating_sub(keep));
        self.written = text;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "sk-live-0123456789abcdef";

    fn run(pieces: &[&[u8]], flush_between: bool) -> String {
        let mut s = StreamRedactor::new(Redactor::new([("KEY", SECRET)]));
        let mut out = Vec::new();
        for piece in pieces {
            out.extend(s.push(piece));
            if flush_between {
                out.extend(s.flush());
            }
        }
        out.extend(s.flush());
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_print_paused_mid_value_passes_no_run_of_8() {
        // Three writes with a pause after each: pieces shorter than a window on either side
        // of a pause are still matched together.
        for a in 1..SECRET.len() {
            for b in a + 1..SECRET.len().min(a + 8) {
                let first = format!("before {}", &SECRET[..a]);
                let last = format!("{} after\n", &SECRET[b..]);
                let pieces = [first.as_bytes(), &SECRET.as_bytes()[a..b], last.as_bytes()];
                let out = run(&pieces, true);
                for at in 0..=SECRET.len() - 8 {
                    let run = &SECRET[at..at + 8];
                    assert!(!out.contains(run), "cut at {a}, {b}: {run:?} in {out:?}");
                }
                assert!(out.contains("[REDACTED:KEY]"), "{out:?}");
                assert!(
                    out.starts_with("before ") && out.ends_with(" after\n"),
                    "{out:?}"
                );
            }
        }
    }

    #[test]
    fn without_flushes_the_stream_is_redacted_as_a_whole() {
        let text = format!(
            "a {SECRET} b {} c",
            SECRET.chars().rev().collect::<String>()
        );
        let whole = Redactor::new([("KEY", SECRET)]).redact(&text);
        for split in 0..text.len() {
            let (a, b) = text.as_bytes().split_at(split);
            assert_eq!(run(&[a, b], false), whole, "split {split}");
        }
    }

    #[test]
    fn bytes_are_held_back_only_while_a_window_could_straddle() {
        let mut s = StreamRedactor::new(Redactor::new([("KEY", SECRET)]));
        let long = "x".repeat(1000);
        let out = s.push(long.as_bytes());
        assert_eq!(
            out.len(),
            1000 - (Redactor::new([("KEY", SECRET)]).longest_match() - 1)
        );
        assert!(s.is_holding());
        assert_eq!(s.discard(), 1000 - out.len());
        let mut none = StreamRedactor::new(Redactor::default());
        assert_eq!(none.push(b"abc"), b"abc");
        assert!(!none.is_holding());
    }
}
