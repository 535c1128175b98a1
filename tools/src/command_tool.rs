//! Tools defined in config that run a program: [`CommandToolConfig`] and [`CommandTool`].
//!
//! Guarantees: a config is accepted only if [`CommandToolConfig::validate`] passes (and
//! unknown fields are refused when it is deserialised), so a typo fails at startup rather than
//! at call time; that includes `input_schema`, which must be a valid, self-contained JSON
//! Schema of an object (checked against its meta-schema; the error names the place in the
//! schema and the config key). The schema is enforced: through the [`Registry`](crate::Registry)
//! an input that breaks it (a missing or extra property, a wrong type, a string too long, a
//! non-object) is an `is_error` result naming each violation, and the program never starts.
//! A call runs `command` (argv, no shell) in the run's workspace under the same
//! confinement as `run_command` (cleared environment, own process group, killed on timeout or
//! cancellation); the input JSON is written to its stdin; stdout is the result (cut at the
//! output cap, full text as an artifact); a non-zero exit, a signal, a timeout or cancellation
//! is an `is_error` result that includes the tail of stderr. The process also gets
//! `NIGHTSHIFT_RUN_ID`, `NIGHTSHIFT_TOOL_CALL_ID` and `NIGHTSHIFT_IDEMPOTENCY_KEY`.

use std::time::Duration;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::context::ToolContext;
use crate::process::{self, Ending, ProcessSpec};
use crate::schema::{InputSchema, SchemaError};
use crate::{Tool, ToolClass, ToolDefinition, ToolOutput};

/// Longest timeout a command tool may configure (a day).
const MAX_TIMEOUT_SECONDS: u64 = 24 * 60 * 60;

fn default_schema() -> Value {
    json!({"type": "object"})
}

fn default_class() -> ToolClass {
    ToolClass::SideEffect
}

/// A tool that runs a program, as written in an agent's config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandToolConfig {
    /// Tool name shown to the model: 1–64 of `A-Z a-z 0-9 _ -`.
    pub name: String,
    pub description: String,
    /// Program and arguments (no shell): an absolute path, a path relative to the config
    /// file's directory (made absolute when the config loads), or a name found on PATH.
    pub command: Vec<String>,
    /// JSON Schema of the input; must be a valid JSON Schema (draft 2020-12 unless `$schema`
    /// names another) with `"type": "object"`, self-contained (no remote `$ref`). Every call's
    /// input is checked against it before the program starts. Default `{"type": "object"}`.
    #[serde(default = "default_schema")]
    pub input_schema: Value,
    /// Durability class. Default `side_effect`, the only safe guess.
    #[serde(default = "default_class")]
    pub class: ToolClass,
    /// Kill the program after this many seconds (default: the context's command timeout).
    #[serde(default)]
    pub timeout_seconds: Option<u64>,
}

/// Whether `name` is a valid tool name (as model APIs accept them).
pub(crate) fn valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Why `name` cannot be a command tool's: the names the loop gives other tools.
fn reserved(name: &str) -> Option<&'static str> {
    if name.starts_with("mcp__") {
        Some("`mcp__` begins the names of MCP servers' tools")
    } else if name == "load_skill" {
        Some("`load_skill` reads an agent's skills")
    } else {
        None
    }
}

/// Why a command tool's config is refused. `Display` names the tool and says what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandToolError {
    #[error(
        "command tool `{tool}`: the name must be 1-64 characters of letters, digits, `_` or `-`"
    )]
    BadName { tool: String },
    #[error("command tool `{tool}`: the name is reserved ({why}); choose another name")]
    ReservedName { tool: String, why: &'static str },
    #[error(
        "command tool `{tool}`: description is empty; say what the tool does and when to use it"
    )]
    NoDescription { tool: String },
    #[error(
        "command tool `{tool}`: command is empty; give the program and its arguments, e.g. \
         [\"/usr/bin/python3\", \"lint.py\"]"
    )]
    NoCommand { tool: String },
    #[error("command tool `{tool}`: the program (command[0]) is empty")]
    NoProgram { tool: String },
    #[error("command tool `{tool}`: command contains a NUL byte")]
    Nul { tool: String },
    #[error(
        "command tool `{tool}`: input_schema must be a JSON object schema with \"type\": \
         \"object\"; fix `command_tools.{tool}.input_schema`"
    )]
    NotAnObjectSchema { tool: String },
    #[error(
        "command tool `{tool}`: input_schema is not a valid JSON Schema: {reason}; fix \
         `command_tools.{tool}.input_schema`"
    )]
    InvalidSchema { tool: String, reason: SchemaError },
    #[error("command tool `{tool}`: timeout_seconds must be at least 1")]
    ZeroTimeout { tool: String },
    #[error(
        "command tool `{tool}`: timeout_seconds is {seconds}; the most allowed is {max}",
        max = MAX_TIMEOUT_SECONDS
    )]
    TimeoutTooLong { tool: String, seconds: u64 },
}

impl CommandToolConfig {
    /// Check the config; the error names the tool and says what to fix.
    pub fn validate(&self) -> Result<(), CommandToolError> {
        let tool = self.name.clone();
        if !valid_tool_name(&tool) {
            return Err(CommandToolError::BadName { tool });
        }
        if let Some(why) = reserved(&tool) {
            return Err(CommandToolError::ReservedName { tool, why });
        }
        if self.description.trim().is_empty() {
            return Err(CommandToolError::NoDescription { tool });
        }
        match self.command.first() {
            None => return Err(CommandToolError::NoCommand { tool }),
            Some(program) if program.trim().is_empty() => {
                return Err(CommandToolError::NoProgram { tool });
            }
            Some(_) => {}
        }
        if self.command.iter().any(|arg| arg.contains('\0')) {
            return Err(CommandToolError::Nul { tool });
        }
        match self.input_schema.get("type").and_then(Value::as_str) {
            Some("object") if self.input_schema.is_object() => {}
            _ => return Err(CommandToolError::NotAnObjectSchema { tool }),
        }
        if let Err(reason) = InputSchema::compile(&self.input_schema) {
            return Err(CommandToolError::InvalidSchema { tool, reason });
        }
        match self.timeout_seconds {
            Some(0) => Err(CommandToolError::ZeroTimeout { tool }),
            Some(seconds) if seconds > MAX_TIMEOUT_SECONDS => {
                Err(CommandToolError::TimeoutTooLong { tool, seconds })
            }
            _ => Ok(()),
        }
    }
}

/// A [`Tool`] running a configured program.
#[derive(Debug, Clone)]
pub struct CommandTool {
    config: CommandToolConfig,
}

impl CommandTool {
    /// Validate `config` and make the tool.
    pub fn new(config: CommandToolConfig) -> Result<Self, CommandToolError> {
        config.validate()?;
        Ok(CommandTool { config })
    }

    pub fn config(&self) -> &CommandToolConfig {
        &self.config
    }
}

impl Tool for CommandTool {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: self.config.name.clone(),
            description: self.config.description.clone(),
            input_schema: self.config.input_schema.clone(),
            class: self.config.class,
        }
    }

    fn call<'a>(&'a self, ctx: &'a ToolContext, input: Value) -> BoxFuture<'a, ToolOutput> {
        Box::pin(self.run(ctx, input))
    }
}

impl CommandTool {
    async fn run(&self, ctx: &ToolContext, input: Value) -> ToolOutput {
        let name = &self.config.name;
        let stdin = match serde_json::to_vec(&input) {
            Ok(bytes) => bytes,
            Err(e) => return ToolOutput::error(format!("cannot encode the input for {name}: {e}")),
        };
        let timeout = self
            .config
            .timeout_seconds
            .map(Duration::from_secs)
            .unwrap_or(ctx.limits().command_timeout);
        let spec = ProcessSpec {
            program: self.config.command[0].clone(),
            args: self.config.command[1..].to_vec(),
            extra_env: vec![
                ("NIGHTSHIFT_RUN_ID".into(), ctx.run_id().to_string()),
                (
                    "NIGHTSHIFT_TOOL_CALL_ID".into(),
                    ctx.tool_call_id().to_string(),
                ),
                ("NIGHTSHIFT_IDEMPOTENCY_KEY".into(), ctx.idempotency_key()),
            ],
            stdin: Some(stdin),
            timeout,
            merge_stderr: false,
            label: name.clone(),
        };
        let result = match process::run(ctx, spec).await {
            Ok(r) => r,
            Err(e) => return ToolOutput::error(format!("{name}: {e}")),
        };
        let stdout = result.output.text;
        if result.ending == Ending::Exited(0) {
            let content = if stdout.is_empty() {
                "(no output)".to_string()
            } else {
                stdout
            };
            return ToolOutput::ok(content).with_artifact(result.output.artifact);
        }
        let mut content = format!(
            "{name} failed: {}",
            process::describe(result.ending, timeout)
        );
        if !stdout.trim().is_empty() {
            content.push_str(&format!("\nstdout:\n{}", stdout.trim_end()));
        }
        if result.stderr_tail.trim().is_empty() {
            content.push_str("\n(stderr was empty)");
        } else {
            content.push_str(&format!(
                "\nstderr (last part):\n{}",
                result.stderr_tail.trim_end()
            ));
        }
        ToolOutput::error(content).with_artifact(result.output.artifact)
    }
}
