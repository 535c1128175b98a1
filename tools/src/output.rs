//! Bounded outputs: head + tail for the model, the full text as an artifact.
//!
//! Guarantees: memory held by a [`Capture`] stays near the output cap whatever is pushed
//! into it, and how the output is split into chunks does not change the result; an output
//! within the cap is returned whole; a longer one returns its first and last `cap / 2` bytes
//! (moved to line boundaries where that loses less than half of each part) around a marker
//! `[… N bytes (M lines) cut; full output saved as artifact NAME …]`, and the artifact file
//! holds exactly the bytes pushed (up to `max_artifact_bytes`, which the marker then says),
//! redacted. Text returned is valid UTF-8 and redacted.
//!
//! Redaction comes before every cut: the pushed stream is redacted as it arrives (with
//! [`Redactor::redact_stream_prefix`], which holds back only what a secret could still
//! straddle), and only redacted bytes are split into head, tail and artifact, so no prefix or
//! suffix of a secret survives at a cut point.

use std::collections::VecDeque;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::context::ToolContext;
use crate::secrets::Redactor;
use crate::{Artifact, ToolOutput};

/// Collects an output of unknown size.
pub(crate) struct Capture {
    half: usize,
    cap: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
    newlines: u64,
    spilled: bool,
    file: Option<File>,
    written: u64,
    max_artifact: u64,
    spill_error: Option<String>,
    dir: PathBuf,
    name: String,
    redactor: Redactor,
    /// Pushed bytes not yet redacted (a secret may still straddle their end).
    pending: Vec<u8>,
}

/// A finished output: what the model sees, and the artifact if it was cut.
#[derive(Debug)]
pub(crate) struct Rendered {
    pub text: String,
    pub artifact: Option<Artifact>,
    /// Bytes pushed in total.
    pub total: u64,
}

impl Capture {
    /// A capture whose artifact (if needed) is `<tool call id>-<label>.txt` in the run's
    /// artifacts directory.
    pub(crate) fn new(ctx: &ToolContext, label: &str) -> Self {
        let cap = ctx.limits().output_cap_bytes.max(64);
        Capture {
            half: cap / 2,
            cap,
            head: Vec::new(),
            tail: VecDeque::new(),
            total: 0,
            newlines: 0,
            spilled: false,
            file: None,
            written: 0,
            max_artifact: ctx.limits().max_artifact_bytes,
            spill_error: None,
            dir: ctx.artifacts_dir().to_path_buf(),
            name: format!("{}-{}.txt", sanitize(ctx.tool_call_id()), sanitize(label)),
            redactor: ctx.secrets().redactor().clone(),
            pending: Vec::new(),
        }
    }

    /// Adds raw output; it is redacted before it is kept or cut.
    pub(crate) fn push(&mut self, chunk: &[u8]) {
        if self.redactor.is_empty() {
            return self.push_redacted(chunk);
        }
        self.pending.extend_from_slice(chunk);
        let (done, used) = self.redactor.redact_stream_prefix(&self.pending, false);
        self.pending.drain(..used);
        self.push_redacted(&done);
    }

    /// The stream is cut here (the rest is not read): drops the bytes still held back, which
    /// may be the start of a secret whose rest never arrives. Returns how many were dropped.
    pub(crate) fn cut_here(&mut self) -> usize {
        let dropped = self.pending.len();
        self.pending.clear();
        dropped
    }

    fn push_redacted(&mut self, chunk: &[u8]) {
        self.total += chunk.len() as u64;
        self.newlines += chunk.iter().filter(|&&b| b == b'\n').count() as u64;
        if !self.spilled {
            if self.head.len() + chunk.len() <= self.cap {
                self.head.extend_from_slice(chunk);
                return;
            }
            // First overflow: everything so far goes to the artifact, and the stream so far
            // (head ++ chunk) is split into the kept head and the start of the tail.
            self.spilled = true;
            self.open_artifact();
            let mut stream = std::mem::take(&mut self.head);
            self.write_artifact(&stream);
            self.write_artifact(chunk);
            stream.extend_from_slice(chunk);
            let tail_start = self.half.max(stream.len() - self.half);
            self.tail.extend(&stream[tail_start..]);
            stream.truncate(self.half);
            self.head = stream;
            return;
        }
        self.write_artifact(chunk);
        let keep = &chunk[chunk.len().saturating_sub(self.half)..];
        self.tail.extend(keep);
        let excess = self.tail.len().saturating_sub(self.half);
        self.tail.drain(..excess);
    }

    fn open_artifact(&mut self) {
        let result =
            fs::create_dir_all(&self.dir).and_then(|_| File::create(self.dir.join(&self.name)));
        match result {
            Ok(file) => self.file = Some(file),
            Err(e) => self.spill_error = Some(e.to_string()),
        }
    }

    fn write_artifact(&mut self, bytes: &[u8]) {
        let Some(file) = self.file.as_mut() else {
            return;
        };
        let room = self.max_artifact.saturating_sub(self.written);
        let take = bytes.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        if take == 0 {
            return;
        }
        match file.write_all(&bytes[..take]) {
            Ok(()) => self.written += take as u64,
            Err(e) => {
                self.spill_error = Some(e.to_string());
                self.file = None;
            }
        }
    }

    /// Finish: redact what is still pending, render for the model, finalize the artifact
    /// file. Does blocking file I/O when the output was cut.
    pub(crate) fn finish(mut self) -> Rendered {
        if !self.pending.is_empty() {
            let pending = std::mem::take(&mut self.pending);
            let (done, _) = self.redactor.redact_stream_prefix(&pending, true);
            self.push_redacted(&done);
        }
        if !self.spilled {
            let text = String::from_utf8_lossy(&self.head).into_owned();
            return Rendered {
                text,
                artifact: None,
                total: self.total,
            };
        }
        let path = self.dir.join(&self.name);
        let artifact = self.finalize_artifact(&path);
        let head = cut_head(&self.head);
        let tail_bytes: Vec<u8> = self.tail.iter().copied().collect();
        let tail = cut_tail(&tail_bytes);
        let kept = (head.len() + tail.len()) as u64;
        let kept_newlines = count_newlines(head) + count_newlines(tail);
        let cut_bytes = self.total.saturating_sub(kept);
        let cut_lines = self.newlines.saturating_sub(kept_newlines);
        let saved = match (&artifact, &self.spill_error) {
            (Some(a), None) if self.written < self.total => format!(
                "the first {} bytes are saved as artifact {}",
                self.written, a.name
            ),
            (Some(a), None) => format!("full output saved as artifact {}", a.name),
            (_, Some(err)) => format!("the full output could not be saved: {err}"),
            (None, None) => "the full output could not be saved".to_string(),
        };
        let mut text = decode_head(head);
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!(
            "[… {cut_bytes} bytes ({cut_lines} lines) cut; {saved} …]\n"
        ));
        text.push_str(&decode_tail(tail));
        Rendered {
            text,
            artifact,
            total: self.total,
        }
    }

    fn finalize_artifact(&mut self, path: &Path) -> Option<Artifact> {
        let file = self.file.take()?;
        if let Err(e) = file.sync_all() {
            self.spill_error = Some(e.to_string());
            return None;
        }
        drop(file);
        let size = fs::metadata(path).map(|m| m.len()).unwrap_or(self.written);
        Some(Artifact {
            name: self.name.clone(),
            path: path.to_path_buf(),
            size,
        })
    }
}

/// Cap a text that is already in memory: redacted first, then cut like a streamed output.
pub(crate) fn cap_text(ctx: &ToolContext, label: &str, text: &str) -> (String, Option<Artifact>) {
    let mut capture = Capture::new(ctx, label);
    capture.push(text.as_bytes());
    let rendered = capture.finish();
    (rendered.text, rendered.artifact)
}

/// `output`, made by a tool outside this crate (an MCP server's result), as the model is
/// shown it: its text redacted and cut at the context's cap like any tool's output, the
/// whole text kept as an artifact when it was cut.
pub fn shown(ctx: &ToolContext, label: &str, output: ToolOutput) -> ToolOutput {
    let (content, artifact) = cap_text(ctx, label, &output.content);
    ToolOutput {
        content,
        artifact,
        ..output
    }
}

/// A reader of the redacted bytes of `inner`: whoever cuts what it reads (into lines, at a
/// length) cuts redacted text.
pub(crate) struct RedactedRead<R> {
    inner: R,
    redactor: Redactor,
    pending: Vec<u8>,
    ready: VecDeque<u8>,
    done: bool,
}

impl<R: std::io::Read> RedactedRead<R> {
    pub(crate) fn new(inner: R, redactor: Redactor) -> Self {
        RedactedRead {
            inner,
            redactor,
            pending: Vec::new(),
            ready: VecDeque::new(),
            done: false,
        }
    }

    /// The reader of the raw bytes, to see where it stopped.
    pub(crate) fn get_ref(&self) -> &R {
        &self.inner
    }
}

impl<R: std::io::Read> std::io::Read for RedactedRead<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut chunk = [0u8; 8192];
        while self.ready.is_empty() && !self.done {
            let n = self.inner.read(&mut chunk)?;
            self.done = n == 0;
            self.pending.extend_from_slice(&chunk[..n]);
            let (out, used) = self.redactor.redact_stream_prefix(&self.pending, self.done);
            self.pending.drain(..used);
            self.ready.extend(out);
        }
        let n = buf.len().min(self.ready.len());
        for (slot, byte) in buf.iter_mut().zip(self.ready.drain(..n)) {
            *slot = byte;
        }
        Ok(n)
    }
}

fn sanitize(s: &str) -> String {
    let cleaned: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let trimmed = cleaned.trim_start_matches('.');
    if trimmed.is_empty() {
        "call".to_string()
    } else {
        trimmed.chars().take(100).collect()
    }
}

fn count_newlines(bytes: &[u8]) -> u64 {
    bytes.iter().filter(|&&b| b == b'\n').count() as u64
}

/// The head, ending after its last newline if that keeps at least half of it.
fn cut_head(head: &[u8]) -> &[u8] {
    match head.iter().rposition(|&b| b == b'\n') {
        Some(i) if i + 1 >= head.len() / 2 => &head[..=i],
        _ => head,
    }
}

/// The tail, starting after its first newline if that keeps at least half of it.
fn cut_tail(tail: &[u8]) -> &[u8] {
    match tail.iter().position(|&b| b == b'\n') {
        Some(i) if i < tail.len() / 2 => &tail[i + 1..],
        _ => tail,
    }
}

/// Decode, dropping an incomplete UTF-8 sequence at the end.
fn decode_head(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(s) => s.to_string(),
        Err(e) if e.error_len().is_none() => {
            String::from_utf8_lossy(&bytes[..e.valid_up_to()]).into_owned()
        }
        Err(_) => String::from_utf8_lossy(bytes).into_owned(),
    }
}

/// Decode, dropping continuation bytes of a sequence cut at the start.
fn decode_tail(bytes: &[u8]) -> String {
    let skip = bytes
        .iter()
        .take(3)
        .take_while(|&&b| (b & 0xC0) == 0x80)
        .count();
    String::from_utf8_lossy(&bytes[skip..]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_edges_are_dropped_not_garbled() {
        let s = "aé".as_bytes();
        assert_eq!(decode_head(&s[..2]), "a");
        assert_eq!(decode_tail(&s[2..]), "");
        assert_eq!(cut_head(b"abc\ndefg"), b"abc\n");
        assert_eq!(cut_tail(b"xx\nyyyy"), b"yyyy");
        assert_eq!(sanitize("../a b"), "_a_b");
    }

    #[test]
    fn chunking_does_not_change_the_result() {
        let dir = tempfile::tempdir().unwrap();
        let text: String = (0..500).map(|i| format!("line {i}\n")).collect();
        let render = |chunk: usize, call: &str| {
            let limits = crate::Limits {
                output_cap_bytes: 300,
                ..Default::default()
            };
            let ctx = ToolContext::new("r", call, dir.path(), dir.path().join("artifacts"))
                .unwrap()
                .with_limits(limits);
            let mut capture = Capture::new(&ctx, "out");
            for part in text.as_bytes().chunks(chunk) {
                capture.push(part);
            }
            capture.finish()
        };
        let whole = render(text.len(), "whole");
        for size in [1, 7, 150, 301] {
            let chunked = render(size, "chunked");
            assert_eq!(
                whole.text.replace("whole-out", "chunked-out"),
                chunked.text,
                "chunks of {size}"
            );
            let saved = fs::read_to_string(chunked.artifact.unwrap().path).unwrap();
            assert_eq!(saved, text, "chunks of {size}");
        }
        assert!(whole.text.starts_with("line 0\n") && whole.text.ends_with("line 499\n"));
        assert!(whole.text.len() < 450, "{}", whole.text);
    }

    #[test]
    fn artifact_size_is_capped_and_the_marker_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let limits = crate::Limits {
            output_cap_bytes: 100,
            max_artifact_bytes: 1000,
            ..Default::default()
        };
        let ctx = ToolContext::new("r", "c", dir.path(), dir.path().join("a"))
            .unwrap()
            .with_limits(limits);
        let mut capture = Capture::new(&ctx, "big");
        for _ in 0..100 {
            capture.push(&[b'z'; 100]);
        }
        let rendered = capture.finish();
        let artifact = rendered.artifact.expect("artifact");
        assert_eq!(artifact.size, 1000);
        assert_eq!(rendered.total, 10_000);
        assert!(
            rendered.text.contains(
                "9900 bytes (0 lines) cut; the first 1000 bytes are saved as artifact c-big.txt"
            ),
            "{}",
            rendered.text
        );
    }
}
