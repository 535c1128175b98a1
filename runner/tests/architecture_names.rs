//! `docs/architecture.md` is the map of the code: every name it gives must exist.
//!
//! Each `code span` of the page that names code is checked against the tree:
//! - a path (`store/src/batch.rs`, `queue/binds.rs`, `egress/`): a file or directory of the
//!   repository ends with it; `file.rs::name`: that file defines `name`;
//! - a Rust name (`Store::settle`, `Backend`, `dispatch!`, `spawn_listener`): each of its
//!   last two segments is defined somewhere in the repository's Rust — an item (`fn`,
//!   `struct`, `enum`, `trait`, `type`, `mod`, `const`, `static`, `macro_rules!`) or an enum
//!   variant.
//!
//! Spans that name no code (routes, SQL words, GitHub's fields) are skipped by shape or listed
//! in [`NOT_CODE`].

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Spans of the page that are words of other systems, not names in this code.
const NOT_CODE: &[&str] = &[
    "NOTIFY",
    "LISTEN",
    "external_id",
    "traceparent",
    "Link",
    // An event's stored name (`RunEvent::ToolStarted`).
    "tool_started",
    // An event's stored name (`RunEvent::McpToolsListed`).
    "mcp_tools_listed",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every file of the repository (not `target/`, `.git/` or hidden directories), relative.
fn tree(dir: &Path, base: &Path, found: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with('.') || name == "target" || name == "node_modules" {
            continue;
        }
        if path.is_dir() {
            tree(&path, base, found);
        } else {
            let relative = path.strip_prefix(base).unwrap();
            found.push(relative.to_string_lossy().replace('\\', "/"));
        }
    }
}

/// Whether `code` defines `name` as an item or an enum variant.
fn defines(code: &str, name: &str) -> bool {
    let items = [
        "fn ",
        "struct ",
        "enum ",
        "trait ",
        "type ",
        "mod ",
        "const ",
        "static ",
        "macro_rules! ",
    ];
    code.lines().any(|line| {
        let line = line.trim_start();
        let line = line.strip_prefix("pub(crate) ").unwrap_or(line);
        let line = line.strip_prefix("pub ").unwrap_or(line);
        let line = line.strip_prefix("async ").unwrap_or(line);
        let named = |rest: &str| {
            rest.strip_prefix(name)
                .is_some_and(|after| !after.starts_with(|c: char| c.is_alphanumeric() || c == '_'))
        };
        items
            .iter()
            .any(|item| line.strip_prefix(item).is_some_and(named))
            // An enum variant: `Name,`, `Name {`, `Name(` at the start of a line.
            || (name.starts_with(char::is_uppercase)
                && named(line)
                && line[name.len()..].starts_with([',', ' ', '(', '{']))
    })
}

/// Whether `span` looks like a path in the tree.
fn is_path(span: &str) -> bool {
    !span.contains(' ') && !span.starts_with('/') && (span.contains('/') || span.contains(".rs"))
}

/// Whether `span` looks like a Rust name.
fn is_name(span: &str) -> bool {
    let bare = span.strip_suffix('!').unwrap_or(span);
    !bare.is_empty()
        && bare.split("::").all(|segment| {
            segment.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                && segment
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
}

#[test]
fn every_name_the_architecture_map_gives_exists() {
    let page = std::fs::read_to_string(root().join("docs/architecture.md")).unwrap();
    let mut files = Vec::new();
    tree(&root(), &root(), &mut files);
    let rust: Vec<String> = files
        .iter()
        .filter(|f| f.ends_with(".rs"))
        .map(|f| std::fs::read_to_string(root().join(f)).unwrap())
        .collect();
    let defined = |name: &str| rust.iter().any(|code| defines(code, name));

    let spans: BTreeSet<&str> = page.split('`').skip(1).step_by(2).collect();
    let mut checked = 0;
    let mut missing = Vec::new();
    for span in spans {
        if NOT_CODE.contains(&span) || span.chars().all(|c| c.is_ascii_uppercase() || c == '_') {
            continue;
        }
        if is_path(span) {
            let (path, item) = match span.split_once("::") {
                Some((path, item)) => (path, Some(item)),
                None => (span, None),
            };
            let dir = path.ends_with('/');
            let holders: Vec<&String> = files
                .iter()
                .filter(|f| {
                    if dir {
                        f.starts_with(path) || f.contains(&format!("/{path}"))
                    } else {
                        *f == path || f.ends_with(&format!("/{path}"))
                    }
                })
                .collect();
            let found = match item {
                None => !holders.is_empty(),
                Some(item) => holders
                    .iter()
                    .any(|f| defines(&std::fs::read_to_string(root().join(f)).unwrap(), item)),
            };
            if !found {
                missing.push(span);
            }
            checked += 1;
        } else if is_name(span) {
            let bare = span.strip_suffix('!').unwrap_or(span);
            let segments: Vec<&str> = bare.split("::").collect();
            let last_two = &segments[segments.len().saturating_sub(2)..];
            if !last_two.iter().all(|s| defined(s)) {
                missing.push(span);
            }
            checked += 1;
        }
    }
    assert!(
        missing.is_empty(),
        "docs/architecture.md names what the code does not have (rename it in the page, or \
         add it to NOT_CODE when it is not a name in this code): {missing:?}"
    );
    assert!(checked > 60, "only {checked} names checked");
}
