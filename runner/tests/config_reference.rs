//! `docs/reference/config.md` documents exactly the keys `nightshift.toml` accepts.
//!
//! The config structs refuse unknown keys (`deny_unknown_fields`), and serde's refusal lists
//! the keys the table accepts ("unknown field `x`, expected one of `a`, `b`, …"). For each
//! table, a minimal config with one bogus key in that table is parsed, and the accepted keys
//! read from the error are compared with the rows the reference documents under that table's
//! heading. So a field added to a struct without a row here fails, and so does a row whose key
//! the structs no longer take. A table the reference documents must be probed below, and a
//! key documented as a table must have a section of its own.

use std::collections::{BTreeMap, BTreeSet};

use nightshift_runner::config::Config;

/// The reference, read at run time so a doc-only change needs no rebuild of the crate.
fn reference() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/reference/config.md");
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
}

const BOGUS: &str = "nightshift_bogus_key";

/// An agent with only its required keys, for the tables inside `[[agents]]`.
const AGENT: &str = "[[agents]]\nname = \"a\"\nprovider = \"p\"\nmodel = \"m\"\n";
/// A provider with only its required key.
const PROVIDER: &str = "[providers.p]\nkind = \"scripted\"\n";
/// A hook with only its required keys.
const HOOK: &str = "[[hooks]]\nname = \"h\"\nsignature = \"none\"\n";

/// Every table of the file, as the reference's headings name it (without the brackets), and
/// a config that puts `{BOGUS}` into that table. `{BOGUS}` stands for the bogus key's line.
fn probes() -> Vec<(&'static str, String)> {
    let at = |prefix: &str, table: &str| format!("{prefix}{table}\n{{BOGUS}}\n");
    vec![
        ("", "{BOGUS}\n".to_string()),
        ("database", at("", "[database]")),
        ("worker", at("", "[worker]")),
        ("server", at("", "[server]")),
        (
            "server.tokens",
            "[[server.tokens]]\nname = \"t\"\n{BOGUS}\n".to_string(),
        ),
        ("runtime", at("", "[runtime]")),
        (
            "runtime.secrets",
            "[[runtime.secrets]]\nname = \"S\"\n{BOGUS}\n".to_string(),
        ),
        ("runtime.background", at("", "[runtime.background]")),
        ("log", at("", "[log]")),
        ("telemetry", at("", "[telemetry]")),
        ("sandbox", at("", "[sandbox]")),
        ("providers.NAME", format!("{PROVIDER}{{BOGUS}}\n")),
        ("providers.NAME.retry", at(PROVIDER, "[providers.p.retry]")),
        (
            "providers.NAME.breaker",
            at(PROVIDER, "[providers.p.breaker]"),
        ),
        (
            "providers.NAME.timeouts",
            at(PROVIDER, "[providers.p.timeouts]"),
        ),
        ("agents", format!("{AGENT}{{BOGUS}}\n")),
        (
            "agents.tool_overrides.TOOL",
            at(AGENT, "[agents.tool_overrides.lint]"),
        ),
        (
            "agents.thinking",
            format!("{AGENT}[agents.thinking]\ntype = \"enabled\"\n{{BOGUS}}\n"),
        ),
        ("agents.budgets", at(AGENT, "[agents.budgets]")),
        ("agents.context", at(AGENT, "[agents.context]")),
        ("agents.pricing", at(AGENT, "[agents.pricing]")),
        ("agents.wakeups", at(AGENT, "[agents.wakeups]")),
        ("agents.approvals", at(AGENT, "[agents.approvals]")),
        (
            "agents.approvals.rules",
            format!("{AGENT}[[agents.approvals.rules]]\ntool = \"t\"\n{{BOGUS}}\n"),
        ),
        ("agents.notify", at(AGENT, "[[agents.notify]]")),
        ("agents.sandbox", at(AGENT, "[agents.sandbox]")),
        ("agents.github", at(AGENT, "[agents.github]")),
        ("agents.workspace", at(AGENT, "[agents.workspace]")),
        (
            "agents.workspace.checkout",
            at(AGENT, "[agents.workspace.checkout]"),
        ),
        (
            "agents.mcp",
            format!("{AGENT}[[agents.mcp]]\nname = \"s\"\n{{BOGUS}}\n"),
        ),
        ("command_tools", at("", "[[command_tools]]")),
        ("schedules", at("", "[[schedules]]")),
        ("hooks", format!("{HOOK}{{BOGUS}}\n")),
        ("hooks.hmac", at(HOOK, "[hooks.hmac]")),
        ("hooks.delivery_id", at(HOOK, "[hooks.delivery_id]")),
        ("hooks.event", at(HOOK, "[hooks.event]")),
        ("hooks.routes", at(HOOK, "[[hooks.routes]]")),
        ("prices.\"MODEL\"", at("", "[prices.\"m\"]")),
        ("github", at("", "[github]")),
        ("github.apps", at("", "[[github.apps]]")),
        ("retention", at("", "[retention]")),
        (
            "retention.keep_days_by_status",
            at("", "[retention.keep_days_by_status]"),
        ),
        ("retention.agents.NAME", at("", "[retention.agents.a]")),
        (
            "retention.agents.NAME.keep_days_by_status",
            at("", "[retention.agents.a.keep_days_by_status]"),
        ),
    ]
}

/// The keys the table `name` accepts, read from the refusal of `toml`'s bogus key.
fn accepted(name: &str, toml: &str) -> BTreeSet<String> {
    let text = toml.replace("{BOGUS}", &format!("{BOGUS} = 1"));
    let err = match Config::parse(&text, "probe.toml") {
        Ok(_) => panic!("[{name}]: a config with `{BOGUS}` in it was accepted:\n{text}"),
        Err(e) => e.to_string(),
    };
    let marker = format!("unknown field `{BOGUS}`");
    let Some((_, rest)) = err.split_once(&marker) else {
        panic!("[{name}]: expected serde's unknown-field error, got: {err}\nfor:\n{text}");
    };
    // "…, expected one of `a`, `b`", "…, expected `a` or `b`", "…, expected `a`", or
    // "…, there are no fields".
    code_spans(rest).into_iter().collect()
}

/// The contents of the `code` spans of `line`, in order.
fn code_spans(line: &str) -> Vec<String> {
    line.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// One documented table: its keys and the type cell of each.
#[derive(Debug, Default)]
struct Section {
    keys: BTreeMap<String, String>,
}

/// The tables the reference documents: each heading naming a table as a code span (`[name]`,
/// `[[name]]`, several for tables that share their keys) starts one, as does the heading
/// "Top level"; its rows are the lines `| `key` | type | …`. Any other heading ends it.
fn documented(text: &str) -> BTreeMap<String, Section> {
    let mut sections: BTreeMap<String, Section> = BTreeMap::new();
    let mut current: Vec<String> = Vec::new();
    let mut in_fence = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        if let Some(heading) = line.strip_prefix('#') {
            let heading = heading.trim_start_matches('#').trim();
            current = if heading == "Top level" {
                vec![String::new()]
            } else {
                code_spans(heading)
                    .into_iter()
                    .filter(|s| s.starts_with('[') && s.ends_with(']'))
                    .map(|s| s.trim_matches(['[', ']']).to_string())
                    .collect()
            };
            for name in &current {
                assert!(
                    !sections.contains_key(name),
                    "config.md documents [{name}] twice"
                );
                sections.insert(name.clone(), Section::default());
            }
            continue;
        }
        if current.is_empty() || !line.starts_with("| `") {
            continue;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // ["", "`key`", "type", …]
        let key = cells[1];
        assert!(
            key.len() > 2
                && key.starts_with('`')
                && key.ends_with('`')
                && key.matches('`').count() == 2,
            "config.md: the first cell of a row is one `key`: {line}"
        );
        let key = key.trim_matches('`').to_string();
        let kind = cells.get(2).copied().unwrap_or_default().to_string();
        for name in &current {
            let section = sections.get_mut(name).unwrap();
            assert!(
                section.keys.insert(key.clone(), kind.clone()).is_none(),
                "config.md lists `{key}` twice under [{name}]"
            );
        }
    }
    sections
}

/// `[name]` for messages (`the top level` for the file itself).
fn shown(name: &str) -> String {
    if name.is_empty() {
        "the top level".to_string()
    } else {
        format!("[{name}]")
    }
}

#[test]
fn the_reference_documents_every_key_the_config_accepts_and_no_other() {
    let docs = documented(&reference());
    let probes = probes();
    let probed: BTreeSet<&str> = probes.iter().map(|(n, _)| *n).collect();
    let mut problems = Vec::new();

    for name in docs.keys() {
        if !probed.contains(name.as_str()) {
            problems.push(format!(
                "config.md documents {} but this test does not probe it: add it to probes()",
                shown(name)
            ));
        }
    }
    for (name, toml) in &probes {
        let accepted = accepted(name, toml);
        let Some(section) = docs.get(*name) else {
            problems.push(format!(
                "config.md has no section for {} (a heading naming it as `[{name}]`), which \
                 accepts: {accepted:?}",
                shown(name)
            ));
            continue;
        };
        let documented: BTreeSet<String> = section.keys.keys().cloned().collect();
        for key in accepted.difference(&documented) {
            problems.push(format!(
                "{} accepts `{key}`, but config.md does not document it",
                shown(name)
            ));
        }
        for key in documented.difference(&accepted) {
            problems.push(format!(
                "config.md documents `{key}` under {}, but the config refuses it",
                shown(name)
            ));
        }
    }
    // A key whose value is a table (of fixed keys) has its own section, so its keys are
    // checked too. Maps ("map of …") hold names the user chooses.
    for (name, section) in &docs {
        for (key, kind) in &section.keys {
            if kind == "table" || kind.starts_with("array of tables") {
                let child = if name.is_empty() {
                    key.clone()
                } else {
                    format!("{name}.{key}")
                };
                if !docs.contains_key(&child) {
                    problems.push(format!(
                        "config.md gives `{key}` under {} the type `{kind}` but has no section \
                         for {}",
                        shown(name),
                        shown(&child)
                    ));
                }
            }
        }
    }
    assert!(
        problems.is_empty(),
        "docs/reference/config.md and the config structs disagree:\n  - {}",
        problems.join("\n  - ")
    );
}

#[test]
fn the_probe_reads_the_accepted_keys_from_the_error() {
    // One field, two fields, many: serde words each differently.
    assert_eq!(
        accepted("log", "[log]\n{BOGUS}\n"),
        BTreeSet::from(["format".to_string()])
    );
    let rules = probes()
        .into_iter()
        .find(|(name, _)| *name == "agents.approvals.rules")
        .unwrap()
        .1;
    assert_eq!(
        accepted("agents.approvals.rules", &rules),
        BTreeSet::from(["tool".to_string(), "input_contains".to_string()])
    );
    assert!(accepted("", "{BOGUS}\n").contains("agents"));
}
