//! Compaction: old messages replaced with a summary, a summary cut off by a full context window
//! not accepted, and a context too long compacted once, then failing.

use std::sync::Arc;

use crate::fakes::*;
use nightshift_llm::{ModelRequest, Role, StopReason};
use nightshift_store::RunStatus;
use nightshift_tests::TestDb;
use serde_json::json;

/// A summary whose own reply stopped because the context window filled up (or at
/// max_tokens) holds less than the conversation it would replace: the compaction is refused,
/// the run fails saying why, and no `compacted` event is logged.
pub(super) async fn cut_off_summary(db: &TestDb) {
    for stop in [
        StopReason::ModelContextWindowExceeded,
        StopReason::MaxTokens,
    ] {
        let mut first = reply(vec![call("c1", "read")], StopReason::ToolUse);
        first.usage = usage(900, 5);
        let model = Arc::new(ScriptModel {
            replies: vec![
                first,
                reply(vec![text("never asked for")], StopReason::EndTurn),
            ],
            summary: Some("we read c1 and then".into()),
            summary_stop: Some(stop.clone()),
            ..ScriptModel::default()
        });
        let policy = json!({"context": {"window_tokens": 1000, "compact_at": 0.5, "keep_last": 2}});
        let h = Harness::new(
            db,
            agent(policy),
            model.clone(),
            Arc::new(FakeTools::default()),
        )
        .await;
        let run_id = h.enqueue("helper", "long task").await;
        h.run_once().await;
        let (status, _, error) = h.status(&run_id).await;
        assert_eq!(status, RunStatus::Failed, "{stop:?}");
        let error = error.unwrap_or_default();
        assert!(
            error.starts_with("compaction failed: ") && error.contains(stop.as_str()),
            "{error}"
        );
        assert!(!h.kinds(&run_id).await.contains(&"compacted"), "{stop:?}");
        assert_eq!(
            model.requests().len(),
            2,
            "the reply, then the refused summary"
        );
    }
}

pub(super) async fn compaction(db: &TestDb) {
    let mut first = reply(vec![call("c1", "read")], StopReason::ToolUse);
    first.usage = usage(900, 5);
    let model = Arc::new(ScriptModel {
        replies: vec![
            first,
            reply(vec![call("c2", "read")], StopReason::ToolUse),
            reply(vec![text("done")], StopReason::EndTurn),
        ],
        summary: Some("we read c1".into()),
        ..ScriptModel::default()
    });
    let policy = json!({"context": {"window_tokens": 1000, "compact_at": 0.5, "keep_last": 2}});
    let h = Harness::new(
        db,
        agent(policy),
        model.clone(),
        Arc::new(FakeTools::default()),
    )
    .await;
    let run_id = h.enqueue("helper", "long task").await;
    h.run_once().await;
    assert_eq!(h.status(&run_id).await.0, RunStatus::Succeeded);
    assert!(h.kinds(&run_id).await.contains(&"compacted"));
    let reqs = model.requests();
    let summary_req: ModelRequest = serde_json::from_str(&reqs[1]).unwrap();
    assert!(
        crate::fakes::asks_for_summary(&summary_req),
        "the request ends with the summary request"
    );
    let after: ModelRequest = serde_json::from_str(&reqs[2]).unwrap();
    assert!(
        after.messages[0].text().contains("we read c1"),
        "summary first"
    );
    assert_eq!(
        after.messages.len(),
        3,
        "summary + the kept reply and its results"
    );
    assert_eq!(after.messages[1].role, Role::Assistant);
    assert_eq!(
        h.store.run(&run_id).await.unwrap().unwrap().turns,
        3,
        "the summary call is not a round"
    );
}

pub(super) async fn context_too_long(db: &TestDb) {
    let model = Arc::new(ScriptModel {
        too_long: true,
        ..ScriptModel::default()
    });
    let h = Harness::new(
        db,
        agent(json!({})),
        model.clone(),
        Arc::new(FakeTools::default()),
    )
    .await;
    let run_id = h.enqueue("helper", "huge").await;
    h.run_once().await;
    let (status, _, error) = h.status(&run_id).await;
    assert_eq!(status, RunStatus::Failed);
    assert_eq!(
        error.as_deref(),
        Some("model call failed: prompt is too long")
    );
    assert_eq!(
        h.kinds(&run_id)
            .await
            .iter()
            .filter(|k| **k == "compacted")
            .count(),
        1,
        "compacted once"
    );
}
