//! A real MCP server process (`nightshift-test-mcp-server`, written with the official Rust
//! SDK) started as a run's stdio server is — in the workspace, with a secret in its
//! environment — and spoken to through `nightshift-mcp`: its tools listed with their classes,
//! a side effect landing in the workspace, its stderr redacted; when it dies mid-call the
//! session says closed, and a server started again goes on from what is on disk.

use std::time::Duration;

use nightshift_mcp::{McpError, McpServerConfig, McpSession, catalog, to_output};
use nightshift_tests::eventually;
use nightshift_tools::{SecretResolver, StdioServer, ToolClass, ToolContext};
use serde_json::json;

const SERVER: &str = env!("CARGO_BIN_EXE_nightshift-test-mcp-server");

fn config() -> McpServerConfig {
    serde_json::from_value(json!({
        "name": "notes", "command": SERVER,
        "env": {"NOTES_TOKEN": "{{secret:NOTES_TOKEN}}"},
        "timeout_seconds": 10
    }))
    .unwrap()
}

/// Starts the server for `ctx` as `cfg` says and opens a session over its pipes.
async fn start(ctx: &ToolContext, cfg: &McpServerConfig) -> (StdioServer, McpSession) {
    let env: Vec<(String, String)> = cfg.env.clone().into_iter().collect();
    let mut server =
        StdioServer::spawn(ctx, cfg.command.as_deref().unwrap(), &cfg.args, &env).unwrap();
    let (stdout, stdin) = server.take_pipes().unwrap();
    let session = McpSession::over_stdio(cfg, stdout, stdin).await.unwrap();
    (server, session)
}

#[tokio::test]
async fn a_stdio_server_process_is_listed_called_and_started_again_after_it_dies() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = ToolContext::new(
        "run-mcp",
        "call-1",
        dir.path(),
        dir.path().join("artifacts"),
    )
    .unwrap()
    .with_secrets(SecretResolver::from_map([(
        "NOTES_TOKEN",
        "notes-s3cret-77",
    )]));
    let cfg = config();
    cfg.check("bot").unwrap();
    let (server, session) = start(&ctx, &cfg).await;

    let offered = catalog(&cfg, &session.list_tools().await.unwrap());
    let classes: Vec<(&str, ToolClass)> = offered
        .tools
        .iter()
        .map(|t| (t.definition.name.as_str(), t.definition.class))
        .collect();
    assert_eq!(
        classes,
        [
            ("mcp__notes__add_note", ToolClass::SideEffect),
            ("mcp__notes__big", ToolClass::ReadOnly),
            ("mcp__notes__crash_once", ToolClass::ReadOnly),
            ("mcp__notes__exit_now", ToolClass::ReadOnly),
            ("mcp__notes__read_notes", ToolClass::ReadOnly),
            ("mcp__notes__set_title", ToolClass::Idempotent),
            ("mcp__notes__wait", ToolClass::ReadOnly),
        ]
    );
    let added = to_output(
        &session
            .call("add_note", &json!({"text": "buy milk"}))
            .await
            .unwrap(),
    );
    assert_eq!(added.content, "added: buy milk");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("notes.txt")).unwrap(),
        "buy milk\n",
        "the server works in the run's workspace"
    );
    // The server dies in the middle of a call: the call is answered as closed, not hung.
    match session.call("exit_now", &json!({})).await {
        Err(McpError::Closed { server, .. }) => assert_eq!(server, "notes"),
        other => panic!("a call to a dying server was not closed: {other:?}"),
    }
    let mut server = server;
    eventually(
        Duration::from_secs(10),
        "the session to see the exit",
        || async { session.is_closed().then_some(()) },
    )
    .await;
    // The pipe closes as the process exits, a moment before its exit can be reaped.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !server.has_exited() {
        assert!(
            std::time::Instant::now() < deadline,
            "the server's exit was never reaped"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Its stderr, complete once it exited, is kept redacted.
    eventually(Duration::from_secs(10), "its stderr to end", || async {
        let tail = server.stderr_tail();
        tail.contains("token [").then_some(())
    })
    .await;
    let tail = server.stderr_tail();
    assert!(
        tail.contains("token [REDACTED:NOTES_TOKEN]") && !tail.contains("notes-s3cret-77"),
        "{tail}"
    );
    drop(session);

    // Started again, it goes on from what is on disk.
    let (_server, session) = start(&ctx, &cfg).await;
    let notes = to_output(&session.call("read_notes", &json!({})).await.unwrap());
    assert_eq!(notes.content, "buy milk\n");
    session.close().await;
}
