//! What the loop needs from the outside, as two small traits: a way to call a model and a
//! way to run a tool. The runner implements them with the real providers and tools; tests
//! can too. Keeping them here keeps the loop independent of any one provider or tool set.

use futures::future::BoxFuture;
use nightshift_llm::{ModelRequest, ModelResponse, ToolSpec};
use tokio_util::sync::CancellationToken;

use crate::config::AgentDef;
use nightshift_tools::{ToolClass, ToolOutput};

/// Why a model call failed, as the loop needs to know it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelFailure {
    /// The model cannot be reached for now: retries and fallbacks were used up on errors
    /// that may pass (rate limits, overload, network, malformed replies), or its circuit is
    /// open. The run waits without spending an attempt, up to the agent's outage limit.
    /// `error` is the provider's real last error; `retry_in` says when it is worth trying
    /// again (the breaker's next probe, or the provider's `retry-after`), when known.
    Unavailable {
        error: String,
        retry_in: Option<std::time::Duration>,
    },
    /// The request can never succeed as is (bad request, auth, refused model): the run fails.
    Fatal(String),
    /// The conversation is longer than the model's window: compact once, then fail.
    ContextTooLong(String),
    /// The cancellation token fired during the call.
    Cancelled,
}

/// Calls models for agents.
pub trait ModelGateway: Send + Sync {
    /// Sends `req` for `agent` (through its fallback chain); the response names the model
    /// that answered.
    fn call<'a>(
        &'a self,
        agent: &'a AgentDef,
        req: &'a ModelRequest,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ModelResponse, ModelFailure>>;
}

/// One tool call to run.
#[derive(Debug, Clone, Copy)]
pub struct ToolCall<'a> {
    pub run_id: &'a str,
    pub call_id: &'a str,
    pub name: &'a str,
    pub input: &'a serde_json::Value,
    /// Unique per call across the run and stable across re-runs of the same call:
    /// `{run_id}:{turn}:{call_id}` (see [`crate::calls`]).
    pub idempotency_key: &'a str,
    /// What the run knows about what started it (the stored run context), if anything.
    pub context: Option<&'a serde_json::Value>,
    /// The store: what a tool asks of the daemon's durable records (who makes a check run).
    pub store: &'a nightshift_store::Store,
}

/// The run a job is about to work on, for [`ToolBox::prepare`].
#[derive(Debug, Clone, Copy)]
pub struct RunStart<'a> {
    pub run_id: &'a str,
    /// What the run knows about what started it (the stored run context), if anything.
    pub context: Option<&'a serde_json::Value>,
    /// The commit an earlier job checked the run's workspace out at: it must be that one
    /// again, whatever the ref names now.
    pub workspace_commit: Option<&'a str>,
    /// The store, to read the run again (it may end while it is being prepared).
    pub store: &'a nightshift_store::Store,
    /// Whether the run's end is written to the outbox (set when it was enqueued): what is
    /// finished from there (a check run) is only started for such a run.
    pub notifies: bool,
}

/// A workspace checked out for a run, as [`crate::RunEvent::WorkspacePrepared`] logs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedWorkspace {
    pub repo: String,
    pub git_ref: String,
    pub commit: String,
    /// The setup commands run after the checkout.
    pub setup: Vec<String>,
}

/// What one MCP server offers a run, as [`crate::RunEvent::McpToolsListed`] logs it.
#[derive(Debug, Clone, PartialEq)]
pub struct McpListing {
    pub server: String,
    /// The tools as the model sees them (`mcp__<server>__<tool>`), sorted, with classes.
    pub tools: Vec<nightshift_tools::ToolDefinition>,
    /// The server's tools not offered, with why.
    pub left_out: Vec<crate::events::LeftOutTool>,
}

/// Why a run could not be prepared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrepareError {
    /// It never will be as things are (a repository gone, a ref missing, access refused):
    /// the run fails with this message.
    Fatal(String),
    /// It may work later (the network, GitHub unavailable): the job is tried again.
    Transient(String),
}

/// Runs the tools of agents.
pub trait ToolBox: Send + Sync {
    /// Prepares what a run's tools need before the job works on it (every job of the run,
    /// before its first model call or tool call): the check run it keeps on its pull request,
    /// its workspace's checkout. Returns the workspace when it checked one out (the loop logs
    /// the first). Default: nothing.
    fn prepare<'a>(
        &'a self,
        agent: &'a AgentDef,
        run: RunStart<'a>,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<Option<PreparedWorkspace>, PrepareError>> {
        let _ = (agent, run, cancel);
        Box::pin(async { Ok(None) })
    }
    /// The MCP servers of `agent` that need listing for run `run.run_id`: each server of
    /// the agent's config not in `listed` (the servers the run's log already lists), and each
    /// whose session said its tool list changed since; each listed now. Called before every
    /// model call; a server that cannot be started or listed is an `Err` (a transient one has
    /// the job tried again). Default: none.
    fn mcp_listings<'a>(
        &'a self,
        agent: &'a AgentDef,
        run: RunStart<'a>,
        listed: Vec<String>,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<Vec<McpListing>, PrepareError>> {
        let _ = (agent, run, listed, cancel);
        Box::pin(async { Ok(Vec::new()) })
    }
    /// The tools `agent` may call, sorted by name, with stable schemas.
    fn specs(&self, agent: &AgentDef) -> Vec<ToolSpec>;
    /// The durability class of a call (it may depend on the input: an HTTP GET is
    /// read-only, a POST is not). Unknown tools count as side effects.
    fn durability(&self, agent: &AgentDef, name: &str, input: &serde_json::Value) -> ToolClass;
    /// Checks a call's input against the tool's JSON Schema before anything runs: `Err` says
    /// what is wrong, in words the model can act on (the loop returns it as an `is_error`
    /// result and never starts the call). Unknown tools are left to [`ToolBox::call`].
    fn check_input(
        &self,
        agent: &AgentDef,
        name: &str,
        input: &serde_json::Value,
    ) -> Result<(), String> {
        let _ = (agent, name, input);
        Ok(())
    }
    /// Runs one call. Failures are replies with `is_error`, never panics.
    fn call<'a>(
        &'a self,
        agent: &'a AgentDef,
        call: ToolCall<'a>,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, ToolOutput>;
    /// Run `run_id` has ended (succeeded, failed, cancelled, out of budget) in the loop: what
    /// the tools kept for it between calls may go (the sandbox's temp dir). Not called when
    /// it parks or retries. Default: nothing.
    fn run_ended<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, ()> {
        let _ = run_id;
        Box::pin(async {})
    }
}
