//! The tools an agent can call, each with a durability class.
//!
//! This crate guarantees, for every tool it ships or builds from config:
//!
//! - **A durability class** ([`ToolClass`]) that tells the agent loop how to recover a call
//!   that was interrupted by a crash: `read_only` and `idempotent` calls are run again (an
//!   idempotent call gets the same [`ToolContext::idempotency_key`] both times), a
//!   `side_effect` call never is.
//! - **Errors are outputs, never panics**: bad input, a missing file, a failing command or a
//!   refused request all become a [`ToolOutput`] with `is_error: true` and a message the model
//!   can act on.
//! - **Inputs match their schema**: every tool's input schema is compiled once when the
//!   [`Registry`] is built (an invalid schema is refused then); [`Registry::check_input`] and
//!   [`Registry::call`] refuse an input that breaks it, naming each violation, before the tool
//!   runs. No schema is ever fetched from outside ([`InputSchema`]).
//! - **Confinement**: file tools never read or write outside the run's workspace (absolute
//!   paths, `..` escapes and symlinks resolving outside are refused, and the kernel resolves
//!   every path beneath a handle on the workspace as it opens it, so a symlink swapped in
//!   concurrently cannot lead out); commands run in the
//!   workspace with a cleared environment, in their own process group, and the whole group is
//!   killed on timeout or cancellation; HTTP goes only to allow-listed hosts (a port-less
//!   entry allows only the scheme's default port), a secret bound to hosts ([`SecretSpec`])
//!   only to those, and the model cannot set `Host` or hop-by-hop headers.
//! - **Secrets by name**: `{{secret:NAME}}` placeholders are filled from a
//!   [`SecretResolver`], and every secret value the daemon holds (substitutable or not) is
//!   redacted — with its base64, hex, URL, JSON-escaped and reversed forms — from every
//!   output the [`Registry`] returns, from artifacts and from task logs, before any cut.
//! - **Bounded outputs**: an output longer than the cap keeps its head and tail around a
//!   marker saying what was cut; the full text is saved as an [`Artifact`].
//! - **Stable specs**: [`Registry::specs`] lists definitions sorted by name, and
//!   [`Registry::specs_json`] gives the same bytes for the same registry, so the tool block
//!   of a model request never breaks the prompt cache.
//!
//! Entry points: build a [`Registry`] from a [`RegistryConfig`], make a [`ToolContext`] for
//! each call, then [`Registry::check_input`], [`Registry::call`] and [`Registry::class_for`].
//!
//! This file holds the contract between the agent loop and a tool: [`Tool`] is
//! dyn-compatible (`Arc<dyn Tool>`), its futures are boxed and `Send`; [`ToolClass`]
//! serialises as `read_only` / `idempotent` / `side_effect`; a [`ToolOutput`] is the only way
//! a call reports anything, errors included.

mod background;
mod builtins;
mod command_tool;
mod context;
mod orphans;
mod output;
mod paths;
mod process;
mod registry;
mod schema;
mod secret_hosts;
mod secrets;
mod stdio_server;

pub use background::{
    EndedTask, StartRefused, StartedTask, StopCause, TaskEnding, TaskError, TaskLedger,
    TaskSnapshot, TaskSupervisor, TaskView,
};
pub use builtins::BUILTIN_TOOLS;
pub use builtins::files::{EditFile, WriteFile};
pub use builtins::http::HttpRequest;
pub use builtins::read_file::ReadFile;
pub use builtins::run_command::RunCommand;
pub use builtins::search::{Grep, ListFiles};
pub use builtins::tasks::{TaskOutput, TaskStop};
pub use builtins::todo::{Todo, TodoError, TodoStatus, TodoWrite, parse_todos, render_todos};
pub use command_tool::{CommandTool, CommandToolConfig, CommandToolError};
pub use context::{GithubAgent, HttpAllowlist, Limits, ToolContext};
pub use orphans::ProcessRegistry;
pub use output::shown as shown_output;
pub use process::{SANDBOXED_PATH, StartError};
pub use registry::{Approval, Registry, RegistryConfig, RegistryError, ToolOverride};
pub use schema::{InputRejected, InputSchema, SchemaError, Violation};
pub use secret_hosts::{Misdirected, SecretBindings, SecretSpec, SecretSpecError};
pub use secrets::{
    GITHUB_TOKEN_SHAPES, Redactor, SecretError, SecretResolver, StreamRedactor, TokenShape,
    encodings as secret_encodings,
};
pub use stdio_server::StdioServer;

use std::fmt;
use std::path::PathBuf;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How a tool call may be recovered after a crash left it without a result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolClass {
    /// Changes nothing: safe to run again.
    ReadOnly,
    /// Running it twice with the same idempotency key has the effect of running it once.
    Idempotent,
    /// May change the world in a way that must not be repeated: never run again on recovery.
    SideEffect,
}

impl ToolClass {
    /// Whether an interrupted call of this class is run again on recovery.
    pub fn rerun_on_recovery(self) -> bool {
        !matches!(self, ToolClass::SideEffect)
    }

    /// The config / wire spelling (`read_only`, `idempotent`, `side_effect`).
    pub fn as_str(self) -> &'static str {
        match self {
            ToolClass::ReadOnly => "read_only",
            ToolClass::Idempotent => "idempotent",
            ToolClass::SideEffect => "side_effect",
        }
    }
}

impl fmt::Display for ToolClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the model is told about a tool, plus its durability class.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    pub name: String,
    pub description: String,
    /// A JSON Schema object describing the tool's input.
    pub input_schema: Value,
    pub class: ToolClass,
}

/// A file holding the full text of an output that was cut for the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Artifact {
    /// File name inside the run's artifacts directory.
    pub name: String,
    /// Full path of the file.
    pub path: PathBuf,
    /// Size of the file in bytes.
    pub size: u64,
}

/// The result of one tool call, as shown to the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolOutput {
    pub content: String,
    pub is_error: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact: Option<Artifact>,
    /// The call's outcome is not known: a request may have reached the other side and what
    /// it did could not be looked up. The agent loop records no result for a call that is
    /// safe to repeat (`read_only`, `idempotent`): it tries the job again later, and the call
    /// is run again under the same idempotency key — looking before it sends. `content` says
    /// why.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unresolved: bool,
}

impl ToolOutput {
    /// A successful result.
    pub fn ok(content: impl Into<String>) -> Self {
        ToolOutput {
            content: content.into(),
            is_error: false,
            artifact: None,
            unresolved: false,
        }
    }

    /// An error result: `content` tells the model what went wrong and what to do.
    pub fn error(content: impl Into<String>) -> Self {
        ToolOutput {
            content: content.into(),
            is_error: true,
            artifact: None,
            unresolved: false,
        }
    }

    /// An outcome not known yet (see [`ToolOutput::unresolved`]); `content` says why, and is
    /// what the model is told should the call be one that is not run again.
    pub fn unresolved(content: impl Into<String>) -> Self {
        ToolOutput {
            unresolved: true,
            ..ToolOutput::error(content)
        }
    }

    /// Attach an artifact (the full text of a cut output).
    pub fn with_artifact(mut self, artifact: Option<Artifact>) -> Self {
        self.artifact = artifact;
        self
    }
}

/// A tool the agent can call.
///
/// Implementations must not panic on any input: every failure is a [`ToolOutput::error`].
/// They must honour `ctx.cancel()` for anything that can take long.
pub trait Tool: Send + Sync {
    /// Name, description, input schema and class. Must be the same on every call.
    fn definition(&self) -> ToolDefinition;

    /// The class of one particular call. Defaults to the definition's class; a tool whose
    /// class depends on its input (e.g. `http_request` with `GET`) overrides this.
    fn class_for(&self, _input: &Value) -> ToolClass {
        self.definition().class
    }

    /// Run the tool.
    fn call<'a>(&'a self, ctx: &'a ToolContext, input: Value) -> BoxFuture<'a, ToolOutput>;
}
