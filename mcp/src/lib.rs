//! The MCP servers an agent uses, from the client side: their config (`[[agents.mcp]]`, the
//! fields of Claude Code's and the Claude Agent SDK's `mcpServers`), their tools as
//! Nightshift tools (`mcp__<server>__<tool>`, each with a durability class from its
//! annotations), their results as tool outputs, and sessions over stdio and streamable HTTP
//! built on the official Rust SDK (`rmcp`).
//!
//! What it guarantees: the decisions — which tools are offered, their names, classes and
//! order, what a result says — are pure functions of the config and what the server listed
//! or answered ([`catalog`], [`result`]), so the same listing always gives the same request
//! bytes; every wait on a server is bounded ([`session`]); and no process is started here:
//! the caller spawns a stdio server under the run's sandbox and hands over its pipes.

pub mod catalog;
pub mod config;
pub mod result;
pub mod session;

pub use catalog::{Catalog, McpTool, catalog, split_name, tool_name};
pub use config::{McpConfigError, McpServerConfig, Transport};
pub use result::to_output;
pub use session::{McpError, McpSession, http_client};
