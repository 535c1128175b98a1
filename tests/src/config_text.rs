//! Pieces of `nightshift.toml` the suites write: scripted agents, command tools, quoted
//! strings. Shared by the suite and the browser tests, so an agent is configured one way.

use std::path::Path;

use serde_json::{Value, json};

/// `s` as a TOML basic string (JSON's quoting is valid TOML for these values).
pub fn q(s: &str) -> String {
    Value::from(s).to_string()
}

/// A scripted provider and an `[[agents]]` entry named `name` replying with `turns` (written
/// to `dir/script-<name>.json`), allowed `tools`.
pub fn agent(dir: &Path, name: &str, tools: &[&str], turns: Value) -> String {
    agent_with(dir, name, tools, turns, "")
}

/// [`agent`] with `extra` lines appended to the agent's entry (its sub-tables).
pub fn agent_with(dir: &Path, name: &str, tools: &[&str], turns: Value, extra: &str) -> String {
    let script = format!("script-{name}.json");
    std::fs::write(dir.join(&script), turns.to_string()).unwrap();
    format!(
        "[providers.{name}]\nkind = \"scripted\"\nscript = {}\n\n\
         [[agents]]\nname = {}\nprovider = {}\nmodel = \"scripted-1\"\ntools = {}\n{extra}\n",
        q(&script),
        q(name),
        q(name),
        json!(tools)
    )
}

/// A `[[command_tools]]` entry running `sh -c program`.
pub fn command_tool(name: &str, class: &str, program: &str) -> String {
    format!(
        "[[command_tools]]\nname = {}\ndescription = \"A test tool.\"\n\
         command = {}\nclass = {}\n\n",
        q(name),
        json!(["sh", "-c", program]),
        q(class)
    )
}
