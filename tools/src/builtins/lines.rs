//! Lines of a file read in bounded memory, whatever length the file or its lines claim.
//!
//! Guarantees: [`BoundedLines`] holds at most `keep` bytes of a line (its head) plus its
//! 64 KiB buffer, however long the line is; the rest of a long line is counted (bytes and
//! characters), not kept. It reads only what its reader gives: callers bound the reading by
//! giving it a reader that ends (`Read::take` at a scan limit), so a sparse file claiming
//! gigabytes, one that grows while it is read, or an endless one costs at most that much
//! reading and no more memory; [`BoundedLines::get_ref`] lets them see whether the limit was
//! reached, to tell the model "the file ends here" from "reading stopped here".

use std::io::{BufRead, Read};

/// One line as read: its first bytes and how long it really was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BoundedLine {
    /// The first `keep` bytes of the line, without its `\n` or `\r\n`.
    pub head: Vec<u8>,
    /// Bytes of the line read, its newline excluded.
    pub bytes: u64,
    /// UTF-8 characters of the line read (lead bytes counted), its newline excluded.
    pub chars: u64,
    /// The line ended with `\n` (not with the end of what was read).
    pub ended: bool,
}

impl BoundedLine {
    /// Whether part of the line is not in `head`.
    pub(crate) fn is_cut(&self) -> bool {
        self.bytes > self.head.len() as u64
    }
}

/// Splits a reader into [`BoundedLine`]s.
pub(crate) struct BoundedLines<R> {
    reader: std::io::BufReader<R>,
    keep: usize,
    done: bool,
}

impl<R: Read> BoundedLines<R> {
    /// Lines of `inner`, each kept up to `keep` bytes.
    pub(crate) fn new(inner: R, keep: usize) -> Self {
        BoundedLines {
            reader: std::io::BufReader::with_capacity(64 * 1024, inner),
            keep,
            done: false,
        }
    }

    /// The reader, to see where it stopped.
    pub(crate) fn get_ref(&self) -> &R {
        self.reader.get_ref()
    }

    /// The next line, or `None` once the reader has ended.
    pub(crate) fn next_line(&mut self) -> std::io::Result<Option<BoundedLine>> {
        if self.done {
            return Ok(None);
        }
        let mut line = BoundedLine {
            head: Vec::new(),
            bytes: 0,
            chars: 0,
            ended: false,
        };
        let mut any = false;
        let mut last = None;
        loop {
            let buf = match self.reader.fill_buf() {
                Ok(buf) => buf,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if buf.is_empty() {
                self.done = true;
                if !any {
                    return Ok(None);
                }
                return Ok(Some(line));
            }
            any = true;
            let newline = buf.iter().position(|&b| b == b'\n');
            let piece = &buf[..newline.unwrap_or(buf.len())];
            let room = self.keep.saturating_sub(line.head.len());
            line.head.extend_from_slice(&piece[..piece.len().min(room)]);
            line.bytes += piece.len() as u64;
            line.chars += piece.iter().filter(|&&b| (b & 0xC0) != 0x80).count() as u64;
            last = piece.last().copied().or(last);
            let used = newline.map_or(buf.len(), |i| i + 1);
            self.reader.consume(used);
            if newline.is_some() {
                line.ended = true;
                if last == Some(b'\r') {
                    // `\r\n` ends the line: the `\r` is not part of it.
                    line.bytes -= 1;
                    line.chars -= 1;
                    if line.head.len() as u64 > line.bytes {
                        line.head.pop();
                    }
                }
                return Ok(Some(line));
            }
        }
    }
}

/// The head of `line` as text, at most `max_chars` characters of it; a character cut by
/// the end of the head is dropped (it is not bad UTF-8 in the file).
pub(crate) fn head_text(line: &BoundedLine, max_chars: usize) -> String {
    let head = line.head.as_slice();
    let whole = match std::str::from_utf8(head) {
        Err(e) if line.is_cut() && e.error_len().is_none() => &head[..e.valid_up_to()],
        _ => head,
    };
    String::from_utf8_lossy(whole)
        .chars()
        .take(max_chars)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(text: &[u8], keep: usize) -> Vec<BoundedLine> {
        let mut lines = BoundedLines::new(text, keep);
        let mut out = Vec::new();
        while let Some(line) = lines.next_line().unwrap() {
            out.push(line);
        }
        out
    }

    #[test]
    fn lines_are_split_counted_and_cut_to_keep() {
        let lines = all("ab\r\ncdéf\n\nlast\r".as_bytes(), 3);
        let heads: Vec<String> = lines.iter().map(|l| head_text(l, 3)).collect();
        assert_eq!(heads, ["ab", "cd", "", "las"]);
        assert_eq!(
            lines.iter().map(|l| (l.bytes, l.chars)).collect::<Vec<_>>(),
            [(2, 2), (5, 4), (0, 0), (5, 5)]
        );
        assert_eq!(
            lines
                .iter()
                .map(|l| (l.is_cut(), l.ended))
                .collect::<Vec<_>>(),
            [(false, true), (true, true), (false, true), (true, false)]
        );
        assert!(all(b"", 3).is_empty());
    }

    #[test]
    fn an_endless_line_is_kept_only_up_to_keep() {
        let endless = std::io::repeat(b'x').take(5 << 20);
        let mut lines = BoundedLines::new(endless, 10);
        let line = lines.next_line().unwrap().expect("one line");
        assert_eq!(line.head.len(), 10);
        assert_eq!((line.bytes, line.chars), (5 << 20, 5 << 20));
        assert!(!line.ended && line.is_cut());
        assert_eq!(lines.next_line().unwrap(), None);
        assert_eq!(
            lines.get_ref().limit(),
            0,
            "the reader was read to its limit"
        );
    }
}
