//! Every SQL statement gets exactly the parameters its placeholders ask for.
//!
//! The store binds parameters by hand, by position (`.bind(…)` in order), and SQLite binds a
//! missing parameter as NULL and ignores an extra one without a word — so a bind added to a
//! statement's code but not to its SQL file (or the other way round, or to one backend's file
//! only) would change what it writes silently. This test reads the store's source: for each
//! `sql!(dir, "name")` it counts the binds of the query the statement is sent with, and
//! checks that the rendered SQL file of each backend it runs on uses placeholders `1..=binds`,
//! each at least once. It also checks that every SQL file is sent by some code.
//!
//! How a statement's binds are found, from its `sql!`:
//! - its query chain up to where it is sent (`.execute(`, `.fetch…(`): `.bind(` calls and the
//!   bind macros (`bind_event_row!`: as many as the macro's body has);
//! - a statement handed to the writer's list helpers (`fetch_in_transaction`,
//!   `begin_fetching`, `commit_fetching`): one, the JSON list bound to `?1`;
//! - a statement returned by a function (`claim_statement`): the chain where that function's
//!   answer is sent.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Where a query is sent.
const SENT: &[&str] = &[
    ".execute(",
    ".fetch_one(",
    ".fetch_optional(",
    ".fetch_all(",
    ".fetch(",
];

/// The writer's helpers that bind one JSON list to `?1`.
const LIST_HELPERS: &[&str] = &["fetch_in_transaction", "begin_fetching", "commit_fetching"];

fn manifest() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every file under `dir` ending in `ext`.
fn files(dir: &Path, ext: &str, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files(&path, ext, found);
        } else if path.extension().is_some_and(|e| e == ext) {
            found.push(path);
        }
    }
}

/// A source file's production code: up to its test module, without comment lines.
fn production(text: &str) -> String {
    let code = text.split("#[cfg(test)]").next().unwrap_or_default();
    code.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The binds each `bind_…!` macro makes.
fn bind_macros(sources: &BTreeMap<PathBuf, String>) -> BTreeMap<String, usize> {
    let mut macros = BTreeMap::new();
    for code in sources.values() {
        for (at, _) in code.match_indices("macro_rules! bind_") {
            let rest = &code[at + "macro_rules! ".len()..];
            let name = rest
                .split(|c: char| !c.is_alphanumeric() && c != '_')
                .next()
                .unwrap();
            let body = &rest[..rest.find("\n}").expect("a macro ends at column 0")];
            macros.insert(format!("{name}!("), body.matches(".bind(").count());
        }
    }
    macros
}

/// The binds of the chain starting at `rest`, up to where it is sent; `None` when it is not
/// sent before the next function starts.
fn chain_binds(rest: &str, macros: &BTreeMap<String, usize>) -> Option<usize> {
    let sent = SENT.iter().filter_map(|s| rest.find(s)).min()?;
    let next_fn = rest.find("fn ").unwrap_or(usize::MAX);
    if next_fn < sent {
        return None;
    }
    let chain = &rest[..sent];
    let by_macros: usize = macros
        .iter()
        .map(|(name, n)| chain.matches(name.as_str()).count() * n)
        .sum();
    Some(chain.matches(".bind(").count() + by_macros)
}

/// The name of the function `code[..at]` is inside.
fn enclosing_fn(code: &str, at: usize) -> &str {
    let start = code[..at]
        .rfind("fn ")
        .expect("a statement inside a function")
        + 3;
    let rest = &code[start..];
    &rest[..rest.find(['(', '<']).unwrap()]
}

/// The binds of the statement whose `sql!` ends at `end` in `code`.
fn binds_of(code: &str, start: usize, end: usize, macros: &BTreeMap<String, usize>) -> usize {
    let before = code[..start]
        .trim_end_matches("crate::backend::")
        .trim_end_matches('$')
        .trim_end();
    // `helper(` or `helper::<T>(` right before the statement.
    let callee = before
        .strip_suffix('(')
        .map(|head| match head.strip_suffix('>') {
            Some(generic) => &generic[..generic.rfind("::<").unwrap_or(0)],
            None => head,
        });
    if callee.is_some_and(|c| LIST_HELPERS.iter().any(|h| c.ends_with(h))) {
        return 1;
    }
    if let Some(n) = chain_binds(&code[end..], macros) {
        return n;
    }
    // Returned by its function: counted where that function's answer is sent.
    let name = enclosing_fn(code, start);
    let call = format!("{name}(");
    let sent_at = code
        .match_indices(&call)
        .map(|(i, _)| i)
        .find(|&i| !code[..i].ends_with("fn "))
        .unwrap_or_else(|| panic!("{name} returns a statement that is never sent"));
    chain_binds(&code[sent_at..], macros)
        .unwrap_or_else(|| panic!("the statement {name} returns is not sent where it is called"))
}

/// The placeholder numbers `sql` uses (`?N` on SQLite, `$N` on PostgreSQL), outside comments.
fn placeholders(sql: &str, backend: &str) -> BTreeSet<usize> {
    let sigil = if backend == "sqlite" { '?' } else { '$' };
    let mut found = BTreeSet::new();
    for line in sql.lines() {
        let line = line.split("--").next().unwrap_or_default();
        for (at, _) in line.match_indices(sigil) {
            let digits: String = line[at + 1..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            if let Ok(n) = digits.parse() {
                found.insert(n);
            }
        }
    }
    found
}

#[test]
fn every_statement_gets_the_parameters_its_placeholders_ask_for() {
    let mut paths = Vec::new();
    files(&manifest().join("src"), "rs", &mut paths);
    let sources: BTreeMap<PathBuf, String> = paths
        .into_iter()
        .map(|p| {
            let code = production(&std::fs::read_to_string(&p).unwrap());
            (p, code)
        })
        .collect();
    let macros = bind_macros(&sources);
    assert!(
        macros.get("bind_event_row!(") == Some(&5),
        "the bind macros are read: {macros:?}"
    );

    let mut checked = BTreeSet::new();
    let mut wrong = Vec::new();
    for (path, code) in &sources {
        for (start, _) in code.match_indices("sql!(") {
            if code[..start].ends_with("macro_rules! ") {
                continue;
            }
            let end = start + code[start..].find(')').unwrap() + 1;
            let args: Vec<&str> = code[start + 5..end - 1]
                .split(',')
                .map(|a| a.trim().trim_matches('"'))
                .filter(|a| !a.is_empty())
                .collect();
            let [dir, name] = args[..] else {
                panic!("{}: sql!({args:?})", path.display());
            };
            let backends: &[&str] = match dir {
                "$dir" => &["sqlite", "postgres"],
                "sqlite" => &["sqlite"],
                "postgres" => &["postgres"],
                other => panic!("{}: sql! of {other:?}", path.display()),
            };
            let binds = binds_of(code, start, end, &macros);
            for backend in backends {
                let sql = nightshift_store::statement(backend, name)
                    .unwrap_or_else(|| panic!("no store/sql/{backend}/{name}.sql"));
                let used = placeholders(sql, backend);
                if used != (1..=binds).collect() {
                    wrong.push(format!(
                        "{}: {backend}/{name}.sql uses placeholders {used:?}, its query binds {binds}",
                        path.strip_prefix(manifest()).unwrap().display()
                    ));
                }
                checked.insert(format!("{backend}/{name}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));

    let mut sql_files = Vec::new();
    files(&manifest().join("sql"), "sql", &mut sql_files);
    let unsent: Vec<String> = sql_files
        .iter()
        .map(|p| {
            let relative = p.strip_prefix(manifest().join("sql")).unwrap();
            relative.with_extension("").display().to_string()
        })
        .filter(|name| !checked.contains(name))
        .collect();
    assert!(
        unsent.is_empty(),
        "SQL files no code sends (remove them, or send them with sql!): {unsent:?}"
    );
    assert!(checked.len() > 200, "{} statements checked", checked.len());
}
