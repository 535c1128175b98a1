//! `write_file` and `edit_file`: changing text files inside the run's workspace
//! (`read_file` is in `read_file`).
//!
//! Guarantees: no path outside the workspace is ever read or written: every file is opened
//! beneath a handle on the workspace, resolved by the kernel (see `paths`), and then read or
//! written through that same open file;
//! `write_file` writes exactly `content`, creating parent directories;
//! `edit_file` changes the file only when `old_string` occurs exactly once (overlapping
//! occurrences counted), otherwise it says how many matches there were and leaves the file
//! untouched. `edit_file` loads the file whole, so it refuses a file over [`MAX_EDIT_BYTES`]
//! (by its size when opened, and again if more than that can be read from it) before
//! loading more than that, saying what to use instead. Running `write_file` or `edit_file`
//! twice has the effect of running it once (an edit already applied reports so instead of
//! failing), hence class `idempotent`.

use std::io::{Read, Seek, Write};

use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{blocking, numbered, parse_input};
use crate::context::ToolContext;
use crate::paths::{Workspace, shown};
use crate::{Tool, ToolClass, ToolDefinition, ToolOutput};

/// Bytes of a file `edit_file` loads at most; a larger file is refused, not loaded.
pub(crate) const MAX_EDIT_BYTES: u64 = 8 * 1024 * 1024;
/// Characters of a line shown in an edit's snippet.
const MAX_SNIPPET_LINE_CHARS: usize = 2000;

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
        Err(e) => return ToolOutput::error(e.to_string()),
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
    let opened = match Workspace::open(ctx.workspace()).and_then(|ws| ws.open_for_edit(&input.path))
    {
        Ok(o) => o,
        Err(e) => return ToolOutput::error(e.to_string()),
    };
    if opened.metadata.len() > MAX_EDIT_BYTES {
        return ToolOutput::error(too_large_to_edit(&input.path, opened.metadata.len()));
    }
    let mut file = opened.file;
    let mut bytes = Vec::new();
    if let Err(e) = (&mut file).take(MAX_EDIT_BYTES + 1).read_to_end(&mut bytes) {
        return ToolOutput::error(format!("cannot read `{}`: {e}", input.path));
    }
    if bytes.len() as u64 > MAX_EDIT_BYTES {
        // It grew since it was opened: still not loaded past the cap.
        return ToolOutput::error(too_large_to_edit(&input.path, bytes.len() as u64));
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
            let snippet: Vec<String> = updated
                .lines()
                .skip(first_line - 1)
                .take(new_lines.min(20))
                .map(snippet_line)
                .collect();
            ToolOutput::ok(format!(
                "edited {} (1 replacement at line {first_line}); the new text now reads:\n{}",
                input.path,
                numbered(snippet.iter().map(String::as_str), first_line)
            ))
        }
        n => ToolOutput::error(format!(
            "old_string matches {n} times in {}; it must match exactly once. Add surrounding \
             lines to old_string to make it unique",
            input.path
        )),
    }
}

/// The refusal of a file over [`MAX_EDIT_BYTES`] (`size` bytes or more).
fn too_large_to_edit(path: &str, size: u64) -> String {
    format!(
        "`{path}` is too large for edit_file ({size} bytes; edit_file loads at most {} MiB); \
         nothing was changed. Edit it with run_command instead (e.g. `sed -i 's/old/new/' \
         {path}`), or find the place first with grep",
        MAX_EDIT_BYTES >> 20
    )
}

/// A line of an edit's snippet, cut at [`MAX_SNIPPET_LINE_CHARS`].
fn snippet_line(line: &str) -> String {
    match line.char_indices().nth(MAX_SNIPPET_LINE_CHARS) {
        Some((at, _)) => format!("{}… [line cut]", &line[..at]),
        None => line.to_string(),
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
    use super::{count_occurrences, snippet_line, too_large_to_edit};

    #[test]
    fn a_too_large_file_is_refused_naming_the_cap_and_what_to_do() {
        let msg = too_large_to_edit("big.txt", 1 << 31);
        assert!(
            msg.contains("2147483648 bytes; edit_file loads at most 8 MiB")
                && msg.contains("nothing was changed")
                && msg.contains("run_command"),
            "{msg}"
        );
        assert_eq!(snippet_line("abc"), "abc");
        assert!(snippet_line(&"é".repeat(3000)).ends_with("é… [line cut]"));
    }

    #[test]
    fn overlapping_occurrences_are_counted() {
        assert_eq!(count_occurrences("aaa", "aa"), 2);
        assert_eq!(count_occurrences("ééé", "é"), 3);
        assert_eq!(count_occurrences("abc", "x"), 0);
    }
}
