//! The daemon's environment does not reach commands: a variable set in this (parent)
//! process is absent from what `run_command` and command tools see, while PATH and
//! explicitly allowed variables are passed. Its own test binary, because it sets variables
//! in the test process before any other thread exists.

use nightshift_tools::{CommandTool, CommandToolConfig, RunCommand, Tool, ToolClass, ToolContext};
use serde_json::json;

const FAKE_KEY: &str = "sk-ant-fake-0123456789";

#[test]
#[allow(unsafe_code)]
fn daemon_secrets_do_not_leak_into_commands() {
    // SAFETY: this is the only test in this binary and no runtime or other thread exists yet,
    // so nothing reads the environment concurrently.
    unsafe {
        std::env::set_var("ANTHROPIC_API_KEY", FAKE_KEY);
        std::env::set_var("NIGHTSHIFT_TEST_ALLOWED", "allowed-value");
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let ctx = ToolContext::new(
        "run-env",
        "call-env",
        dir.path(),
        dir.path().join("artifacts"),
    )
    .expect("ctx")
    .with_env_allow(["NIGHTSHIFT_TEST_ALLOWED"]);

    let out = runtime.block_on(RunCommand.call(&ctx, json!({"command": "env"})));
    assert!(!out.is_error, "{}", out.content);
    assert!(
        out.content.contains("PATH="),
        "PATH is passed: {}",
        out.content
    );
    assert!(
        out.content
            .contains("NIGHTSHIFT_TEST_ALLOWED=allowed-value"),
        "{}",
        out.content
    );
    assert!(
        !out.content.contains("ANTHROPIC_API_KEY"),
        "leaked: {}",
        out.content
    );
    assert!(!out.content.contains(FAKE_KEY), "leaked: {}", out.content);

    let tool = CommandTool::new(CommandToolConfig {
        name: "show_env".into(),
        description: "print the environment".into(),
        command: vec!["env".into()],
        input_schema: json!({"type": "object"}),
        class: ToolClass::ReadOnly,
        timeout_seconds: Some(10),
    })
    .expect("valid");
    let out = runtime.block_on(tool.call(&ctx, json!({})));
    assert!(!out.is_error, "{}", out.content);
    assert!(
        out.content
            .contains("NIGHTSHIFT_IDEMPOTENCY_KEY=run-env:call-env"),
        "{}",
        out.content
    );
    assert!(
        !out.content.contains("ANTHROPIC_API_KEY"),
        "leaked: {}",
        out.content
    );
    assert!(!out.content.contains(FAKE_KEY), "leaked: {}", out.content);
}
