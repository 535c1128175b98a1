//! todo_write: validation and rendering; the list is returned for the loop to keep.

use nightshift_tools::{Todo, TodoStatus, TodoWrite, parse_todos, render_todos};
use serde_json::json;

use crate::common::{Fixture, call};

#[tokio::test]
async fn a_valid_list_is_rendered() {
    let fx = Fixture::new();
    let input = json!({"todos": [
        {"content": "read the issue", "status": "completed"},
        {"content": "write the fix", "status": "in_progress"},
        {"content": "run the tests", "status": "pending"}
    ]});
    let out = call(&TodoWrite, &fx.ctx(), input.clone()).await;
    assert!(!out.is_error, "{}", out.content);
    assert_eq!(
        out.content,
        "3 todos: 1 completed, 1 in progress, 1 pending\n[x] read the issue\n[>] write the fix\n[ ] run the tests\n"
    );
    let todos = parse_todos(&input).unwrap();
    assert_eq!(
        todos[1],
        Todo {
            content: "write the fix".into(),
            status: TodoStatus::InProgress
        }
    );
    assert_eq!(render_todos(&todos), out.content);
    assert_eq!(render_todos(&[]), "todo list cleared (0 items)");
}

#[tokio::test]
async fn invalid_lists_are_refused_with_the_reason() {
    let fx = Fixture::new();
    let cases = [
        (
            json!({"todos": [{"content": "a", "status": "in_progress"}, {"content": "b", "status": "in_progress"}]}),
            "2 todos are in_progress (#1, #2)",
        ),
        (
            json!({"todos": [{"content": "a", "status": "done"}]}),
            "unknown variant `done`",
        ),
        (
            json!({"todos": [{"content": "  ", "status": "pending"}]}),
            "todo #1 has empty content",
        ),
        (
            json!({"todos": [{"content": "a"}]}),
            "missing field `status`",
        ),
        (json!({"items": []}), "unknown field `items`"),
    ];
    for (input, expected) in cases {
        let out = call(&TodoWrite, &fx.ctx(), input.clone()).await;
        assert!(out.is_error, "{input}: {}", out.content);
        assert!(out.content.contains(expected), "{input}: {}", out.content);
    }
}
