//! Forks and reruns over a real store: the fork reads the parent's history instead of
//! running it again (a side-effect call before the fork point happens once), sends the
//! parent's request bytes at the fork point, applies the changes asked for, refuses what it
//! cannot be without writing anything, and keeps its parent from retention while it is kept.

use std::collections::BTreeMap;
use std::sync::Arc;

use nightshift_agent::fork::{self, ForkError, ForkGuard, ForkRequest};
use nightshift_agent::{PriceTable, Pricing};
use nightshift_llm::{ContentBlock, StopReason};
use nightshift_store::retention::PurgeRule;
use nightshift_store::{RunStatus, Trigger};
use nightshift_tests::TestDb;
use nightshift_tools::Redactor;
use serde_json::json;

use super::super::fakes::*;

/// A parent that sends (a side effect), then reads, then ends.
fn script() -> Vec<nightshift_llm::ModelResponse> {
    vec![
        reply(
            vec![text("Sending."), call("c1", "send")],
            StopReason::ToolUse,
        ),
        reply(vec![call("c2", "read")], StopReason::ToolUse),
        reply(vec![text("done")], StopReason::EndTurn),
    ]
}

/// The parent run, finished: the harness, its model, its tools and the run id.
async fn finished_parent(db: &TestDb) -> (Harness, Arc<ScriptModel>, Arc<FakeTools>, String) {
    let model = ScriptModel::new(script());
    let tools = Arc::new(FakeTools::default());
    let h = Harness::new(db, agent(json!({})), model.clone(), tools.clone()).await;
    let parent = h.enqueue("helper", &long_prompt()).await;
    h.run_once().await;
    assert_eq!(h.status(&parent).await.0, RunStatus::Succeeded);
    assert_eq!(model.requests().len(), 3);
    (h, model, tools, parent)
}

/// A prompt long enough to be stored as a blob of its own (past 256 bytes).
fn long_prompt() -> String {
    let words: Vec<String> = (0..400).map(|i| format!("w{i}")).collect();
    format!("Send it, then look: {}", words.join(" "))
}

/// The guard of a config holding the harness's agent, whose price table knows
/// `another-model` too, storing through `redactor`.
fn guard(redactor: Redactor) -> ForkGuard {
    let prices: Pricing = serde_json::from_value(json!({"input": 1.0, "output": 2.0})).unwrap();
    let table = PriceTable::with_overrides(&BTreeMap::from([("another-model".into(), prices)]));
    ForkGuard::new(redactor, &[agent(json!({})).config], &table.unwrap()).unwrap()
}

fn sends(tools: &FakeTools) -> usize {
    tools.calls().iter().filter(|(n, _)| n == "send").count()
}

pub(super) async fn a_fork_reuses_side_effects_and_sends_the_parents_request(db: &TestDb) {
    let (h, model, tools, parent) = finished_parent(db).await;
    assert_eq!(sends(&tools), 1);
    let op = h.store.as_operator("test:forks");
    let req = ForkRequest {
        from_turn: 1,
        ..ForkRequest::default()
    };
    let made = fork::fork_run(
        &op,
        &parent,
        &req,
        Trigger::Api,
        &guard(Redactor::default()),
    )
    .await
    .unwrap();
    h.run_once().await;
    assert_eq!(h.status(&made.run_id).await.0, RunStatus::Succeeded);
    assert_eq!(
        sends(&tools),
        1,
        "the send before the fork point ran once, in the parent"
    );
    let requests = model.requests();
    assert_eq!(requests.len(), 5, "the fork made turns 1 and 2 again");
    assert_eq!(
        requests[3], requests[1],
        "the fork's first request is byte for byte the parent's at turn 1"
    );
    assert_eq!(requests[4], requests[2]);
    let run = h.store.run(&made.run_id).await.unwrap().unwrap();
    assert_eq!(run.forked_from.as_deref(), Some(parent.as_str()));
    // The fork's log: the parent's events up to the fork point, then its own from `forked`.
    let parent_log = h.events(&parent).await;
    let fork_log = h.events(&made.run_id).await;
    let shared = run.fork_seq.unwrap() as usize;
    assert_eq!(fork_log[..shared], parent_log[..shared]);
    assert_eq!(fork_log[shared].kind(), "forked");
    let stored = h.store.events(&made.run_id, 0).await.unwrap();
    assert!(
        stored[..shared].iter().all(|e| e.run_id == parent),
        "read through the parent's rows"
    );
    // Its checkpoint refers to the parent's text instead of storing it again.
    let (p, f) = (
        h.store.run_storage(&parent).await.unwrap(),
        h.store.run_storage(&made.run_id).await.unwrap(),
    );
    assert_eq!(f.checkpoints, 1);
    assert!(
        f.blob_raw_bytes < long_prompt().len() as i64
            && p.blob_raw_bytes > long_prompt().len() as i64,
        "the prompt is stored once, in the parent: fork {f:?}, parent {p:?}"
    );
    // Repeating the request with a key makes one fork.
    let keyed = ForkRequest {
        idempotency_key: Some("k1".into()),
        ..req.clone()
    };
    let first = fork::fork_run(
        &op,
        &parent,
        &keyed,
        Trigger::Api,
        &guard(Redactor::default()),
    )
    .await
    .unwrap();
    let again = fork::fork_run(
        &op,
        &parent,
        &keyed,
        Trigger::Api,
        &guard(Redactor::default()),
    )
    .await
    .unwrap();
    assert!(again.duplicate && again.run_id == first.run_id);
}

pub(super) async fn a_rerun_sends_the_first_request_again(db: &TestDb) {
    let (h, model, tools, parent) = finished_parent(db).await;
    let op = h.store.as_operator("test:forks");
    let made = fork::fork_run(
        &op,
        &parent,
        &ForkRequest::rerun(),
        Trigger::Cli,
        &guard(Redactor::default()),
    )
    .await
    .unwrap();
    h.run_once().await;
    assert_eq!(h.status(&made.run_id).await.0, RunStatus::Succeeded);
    let requests = model.requests();
    assert_eq!(
        requests[3], requests[0],
        "the rerun starts from the same request"
    );
    assert_eq!(
        sends(&tools),
        2,
        "a rerun makes every call again, the send too"
    );
    // Bulk: the succeeded runs, each once however often asked.
    let filter = nightshift_store::RunFilter {
        status: Some(RunStatus::Succeeded),
        ..Default::default()
    };
    let first = fork::rerun_matching(
        &op,
        &filter,
        10,
        false,
        Trigger::Cli,
        &guard(Redactor::default()),
    )
    .await
    .unwrap();
    assert_eq!(first.len(), 2, "{first:?}");
    assert!(
        first
            .iter()
            .all(|r| matches!(r, fork::Rerun::Started { .. }))
    );
    let again = fork::rerun_matching(
        &op,
        &filter,
        10,
        false,
        Trigger::Cli,
        &guard(Redactor::default()),
    )
    .await
    .unwrap();
    assert!(
        again
            .iter()
            .all(|r| matches!(r, fork::Rerun::AlreadyRerun { .. })),
        "{again:?}"
    );
    let live = nightshift_store::RunFilter::default();
    assert!(matches!(
        fork::rerun_matching(
            &op,
            &live,
            10,
            false,
            Trigger::Cli,
            &guard(Redactor::default())
        )
        .await,
        Err(ForkError::Invalid(_))
    ));
}

pub(super) async fn a_fork_applies_its_changes(db: &TestDb) {
    let (h, model, tools, parent) = finished_parent(db).await;
    let op = h.store.as_operator("test:forks");
    let req = ForkRequest {
        from_turn: 1,
        prompt: Some("Check the reply twice. The key is sk-fork-secret-42.".into()),
        model: Some("another-model".into()),
        tool_results: BTreeMap::from([(
            "c1".to_string(),
            "sent, but to the wrong place".to_string(),
        )]),
        idempotency_key: None,
    };
    let redactor = Redactor::new([("FORK_KEY", "sk-fork-secret-42")]);
    let made = fork::fork_run(&op, &parent, &req, Trigger::Api, &guard(redactor))
        .await
        .unwrap();
    h.run_once().await;
    assert_eq!(h.status(&made.run_id).await.0, RunStatus::Succeeded);
    assert_eq!(sends(&tools), 1);
    let first = model.request(3);
    assert_eq!(first.model, "another-model");
    let last = first.messages.last().unwrap();
    let results = tool_results(last);
    assert_eq!(
        results,
        vec![("c1".into(), "sent, but to the wrong place".into(), false)]
    );
    assert!(
        matches!(last.content.last(), Some(ContentBlock::Text { text }) if text == "Check the reply twice. The key is [REDACTED:FORK_KEY]."),
        "the prompt follows the results: {last:?}"
    );
    let run = h.store.run(&made.run_id).await.unwrap().unwrap();
    assert_eq!(run.cost_usd, 0.0, "the fork pays only for its own calls");
    let stored = h.store.events(&made.run_id, 0).await.unwrap();
    assert!(
        stored
            .iter()
            .all(|e| !e.payload.contains("sk-fork-secret-42")),
        "the fork's prompt is stored redacted"
    );
    assert!(
        !model
            .requests()
            .iter()
            .any(|r| r.contains("sk-fork-secret-42"))
    );
}

pub(super) async fn a_fork_that_cannot_be_is_refused_whole(db: &TestDb) {
    let (h, _model, _tools, parent) = finished_parent(db).await;
    let op = h.store.as_operator("test:forks");
    let before = h.store.list_runs(None, 100).await.unwrap().len();
    let refused = [
        ForkRequest {
            from_turn: 4,
            ..Default::default()
        },
        ForkRequest {
            from_turn: 3,
            ..Default::default()
        },
        ForkRequest {
            from_turn: 1,
            tool_results: BTreeMap::from([("c2".to_string(), "x".to_string())]),
            ..Default::default()
        },
        ForkRequest {
            from_turn: 1,
            prompt: Some("  ".into()),
            ..Default::default()
        },
        // A model the agent neither has nor can price.
        ForkRequest {
            from_turn: 1,
            model: Some("no-such-model".into()),
            ..Default::default()
        },
    ];
    for req in &refused {
        match fork::fork_run(&op, &parent, req, Trigger::Api, &guard(Redactor::default())).await {
            Err(ForkError::Invalid(why)) => assert!(!why.is_empty()),
            other => panic!("{req:?} was not refused: {other:?}"),
        }
    }
    assert!(matches!(
        fork::fork_run(
            &op,
            "no-such-run",
            &ForkRequest::rerun(),
            Trigger::Api,
            &guard(Redactor::default())
        )
        .await,
        Err(ForkError::NotFound(_))
    ));
    // A run of an agent this config does not hold (removed since) is refused, alone and in
    // a bulk rerun.
    let elsewhere = ForkGuard::new(Redactor::default(), &[], &PriceTable::builtin()).unwrap();
    match fork::fork_run(
        &op,
        &parent,
        &ForkRequest::rerun(),
        Trigger::Api,
        &elsewhere,
    )
    .await
    {
        Err(ForkError::Invalid(why)) => {
            assert!(why.contains("'helper' is not configured"), "{why}")
        }
        other => panic!("a fork of an unconfigured agent's run was made: {other:?}"),
    }
    let ended = nightshift_store::RunFilter {
        status: Some(RunStatus::Succeeded),
        ..Default::default()
    };
    for dry_run in [true, false] {
        let said = fork::rerun_matching(&op, &ended, 10, dry_run, Trigger::Cli, &elsewhere)
            .await
            .unwrap();
        assert!(
            matches!(&said[..], [fork::Rerun::Refused { parent: p, error }]
                if *p == parent && error.contains("not configured")),
            "{said:?}"
        );
    }
    assert_eq!(
        h.store.list_runs(None, 100).await.unwrap().len(),
        before,
        "nothing was made"
    );
    // After its last call a fork goes on with a prompt.
    let on = ForkRequest {
        from_turn: 3,
        prompt: Some("And now?".into()),
        ..Default::default()
    };
    fork::fork_run(&op, &parent, &on, Trigger::Api, &guard(Redactor::default()))
        .await
        .unwrap();
}

pub(super) async fn retention_keeps_a_parent_while_its_fork_is_kept(db: &TestDb) {
    let (h, _model, _tools, parent) = finished_parent(db).await;
    let op = h.store.as_operator("test:forks");
    let made = fork::fork_run(
        &op,
        &parent,
        &ForkRequest::rerun(),
        Trigger::Api,
        &guard(Redactor::default()),
    )
    .await
    .unwrap();
    h.run_once().await;
    h.clock.advance(std::time::Duration::from_secs(3600));
    let rule = PurgeRule {
        status: RunStatus::Succeeded,
        ended_before: h.store.now(),
        agent: None,
        except_agents: Vec::new(),
        keep_summary: true,
    };
    let batch = h.store.purge_batch(&rule, 10).await.unwrap();
    assert_eq!(
        batch.runs,
        vec![made.run_id.clone()],
        "only the fork: its parent stays"
    );
    assert!(
        h.store
            .run(&parent)
            .await
            .unwrap()
            .unwrap()
            .purged_at
            .is_none()
    );
    let batch = h.store.purge_batch(&rule, 10).await.unwrap();
    assert_eq!(batch.runs, vec![parent.clone()], "then the parent");
    assert!(matches!(
        fork::fork_run(
            &op,
            &parent,
            &ForkRequest::rerun(),
            Trigger::Api,
            &guard(Redactor::default())
        )
        .await,
        Err(ForkError::NotFound(_))
    ));
}
