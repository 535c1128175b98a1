//! `read_file`, `write_file` and `edit_file`: text files inside the run's workspace.
//!
//! Guarantees: no path outside the workspace is ever read or written: every file is opened
//! beneath a handle on the workspace, resolved by the kernel (see `paths`), and then read or
//! written through that same open file;
//! `read_file` streams the file (memory bounded by the lines shown), numbers lines from 1 and
//! says how to read on; `write_file` writes exactly `content`, creating parent directories;
//! `edit_file` changes the file only when `old_string` occurs exactly once (overlapping
//! occurrences counted), otherwise it says how many matches there were and leaves the file
//! untouched. Running `write_file` or `edit_file` twice has the effect of running it once
//! (an edit already applied reports so instead of failing), hence class `idempotent`.

use std::io::{BufRead, BufReader, Read, Seek, Write};

use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{blocking, numbered, parse_input};
use crate::context::ToolContext;
use crate::output::{RedactedRead, cap_text};
use crate::paths::{Workspace, shown};
use crate::{Tool, ToolClass, ToolDefinition, ToolOutput};

const DEFAULT_LINES: usize = 2000;
const MAX_LINE_CHARS: usize = 2000;

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
                 Reads at most {DEFAULT_LINES} lines unless `limit` says otherwise; use `offset` \
                 (first line to show, 1-based) to read on."
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

fn read_file(ctx: &ToolContext, input: ReadInput) -> ToolOutput {
    let opened = match Workspace::open(ctx.workspace()).and_then(|ws| ws.open_existing(&input.path))
    {
        Ok(o) => o,
        Err(e) => return ToolOutput::error(e),
    };
    if opened.metadata.is_dir() {
        return ToolOutput::error(format!(
            "`{}` is a directory; use list_files to see what is in it",
            input.path
        ));
    }
    if !opened.metadata.is_file() {
        return ToolOutput::error(format!(
            "`{}` is not a regular file; read_file reads files only",
            input.path
        ));
    }
    let offset = input.offset.unwrap_or(1).max(1);
    let limit = input.limit.unwrap_or(DEFAULT_LINES).max(1);
    let file = opened.file;
    let mut reader = BufReader::new(file);
    let mut probe = Vec::new();
    if let Err(e) = reader.by_ref().take(8192).read_to_end(&mut probe) {
        return ToolOutput::error(format!("cannot read `{}`: {e}", input.path));
    }
    if probe.contains(&0) {
        return ToolOutput::error(format!(
            "`{}` looks like a binary file (it contains NUL bytes); read_file shows text only",
            input.path
        ));
    }
    // Lines are cut (at MAX_LINE_CHARS) only after the whole file is redacted.
    let mut reader = BufReader::new(RedactedRead::new(
        probe.as_slice().chain(reader),
        ctx.secrets().redactor().clone(),
    ));
    let mut shown: Vec<String> = Vec::new();
    let mut total = 0usize;
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => return ToolOutput::error(format!("cannot read `{}`: {e}", input.path)),
        }
        total += 1;
        if total >= offset && shown.len() < limit {
            shown.push(render_line(&buf));
        }
    }
    if total == 0 {
        return ToolOutput::ok(format!("`{}` is empty", input.path));
    }
    if offset > total {
        return ToolOutput::error(format!(
            "offset {offset} is past the end of `{}`, which has {total} lines",
            input.path
        ));
    }
    let last = offset + shown.len() - 1;
    let mut text = numbered(shown.iter().map(String::as_str), offset);
    if last < total || offset > 1 {
        text.push_str(&format!("[lines {offset}-{last} of {total}"));
        if last < total {
            text.push_str(&format!(
                "; call read_file with offset={} to read more",
                last + 1
            ));
        }
        text.push_str("]\n");
    }
    let (content, artifact) = cap_text(ctx, "read_file", &text);
    ToolOutput::ok(content).with_artifact(artifact)
}

fn render_line(raw: &[u8]) -> String {
    let text = String::from_utf8_lossy(raw);
    let text = text.strip_suffix('\n').unwrap_or(&text);
    let text = text.strip_suffix('\r').unwrap_or(text);
    let chars = text.chars().count();
    if chars > MAX_LINE_CHARS {
        let kept: String = text.chars().take(MAX_LINE_CHARS).collect();
        format!("{kept}… [line cut: {chars} characters]")
    } else {
        text.to_string()
    }
}

/// `write_file {path, content}`: create or overwrite a file (idempotent).
#[derive(Debug, Default, Clone, Copy)]
pub struct WriteFile;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteInput {
    path: String,
    content: String,
}

impl Tool for WriteFile {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: "write_file".into(),
            description: "Create or overwrite a file in the workspace with exactly `content`. \
                          Parent directories are created. To change part of a file, use edit_file."
                .into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "Path relative to the workspace."},
                    "content": {"type": "string", "description": "The full new content of the file."}
                },
                "required": ["path", "content"],
                "additionalProperties": false
            }),
            class: ToolClass::Idempotent,
        }
    }

    fn call<'a>(&'a self, ctx: &'a ToolContext, input: Value) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let input: WriteInput = match parse_input("write_file", input) {
                Ok(i) => i,
                Err(e) => return e,
            };
            let ctx = ctx.clone();
            blocking(move || write_file(&ctx, input)).await
        })
    }
}

fn write_file(ctx: &ToolContext, input: WriteInput) -> ToolOutput {
    let opened = match Workspace::open(ctx.workspace()).and_then(|ws| ws.create_file(&input.path)) {
        Ok(o) => o,
        Err(e) => return ToolOutput::error(e),
    };
    let mut file = opened.file;
    match file.write_all(input.content.as_bytes()) {
        Ok(()) => ToolOutput::ok(format!(
            "wrote {} bytes ({} lines) to {}",
            input.content.len(),
            input.content.lines().count(),
            shown(&opened.rel)
        )),
        Err(e) => ToolOutput::error(format!("cannot write `{}`: {e}", input.path)),
    }
}

/// `edit_file {path, old_string, new_string}`: replace one unique snippet (idempotent).
#[derive(Debug, Default, Clone, Copy)]
pub struct EditFile;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EditInput {
    path: String,
    old_string: String,
    new_string: String,
}

impl Tool for EditFile {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: "edit_file".into(),
            description:
                "Replace `old_string` with `new_string` in a workspace file. `old_string` \
                          must occur exactly once: copy it exactly (whitespace included) and add \
                          surrounding lines until it is unique."
                    .into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "Path relative to the workspace."},
                    "old_string": {"type": "string", "description": "Exact text to replace; must be unique in the file."},
                    "new_string": {"type": "string", "description": "Replacement text."}
                },
                "required": ["path", "old_string", "new_string"],
                "additionalProperties": false
            }),
            class: ToolClass::Idempotent,
        }
    }

    fn call<'a>(&'a self, ctx: &'a ToolContext, input: Value) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let input: EditInput = match parse_input("edit_file", input) {
                Ok(i) => i,
                Err(e) => return e,
            };
            let ctx = ctx.clone();
            blocking(move || edit_file(&ctx, input)).await
        })
    }
}

/// Occurrences of `needle` in `haystack`, overlapping ones included.
fn count_occurrences(haystack: &str, needle: &str) -> usize {
    let mut count = 0;
    let mut from = 0;
    while let Some(i) = haystack[from..].find(needle) {
        count += 1;
        let start = from + i;
        from = start + haystack[start..].chars().next().map_or(1, char::len_utf8);
    }
    count
}

fn edit_file(ctx: &ToolContext, input: EditInput) -> ToolOutput {
    if input.old_string.is_empty() {
        return ToolOutput::error(
            "old_string is empty; to create or overwrite a whole file use write_file",
        );
    }
    if input.old_string == input.new_string {
        return ToolOutput::error("old_string and new_string are identical; nothing would change");
    }
    let mut file =
        match Workspace::open(ctx.workspace()).and_then(|ws| ws.open_for_edit(&input.path)) {
            Ok(o) => o.file,
            Err(e) => return ToolOutput::error(e),
        };
    let mut bytes = Vec::new();
    if let Err(e) = file.read_to_end(&mut bytes) {
        return ToolOutput::error(format!("cannot read `{}`: {e}", input.path));
    }
    let content = match String::from_utf8(bytes) {
        Ok(s) => s,
        Err(_) => {
            return ToolOutput::error(format!(
                "`{}` is not UTF-8 text; cannot edit it",
                input.path
            ));
        }
    };
    match count_occurrences(&content, &input.old_string) {
        0 if !input.new_string.is_empty() && content.contains(&input.new_string) => {
            ToolOutput::ok(format!(
                "no change: old_string is not in {} but new_string is; the edit appears to be \
                 applied already",
                input.path
            ))
        }
        0 => ToolOutput::error(format!(
            "old_string was not found in {}; read the file again and copy the text exactly, \
             whitespace included",
            input.path
        )),
        1 => {
            let start = content.find(&input.old_string).unwrap_or(0);
            let updated = content.replacen(&input.old_string, &input.new_string, 1);
            if let Err(e) = rewrite(&mut file, updated.as_bytes()) {
                return ToolOutput::error(format!("cannot write `{}`: {e}", input.path));
            }
            let first_line = content[..start].matches('\n').count() + 1;
            let new_lines = input.new_string.matches('\n').count() + 1;
            let snippet: Vec<&str> = updated
                .lines()
                .skip(first_line - 1)
                .take(new_lines.min(20))
                .collect();
            ToolOutput::ok(format!(
                "edited {} (1 replacement at line {first_line}); the new text now reads:\n{}",
                input.path,
                numbered(snippet, first_line)
            ))
        }
        n => ToolOutput::error(format!(
            "old_string matches {n} times in {}; it must match exactly once. Add surrounding \
             lines to old_string to make it unique",
            input.path
        )),
    }
}

/// Replaces the whole content of the open `file` with `bytes`.
fn rewrite(file: &mut std::fs::File, bytes: &[u8]) -> std::io::Result<()> {
    file.set_len(0)?;
    file.rewind()?;
    file.write_all(bytes)
}

#[cfg(test)]
mod tests {
    use super::count_occurrences;

    #[test]
    fn overlapping_occurrences_are_counted() {
        assert_eq!(count_occurrences("aaa", "aa"), 2);
        assert_eq!(count_occurrences("ééé", "é"), 3);
        assert_eq!(count_occurrences("abc", "x"), 0);
    }
}
