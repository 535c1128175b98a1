//! Shared fixtures: a temp dir with a workspace, an artifacts dir and a file outside the
//! workspace that no tool may reach.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nightshift_tools::{InputSchema, Limits, Registry, Tool, ToolContext, ToolOutput};
use serde_json::Value;
use tempfile::TempDir;

pub const OUTSIDE_CONTENT: &str = "OUTSIDE-SECRET-CONTENT\n";

pub struct Fixture {
    _dir: TempDir,
    pub root: PathBuf,
    pub workspace: PathBuf,
    pub artifacts: PathBuf,
    /// A file next to (not inside) the workspace.
    pub outside_file: PathBuf,
}

impl Fixture {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical tempdir");
        let workspace = root.join("ws");
        let artifacts = root.join("artifacts");
        std::fs::create_dir(&workspace).expect("workspace");
        let outside_file = root.join("outside.txt");
        std::fs::write(&outside_file, OUTSIDE_CONTENT).expect("outside file");
        Fixture {
            _dir: dir,
            root,
            workspace,
            artifacts,
            outside_file,
        }
    }

    pub fn ctx(&self) -> ToolContext {
        ToolContext::new("run-1", "call-7", &self.workspace, &self.artifacts).expect("context")
    }

    pub fn ws(&self, rel: &str) -> PathBuf {
        self.workspace.join(rel)
    }

    pub fn write(&self, rel: &str, content: &str) {
        let path = self.ws(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("parent");
        }
        std::fs::write(path, content).expect("write fixture file");
    }

    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.ws(rel)).expect("read fixture file")
    }
}

/// Limits with a small output cap, for truncation tests.
pub fn small_cap(cap: usize) -> Limits {
    Limits {
        output_cap_bytes: cap,
        ..Limits::default()
    }
}

/// Call `tool` directly (not through a registry), and check that its input schema agrees:
/// an input the tool accepts must pass the schema, or the registry (which checks the schema
/// first) would refuse a call that works. Panics if it does not.
pub async fn call(tool: &dyn Tool, ctx: &ToolContext, input: Value) -> ToolOutput {
    let definition = tool.definition();
    let schema = InputSchema::compile(&definition.input_schema)
        .unwrap_or_else(|e| panic!("schema of {}: {e}", definition.name));
    let verdict = schema.check(&definition.name, &input);
    let output = tool.call(ctx, input.clone()).await;
    if let Err(e) = verdict
        && !output.is_error
    {
        panic!("the schema refuses an input the tool accepts ({input}): {e}");
    }
    output
}

pub async fn call_builtin(name: &str, ctx: &ToolContext, input: Value) -> ToolOutput {
    let tool = Registry::builtin(name).expect("built-in exists");
    call(tool.as_ref(), ctx, input).await
}

/// Whether process `pid` is gone (no entry, or a zombie: dead but not yet reaped by init).
pub fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => {
            // state is the first field after the parenthesised command name
            let state = stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .chars()
                .next();
            state == Some('Z') || state == Some('X')
        }
    }
}

/// Poll until `path` holds a number (a pid written by a test command).
pub async fn wait_for_pid(path: &Path) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(text) = std::fs::read_to_string(path)
            && let Ok(pid) = text.trim().parse()
        {
            return pid;
        }
        assert!(
            Instant::now() < deadline,
            "no pid appeared in {}",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Poll until process `pid` is gone; `false` if it is still alive at `deadline`.
pub async fn gone_by(pid: u32, deadline: Instant) -> bool {
    loop {
        if process_gone(pid) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
