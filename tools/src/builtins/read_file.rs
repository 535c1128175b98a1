//! `read_file`: a text file of the workspace, line-numbered, bounded by what it returns.
//!
//! Guarantees: the file is opened beneath the workspace (see `paths`) and must be a regular
//! file; lines are numbered from 1; lines are cut (at [`MAX_LINE_CHARS`]) only after the
//! file is redacted. Memory is bounded by the answer, not by the file: a line is kept up to
//! [`MAX_LINE_CHARS`] characters whatever its length (the rest is counted), and lines stop
//! being collected once the answer reaches the output limit (`runtime.output_cap_bytes`), so
//! the tool holds at most that limit plus one cut line and fixed buffers. Reading stops at
//! the file's size when it was opened (a file growing meanwhile is not followed) and after
//! [`MAX_SCAN_BYTES`] (a sparse file claiming gigabytes costs at most that much reading).
//! Every answer that does not show the whole file says what was left out — lines after the
//! window, a cut line, lines past the output limit, the part of the file never read — and
//! how to read on (`offset`, grep, or run_command).

use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::{Value, json};
use std::fs::File;
use std::io::Read;

use super::lines::{BoundedLine, BoundedLines, head_text};
use super::{blocking, numbered, parse_input};
use crate::context::ToolContext;
use crate::output::{RedactedRead, cap_text};
use crate::paths::Workspace;
use crate::{Tool, ToolClass, ToolDefinition, ToolOutput};

const DEFAULT_LINES: usize = 2000;
/// Characters of a line shown; the rest is cut with a note.
pub(crate) const MAX_LINE_CHARS: usize = 2000;
/// Bytes of a file read at most: lines past them are neither shown nor counted.
pub(crate) const MAX_SCAN_BYTES: u64 = 64 * 1024 * 1024;
/// Bytes of the start sniffed for NUL bytes (a binary file is refused).
const SNIFF_BYTES: u64 = 8192;

/// `read_file {path, offset?, limit?}`: line-numbered text (read_only).
#[derive(Debug, Default, Clone, Copy)]
pub struct ReadFile;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadInput {
    path: String,
    offset: Option<usize>,
    limit: Option<usize>,
}

impl Tool for ReadFile {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: "read_file".into(),
            description: format!(
                "Read a text file from the workspace. Lines are numbered from 1 (`number<TAB>line`). \
                 Reads at most {DEFAULT_LINES} lines unless `limit` says otherwise, and stops \
                 earlier when the answer reaches the output limit; use `offset` (first line to \
                 show, 1-based) to read on. Lines longer than {MAX_LINE_CHARS} characters are \
                 cut; only the first {} MiB of a file are read.",
                MAX_SCAN_BYTES >> 20
            ),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "Path relative to the workspace."},
                    "offset": {"type": "integer", "minimum": 1, "description": "First line to show (1-based)."},
                    "limit": {"type": "integer", "minimum": 1, "description": "Number of lines to show."}
                },
                "required": ["path"],
                "additionalProperties": false
            }),
            class: ToolClass::ReadOnly,
        }
    }

    fn call<'a>(&'a self, ctx: &'a ToolContext, input: Value) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let input: ReadInput = match parse_input("read_file", input) {
                Ok(i) => i,
                Err(e) => return e,
            };
            let ctx = ctx.clone();
            blocking(move || read_file(&ctx, input)).await
        })
    }
}

/// What a read saw, for [`footer`] to describe.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    offset: usize,
    /// Lines shown, from `offset`.
    shown: usize,
    /// Lines read in all (the file's line count unless `stopped_early`).
    total: usize,
    /// Lines were left out because the answer reached the output limit.
    output_full: bool,
    /// Reading stopped at [`MAX_SCAN_BYTES`] before the end of the file.
    stopped_early: bool,
    /// The file's size when opened.
    size: u64,
}

fn read_file(ctx: &ToolContext, input: ReadInput) -> ToolOutput {
    let offset = input.offset.unwrap_or(1).max(1);
    let limit = input.limit.unwrap_or(DEFAULT_LINES).max(1);
    let (file, probe, size) = match open_text(ctx, &input.path) {
        Ok(opened) => opened,
        Err(refused) => return refused,
    };
    let scan = size.min(MAX_SCAN_BYTES);
    let raw = probe.as_slice().chain(file).take(scan);
    let redacted = RedactedRead::new(raw, ctx.secrets().redactor().clone());
    let mut lines = BoundedLines::new(redacted, MAX_LINE_CHARS * 4);
    // Room is left for the footer, so an answer cut here is not cut again by `cap_text`.
    let budget = ctx.limits().output_cap_bytes.saturating_sub(512);
    let mut shown: Vec<String> = Vec::new();
    let mut shown_bytes = 0usize;
    let mut seen = Seen {
        offset,
        shown: 0,
        total: 0,
        output_full: false,
        stopped_early: false,
        size,
    };
    loop {
        let line = match lines.next_line() {
            Ok(Some(line)) => line,
            Ok(None) => break,
            Err(e) => return ToolOutput::error(format!("cannot read `{}`: {e}", input.path)),
        };
        seen.total += 1;
        if seen.total < offset || shown.len() >= limit || seen.output_full {
            continue;
        }
        // Only the last line read can be unended; its length is known unless reading
        // stopped inside it at the scan limit.
        let runs_on =
            !line.ended && size > MAX_SCAN_BYTES && lines.get_ref().get_ref().limit() == 0;
        let text = render_line(&line, runs_on);
        if shown_bytes + text.len() + 8 > budget && !shown.is_empty() {
            seen.output_full = true;
            continue;
        }
        shown_bytes += text.len() + 8;
        shown.push(text);
    }
    seen.shown = shown.len();
    seen.stopped_early = size > MAX_SCAN_BYTES && lines.get_ref().get_ref().limit() == 0;
    if seen.total == 0 {
        return ToolOutput::ok(format!("`{}` is empty", input.path));
    }
    if offset > seen.total {
        return ToolOutput::error(past_the_end(&input.path, &seen));
    }
    let mut text = numbered(shown.iter().map(String::as_str), offset);
    text.push_str(&footer(&seen));
    let (content, artifact) = cap_text(ctx, "read_file", &text);
    ToolOutput::ok(content).with_artifact(artifact)
}

/// Opens `path` beneath the workspace as a regular file that looks like text: the file
/// (read past its first bytes), those first bytes, and its size when opened. `Err` is what
/// the model is told (a directory, a FIFO, a binary file, a path that is not allowed).
fn open_text(ctx: &ToolContext, path: &str) -> Result<(File, Vec<u8>, u64), ToolOutput> {
    let opened = Workspace::open(ctx.workspace())
        .and_then(|ws| ws.open_existing(path))
        .map_err(|e| ToolOutput::error(e.to_string()))?;
    if opened.metadata.is_dir() {
        return Err(ToolOutput::error(format!(
            "`{path}` is a directory; use list_files to see what is in it"
        )));
    }
    if !opened.metadata.is_file() {
        return Err(ToolOutput::error(format!(
            "`{path}` is not a regular file; read_file reads files only"
        )));
    }
    let size = opened.metadata.len();
    let mut file = opened.file;
    let mut probe = Vec::new();
    if let Err(e) = file
        .by_ref()
        .take(SNIFF_BYTES.min(size.min(MAX_SCAN_BYTES)))
        .read_to_end(&mut probe)
    {
        return Err(ToolOutput::error(format!("cannot read `{path}`: {e}")));
    }
    if probe.contains(&0) {
        return Err(ToolOutput::error(format!(
            "`{path}` looks like a binary file (it contains NUL bytes); read_file shows text only"
        )));
    }
    Ok((file, probe, size))
}

/// A line as shown: its first [`MAX_LINE_CHARS`] characters, and a note when it was cut.
/// `runs_on`: reading stopped inside it, so its length is not known.
fn render_line(line: &BoundedLine, runs_on: bool) -> String {
    let kept = head_text(line, MAX_LINE_CHARS);
    if runs_on {
        return format!(
            "{kept}… [line cut: it runs on past the first {} MiB, where read_file stops \
             reading; use grep, or run_command (e.g. `cut -c{}-{}`), for more of it]",
            MAX_SCAN_BYTES >> 20,
            MAX_LINE_CHARS + 1,
            MAX_LINE_CHARS * 2
        );
    }
    if line.chars > MAX_LINE_CHARS as u64 {
        return format!(
            "{kept}… [line cut: {} characters; use grep, or run_command (e.g. `cut -c{}-{}`), \
             for more of it]",
            line.chars,
            MAX_LINE_CHARS + 1,
            MAX_LINE_CHARS * 2
        );
    }
    kept
}

/// The note after the lines shown, empty when the whole file was shown.
fn footer(seen: &Seen) -> String {
    let last = seen.offset + seen.shown - 1;
    let more_after = last < seen.total || seen.stopped_early;
    if !more_after && seen.offset == 1 {
        return String::new();
    }
    let mut note = if seen.stopped_early {
        format!(
            "[lines {}-{last} of at least {}: read_file stopped reading this {}-byte file after \
             its first {} MiB",
            seen.offset,
            seen.total,
            seen.size,
            MAX_SCAN_BYTES >> 20
        )
    } else {
        format!("[lines {}-{last} of {}", seen.offset, seen.total)
    };
    if seen.output_full {
        note.push_str("; the answer reached the output limit");
    }
    if last < seen.total {
        note.push_str(&format!(
            "; call read_file with offset={} to read more",
            last + 1
        ));
    } else if seen.stopped_early {
        note.push_str("; use grep, or run_command (e.g. `tail`, `sed -n`), for the rest");
    }
    note.push_str("]\n");
    note
}

/// The error for an `offset` past the lines read.
fn past_the_end(path: &str, seen: &Seen) -> String {
    if seen.stopped_early {
        format!(
            "offset {} is past the {} lines in the first {} MiB of `{path}` ({} bytes), which \
             is all read_file reads; use grep, or run_command (e.g. `sed -n '{},+99p'`), to \
             read further",
            seen.offset,
            seen.total,
            MAX_SCAN_BYTES >> 20,
            seen.size,
            seen.offset
        )
    } else {
        format!(
            "offset {} is past the end of `{path}`, which has {} lines",
            seen.offset, seen.total
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(offset: usize, shown: usize, total: usize) -> Seen {
        Seen {
            offset,
            shown,
            total,
            output_full: false,
            stopped_early: false,
            size: 1000,
        }
    }

    #[test]
    fn the_footer_says_what_was_left_out_and_how_to_read_on() {
        assert_eq!(footer(&seen(1, 3, 3)), "");
        assert_eq!(
            footer(&seen(1, 2, 3)),
            "[lines 1-2 of 3; call read_file with offset=3 to read more]\n"
        );
        assert_eq!(footer(&seen(2, 2, 3)), "[lines 2-3 of 3]\n");
        let full = Seen {
            output_full: true,
            ..seen(1, 5, 9)
        };
        assert_eq!(
            footer(&full),
            "[lines 1-5 of 9; the answer reached the output limit; call read_file with \
             offset=6 to read more]\n"
        );
        let huge = Seen {
            stopped_early: true,
            size: 1 << 31,
            ..seen(1, 1, 1)
        };
        let note = footer(&huge);
        assert!(
            note.starts_with("[lines 1-1 of at least 1: read_file stopped reading this 2147483648-byte file after its first 64 MiB")
                && note.contains("use grep, or run_command"),
            "{note}"
        );
        assert!(past_the_end("big", &Seen { offset: 5, ..huge }).contains("sed -n '5,+99p'"));
    }

    #[test]
    fn a_long_line_is_cut_with_its_length_or_a_note_that_it_runs_on() {
        let line = BoundedLine {
            head: vec![b'a'; MAX_LINE_CHARS * 4],
            bytes: 1 << 30,
            chars: 1 << 30,
            ended: true,
        };
        let known = render_line(&line, false);
        assert!(
            known.starts_with(&"a".repeat(MAX_LINE_CHARS))
                && known.contains("… [line cut: 1073741824 characters; use grep"),
            "{known}"
        );
        let (shown, note) = known.split_once('…').unwrap();
        assert_eq!(shown.len(), MAX_LINE_CHARS);
        assert!(note.starts_with(" [line cut"), "{note}");
        let open = render_line(&line, true);
        assert!(open.contains("runs on past the first 64 MiB"), "{open}");
    }
}
