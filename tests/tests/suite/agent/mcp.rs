//! MCP tools in the loop, with the tool box's listing faked: a server is listed into the
//! run's log once, its tools are offered from the log in the same bytes after a crash and a
//! resume (the listing is not asked again), a changed list is logged and offered from the
//! next request on, and a call's class and input check come from the logged listing.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::fakes::*;
use nightshift_agent::{LeftOutTool, McpListing, RunEvent, ToolClass};
use nightshift_llm::{ModelRequest, StopReason};
use nightshift_store::RunStatus;
use nightshift_tests::TestDb;
use nightshift_tools::ToolDefinition;
use serde_json::json;

fn tool(name: &str, class: ToolClass) -> ToolDefinition {
    ToolDefinition {
        name: format!("mcp__notes__{name}"),
        description: format!("does {name}"),
        input_schema: json!({"type": "object", "properties": {"text": {"type": "string"}},
                             "required": ["text"]}),
        class,
    }
}

fn listing(tools: Vec<ToolDefinition>) -> McpListing {
    McpListing {
        server: "notes".into(),
        tools,
        left_out: vec![LeftOutTool {
            tool: "bad.name".into(),
            reason: "its name has characters a model's tool name cannot hold".into(),
        }],
    }
}

/// The tool names a request offered, in order.
fn offered(req: &ModelRequest) -> Vec<String> {
    req.tools.iter().map(|t| t.name.clone()).collect()
}

/// The `tools` part of a recorded request, as sent.
fn tools_bytes(raw: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(raw).unwrap();
    v["tools"].to_string()
}

pub(super) async fn listed_once_and_offered_the_same_across_a_crash(db: &TestDb) {
    let model = ScriptModel::new(vec![
        reply(
            vec![
                call_with("c1", "mcp__notes__read", json!({"text": "a"})),
                call_with("c2", "mcp__notes__write", json!({"nope": 1})),
            ],
            StopReason::ToolUse,
        ),
        reply(
            vec![call_with("c3", "mcp__notes__write", json!({"text": "b"}))],
            StopReason::ToolUse,
        ),
        reply(vec![text("done")], StopReason::EndTurn),
    ]);
    *model.stall_at.lock().unwrap() = Some(1);
    let tools = Arc::new(FakeTools::default());
    *tools.mcp.lock().unwrap() = vec![listing(vec![
        tool("read", ToolClass::ReadOnly),
        tool("write", ToolClass::SideEffect),
    ])];
    let a = agent(json!({"mcp": [{"name": "notes", "command": "notes-server"}]}));
    let h = Harness::new(db, a, model.clone(), tools.clone()).await;
    let run_id = h.enqueue("helper", "take notes").await;
    h.crash_when(&model.stalled).await;
    *model.stall_at.lock().unwrap() = None;
    h.run_once().await;
    let (status, _, error) = h.status(&run_id).await;
    assert_eq!(status, RunStatus::Succeeded, "{error:?}");

    let requests = model.requests();
    assert_eq!(requests.len(), 4, "first, crashed, resumed, last");
    let first = model.request(0);
    assert_eq!(
        offered(&first),
        [
            "mcp__notes__read",
            "mcp__notes__write",
            "put",
            "read",
            "send"
        ],
        "the agent's tools and the server's, sorted by name"
    );
    for (i, raw) in requests.iter().enumerate() {
        assert_eq!(
            tools_bytes(raw),
            tools_bytes(&requests[0]),
            "request {i} offers the same tools in the same bytes"
        );
    }
    assert_eq!(
        tools.mcp_listed.load(Ordering::SeqCst),
        1,
        "the resumed job read the listing from the log"
    );
    let events = h.events(&run_id).await;
    let listed: Vec<&RunEvent> = events
        .iter()
        .filter(|e| matches!(e, RunEvent::McpToolsListed { .. }))
        .collect();
    assert_eq!(listed.len(), 1);
    assert!(matches!(listed[0], RunEvent::McpToolsListed { left_out, .. } if left_out.len() == 1));
    // Classes from the listing; the input that breaks the schema never reached the tool box.
    let started: Vec<(String, ToolClass)> = events
        .iter()
        .filter_map(|e| match e {
            RunEvent::ToolStarted {
                call_id,
                durability,
                ..
            } => Some((call_id.clone(), *durability)),
            _ => None,
        })
        .collect();
    assert_eq!(
        started,
        [
            ("c1".to_string(), ToolClass::ReadOnly),
            ("c3".to_string(), ToolClass::SideEffect)
        ]
    );
    let refused = events.iter().find_map(|e| match e {
        RunEvent::ToolResult {
            call_id, content, ..
        } if call_id == "c2" => Some(content.clone()),
        _ => None,
    });
    assert!(
        refused.as_deref().is_some_and(|c| c.contains("text")),
        "{refused:?}"
    );
    let called: Vec<String> = tools.calls().into_iter().map(|(n, _)| n).collect();
    assert_eq!(called, ["mcp__notes__read", "mcp__notes__write"]);
}

/// A server that says its list changed is listed again: the new list is logged and offered
/// from the next request on; an unchanged one is not logged again.
pub(super) async fn a_changed_list_is_logged_and_offered(db: &TestDb) {
    let model = ScriptModel::new(vec![
        reply(
            vec![call_with("c1", "mcp__notes__read", json!({"text": "a"}))],
            StopReason::ToolUse,
        ),
        reply(
            vec![call_with("c2", "mcp__notes__read", json!({"text": "b"}))],
            StopReason::ToolUse,
        ),
        reply(vec![text("done")], StopReason::EndTurn),
    ]);
    let tools = Arc::new(FakeTools::default());
    *tools.mcp.lock().unwrap() = vec![listing(vec![tool("read", ToolClass::ReadOnly)])];
    let a = agent(json!({"mcp": [{"name": "notes", "command": "notes-server"}]}));
    let h = Harness::new(db, a, model.clone(), tools.clone()).await;
    let run_id = h.enqueue("helper", "take notes").await;
    // The server changes its list while the model answers the first request, then says the
    // list changed again without changing it while the model answers the second.
    let changing = tools.clone();
    model.during(0, async move {
        *changing.mcp.lock().unwrap() = vec![listing(vec![
            tool("read", ToolClass::ReadOnly),
            tool("search", ToolClass::ReadOnly),
        ])];
        changing.mcp_changed.lock().unwrap().push("notes".into());
    });
    let again = tools.clone();
    model.during(1, async move {
        again.mcp_changed.lock().unwrap().push("notes".into());
    });
    h.run_once().await;
    assert_eq!(h.status(&run_id).await.0, RunStatus::Succeeded);
    assert_eq!(
        offered(&model.request(0))
            .iter()
            .filter(|n| n.starts_with("mcp__"))
            .count(),
        1
    );
    for i in [1, 2] {
        assert!(
            offered(&model.request(i)).contains(&"mcp__notes__search".to_string()),
            "request {i}"
        );
    }
    let listings = h
        .events(&run_id)
        .await
        .into_iter()
        .filter(|e| matches!(e, RunEvent::McpToolsListed { .. }))
        .count();
    assert_eq!(listings, 2, "an unchanged list is not logged again");
    assert_eq!(tools.mcp_listed.load(Ordering::SeqCst), 3);
}

/// The agent's current `deny` and `classes` rule over a listing already in the log (a reload
/// applies to runs under way): a denied tool is neither offered nor called, a reclassed one
/// starts with the config's class.
pub(super) async fn the_config_rules_over_the_logged_listing(db: &TestDb) {
    let model = ScriptModel::new(vec![
        reply(
            vec![
                call_with("c1", "mcp__notes__write", json!({"text": "a"})),
                call_with("c2", "mcp__notes__read", json!({"text": "b"})),
            ],
            StopReason::ToolUse,
        ),
        reply(vec![text("done")], StopReason::EndTurn),
    ]);
    let tools = Arc::new(FakeTools::default());
    *tools.mcp.lock().unwrap() = vec![listing(vec![
        tool("read", ToolClass::ReadOnly),
        tool("write", ToolClass::SideEffect),
    ])];
    let a = agent(json!({"mcp": [{"name": "notes", "command": "notes-server",
        "deny": ["write"], "classes": {"read": "side_effect"}}]}));
    let h = Harness::new(db, a, model.clone(), tools.clone()).await;
    let run_id = h.enqueue("helper", "take notes").await;
    h.run_once().await;
    assert_eq!(h.status(&run_id).await.0, RunStatus::Succeeded);
    assert!(!offered(&model.request(0)).contains(&"mcp__notes__write".to_string()));
    let events = h.events(&run_id).await;
    let denied = events.iter().find_map(|e| match e {
        RunEvent::ToolResult {
            call_id, content, ..
        } if call_id == "c1" => Some(content.clone()),
        _ => None,
    });
    assert!(
        denied
            .as_deref()
            .is_some_and(|c| c.contains("not a tool of this run")),
        "{denied:?}"
    );
    let read_class = events.iter().find_map(|e| match e {
        RunEvent::ToolStarted {
            call_id,
            durability,
            ..
        } if call_id == "c2" => Some(*durability),
        _ => None,
    });
    assert_eq!(read_class, Some(ToolClass::SideEffect));
    let called: Vec<String> = tools.calls().into_iter().map(|(n, _)| n).collect();
    assert_eq!(called, ["mcp__notes__read"]);
}
