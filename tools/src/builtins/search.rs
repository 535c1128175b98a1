//! `list_files` and `grep`: finding things in the run's workspace (both read_only).
//!
//! Guarantees: the walk starts at a directory opened beneath the workspace, opens every
//! directory and file beneath it too (see `paths`), never descends into a symlinked directory,
//! and never reads a file whose symlink points outside the workspace;
//! `.git` directories are skipped; results are sorted by path and listed relative to the
//! workspace (so they can be passed to `read_file` as they are); counts are capped with a
//! note saying so; a bad regex or glob is an `is_error` output quoting the parser's message.
//!
//! Memory is bounded by the answer, not by the workspace: a walk visits at most
//! [`MAX_WALK_ENTRIES`] entries (a note says when it stopped), and `grep` streams each file
//! line by line (see `lines`), holding at most [`MAX_GREP_LINE_BYTES`] of a line — a longer
//! line is searched in that first part only, and the answer says how many were — and skips
//! files over [`MAX_GREP_FILE_BYTES`] or that look binary, saying how many it skipped.

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use futures::future::BoxFuture;
use globset::{GlobBuilder, GlobMatcher};
use nix::dir::{Dir, Type};
use nix::fcntl::AtFlags;
use nix::sys::stat::{SFlag, fstatat};
use regex::RegexBuilder;
use serde::Deserialize;
use serde_json::{Value, json};

use super::lines::BoundedLines;
use super::{blocking, parse_input};
use crate::context::ToolContext;
use crate::output::{RedactedRead, cap_text};
use crate::paths::{Opened, PathError, Workspace, shown};
use crate::{Tool, ToolClass, ToolDefinition, ToolOutput};

const MAX_ENTRIES: usize = 1000;
const MAX_MATCHES: usize = 500;
const MAX_MATCH_LINE_CHARS: usize = 500;
/// Files larger than this are skipped by `grep` (the answer counts them).
pub(crate) const MAX_GREP_FILE_BYTES: u64 = 20 * 1024 * 1024;
/// Bytes of a line `grep` holds and searches; the rest of a longer line is not searched.
pub(crate) const MAX_GREP_LINE_BYTES: usize = 64 * 1024;
/// Entries a walk visits at most (files and directories), so a tree of millions of files
/// costs no more memory than this many paths.
pub(crate) const MAX_WALK_ENTRIES: usize = 200_000;

/// The entries a walk found, and whether it stopped at [`MAX_WALK_ENTRIES`].
struct Walked {
    entries: Vec<(PathBuf, bool)>,
    stopped: bool,
}

impl Walked {
    /// The note for an answer when the walk stopped early, else empty.
    fn note(&self) -> String {
        if self.stopped {
            format!(
                "[the walk stopped after {MAX_WALK_ENTRIES} entries; files past them were not \
                 looked at: narrow `path`]\n"
            )
        } else {
            String::new()
        }
    }
}

/// Entries under `root` (itself included when it is not a directory), as paths below the
/// workspace, sorted, skipping `.git` and not following symlinked directories: each directory
/// is opened beneath the workspace without following a symlink in its last component, so a
/// directory swapped for a symlink mid-walk is skipped, not entered. `is_dir = true` marks
/// directories. At most [`MAX_WALK_ENTRIES`] entries are visited.
fn walk(ws: &Workspace, root: &Opened) -> Walked {
    let mut out = Vec::new();
    if !root.metadata.is_dir() {
        out.push((root.rel.clone(), false));
        return Walked {
            entries: out,
            stopped: false,
        };
    }
    let mut stopped = false;
    // The root itself may be reached through a symlink that stays inside: use its open file.
    let root_fd = root.file.try_clone().ok().map(OwnedFd::from);
    let mut stack = vec![(root.rel.clone(), root_fd)];
    while let Some((dir, fd)) = stack.pop() {
        let room = MAX_WALK_ENTRIES.saturating_sub(out.len());
        if room == 0 {
            stopped = true;
            break;
        }
        let fd = match fd {
            Some(fd) => fd,
            None => match ws.open_walk_dir(&dir) {
                Some(fd) => fd,
                None => continue,
            },
        };
        let Ok(mut handle) = Dir::from_fd(fd) else {
            continue;
        };
        let entries: Vec<(OsString, Option<Type>)> = handle
            .iter()
            .filter_map(Result::ok)
            .map(|e| {
                let name = OsStr::from_bytes(e.file_name().to_bytes()).to_os_string();
                (name, e.file_type())
            })
            .filter(|(name, _)| name != "." && name != "..")
            .take(room + 1)
            .collect();
        if entries.len() > room {
            stopped = true;
        }
        let mut children: Vec<(OsString, bool)> = entries
            .into_iter()
            .map(|(name, kind)| {
                let is_dir = match kind {
                    Some(kind) => kind == Type::Directory,
                    // The file system did not say: look without following a symlink.
                    None => fstatat(
                        handle.as_fd(),
                        name.as_os_str(),
                        AtFlags::AT_SYMLINK_NOFOLLOW,
                    )
                    .is_ok_and(|st| {
                        SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR
                    }),
                };
                (name, is_dir)
            })
            .collect();
        children.sort();
        children.truncate(room);
        for (name, is_dir) in children.into_iter().rev() {
            let path = dir.join(&name);
            if is_dir {
                if name != ".git" {
                    out.push((path.clone(), true));
                    stack.push((path, None));
                }
            } else {
                out.push((path, false));
            }
        }
    }
    out.sort();
    Walked {
        entries: out,
        stopped,
    }
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
    let (ws, root) = match open_root(ctx, shown_path) {
        Ok(r) => r,
        Err(e) => return ToolOutput::error(e.to_string()),
    };
    let matcher = match glob_matcher(input.pattern.as_deref()) {
        Ok(m) => m,
        Err(e) => return e,
    };
    let mut lines = Vec::new();
    let mut more = 0usize;
    let walked = walk(&ws, &root);
    for (path, is_dir) in &walked.entries {
        let (path, is_dir) = (path.clone(), *is_dir);
        if path == root.rel && is_dir {
            continue;
        }
        if let Some(m) = &matcher {
            let below = path.strip_prefix(&root.rel).unwrap_or(&path);
            let name_only = path.file_name().map(Path::new).unwrap_or(below);
            if is_dir || !(m.is_match(below) || m.is_match(name_only)) {
                continue;
            }
        }
        if lines.len() >= MAX_ENTRIES {
            more += 1;
            continue;
        }
        let rel = shown(&path);
        lines.push(if is_dir { format!("{rel}/") } else { rel });
    }
    if lines.is_empty() {
        return ToolOutput::ok(match &input.pattern {
            Some(p) => format!(
                "no files under `{shown_path}` match `{p}`{}",
                with_newline_before(&walked.note())
            ),
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
    text.push_str(&walked.note());
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

/// The directory or file a search starts at, opened beneath the workspace.
fn open_root(ctx: &ToolContext, shown_path: &str) -> Result<(Workspace, Opened), PathError> {
    let ws = Workspace::open(ctx.workspace())?;
    let root = ws.open_existing(shown_path)?;
    Ok((ws, root))
}

/// Why a file was not searched, or how it was.
#[derive(Debug, Default)]
struct Skipped {
    /// Files over [`MAX_GREP_FILE_BYTES`].
    large: usize,
    /// Lines longer than [`MAX_GREP_LINE_BYTES`], searched in their first part only.
    long_lines: usize,
}

/// The matching lines of `rel` (line number, redacted text), when it is a searchable text
/// file: opened beneath the workspace (a symlink leading out is not followed), a regular
/// file, not over [`MAX_GREP_FILE_BYTES`] (counted in `skipped`), not binary. Streams the
/// file: at most [`MAX_GREP_LINE_BYTES`] of a line are held, and at most `room` matches
/// kept (the rest counted in the returned total).
fn search_file(
    ctx: &ToolContext,
    ws: &Workspace,
    rel: &Path,
    regex: &regex::Regex,
    room: usize,
    skipped: &mut Skipped,
) -> (Vec<(usize, String)>, usize) {
    let mut found = Vec::new();
    let mut count = 0usize;
    let Some(opened) = ws.open_walk_file(rel) else {
        return (found, count);
    };
    if opened.metadata.len() > MAX_GREP_FILE_BYTES {
        skipped.large += 1;
        return (found, count);
    }
    let mut file = opened.file;
    let mut probe = Vec::new();
    if file.by_ref().take(8192).read_to_end(&mut probe).is_err() || probe.contains(&0) {
        return (found, count);
    }
    // Matched and cut (at MAX_MATCH_LINE_CHARS) only once redacted.
    let raw = probe.as_slice().chain(file).take(MAX_GREP_FILE_BYTES);
    let redacted = RedactedRead::new(raw, ctx.secrets().redactor().clone());
    let mut lines = BoundedLines::new(redacted, MAX_GREP_LINE_BYTES);
    let mut number = 0usize;
    while let Ok(Some(line)) = lines.next_line() {
        number += 1;
        skipped.long_lines += usize::from(line.is_cut());
        let text = String::from_utf8_lossy(&line.head[..line.head.len().min(MAX_GREP_LINE_BYTES)]);
        if !regex.is_match(&text) {
            continue;
        }
        count += 1;
        if found.len() < room {
            let shown: String = text.chars().take(MAX_MATCH_LINE_CHARS).collect();
            let cut = if shown.len() < text.len() || line.is_cut() {
                "…"
            } else {
                ""
            };
            found.push((number, format!("{shown}{cut}")));
        }
    }
    (found, count)
}

/// `notes` on a line of their own after a one-line answer (nothing when empty).
fn with_newline_before(notes: &str) -> String {
    if notes.is_empty() {
        String::new()
    } else {
        format!("\n{notes}")
    }
}

/// Notes on what `grep` did not search.
fn grep_notes(skipped: &Skipped) -> String {
    let mut notes = String::new();
    if skipped.large > 0 {
        notes.push_str(&format!(
            "[{} files over {} MiB were not searched; use run_command (e.g. `grep -n`) for them]\n",
            skipped.large,
            MAX_GREP_FILE_BYTES >> 20
        ));
    }
    if skipped.long_lines > 0 {
        notes.push_str(&format!(
            "[{} lines longer than {} KiB were searched in their first {} KiB only]\n",
            skipped.long_lines,
            MAX_GREP_LINE_BYTES >> 10,
            MAX_GREP_LINE_BYTES >> 10
        ));
    }
    notes
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
    let (ws, root) = match open_root(ctx, shown_path) {
        Ok(r) => r,
        Err(e) => return ToolOutput::error(e.to_string()),
    };
    let matcher = match glob_matcher(input.glob.as_deref()) {
        Ok(m) => m,
        Err(e) => return e,
    };
    let mut lines = Vec::new();
    let mut more = 0usize;
    let mut files = 0usize;
    let mut skipped = Skipped::default();
    let walked = walk(&ws, &root);
    for (path, is_dir) in &walked.entries {
        if *is_dir {
            continue;
        }
        if let Some(m) = &matcher {
            let below = path.strip_prefix(&root.rel).unwrap_or(path);
            let name_only = path.file_name().map(Path::new).unwrap_or(below);
            if !(m.is_match(below) || m.is_match(name_only)) {
                continue;
            }
        }
        let room = MAX_MATCHES.saturating_sub(lines.len());
        let (found, count) = search_file(ctx, &ws, path, &regex, room, &mut skipped);
        let rel = shown(path);
        let hit = count > 0;
        more += count - found.len();
        for (number, text) in found {
            lines.push(format!("{rel}:{number}:{text}"));
        }
        files += usize::from(hit);
    }
    let notes = grep_notes(&skipped) + &walked.note();
    if lines.is_empty() {
        return ToolOutput::ok(format!(
            "no matches for `{}` under `{shown_path}`{}",
            input.pattern,
            with_newline_before(&notes)
        ));
    }
    let mut text = lines.join("\n");
    text.push('\n');
    if more > 0 {
        text.push_str(&format!(
            "[… {more} more matching lines not shown ({files} files matched); narrow the pattern, `path` or `glob`]\n"
        ));
    }
    text.push_str(&notes);
    let (content, artifact) = cap_text(ctx, "grep", &text);
    ToolOutput::ok(content).with_artifact(artifact)
}
