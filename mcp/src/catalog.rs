//! What an MCP server's listed tools become for the model: Nightshift tools named
//! `mcp__<server>__<tool>`, filtered by the server's `allow` and `deny`, each with a class.
//!
//! What it guarantees (all decided here, without I/O):
//! - **A class from the annotations, never guessed optimistic.** `readOnlyHint` → `read_only`;
//!   `idempotentHint` (not read-only, not destructive) → `idempotent`; `destructiveHint`, or
//!   no annotations at all → `side_effect`, which runs at most once across crashes. The
//!   config's `classes` wins over any hint.
//! - **Byte-stable.** The tools are sorted by name and carry only what the server listed, so
//!   the same listing gives the same request bytes (and the provider's prompt cache holds).
//! - **Every name is one a provider accepts** (`^[a-zA-Z0-9_-]{1,64}$`): a tool whose full name
//!   would not be is left out and reported, as is a tool whose input schema is not a JSON
//!   object schema.

use nightshift_tools::{ToolClass, ToolDefinition};
use rmcp::model::Tool;
use serde_json::Value;

use crate::config::McpServerConfig;

/// The longest tool name the providers accept.
pub const MAX_TOOL_NAME: usize = 64;

/// The prefix of every MCP tool's name.
pub const PREFIX: &str = "mcp__";

/// One tool of a server, as offered.
#[derive(Debug, Clone, PartialEq)]
pub struct McpTool {
    /// What the model sees (`mcp__<server>__<tool>`), with its class.
    pub definition: ToolDefinition,
    /// The name the server knows it by.
    pub remote_name: String,
}

/// A server's tools as offered, sorted by name, and those left out with why.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Catalog {
    pub tools: Vec<McpTool>,
    /// (the server's tool name, why it is not offered), for the log.
    pub left_out: Vec<(String, String)>,
}

/// `mcp__<server>__<tool>`.
pub fn tool_name(server: &str, tool: &str) -> String {
    format!("{PREFIX}{server}__{tool}")
}

/// The server and the server's tool name of an `mcp__<server>__<tool>` name.
pub fn split_name(name: &str) -> Option<(&str, &str)> {
    name.strip_prefix(PREFIX)?
        .split_once("__")
        .filter(|(s, t)| !s.is_empty() && !t.is_empty())
}

/// The class of a listed tool: the config's override, else from its annotations.
pub fn class_of(server: &McpServerConfig, tool: &Tool) -> ToolClass {
    if let Some(class) = server.classes.get(tool.name.as_ref()) {
        return *class;
    }
    let Some(a) = &tool.annotations else {
        return ToolClass::SideEffect;
    };
    if a.read_only_hint == Some(true) {
        ToolClass::ReadOnly
    } else if a.destructive_hint == Some(true) {
        ToolClass::SideEffect
    } else if a.idempotent_hint == Some(true) {
        ToolClass::Idempotent
    } else {
        ToolClass::SideEffect
    }
}

/// The tools `server` offers of those it listed.
pub fn catalog(server: &McpServerConfig, listed: &[Tool]) -> Catalog {
    let mut out = Catalog::default();
    for tool in listed {
        let remote = tool.name.to_string();
        if !server.offers(&remote) {
            continue;
        }
        let name = tool_name(&server.name, &remote);
        if let Err(why) = check_name(&name) {
            out.left_out.push((remote, why));
            continue;
        }
        let schema = Value::Object((*tool.input_schema).clone());
        if schema.get("type").and_then(Value::as_str) != Some("object") {
            out.left_out.push((
                remote,
                "its inputSchema is not a JSON Schema of type \"object\"".into(),
            ));
            continue;
        }
        let description = tool
            .description
            .as_deref()
            .or(tool.title.as_deref())
            .unwrap_or("")
            .to_string();
        out.tools.push(McpTool {
            definition: ToolDefinition {
                name,
                description,
                input_schema: schema,
                class: class_of(server, tool),
            },
            remote_name: remote,
        });
    }
    out.tools
        .sort_by(|a, b| a.definition.name.cmp(&b.definition.name));
    out.tools
        .dedup_by(|a, b| a.definition.name == b.definition.name);
    out
}

/// Whether `name` is a tool name every provider accepts.
fn check_name(name: &str) -> Result<(), String> {
    if name.len() > MAX_TOOL_NAME {
        return Err(format!(
            "its name as offered, {name}, is over {MAX_TOOL_NAME} characters: shorten the \
             server's name"
        ));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return Err(format!(
            "its name as offered, {name}, has characters a model's tool name cannot hold \
             (only letters, digits, '_' and '-')"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rmcp::model::ToolAnnotations;

    use super::*;

    fn server(json: serde_json::Value) -> McpServerConfig {
        let mut base = serde_json::json!({"name": "gh", "command": "x"});
        base.as_object_mut()
            .unwrap()
            .extend(json.as_object().unwrap().clone());
        serde_json::from_value(base).unwrap()
    }

    fn tool(name: &str, annotations: Option<ToolAnnotations>) -> Tool {
        let schema = serde_json::json!({"type": "object", "properties": {}});
        let mut t = Tool::new(
            name.to_string(),
            format!("does {name}"),
            Arc::new(schema.as_object().unwrap().clone()),
        );
        t.annotations = annotations;
        t
    }

    fn hints(
        read_only: Option<bool>,
        destructive: Option<bool>,
        idempotent: Option<bool>,
    ) -> ToolAnnotations {
        let mut a = ToolAnnotations::default();
        a.read_only_hint = read_only;
        a.destructive_hint = destructive;
        a.idempotent_hint = idempotent;
        a
    }

    #[test]
    fn annotations_give_the_class_and_none_is_a_side_effect() {
        let s = server(serde_json::json!({}));
        let cases = [
            (None, ToolClass::SideEffect),
            (Some(hints(None, None, None)), ToolClass::SideEffect),
            (Some(hints(Some(true), None, None)), ToolClass::ReadOnly),
            (
                Some(hints(Some(false), Some(false), Some(true))),
                ToolClass::Idempotent,
            ),
            (
                Some(hints(None, Some(true), Some(true))),
                ToolClass::SideEffect,
            ),
            (Some(hints(None, Some(false), None)), ToolClass::SideEffect),
        ];
        for (a, class) in cases {
            assert_eq!(class_of(&s, &tool("t", a.clone())), class, "{a:?}");
        }
        let over = server(serde_json::json!({"classes": {"t": "idempotent"}}));
        assert_eq!(class_of(&over, &tool("t", None)), ToolClass::Idempotent);
    }

    #[test]
    fn the_catalog_is_filtered_named_and_sorted() {
        let s = server(
            serde_json::json!({"allow": ["b_list", "a_create", "c_drop"], "deny": ["c_drop"]}),
        );
        let listed = [
            tool("c_drop", None),
            tool("b_list", None),
            tool("a_create", None),
            tool("d_other", None),
        ];
        let c = catalog(&s, &listed);
        let names: Vec<&str> = c.tools.iter().map(|t| t.definition.name.as_str()).collect();
        assert_eq!(names, ["mcp__gh__a_create", "mcp__gh__b_list"]);
        assert_eq!(c.tools[0].remote_name, "a_create");
        assert_eq!(c.tools[0].definition.description, "does a_create");
        // The same tools listed in another order give the same catalog.
        let mut again = listed.clone();
        again.reverse();
        assert_eq!(catalog(&s, &again), c);
    }

    #[test]
    fn a_tool_no_provider_could_take_is_left_out_saying_why() {
        let s = server(serde_json::json!({}));
        let mut bad_schema = tool("bad_schema", None);
        bad_schema.input_schema = Arc::new(
            serde_json::json!({"type": "string"})
                .as_object()
                .unwrap()
                .clone(),
        );
        let listed = [
            tool(&"x".repeat(60), None),
            tool("has.dot", None),
            bad_schema,
            tool("fine", None),
        ];
        let c = catalog(&s, &listed);
        assert_eq!(c.tools.len(), 1);
        let why: Vec<&str> = c.left_out.iter().map(|(_, w)| w.as_str()).collect();
        assert!(why[0].contains("over 64 characters"), "{why:?}");
        assert!(why[1].contains("cannot hold"), "{why:?}");
        assert!(
            why[2].contains("not a JSON Schema of type \"object\""),
            "{why:?}"
        );
    }

    #[test]
    fn names_split_back_into_server_and_tool() {
        assert_eq!(
            split_name(&tool_name("gh", "create_issue")),
            Some(("gh", "create_issue"))
        );
        assert_eq!(split_name("mcp__gh__a__b"), Some(("gh", "a__b")));
        for not in ["read_file", "mcp__gh", "mcp____t", "mcp__gh__"] {
            assert_eq!(split_name(not), None, "{not}");
        }
    }
}
