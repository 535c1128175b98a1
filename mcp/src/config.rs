//! `[[agents.mcp]]`: one MCP server an agent uses, with the fields users already write in the
//! `mcpServers` entries of Claude Code, Cursor and the Claude Agent SDK, so a definition can be
//! copied over (`command`, `args`, `env`; or `type = "http"`, `url`, `headers`), and
//! Nightshift's own: which of its tools to offer, the class of a tool whose annotations say
//! wrong, and how long to wait.
//!
//! What it guarantees: [`McpServerConfig::check`] refuses a definition that could never work
//! — a name that cannot prefix a tool name, a stdio server without a command, an HTTP server
//! without an `http(s)` URL, fields of the other transport, the deprecated SSE transport, a
//! zero timeout — naming the key and what to write instead, before anything starts.

use std::collections::BTreeMap;

use nightshift_tools::ToolClass;
use serde::{Deserialize, Serialize};

/// How Nightshift reaches an MCP server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// A process started for the run, under its sandbox, spoken to over stdin and stdout.
    #[default]
    Stdio,
    /// Streamable HTTP (MCP 2025-03-26 and later).
    Http,
    /// The deprecated HTTP+SSE transport: refused with what to write instead.
    Sse,
}

/// One `[[agents.mcp]]` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// The server's name: its tools are offered as `mcp__<name>__<tool>`.
    pub name: String,
    /// `stdio` (the default when `command` is given) or `http`.
    #[serde(default, rename = "type")]
    pub transport: Transport,
    /// The program of a stdio server (found on the sandbox's PATH), and its arguments.
    #[serde(default)]
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    /// Variables of a stdio server; a value may name a secret as `{{secret:NAME}}`.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The endpoint of an HTTP server.
    #[serde(default)]
    pub url: Option<String>,
    /// Headers sent to an HTTP server; a value may name a secret as `{{secret:NAME}}`.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Only these tools (the server's own names) are offered; all when empty.
    #[serde(default)]
    pub allow: Vec<String>,
    /// These tools are never offered (applied after `allow`).
    #[serde(default)]
    pub deny: Vec<String>,
    /// A tool's class when its annotations say wrong or nothing (the server's tool name to
    /// `read_only`, `idempotent` or `side_effect`).
    #[serde(default)]
    pub classes: BTreeMap<String, ToolClass>,
    /// How long one call may take before it is an error (and, for a `side_effect` tool, an
    /// outcome not known).
    #[serde(default = "default_call_timeout")]
    pub timeout_seconds: u64,
    /// How long starting the server and listing its tools may take.
    #[serde(default = "default_startup_timeout")]
    pub startup_timeout_seconds: u64,
}

fn default_call_timeout() -> u64 {
    120
}

fn default_startup_timeout() -> u64 {
    30
}

/// A definition that cannot work: the key and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key} {message}")]
pub struct McpConfigError {
    pub key: String,
    pub message: String,
}

impl McpServerConfig {
    /// Whether its `allow` and `deny` let its tool `tool` (the server's own name) be offered.
    pub fn offers(&self, tool: &str) -> bool {
        (self.allow.is_empty() || self.allow.iter().any(|a| a == tool))
            && !self.deny.iter().any(|d| d == tool)
    }

    /// Whether this definition can work, for agent `agent` (`Err` names
    /// `agents.<agent>.mcp.<name>.<key>`).
    pub fn check(&self, agent: &str) -> Result<(), McpConfigError> {
        let key = |k: &str| format!("agents.{agent}.mcp.{}.{k}", self.name);
        let err = |k: &str, message: String| McpConfigError {
            key: key(k),
            message,
        };
        if !valid_server_name(&self.name) {
            return Err(McpConfigError {
                key: format!("agents.{agent}.mcp.name"),
                message: format!(
                    "'{}' cannot prefix a tool name: use 1 to 32 letters, digits, '-' or a \
                     single '_' (it becomes mcp__{}__<tool>)",
                    self.name, self.name
                ),
            });
        }
        for (what, value) in [
            ("timeout_seconds", self.timeout_seconds),
            ("startup_timeout_seconds", self.startup_timeout_seconds),
        ] {
            if !(1..=86_400).contains(&value) {
                return Err(err(what, format!("is {value}; use 1 to 86400 seconds")));
            }
        }
        match self.transport {
            Transport::Sse => Err(err(
                "type",
                "is \"sse\", the transport MCP deprecated in 2025-03-26: servers that still \
                 speak it mostly speak streamable HTTP too; write type = \"http\" with its \
                 endpoint"
                    .into(),
            )),
            Transport::Stdio => {
                if self.command.as_deref().is_none_or(|c| c.trim().is_empty()) {
                    return Err(err(
                        "command",
                        "is missing: a stdio server needs the program to start (or write \
                         type = \"http\" and a url for a remote server)"
                            .into(),
                    ));
                }
                if self.url.is_some() || !self.headers.is_empty() {
                    return Err(err(
                        "url",
                        "belongs to an HTTP server: write type = \"http\", or leave out url \
                         and headers"
                            .into(),
                    ));
                }
                Ok(())
            }
            Transport::Http => {
                let url = self.url.as_deref().unwrap_or("");
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(err(
                        "url",
                        format!(
                            "is '{url}': an HTTP server needs its http:// or https:// endpoint"
                        ),
                    ));
                }
                if self.command.is_some() || !self.args.is_empty() || !self.env.is_empty() {
                    return Err(err(
                        "command",
                        "belongs to a stdio server: an HTTP server has a url (and headers) \
                         only"
                            .into(),
                    ));
                }
                Ok(())
            }
        }
    }
}

/// Whether `name` can prefix tool names: 1 to 32 of `[A-Za-z0-9_-]`, no `__` (which
/// separates the parts of `mcp__<server>__<tool>`).
pub fn valid_server_name(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        && !name.contains("__")
        && !name.starts_with('_')
        && !name.ends_with('_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(json: serde_json::Value) -> McpServerConfig {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn a_claude_code_entry_reads_as_it_is_written() {
        let stdio = server(serde_json::json!({"name": "files", "command": "npx",
            "args": ["-y", "@modelcontextprotocol/server-filesystem", "."],
            "env": {"DEBUG": "1"}}));
        assert_eq!(stdio.transport, Transport::Stdio);
        stdio.check("a").unwrap();
        let http = server(serde_json::json!({"name": "linear", "type": "http",
            "url": "https://mcp.linear.app/mcp",
            "headers": {"Authorization": "Bearer {{secret:LINEAR_TOKEN}}"}}));
        assert_eq!(http.transport, Transport::Http);
        http.check("a").unwrap();
        assert_eq!(
            (http.timeout_seconds, http.startup_timeout_seconds),
            (120, 30)
        );
    }

    #[test]
    fn a_definition_that_cannot_work_is_refused_naming_the_key() {
        let cases = [
            (
                serde_json::json!({"name": "a__b", "command": "x"}),
                "agents.bot.mcp.name",
            ),
            (
                serde_json::json!({"name": "", "command": "x"}),
                "agents.bot.mcp.name",
            ),
            (
                serde_json::json!({"name": "s"}),
                "agents.bot.mcp.s.command is missing",
            ),
            (
                serde_json::json!({"name": "s", "command": "x", "url": "http://h"}),
                "agents.bot.mcp.s.url belongs to an HTTP server",
            ),
            (
                serde_json::json!({"name": "s", "type": "http", "url": "ftp://h"}),
                "agents.bot.mcp.s.url is 'ftp://h'",
            ),
            (
                serde_json::json!({"name": "s", "type": "http", "url": "https://h", "command": "x"}),
                "agents.bot.mcp.s.command belongs to a stdio server",
            ),
            (
                serde_json::json!({"name": "s", "type": "sse", "url": "https://h/sse"}),
                "write type = \"http\"",
            ),
            (
                serde_json::json!({"name": "s", "command": "x", "timeout_seconds": 0}),
                "agents.bot.mcp.s.timeout_seconds is 0",
            ),
        ];
        for (json, said) in cases {
            let err = server(json.clone()).check("bot").unwrap_err().to_string();
            assert!(err.contains(said), "{json}: {err}");
        }
        assert!(
            serde_json::from_value::<McpServerConfig>(
                serde_json::json!({"name": "s", "command": "x", "cmd": "y"})
            )
            .is_err(),
            "an unknown key is refused"
        );
    }

    #[test]
    fn server_names_fit_a_tool_name() {
        for ok in ["github", "my-server", "a_b", "x1"] {
            assert!(valid_server_name(ok), "{ok}");
        }
        for bad in [
            "",
            "a__b",
            "_a",
            "a_",
            "has space",
            "dot.ted",
            &"x".repeat(33),
        ] {
            assert!(!valid_server_name(bad), "{bad}");
        }
    }
}
