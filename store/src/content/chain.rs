//! Chained compression: each blob is deflated with the content written just before it in
//! its chain as the dictionary, so a run's content compresses about as well as one stream
//! (text that repeats the words, keys and lines of the turns before costs little), while each
//! blob stays a row of its own that a reader finds by id.
//!
//! A chain is the blobs one lease holder wrote, in id order, until [`CHAIN_RAW_MAX`] bytes
//! of content; then the next blob starts a new chain. Reading a blob decodes its chain from
//! the start up to it, so a read never costs more than one chain's content.
//!
//! What it guarantees: `inflate` of what `deflate` made, given the same history, is the
//! content exactly; a body that does not inflate, or inflates to another size than recorded,
//! is an error, never a wrong text.

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

/// The most history a blob is deflated against: deflate's window.
const WINDOW: usize = 32 * 1024;

/// Content per chain before a new one starts: what reading one blob may cost at most.
pub const CHAIN_RAW_MAX: usize = 256 * 1024;

/// The content of a chain so far that the next blob is compressed against.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    /// The last [`WINDOW`] bytes of the chain's content.
    tail: Vec<u8>,
    /// How many bytes the chain holds.
    total: usize,
}

impl History {
    /// Adds a blob's content to the chain.
    pub fn push(&mut self, content: &[u8]) {
        self.total += content.len();
        if content.len() >= WINDOW {
            self.tail.clear();
            self.tail
                .extend_from_slice(&content[content.len() - WINDOW..]);
            return;
        }
        let keep = (WINDOW - content.len()).min(self.tail.len());
        self.tail.drain(..self.tail.len() - keep);
        self.tail.extend_from_slice(content);
    }

    /// Whether the next blob should start a new chain.
    pub fn full(&self) -> bool {
        self.total >= CHAIN_RAW_MAX
    }
}

/// `content` deflated (raw deflate, level 6) against `history`.
pub fn deflate(history: &History, content: &[u8]) -> Vec<u8> {
    let mut c = Compress::new(Compression::new(6), false);
    if !history.tail.is_empty() {
        c.set_dictionary(&history.tail)
            .expect("a dictionary is set before any input");
    }
    let mut out = Vec::with_capacity(content.len() / 2 + 64);
    loop {
        let consumed = c.total_in() as usize;
        out.reserve(content.len() / 4 + 64);
        let status = c
            .compress_vec(&content[consumed..], &mut out, FlushCompress::Finish)
            .expect("deflating into memory");
        if status == Status::StreamEnd {
            return out;
        }
    }
}

/// Why a blob's body could not be read back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InflateError {
    #[error("does not inflate: {0}")]
    Damaged(String),
    #[error("inflates to {got} bytes (or more), not the {want} recorded")]
    WrongSize { want: usize, got: usize },
}

/// The content of a body [`deflate`] made against `history`, which must be `raw_size` bytes.
pub fn inflate(history: &History, body: &[u8], raw_size: usize) -> Result<Vec<u8>, InflateError> {
    let mut d = Decompress::new(false);
    if !history.tail.is_empty() {
        d.set_dictionary(&history.tail)
            .map_err(|e| InflateError::Damaged(e.to_string()))?;
    }
    // Room for one byte more than recorded: a body holding more is found out without
    // inflating all of it.
    let mut out = Vec::with_capacity(raw_size + 1);
    let status = d
        .decompress_vec(body, &mut out, FlushDecompress::Finish)
        .map_err(|e| InflateError::Damaged(e.to_string()))?;
    if status != Status::StreamEnd && out.len() <= raw_size {
        return Err(InflateError::Damaged("the body ends early".into()));
    }
    if out.len() != raw_size {
        return Err(InflateError::WrongSize {
            want: raw_size,
            got: out.len(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(i: usize) -> Vec<u8> {
        (0..120)
            .map(|l| format!("line {l} of turn {i}: the parser consumed token_{l}\n"))
            .collect::<String>()
            .into_bytes()
    }

    #[test]
    fn a_chain_inflates_back_and_compresses_like_one_stream() {
        let mut writer = History::default();
        let mut bodies = Vec::new();
        for i in 0..20 {
            let content = text(i);
            bodies.push((deflate(&writer, &content), content.len()));
            writer.push(&content);
        }
        let mut reader = History::default();
        for (i, (body, size)) in bodies.iter().enumerate() {
            let content = inflate(&reader, body, *size).unwrap();
            assert_eq!(content, text(i));
            reader.push(&content);
        }
        assert_eq!(reader, writer);
        let chained: usize = bodies.iter().map(|(b, _)| b.len()).sum();
        let alone: usize = (0..20)
            .map(|i| deflate(&History::default(), &text(i)).len())
            .sum();
        let stream = deflate(
            &History::default(),
            &(0..20).flat_map(text).collect::<Vec<u8>>(),
        );
        assert!(
            chained * 10 < stream.len() * 11 && chained * 3 < alone * 2,
            "chained {chained} bytes, as one stream {}, each alone {alone}",
            stream.len()
        );
    }

    #[test]
    fn damage_and_the_wrong_history_are_errors() {
        let mut h = History::default();
        h.push(b"some earlier content that the next blob repeats: some earlier content");
        let body = deflate(&h, b"some earlier content, again");
        assert!(
            inflate(&History::default(), &body, 27).is_err(),
            "needs its history"
        );
        assert!(inflate(&h, &body[..body.len() / 2], 27).is_err());
        assert_eq!(
            inflate(&h, &body, 30),
            Err(InflateError::WrongSize { want: 30, got: 27 })
        );
        assert!(inflate(&h, b"\xff\xff\xff", 3).is_err());
        assert_eq!(
            inflate(&h, &body, 27).unwrap(),
            b"some earlier content, again"
        );
    }

    #[test]
    fn the_history_keeps_the_window_and_counts_the_chain() {
        let mut h = History::default();
        h.push(&vec![b'a'; WINDOW - 10]);
        h.push(b"0123456789abcdef");
        assert_eq!(h.tail.len(), WINDOW);
        assert!(h.tail.ends_with(b"0123456789abcdef"));
        assert_eq!(h.total, WINDOW + 6);
        h.push(&vec![b'b'; CHAIN_RAW_MAX]);
        assert!(h.full());
        assert_eq!(h.tail, vec![b'b'; WINDOW]);
    }
}
