//! The per-agent set of tools: [`Registry`], built from a [`RegistryConfig`].
//!
//! Guarantees: building fails with a clear [`RegistryError`] — never a silently smaller tool
//! set — for an unknown tool name (naming it and listing the known ones), a name defined
//! twice, an invalid command tool, a tool whose input schema is not a valid JSON Schema or an
//! override of a tool that is not enabled. Every tool's input schema (built-ins and command
//! tools alike) is compiled once, when the tool is added, and kept with it.
//! [`Registry::check_input`] checks a call's input against that schema and names every
//! violation; [`Registry::call`] checks it too and answers a bad input with that `is_error`
//! message without running the tool.
//! [`Registry::specs`] is sorted by name and every JSON object in it has sorted keys, so
//! [`Registry::specs_json`] gives identical bytes for identical registries. [`Registry::call`]
//! never panics on a bad name or input, refuses to start a call whose run is already
//! cancelled, and redacts every secret value from the output it returns.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::builtins::{self, BUILTIN_TOOLS};
use crate::command_tool::{CommandTool, CommandToolConfig, CommandToolError};
use crate::context::ToolContext;
use crate::schema::{InputRejected, InputSchema};
use crate::{Tool, ToolClass, ToolDefinition, ToolOutput};

/// Per-tool changes an agent config may make.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolOverride {
    /// Replaces the description shown to the model.
    pub description: Option<String>,
    /// Default timeout of the tool (commands, command tools, HTTP).
    pub timeout_seconds: Option<u64>,
    /// Replaces the durability class (for every call of the tool).
    pub class: Option<ToolClass>,
    /// `required`: every call waits for a human's approval before it runs (the agent
    /// runtime parks the run; see its `approval` module).
    pub approval: Option<Approval>,
}

/// Whether a tool's calls wait for a human's approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Approval {
    /// Every call waits for approval.
    Required,
    /// No call waits (the default).
    None,
}

/// The tool part of an agent's config.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistryConfig {
    /// Built-in tools to enable (command tools are always enabled; listing them is allowed).
    #[serde(default)]
    pub tools: Vec<String>,
    #[serde(default)]
    pub command_tools: Vec<CommandToolConfig>,
    /// Overrides by tool name.
    #[serde(default)]
    pub overrides: BTreeMap<String, ToolOverride>,
}

/// Why a registry could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    #[error("unknown tool `{name}` in the agent config; known tools: {}", .known.join(", "))]
    UnknownTool { name: String, known: Vec<String> },
    #[error("tool `{0}` is defined more than once")]
    Duplicate(String),
    #[error(transparent)]
    InvalidCommandTool(#[from] CommandToolError),
    #[error("tool `{name}`: input_schema is not a valid JSON Schema: {reason}")]
    InvalidSchema { name: String, reason: String },
    #[error("override for tool `{name}`, which is not enabled for this agent; enabled tools: {}", .enabled.join(", "))]
    OverrideForDisabledTool { name: String, enabled: Vec<String> },
    #[error("override for tool `{name}`: {reason}")]
    InvalidOverride { name: String, reason: String },
}

struct Entry {
    tool: Arc<dyn Tool>,
    definition: ToolDefinition,
    schema: InputSchema,
    class_override: Option<ToolClass>,
    timeout: Option<Duration>,
}

/// The tools one agent may call.
#[derive(Default)]
pub struct Registry {
    entries: BTreeMap<String, Entry>,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("tools", &self.names())
            .finish()
    }
}

impl Registry {
    /// An empty registry (add tools with [`insert`](Self::insert)).
    pub fn new() -> Self {
        Self::default()
    }

    /// A fresh instance of a built-in tool (`None` for a name not in [`BUILTIN_TOOLS`]).
    pub fn builtin(name: &str) -> Option<Arc<dyn Tool>> {
        builtins::by_name(name)
    }

    /// Build an agent's registry from its config.
    pub fn build(config: &RegistryConfig) -> Result<Self, RegistryError> {
        let command_names: Vec<&str> = config
            .command_tools
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        let mut registry = Registry::new();
        for name in &config.tools {
            if command_names.contains(&name.as_str()) && Self::builtin(name).is_none() {
                continue; // a command tool: enabled by being configured
            }
            let Some(tool) = Self::builtin(name) else {
                let mut known: Vec<String> = BUILTIN_TOOLS.iter().map(|s| s.to_string()).collect();
                known.extend(command_names.iter().map(|s| s.to_string()));
                known.sort();
                return Err(RegistryError::UnknownTool {
                    name: name.clone(),
                    known,
                });
            };
            registry.insert(tool)?;
        }
        for command in &config.command_tools {
            let mut command = command.clone();
            if let Some(t) = config
                .overrides
                .get(&command.name)
                .and_then(|o| o.timeout_seconds)
            {
                command.timeout_seconds = Some(t);
            }
            let tool = CommandTool::new(command).map_err(RegistryError::InvalidCommandTool)?;
            registry.insert(Arc::new(tool))?;
        }
        for (name, o) in &config.overrides {
            registry.apply_override(name, o)?;
        }
        Ok(registry)
    }

    /// Add a tool and compile its input schema. Fails if a tool of that name is already there
    /// or its schema is not a valid JSON Schema.
    pub fn insert(&mut self, tool: Arc<dyn Tool>) -> Result<(), RegistryError> {
        let mut definition = tool.definition();
        definition.input_schema = canonical(&definition.input_schema);
        let name = definition.name.clone();
        if self.entries.contains_key(&name) {
            return Err(RegistryError::Duplicate(name));
        }
        let schema = InputSchema::compile(&definition.input_schema).map_err(|reason| {
            RegistryError::InvalidSchema {
                name: name.clone(),
                reason: reason.to_string(),
            }
        })?;
        self.entries.insert(
            name,
            Entry {
                tool,
                definition,
                schema,
                class_override: None,
                timeout: None,
            },
        );
        Ok(())
    }

    fn apply_override(&mut self, name: &str, o: &ToolOverride) -> Result<(), RegistryError> {
        let enabled = self.names().into_iter().map(String::from).collect();
        let Some(entry) = self.entries.get_mut(name) else {
            return Err(RegistryError::OverrideForDisabledTool {
                name: name.to_string(),
                enabled,
            });
        };
        let invalid = |reason: &str| RegistryError::InvalidOverride {
            name: name.to_string(),
            reason: reason.to_string(),
        };
        if let Some(description) = &o.description {
            if description.trim().is_empty() {
                return Err(invalid("description is empty"));
            }
            entry.definition.description = description.clone();
        }
        if let Some(class) = o.class {
            entry.definition.class = class;
            entry.class_override = Some(class);
        }
        match o.timeout_seconds {
            Some(0) => return Err(invalid("timeout_seconds must be at least 1")),
            Some(t) => entry.timeout = Some(Duration::from_secs(t)),
            None => {}
        }
        Ok(())
    }

    /// Tool names, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.entries.keys().map(String::as_str).collect()
    }

    /// The definition of one tool, overrides applied.
    pub fn definition(&self, name: &str) -> Option<&ToolDefinition> {
        self.entries.get(name).map(|e| &e.definition)
    }

    /// All definitions, sorted by name, overrides applied.
    pub fn specs(&self) -> Vec<ToolDefinition> {
        self.entries
            .values()
            .map(|e| e.definition.clone())
            .collect()
    }

    /// [`specs`](Self::specs) as JSON: the same bytes for the same registry.
    pub fn specs_json(&self) -> String {
        serde_json::to_string(&self.specs()).expect("definitions always serialise")
    }

    /// The class of one call (for recovery), or `None` for an unknown tool.
    pub fn class_for(&self, name: &str, input: &Value) -> Option<ToolClass> {
        let entry = self.entries.get(name)?;
        Some(
            entry
                .class_override
                .unwrap_or_else(|| entry.tool.class_for(input)),
        )
    }

    /// Check a call's input against the tool's input schema. `Err` names every violation
    /// (instance path and what was wrong, at most a few) in words the model can act on, e.g.
    /// ``input for `pay` does not match its schema: at /amount: "5" is not of type "integer";
    /// at (root): Additional properties are not allowed ('memo' was unexpected). Fix the input
    /// and call the tool again.`` An unknown tool is `Ok` ([`call`](Self::call) answers it).
    pub fn check_input(&self, name: &str, input: &Value) -> Result<(), InputRejected> {
        match self.entries.get(name) {
            Some(entry) => entry.schema.check(name, input),
            None => Ok(()),
        }
    }

    /// Run one tool call. Unknown tools and bad input are `is_error` outputs; an input that
    /// breaks the tool's schema is answered with [`check_input`](Self::check_input)'s message
    /// and the tool does not run.
    pub async fn call(&self, ctx: &ToolContext, name: &str, input: Value) -> ToolOutput {
        let Some(entry) = self.entries.get(name) else {
            return ToolOutput::error(format!(
                "unknown tool `{name}`; available tools: {}",
                self.names().join(", ")
            ));
        };
        if let Err(rejected) = entry.schema.check(name, &input) {
            tracing::debug!(
                tool = name,
                call = ctx.tool_call_id(),
                "input refused by its schema"
            );
            return ToolOutput::error(ctx.secrets().redact(&rejected.to_string()));
        }
        if ctx.cancel().is_cancelled() {
            return ToolOutput::error(format!("{name} was not run: the run is cancelled"));
        }
        let ctx = match entry.timeout {
            Some(timeout) => {
                let mut owned = ctx.clone();
                owned.limits_mut().command_timeout = timeout;
                owned.limits_mut().http_timeout = timeout;
                Cow::Owned(owned)
            }
            None => Cow::Borrowed(ctx),
        };
        tracing::debug!(tool = name, call = ctx.tool_call_id(), "tool call");
        let mut output = entry.tool.call(&ctx, input).await;
        output.content = ctx.secrets().redact(&output.content);
        tracing::debug!(
            tool = name,
            call = ctx.tool_call_id(),
            is_error = output.is_error,
            "tool result"
        );
        output
    }
}

/// `value` with the keys of every object sorted (whatever map order serde_json is built with).
fn canonical(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let mut out = Map::new();
            for key in keys {
                out.insert(key.clone(), canonical(&map[key]));
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
        other => other.clone(),
    }
}
