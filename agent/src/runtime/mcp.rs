//! The MCP servers' tools in the loop: listed into the run's log before a model call needs
//! them, offered from the log, classed and checked from the log.
//!
//! What it guarantees:
//! - **Listed once, then read from the log.** A server is listed (by the tool box, which
//!   starts it) before the first model call that could offer its tools, and again only when
//!   its session said its list changed; a listing is logged (`mcp_tools_listed`) only when it
//!   differs from the one the log holds. So every request of a run offers the same tools in
//!   the same bytes across resumes, daemons and server restarts, and the prompt cache holds.
//! - **Recovery never asks the server.** An interrupted call's class, and a call's input
//!   check, come from the logged listing; a tool the log does not list is a side effect and
//!   an input error.
//! - **The config still rules.** What the log lists is offered only as the agent's current
//!   `allow` and `deny` let it, and the current `classes` override a listed class, so a
//!   reload that denies a tool or corrects a class applies to runs already under way.
//! - **A server that cannot be listed never hangs the run:** the tool box bounds the start,
//!   and its failure has the job tried again (or fails the run, when it never will work).

use nightshift_llm::ToolSpec;
use nightshift_store::RunEnd;
use nightshift_tools::{InputSchema, ToolClass, ToolDefinition};
use nightshift_worker::JobOutcome;

use super::{AgentRuntime, Session, Stop};
use crate::config::AgentDef;
use crate::events::RunEvent;
use crate::ports::{PrepareError, RunStart};
use crate::state::RunState;

/// MCP tool `name` as the run may call it now, with its class: listed in the run's log, its
/// server still the agent's, allowed by the server's current `allow` and `deny`, and classed
/// by the current `classes` over what was listed (a reload applies to runs under way).
fn offered<'s>(
    agent: &AgentDef,
    state: &'s RunState,
    name: &str,
) -> Option<(&'s ToolDefinition, ToolClass)> {
    let (server, remote) = nightshift_mcp::split_name(name)?;
    let config = agent.config.mcp.iter().find(|s| s.name == server)?;
    if !config.offers(remote) {
        return None;
    }
    let tool = state.mcp_tool(name)?;
    Some((
        tool,
        config.classes.get(remote).copied().unwrap_or(tool.class),
    ))
}

/// The MCP tools the run's log lists for servers the agent still has, as their current
/// `allow` and `deny` let them be offered, sorted by name.
pub(super) fn specs(agent: &AgentDef, state: &RunState) -> Vec<ToolSpec> {
    agent
        .config
        .mcp
        .iter()
        .filter_map(|server| Some((server, state.mcp_tools.get(&server.name)?)))
        .flat_map(|(server, tools)| {
            tools.iter().filter(move |t| {
                nightshift_mcp::split_name(&t.name).is_some_and(|(_, r)| server.offers(r))
            })
        })
        .map(|t| ToolSpec {
            name: t.name.clone(),
            description: t.description.clone(),
            input_schema: t.input_schema.clone(),
        })
        .collect()
}

/// Whether `name` is an MCP tool's name (`mcp__<server>__<tool>`).
pub(super) fn is_mcp(name: &str) -> bool {
    nightshift_mcp::split_name(name).is_some()
}

/// The class of MCP tool `name` (see [`offered`]); one not offered is a side effect.
pub(super) fn class(agent: &AgentDef, state: &RunState, name: &str) -> ToolClass {
    offered(agent, state, name).map_or(ToolClass::SideEffect, |(_, class)| class)
}

/// Checks `input` against the logged schema of MCP tool `name`; `Err` is what the model is
/// told.
pub(super) fn check_input(
    agent: &AgentDef,
    state: &RunState,
    name: &str,
    input: &serde_json::Value,
) -> Result<(), String> {
    let Some((tool, _)) = offered(agent, state, name) else {
        return Err(format!(
            "{name} is not a tool of this run: its MCP server does not offer it (now); call \
             one of the tools you were given"
        ));
    };
    let schema = InputSchema::compile(&tool.input_schema).map_err(|e| {
        format!(
            "{name} cannot be called: its MCP server gave it an input schema that cannot be \
             used ({e})"
        )
    })?;
    schema.check(name, input).map_err(|e| e.to_string())
}

impl AgentRuntime {
    /// Lists the agent's MCP servers the run's log does not list yet (or whose list
    /// changed), logging each listing that differs from the log's. Returns the job's outcome
    /// when a server could not be listed.
    pub(super) async fn list_mcp(&self, s: &mut Session<'_>) -> Result<Option<JobOutcome>, Stop> {
        if s.agent.config.mcp.is_empty() || s.ctx.cancel.is_cancelled() {
            return Ok(None);
        }
        let listed: Vec<String> = s.state.mcp_tools.keys().cloned().collect();
        let start = RunStart {
            run_id: &s.run_id,
            context: s.context.as_ref(),
            workspace_commit: s.state.workspace_commit.as_deref(),
            store: s.ctx.lease.store(),
            notifies: false,
        };
        let listings = self
            .tools
            .mcp_listings(s.agent, start, listed, &s.ctx.cancel)
            .await;
        match listings {
            Ok(listings) => {
                for l in listings {
                    if s.state.mcp_tools.get(&l.server) == Some(&l.tools) {
                        continue;
                    }
                    tracing::info!(run_id = %s.run_id, server = %l.server,
                        tools = l.tools.len(), left_out = l.left_out.len(), "MCP tools listed");
                    s.log(RunEvent::McpToolsListed {
                        server: l.server,
                        tools: l.tools,
                        left_out: l.left_out,
                    })
                    .await?;
                }
                Ok(None)
            }
            Err(_) if s.ctx.cancel.is_cancelled() => Ok(None),
            Err(PrepareError::Transient(why)) => {
                tracing::warn!(run_id = %s.run_id, error = %why,
                    "an MCP server could not be listed; the job is tried again");
                Ok(Some(JobOutcome::retry(why)))
            }
            Err(PrepareError::Fatal(why)) => {
                s.finish(RunEnd::Failed { error: why }).await.map(Some)
            }
        }
    }
}
