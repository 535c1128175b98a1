//! A run's end is counted once, by the pool that wrote it: never when a handler only returned
//! it (a stale end), and not again by a job that finds its run already ended.

use std::time::Duration;

use nightshift_store::RunStatus;
use nightshift_telemetry::exposition::parse;
use nightshift_tests::{TestDb, eventually};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::value;

/// A run's end is counted once a pool wrote it, not when the runtime returned it: a job run
/// by the runtime with no pool to write its outcome — which is how a worker frozen past its
/// lease, whose job another worker took and ends, sees its own stale end — counts nothing,
/// while the same agent's run in a pool is counted once.
pub(super) async fn end_counted_once_written(db: &TestDb) {
    use crate::fakes::{FakeTools, Harness, ScriptModel, agent, reply, text};
    use nightshift_agent::AgentRuntime;
    use nightshift_llm::StopReason;
    use nightshift_worker::{Handler, JobContext, JobOutcome, Pool, PoolConfig};
    use std::sync::Arc;

    nightshift_telemetry::install();
    let name = format!("frozen-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let done = || reply(vec![text("Done.")], StopReason::EndTurn);
    let def = || agent(json!({ "name": name }));
    let tools = Arc::new(FakeTools::default());
    let h = Harness::new(db, def(), ScriptModel::new(vec![done()]), tools.clone()).await;
    let labels = [("agent", name.as_str()), ("status", "succeeded")];
    let counted = || {
        value(
            &parse(&nightshift_telemetry::render()),
            "nightshift_runs_ended_total",
            &labels,
        )
    };

    // In a pool the end is written, then counted.
    let runtime = AgentRuntime::new([def()], ScriptModel::new(vec![done()]), tools);
    let stop = CancellationToken::new();
    let pool = Pool::new(h.store.clone(), runtime, PoolConfig::default());
    let pool = tokio::spawn(pool.run(stop.clone()));
    let run_id = h.enqueue(&name, "Work in a pool.").await;
    eventually(
        Duration::from_secs(60),
        "the pool's run to be counted",
        || async { (counted() == Some(1.0)).then_some(()) },
    )
    .await;
    let run = h.store.run(&run_id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Succeeded);
    stop.cancel();
    pool.await.unwrap().unwrap();

    // No pool: nobody writes the end the runtime returns, so nobody counts it.
    h.enqueue(&name, "Work alone.").await;
    let ctx = JobContext::new(h.claim().await);
    let (tell, written) = tokio::sync::oneshot::channel();
    ctx.when_outcome_written(move |written| {
        let _ = tell.send(written);
    });
    let outcome = h.runtime.handle(ctx).await;
    assert!(matches!(outcome, JobOutcome::Done(_)), "{outcome:?}");
    // Every clone of the context is gone untold, so the end was told unwritten, for good:
    // the count can never move for it.
    let written = tokio::time::timeout(Duration::from_secs(30), written).await;
    assert_eq!(written.expect("told in time").ok(), Some(false));
    assert_eq!(counted(), Some(1.0), "only the end a pool wrote is counted");
}

/// A message accepted while its run was failing: its job runs in the pool after the run's end,
/// ends cancelled saying why, and the run is started once and ended once in the metrics.
pub(super) async fn leftover_counts_nothing(db: &TestDb) {
    use crate::fakes::{FakeTools, Harness, ScriptModel, agent, reply, text};
    use nightshift_agent::AgentRuntime;
    use nightshift_llm::StopReason;
    use nightshift_store::{ConcurrencyPolicy, JobState, NewRun};
    use nightshift_worker::{Pool, PoolConfig};
    use std::sync::{Arc, Mutex};

    nightshift_telemetry::install();
    let name = format!(
        "leftover-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let model = ScriptModel::new(vec![reply(vec![text("no")], StopReason::Refusal)]);
    let def = || agent(json!({ "name": name }));
    let tools = Arc::new(FakeTools::default());
    let h = Harness::new(db, def(), model.clone(), tools.clone()).await;
    let intake = nightshift_scheduler::Intake::new(h.store.clone(), [name.clone()]);
    let sent = Arc::new(Mutex::new(None));
    let slot = sent.clone();
    model.during(0, async move {
        let accepted = intake
            .resume(nightshift_scheduler::ResumeRequest {
                concurrency_key: "pr-9".into(),
                message: "still there?".into(),
                idempotency_key: None,
            })
            .await
            .unwrap();
        *slot.lock().unwrap() = Some(accepted.job_id);
    });
    let run_id = h
        .store
        .enqueue(&NewRun::new(&name, "Review PR 9").concurrency("pr-9", ConcurrencyPolicy::Queue))
        .await
        .unwrap()
        .run_id;
    let runtime = AgentRuntime::new([def()], model.clone(), tools);
    let stop = CancellationToken::new();
    let pool = Pool::new(h.store.clone(), runtime, PoolConfig::default());
    let pool = tokio::spawn(pool.run(stop.clone()));
    let store = h.store.clone();
    let job = eventually(
        Duration::from_secs(60),
        "the message's job to end",
        || async {
            let id = (*sent.lock().unwrap())?;
            let job = store.job(id).await.unwrap()?;
            (job.status == JobState::Cancelled).then_some(job)
        },
    )
    .await;
    stop.cancel();
    pool.await.unwrap().unwrap();
    assert!(
        job.last_error
            .as_deref()
            .is_some_and(|e| e.contains("not delivered")),
        "{job:?}"
    );
    assert_eq!(
        h.store.run(&run_id).await.unwrap().unwrap().status,
        RunStatus::Failed
    );
    let samples = parse(&nightshift_telemetry::render());
    let agent = [("agent", name.as_str())];
    assert_eq!(
        value(&samples, "nightshift_runs_started_total", &agent),
        Some(1.0)
    );
    let ended: f64 = samples
        .iter()
        .filter(|s| {
            s.name == "nightshift_runs_ended_total"
                && s.labels.iter().any(|(k, v)| k == "agent" && *v == name)
        })
        .map(|s| s.value)
        .sum();
    assert_eq!(ended, 1.0, "the run ended once");
    assert_eq!(
        value(
            &samples,
            "nightshift_runs_ended_total",
            &[("agent", name.as_str()), ("status", "failed")]
        ),
        Some(1.0)
    );
}

/// A fork is a run started: its first job counts it under its agent (its log opens with the
/// parent's history, not a `run_started` of its own), once.
pub(super) async fn fork_counted_as_started(db: &TestDb) {
    use crate::fakes::{FakeTools, Harness, ScriptModel, agent, call, reply, text};
    use nightshift_agent::fork::{self, ForkGuard, ForkRequest};
    use nightshift_llm::StopReason;
    use nightshift_store::Trigger;
    use std::sync::Arc;

    nightshift_telemetry::install();
    let name = format!("forked-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let def = agent(json!({ "name": name }));
    let script = vec![
        reply(vec![call("c1", "read")], StopReason::ToolUse),
        reply(vec![text("Done.")], StopReason::EndTurn),
        // The fork, from turn 1: a tool round of its own, then its end.
        reply(vec![call("c2", "read")], StopReason::ToolUse),
        reply(vec![text("Done again.")], StopReason::EndTurn),
    ];
    let h = Harness::new(
        db,
        def.clone(),
        ScriptModel::new(script),
        Arc::new(FakeTools::default()),
    )
    .await;
    let started = || {
        value(
            &parse(&nightshift_telemetry::render()),
            "nightshift_runs_started_total",
            &[("agent", name.as_str())],
        )
    };
    let parent = h.enqueue(&name, "Look.").await;
    h.run_once().await;
    assert_eq!(h.status(&parent).await.0, RunStatus::Succeeded);
    assert_eq!(started(), Some(1.0));

    let guard = ForkGuard::new(
        nightshift_tools::Redactor::default(),
        std::slice::from_ref(&def.config),
        &nightshift_agent::PriceTable::builtin(),
    )
    .unwrap();
    let req = ForkRequest {
        from_turn: 1,
        ..ForkRequest::default()
    };
    let op = h.store.as_operator("test:metrics");
    let made = fork::fork_run(&op, &parent, &req, Trigger::Api, &guard)
        .await
        .unwrap();
    while h.status(&made.run_id).await.0 != RunStatus::Succeeded {
        h.run_once().await;
    }
    assert_eq!(started(), Some(2.0), "the fork counted once, as it started");
}
