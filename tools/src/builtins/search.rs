//! `list_files` and `grep`: finding things in the run's workspace (both read_only).
//!
//! Guarantees: the walk starts at a path confined to the workspace, never descends into a
//! symlinked directory, and never reads a file whose symlink points outside the workspace;
//! `.git` directories are skipped; results are sorted by path and listed relative to the
//! workspace (so they can be passed to `read_file` as they are); counts are capped with a
//! note saying so; a bad regex or glob is an `is_error` output quoting the parser's message.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use futures::future::BoxFuture;
use globset::{GlobBuilder, GlobMatcher};
use regex::RegexBuilder;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{blocking, parse_input};
use crate::context::ToolContext;
use crate::output::cap_text;
use crate::paths::{Access, relative, resolve};
use crate::{Tool, ToolClass, ToolDefinition, ToolOutput};

const MAX_ENTRIES: usize = 1000;
const MAX_MATCHES: usize = 500;
const MAX_MATCH_LINE_CHARS: usize = 500;
const MAX_GREP_FILE_BYTES: u64 = 20 * 1024 * 1024;

/// Files under `root` (itself included when it is a file), sorted, skipping `.git` and not
/// following symlinked directories. Directories are reported with `is_dir = true`.
fn walk(root: &Path) -> Vec<(PathBuf, bool)> {
    let mut out = Vec::new();
    if !root.is_dir() {
        out.push((root.to_path_buf(), false));
        return out;
    }
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        let mut children: Vec<_> = entries.filter_map(Result::ok).collect();
        children.sort_by_key(|e| e.file_name());
        for entry in children.into_iter().rev() {
            let path = entry.path();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                if entry.file_name() != ".git" {
                    out.push((path.clone(), true));
                    stack.push(path);
                }
            } else {
                out.push((path, false));
            }
        }
    }
    out.sort();
    out
}

fn glob_matcher(pattern: Option<&str>) -> Result<Option<GlobMatcher>, ToolOutput> {
    let Some(pattern) = pattern.filter(|p| !p.is_empty()) else {
        return Ok(None);
    };
    GlobBuilder::new(pattern)
        .literal_separator(false)
        .build()
        .map(|g| Some(g.compile_matcher()))
        .map_err(|e| ToolOutput::error(format!("invalid glob `{pattern}`: {e}")))
}

/// `list_files {path?, pattern?}`: files under a workspace directory.
#[derive(Debug, Default, Clone, Copy)]
pub struct ListFiles;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListInput {
    path: Option<String>,
    pattern: Option<String>,
}

impl Tool for ListFiles {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: "list_files".into(),
            description: format!(
                "List files under a workspace directory (default: the whole workspace), \
                 recursively and sorted; directories end with `/`. `pattern` is a glob matched \
                 against the path below `path` (`*` also matches `/`, e.g. `*.rs`, \
                 `src/**/mod.rs`); with a pattern only files are listed. At most {MAX_ENTRIES} \
                 entries."
            ),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "Directory relative to the workspace (default `.`)."},
                    "pattern": {"type": "string", "description": "Glob to filter files, e.g. `*.rs`."}
                },
                "additionalProperties": false
            }),
            class: ToolClass::ReadOnly,
        }
    }

    fn call<'a>(&'a self, ctx: &'a ToolContext, input: Value) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let input: ListInput = match parse_input("list_files", input) {
                Ok(i) => i,
                Err(e) => return e,
            };
            let ctx = ctx.clone();
            blocking(move || list_files(&ctx, input)).await
        })
    }
}

fn list_files(ctx: &ToolContext, input: ListInput) -> ToolOutput {
    let shown_path = input.path.as_deref().unwrap_or(".");
    let root = match resolve(ctx.workspace(), shown_path, Access::Existing) {
        Ok(p) => p,
        Err(e) => return ToolOutput::error(e),
    };
    let matcher = match glob_matcher(input.pattern.as_deref()) {
        Ok(m) => m,
        Err(e) => return e,
    };
    let mut lines = Vec::new();
    let mut more = 0usize;
    for (path, is_dir) in walk(&root) {
        if path == root && is_dir {
            continue;
        }
        if let Some(m) = &matcher {
            let below = path.strip_prefix(&root).unwrap_or(&path);
            let name_only = path.file_name().map(Path::new).unwrap_or(below);
            if is_dir || !(m.is_match(below) || m.is_match(name_only)) {
                continue;
            }
        }
        if lines.len() >= MAX_ENTRIES {
            more += 1;
            continue;
        }
        let rel = relative(ctx.workspace(), &path);
        lines.push(if is_dir { format!("{rel}/") } else { rel });
    }
    if lines.is_empty() {
        return ToolOutput::ok(match &input.pattern {
            Some(p) => format!("no files under `{shown_path}` match `{p}`"),
            None => format!("`{shown_path}` is empty"),
        });
    }
    let mut text = lines.join("\n");
    text.push('\n');
    if more > 0 {
        text.push_str(&format!(
            "[… {more} more entries not shown; narrow `path` or `pattern`]\n"
        ));
    }
    let (content, artifact) = cap_text(ctx, "list_files", &text);
    ToolOutput::ok(content).with_artifact(artifact)
}

/// `grep {pattern, path?, glob?}`: regex search over workspace files.
#[derive(Debug, Default, Clone, Copy)]
pub struct Grep;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GrepInput {
    pattern: String,
    path: Option<String>,
    glob: Option<String>,
}

impl Tool for Grep {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: "grep".into(),
            description: format!(
                "Search workspace files for a regular expression (Rust regex syntax; `(?i)` for \
                 case-insensitive). Prints `path:line:text` for each matching line, at most \
                 {MAX_MATCHES} matches. `path` limits the search to a file or directory; `glob` \
                 filters file names (e.g. `*.rs`). Binary files are skipped."
            ),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "Regular expression."},
                    "path": {"type": "string", "description": "File or directory relative to the workspace (default `.`)."},
                    "glob": {"type": "string", "description": "Only search files matching this glob."}
                },
                "required": ["pattern"],
                "additionalProperties": false
            }),
            class: ToolClass::ReadOnly,
        }
    }

    fn call<'a>(&'a self, ctx: &'a ToolContext, input: Value) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let input: GrepInput = match parse_input("grep", input) {
                Ok(i) => i,
                Err(e) => return e,
            };
            let ctx = ctx.clone();
            blocking(move || grep(&ctx, input)).await
        })
    }
}

/// The text of `path` if it is a searchable text file inside the workspace.
fn searchable_text(ctx: &ToolContext, path: &Path) -> Option<String> {
    let real = path.canonicalize().ok()?;
    if !real.starts_with(ctx.workspace()) || !real.is_file() {
        return None;
    }
    let file = fs::File::open(&real).ok()?;
    if file.metadata().ok()?.len() > MAX_GREP_FILE_BYTES {
        return None;
    }
    let mut bytes = Vec::new();
    file.take(MAX_GREP_FILE_BYTES)
        .read_to_end(&mut bytes)
        .ok()?;
    if bytes[..bytes.len().min(8192)].contains(&0) {
        return None;
    }
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

fn grep(ctx: &ToolContext, input: GrepInput) -> ToolOutput {
    let regex = match RegexBuilder::new(&input.pattern)
        .size_limit(16 << 20)
        .build()
    {
        Ok(r) => r,
        Err(e) => return ToolOutput::error(format!("invalid regex `{}`: {e}", input.pattern)),
    };
    let shown_path = input.path.as_deref().unwrap_or(".");
    let root = match resolve(ctx.workspace(), shown_path, Access::Existing) {
        Ok(p) => p,
        Err(e) => return ToolOutput::error(e),
    };
    let matcher = match glob_matcher(input.glob.as_deref()) {
        Ok(m) => m,
        Err(e) => return e,
    };
    let mut lines = Vec::new();
    let mut more = 0usize;
    let mut files = 0usize;
    for (path, is_dir) in walk(&root) {
        if is_dir {
            continue;
        }
        if let Some(m) = &matcher {
            let below = path.strip_prefix(&root).unwrap_or(&path);
            let name_only = path.file_name().map(Path::new).unwrap_or(below);
            if !(m.is_match(below) || m.is_match(name_only)) {
                continue;
            }
        }
        let Some(text) = searchable_text(ctx, &path) else {
            continue;
        };
        // Matched and cut (at MAX_MATCH_LINE_CHARS) only once redacted.
        let text = ctx.secrets().redact(&text);
        let rel = relative(ctx.workspace(), &path);
        let mut hit = false;
        for (i, line) in text.lines().enumerate() {
            if !regex.is_match(line) {
                continue;
            }
            hit = true;
            if lines.len() >= MAX_MATCHES {
                more += 1;
                continue;
            }
            let shown: String = line.chars().take(MAX_MATCH_LINE_CHARS).collect();
            let cut = if shown.len() < line.len() { "…" } else { "" };
            lines.push(format!("{rel}:{}:{shown}{cut}", i + 1));
        }
        files += usize::from(hit);
    }
    if lines.is_empty() {
        return ToolOutput::ok(format!(
            "no matches for `{}` under `{shown_path}`",
            input.pattern
        ));
    }
    let mut text = lines.join("\n");
    text.push('\n');
    if more > 0 {
        text.push_str(&format!(
            "[… {more} more matching lines not shown ({files} files matched); narrow the pattern, `path` or `glob`]\n"
        ));
    }
    let (content, artifact) = cap_text(ctx, "grep", &text);
    ToolOutput::ok(content).with_artifact(artifact)
}
