//! The manual's links hold: every relative link in `README.md`, `CHANGELOG.md`, `docs/` and
//! `ops/` points to a file that exists, every `#anchor` to a heading of the file it names (as
//! GitHub and mdBook make heading ids: lowercase, spaces to `-`, punctuation other than `-` and
//! `_` dropped, a repeated heading numbered `-1`, `-2`, …), and every page under `docs/` is in
//! the book's `SUMMARY.md`. mdBook builds the book but checks none of this.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The Markdown files whose links are checked, relative to the root.
fn pages() -> Vec<PathBuf> {
    let root = root();
    let mut pages = vec![PathBuf::from("README.md"), PathBuf::from("CHANGELOG.md")];
    for dir in ["docs", "ops"] {
        markdown_under(&root, Path::new(dir), &mut pages);
    }
    pages.retain(|p| root.join(p).is_file());
    pages.sort();
    pages
}

fn markdown_under(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
        return;
    };
    for entry in entries {
        let entry = entry.unwrap();
        let rel = dir.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            markdown_under(root, &rel, out);
        } else if rel.extension().is_some_and(|e| e == "md") {
            out.push(rel);
        }
    }
}

/// The lines of `text` outside fenced code blocks, with their numbers (from 1).
fn prose(text: &str) -> Vec<(usize, &str)> {
    let mut fence: Option<&str> = None;
    let mut lines = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let marker = if trimmed.starts_with("```") {
            Some("```")
        } else if trimmed.starts_with("~~~") {
            Some("~~~")
        } else {
            None
        };
        match (fence, marker) {
            (None, Some(m)) => fence = Some(m),
            (Some(f), Some(m)) if f == m => fence = None,
            (None, None) => lines.push((i + 1, line)),
            _ => {}
        }
    }
    lines
}

/// `line` with each inline code span replaced by `code` (so that brackets and parentheses in
/// code are not taken for links, while a link whose text is code is still found).
fn without_code(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        let ticks = rest[start..].chars().take_while(|c| *c == '`').count();
        let fence = &rest[start..start + ticks];
        out.push_str(&rest[..start]);
        match rest[start + ticks..].find(fence) {
            Some(end) => {
                out.push_str("code");
                rest = &rest[start + ticks + end + ticks..];
            }
            None => {
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// The targets of the inline links and images (`[text](target)`, `![alt](target)`) and of
/// the link definitions (`[name]: target`) on `line`.
fn targets(line: &str) -> Vec<String> {
    let line = without_code(line);
    let mut found = Vec::new();
    if let Some(def) = line.trim_start().strip_prefix('[')
        && let Some((_, target)) = def.split_once("]: ")
    {
        found.push(target.split_whitespace().next().unwrap_or("").to_string());
    }
    let mut rest = line.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let mut depth = 0usize;
        let mut end = after.len();
        for (i, c) in after.char_indices() {
            match c {
                '(' => depth += 1,
                ')' if depth == 0 => {
                    end = i;
                    break;
                }
                ')' => depth -= 1,
                _ => {}
            }
        }
        let inside = after[..end].trim();
        // A title after the destination: [x](path "title").
        let target = inside
            .split_once(" \"")
            .map_or(inside, |(t, _)| t)
            .trim_matches(['<', '>']);
        found.push(target.to_string());
        rest = &after[end.min(after.len())..];
    }
    found
}

/// The id GitHub and mdBook give a heading with this text.
fn slug(heading: &str) -> String {
    // The text as rendered: code spans keep their content, links their text, emphasis
    // markers go.
    let mut text = String::new();
    let mut rest = heading;
    while let Some(open) = rest.find('[') {
        text.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find("](") {
            Some(close) if !after[..close].contains('[') => {
                text.push_str(&after[..close]);
                let tail = &after[close + 2..];
                rest = tail.find(')').map_or("", |p| &tail[p + 1..]);
            }
            _ => {
                text.push('[');
                rest = after;
            }
        }
    }
    text.push_str(rest);
    text.chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '-' || c == '_' {
                Some(c.to_lowercase().collect::<String>())
            } else if c == ' ' {
                Some("-".to_string())
            } else {
                None
            }
        })
        .collect()
}

/// The anchors of a Markdown file: its headings' ids (repeats numbered) and explicit
/// `<a id="…">` / `<a name="…">` anchors.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut anchors = BTreeSet::new();
    for (_, line) in prose(text) {
        for attr in ["<a id=\"", "<a name=\""] {
            let mut rest = line;
            while let Some(at) = rest.find(attr) {
                let value = &rest[at + attr.len()..];
                if let Some(end) = value.find('"') {
                    anchors.insert(value[..end].to_string());
                }
                rest = &rest[at + attr.len()..];
            }
        }
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let id = slug(line[hashes..].trim().trim_end_matches('#').trim());
        let n = seen.entry(id.clone()).or_insert(0);
        anchors.insert(if *n == 0 {
            id.clone()
        } else {
            format!("{id}-{n}")
        });
        *n += 1;
    }
    anchors
}

/// `base/rel` with `.` and `..` folded, relative to the root; `None` when it climbs out.
fn join(base: &Path, rel: &str) -> Option<PathBuf> {
    let joined = base.join(rel);
    let mut parts: Vec<Component> = Vec::new();
    for c in joined.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                parts.pop()?;
            }
            c => parts.push(c),
        }
    }
    Some(parts.iter().collect())
}

fn is_external(target: &str) -> bool {
    let scheme = target.split_once(':').map(|(s, _)| s);
    scheme.is_some_and(|s| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    })
}

#[test]
fn every_relative_link_and_anchor_in_the_manual_resolves() {
    let root = root();
    let mut cache: BTreeMap<PathBuf, BTreeSet<String>> = BTreeMap::new();
    let mut anchors_of = |file: &Path| -> BTreeSet<String> {
        cache
            .entry(file.to_path_buf())
            .or_insert_with(|| anchors(&std::fs::read_to_string(root.join(file)).unwrap()))
            .clone()
    };
    let mut broken = Vec::new();
    let pages = pages();
    assert!(pages.len() > 10, "found only {pages:?}");
    for page in &pages {
        let text = std::fs::read_to_string(root.join(page)).unwrap();
        let dir = page.parent().unwrap_or(Path::new(""));
        for (n, line) in prose(&text) {
            for target in targets(line) {
                if target.is_empty() || is_external(&target) {
                    continue;
                }
                let at = format!("{}:{n}: ({target})", page.display());
                let (path, anchor) = match target.split_once('#') {
                    Some((p, a)) => (p, Some(a)),
                    None => (target.as_str(), None),
                };
                let file = if path.is_empty() {
                    page.clone()
                } else if path.starts_with('/') {
                    broken.push(format!("{at}: an absolute path; link relative to the page"));
                    continue;
                } else {
                    match join(dir, path) {
                        Some(f) => f,
                        None => {
                            broken.push(format!("{at}: leads out of the repository"));
                            continue;
                        }
                    }
                };
                if !root.join(&file).exists() {
                    broken.push(format!("{at}: {} does not exist", file.display()));
                    continue;
                }
                if let Some(anchor) = anchor {
                    if file.extension().is_none_or(|e| e != "md") {
                        continue;
                    }
                    if !anchors_of(&file).contains(anchor) {
                        broken.push(format!(
                            "{at}: {} has no heading with the id `{anchor}`",
                            file.display()
                        ));
                    }
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "broken links in the manual:\n  - {}",
        broken.join("\n  - ")
    );
}

#[test]
fn every_page_under_docs_is_in_the_books_summary() {
    let root = root();
    let summary_path = root.join("docs/SUMMARY.md");
    let summary = std::fs::read_to_string(&summary_path).unwrap();
    let mut listed = BTreeSet::new();
    for (_, line) in prose(&summary) {
        for target in targets(line) {
            if target.is_empty() || is_external(&target) {
                continue;
            }
            let path = target.split('#').next().unwrap();
            listed.insert(join(Path::new("docs"), path).unwrap());
        }
    }
    let mut pages = Vec::new();
    markdown_under(&root, Path::new("docs"), &mut pages);
    let missing: Vec<_> = pages
        .iter()
        .filter(|p| p.as_path() != Path::new("docs/SUMMARY.md") && !listed.contains(*p))
        .collect();
    assert!(
        missing.is_empty(),
        "pages under docs/ that docs/SUMMARY.md does not list (the book would leave them \
         out): {missing:?}"
    );
}

#[test]
fn slugs_follow_github_and_mdbook() {
    assert_eq!(slug("The command sandbox"), "the-command-sandbox");
    assert_eq!(
        slug("Concurrency, wakeups, background commands and approvals"),
        "concurrency-wakeups-background-commands-and-approvals"
    );
    assert_eq!(
        slug("`[agents.tool_overrides.TOOL]`"),
        "agentstool_overridestool"
    );
    assert_eq!(
        slug("`[hooks.delivery_id]`, `[hooks.event]`"),
        "hooksdelivery_id-hooksevent"
    );
    assert_eq!(
        slug("Redaction: every secret the daemon knows, everywhere, before any cut"),
        "redaction-every-secret-the-daemon-knows-everywhere-before-any-cut"
    );
    assert_eq!(slug("A [linked](x.md) heading"), "a-linked-heading");
    let text = "# A\n## A\n```\n# not a heading\n```\n## `b`\n";
    assert_eq!(
        anchors(text),
        BTreeSet::from(["a".into(), "a-1".into(), "b".into()])
    );
    assert_eq!(
        targets("see [`[database]`](#database) and ![x](shot.png \"t\"), not `[a](b)`"),
        ["#database", "shot.png"]
    );
}

#[test]
fn the_glossary_gives_each_term_once() {
    let text = std::fs::read_to_string(root().join("docs/concepts/glossary.md")).unwrap();
    let mut seen = BTreeSet::new();
    let mut twice = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("| **") else {
            continue;
        };
        let term = rest.split("**").next().unwrap_or_default().to_lowercase();
        if !seen.insert(term.clone()) {
            twice.push(term);
        }
    }
    assert!(seen.len() > 40, "the glossary's terms are read: {seen:?}");
    assert!(
        twice.is_empty(),
        "terms given twice in the glossary: {twice:?}"
    );
}
