//! Retention (`Store::purge_batch`, `Store::purge_preview`, `AsOperator::purge_runs`): a purge
//! removes exactly the history of the runs its rule names — the end state, the cutoff, the
//! agents — and nothing of a live run, of a run that ended after the cutoff, or of an ended
//! run whose job or background task still runs; batches are bounded; a second purge finds
//! nothing; the audit trail stays; a dry run changes nothing.

use std::time::Duration;

use nightshift_store::{
    ConcurrencyPolicy, Error, ManualClock, NewRun, NewTask, PurgeRule, RunStatus, Store,
};

use crate::TestDb;

const LEASE: Duration = Duration::from_secs(30);
const DAY: Duration = Duration::from_secs(86_400);

/// A run of `agent` that ended as `status` now, with two events and a checkpoint.
async fn ended(store: &Store, agent: &str, status: RunStatus) -> String {
    let run_id = store
        .enqueue(&NewRun::new(agent, "p"))
        .await
        .unwrap()
        .run_id;
    let lease = store.claim("w", None, 1, LEASE).await.unwrap().remove(0);
    assert_eq!(lease.job().run_id, run_id);
    // A long string, so that the run has stored content (`run_blobs`) the purge must take.
    let long = "stored once ".repeat(40);
    lease
        .append_event("note", &format!("{{\"a\":\"{long}\"}}"))
        .await
        .unwrap();
    lease.append_event("note", "{\"b\":2}").await.unwrap();
    lease
        .write_checkpoint(2, 1, &format!("{{\"snapshot\":\"{long}\"}}"))
        .await
        .unwrap();
    match status {
        RunStatus::Succeeded => lease.ack(Some("ok".into())).await.unwrap(),
        RunStatus::Failed => lease.fail("boom").await.unwrap(),
        other => panic!("no path to {other} here"),
    }
    run_id
}

/// A run of `agent` cancelled while queued (no history but its job and outbox row).
async fn cancelled(store: &Store, agent: &str) -> String {
    let run_id = store
        .enqueue(&NewRun::new(agent, "p"))
        .await
        .unwrap()
        .run_id;
    store.cancel_run(&run_id).await.unwrap();
    run_id
}

fn rule(status: RunStatus, before: i64) -> PurgeRule {
    PurgeRule {
        status,
        ended_before: before,
        agent: None,
        except_agents: Vec::new(),
        keep_summary: true,
    }
}

/// Whether the run still has its history: events, a checkpoint, stored content, jobs.
async fn has_history(store: &Store, run_id: &str) -> bool {
    !store.events(run_id, 0).await.unwrap().is_empty()
        || store.latest_checkpoint(run_id).await.unwrap().is_some()
        || store.run_storage(run_id).await.unwrap().blobs > 0
        || !store.jobs_of_run(run_id).await.unwrap().is_empty()
}

async fn purge_all(store: &Store, rule: &PurgeRule) -> Vec<String> {
    let mut all = Vec::new();
    loop {
        let batch = store.purge_batch(rule, 100).await.unwrap();
        if batch.runs.is_empty() {
            return all;
        }
        all.extend(batch.runs);
    }
}

/// The end state, the cutoff and the agents decide; live runs and later ends are kept.
pub async fn purge_takes_exactly_what_its_rule_names(db: &TestDb) {
    let (store, clock) = db.manual().await;
    let old_ok = ended(&store, "a", RunStatus::Succeeded).await;
    let old_failed = ended(&store, "a", RunStatus::Failed).await;
    let old_other = ended(&store, "b", RunStatus::Succeeded).await;
    let old_cancelled = cancelled(&store, "a").await;
    clock.advance(DAY);
    let cutoff = store.now();
    clock.advance(DAY);
    let new_ok = ended(&store, "a", RunStatus::Succeeded).await;
    let queued = store.enqueue(&NewRun::new("a", "q")).await.unwrap().run_id;
    let running = store.enqueue(&NewRun::new("a", "r")).await.unwrap().run_id;
    let lease = store.claim("w", None, 1, LEASE).await.unwrap().remove(0);
    assert_eq!(
        lease.job().run_id,
        queued,
        "the older queued run is claimed first"
    );
    lease.append_event("note", "{}").await.unwrap();

    // Agent a's succeeded runs that ended before the cutoff, and only those.
    let only_a = PurgeRule {
        agent: Some("a".into()),
        ..rule(RunStatus::Succeeded, cutoff)
    };
    assert_eq!(
        purge_all(&store, &only_a).await,
        std::slice::from_ref(&old_ok)
    );
    let summary = store
        .run(&old_ok)
        .await
        .unwrap()
        .expect("the summary is kept");
    assert_eq!(summary.status, RunStatus::Succeeded);
    assert_eq!(summary.result.as_deref(), Some("ok"));
    assert!(summary.purged_at.is_some());
    assert!(!has_history(&store, &old_ok).await);
    for kept in [&old_failed, &old_other, &new_ok, &queued, &running] {
        let run = store.run(kept).await.unwrap().unwrap();
        assert_eq!(run.purged_at, None, "{kept} is untouched");
        assert!(has_history(&store, kept).await, "{kept} keeps its history");
    }
    assert!(
        store
            .run(&old_cancelled)
            .await
            .unwrap()
            .unwrap()
            .purged_at
            .is_none()
    );

    // Any agent but a: b's old run goes; a's are left to a's own rule.
    let but_a = PurgeRule {
        except_agents: vec!["a".into()],
        ..rule(RunStatus::Succeeded, cutoff)
    };
    assert_eq!(
        purge_all(&store, &but_a).await,
        std::slice::from_ref(&old_other)
    );
    assert_eq!(
        purge_all(&store, &rule(RunStatus::Cancelled, cutoff)).await,
        std::slice::from_ref(&old_cancelled)
    );
    assert_eq!(
        purge_all(&store, &rule(RunStatus::Failed, cutoff)).await,
        std::slice::from_ref(&old_failed)
    );
    // A cutoff in the future takes the later end too, never the live runs.
    let future = store.now() + 1;
    assert_eq!(
        purge_all(&store, &rule(RunStatus::Succeeded, future)).await,
        std::slice::from_ref(&new_ok)
    );
    for live in [&queued, &running] {
        assert!(has_history(&store, live).await);
        assert!(!store.run(live).await.unwrap().unwrap().status.is_terminal());
    }
}

/// Without a summary the run row goes as well, with its tasks, outbox rows and approvals;
/// the audit trail naming it stays.
pub async fn without_a_summary_the_row_goes_and_the_audit_trail_stays(db: &TestDb) {
    let (store, clock) = db.manual().await;
    let run_id = store.enqueue(&NewRun::new("a", "p")).await.unwrap().run_id;
    let lease = store.claim("w", None, 1, LEASE).await.unwrap().remove(0);
    let task = NewTask {
        id: "task-1",
        run_id: &run_id,
        call_id: "c1",
        command: "sleep 1",
        owner: "w",
        deadline_at: store.now() + 60_000,
    };
    store.start_task(&task).await.unwrap();
    end_task(&store, "task-1").await;
    lease.ack(None).await.unwrap();
    let other = store.enqueue(&NewRun::new("a", "p")).await.unwrap().run_id;
    let op = store.as_operator("cli:alice");
    op.cancel_run(&other).await.unwrap();
    clock.advance(DAY);
    let rule = PurgeRule {
        keep_summary: false,
        ..rule(RunStatus::Succeeded, store.now())
    };
    let batch = store.purge_batch(&rule, 10).await.unwrap();
    assert_eq!(batch.runs, std::slice::from_ref(&run_id));
    assert_eq!(batch.tasks, ["task-1".to_string()]);
    assert!(batch.rows >= 3, "job, task and run at least: {batch:?}");
    assert_eq!(store.run(&run_id).await.unwrap(), None);
    assert!(store.task("task-1").await.unwrap().is_none());
    assert!(store.run_outbox(&run_id).await.unwrap().is_empty());
    assert!(!has_history(&store, &run_id).await);
    assert!(
        store.run(&other).await.unwrap().is_some(),
        "cancelled runs have their own rule"
    );

    // The operator's purge is recorded once; the row of the earlier cancel naming the run
    // stays after the run is gone.
    let cancelled_rule = PurgeRule {
        status: RunStatus::Cancelled,
        ..rule.clone()
    };
    let done = op
        .purge_runs(&[cancelled_rule, rule], 1, "before=test", |_| {
            Duration::ZERO
        })
        .await
        .unwrap();
    assert_eq!(
        (done.counts.runs, done.runs.clone()),
        (1, vec![other.clone()])
    );
    assert_eq!(store.run(&other).await.unwrap(), None);
    let trail = store.audit_log(None, None, 100).await.unwrap();
    let actions: Vec<(&str, Option<&str>)> = trail
        .iter()
        .map(|e| (e.action.as_str(), e.run_id.as_deref()))
        .collect();
    assert_eq!(actions, [("purge", None), ("cancel", Some(other.as_str()))]);
    assert_eq!(trail[0].detail.as_deref(), Some("before=test"));
}

async fn end_task(store: &Store, id: &str) {
    let end = nightshift_store::TaskEnd {
        status: nightshift_store::TaskStatus::Succeeded,
        exit_code: Some(0),
        detail: "",
        output_tail: "done",
        output_bytes: 4,
    };
    store.end_task(id, &end).await.unwrap();
}

/// A batch takes at most its limit, oldest end first; once all are purged, nothing more is.
pub async fn batches_are_bounded_and_a_second_purge_finds_nothing(db: &TestDb) {
    let (store, clock) = db.manual().await;
    let mut runs = Vec::new();
    for _ in 0..7 {
        runs.push(ended(&store, "a", RunStatus::Succeeded).await);
        clock.advance(Duration::from_secs(1));
    }
    clock.advance(DAY);
    let rule = rule(RunStatus::Succeeded, store.now());
    let mut sizes = Vec::new();
    let mut order = Vec::new();
    loop {
        let batch = store.purge_batch(&rule, 3).await.unwrap();
        sizes.push(batch.runs.len());
        if batch.runs.is_empty() {
            break;
        }
        assert_eq!(batch.counts.events, 2 * batch.runs.len() as u64);
        assert_eq!(batch.counts.checkpoints, batch.runs.len() as u64);
        let mut ids = batch.runs;
        ids.sort_by_key(|id| runs.iter().position(|r| r == id));
        order.extend(ids);
    }
    assert_eq!(sizes, [3, 3, 1, 0]);
    assert_eq!(order, runs, "oldest end first");
    assert!(store.purge_batch(&rule, 3).await.unwrap().runs.is_empty());
}

/// A live state is refused; a dry run counts what a purge then removes, changing nothing.
pub async fn a_live_state_is_refused_and_a_preview_changes_nothing(db: &TestDb) {
    let (store, clock) = db.manual().await;
    let a = ended(&store, "a", RunStatus::Succeeded).await;
    let b = ended(&store, "a", RunStatus::Succeeded).await;
    clock.advance(DAY);
    let now = store.now();
    for live in [RunStatus::Queued, RunStatus::Running, RunStatus::Waiting] {
        assert!(matches!(
            store.purge_batch(&rule(live, now), 10).await,
            Err(Error::Invalid(_))
        ));
        assert!(matches!(
            store.purge_preview(&rule(live, now)).await,
            Err(Error::Invalid(_))
        ));
    }
    let preview = store
        .purge_preview(&rule(RunStatus::Succeeded, now))
        .await
        .unwrap();
    assert_eq!(
        (preview.runs, preview.events, preview.checkpoints),
        (2, 4, 2)
    );
    assert!(preview.bytes >= 2 * "snapshot".len() as u64 + 4 * 7);
    assert!(has_history(&store, &a).await && has_history(&store, &b).await);
    let batch = store
        .purge_batch(&rule(RunStatus::Succeeded, now), 10)
        .await
        .unwrap();
    assert_eq!(batch.counts, preview);
}

/// An ended run whose job still runs (superseded under its worker) or whose background task
/// still runs is kept, and the sweep sees it as not settled.
pub async fn ended_runs_with_work_still_running_are_kept(db: &TestDb) {
    let (store, clock) = db.manual().await;
    let new = || NewRun::new("a", "p").concurrency("k", ConcurrencyPolicy::Supersede);
    let first = store.enqueue(&new()).await.unwrap().run_id;
    let lease = store.claim("w", None, 1, LEASE).await.unwrap().remove(0);
    lease.append_event("note", "{}").await.unwrap();
    let second = store.enqueue(&new()).await.unwrap().run_id;
    assert_eq!(
        store.run(&first).await.unwrap().unwrap().status,
        RunStatus::Superseded
    );
    store.cancel_run(&second).await.unwrap();
    let tasked = store.enqueue(&NewRun::new("b", "p")).await.unwrap().run_id;
    let tasked_lease = store.claim("w", None, 1, LEASE).await.unwrap();
    let tasked_lease = tasked_lease
        .into_iter()
        .find(|l| l.job().run_id == tasked)
        .expect("the run of b is claimed");
    let task = NewTask {
        id: "task-2",
        run_id: &tasked,
        call_id: "c1",
        command: "sleep 100",
        owner: "w",
        deadline_at: store.now() + 3_600_000,
    };
    store.start_task(&task).await.unwrap();
    tasked_lease.ack(None).await.unwrap();
    clock.advance(DAY);
    let now = store.now();
    assert!(
        purge_all(&store, &rule(RunStatus::Superseded, now))
            .await
            .is_empty()
    );
    assert!(
        purge_all(&store, &rule(RunStatus::Succeeded, now))
            .await
            .is_empty()
    );
    let ids = vec![
        first.clone(),
        tasked.clone(),
        second.clone(),
        "gone".to_string(),
    ];
    let mut seen = store.settled_runs(&ids).await.unwrap();
    seen.sort_by(|x, y| x.run_id.cmp(&y.run_id));
    let settled = |id: &str| seen.iter().find(|s| s.run_id == id).map(|s| s.settled);
    assert_eq!(settled(&first), Some(false), "its job still runs");
    assert_eq!(settled(&tasked), Some(false), "its task still runs");
    assert_eq!(settled(&second), Some(true));
    assert_eq!(settled("gone"), None);
    // Once the work stops, both go, and the sweep sees the purge.
    lease.ack(None).await.unwrap();
    end_task(&store, "task-2").await;
    assert_eq!(
        purge_all(&store, &rule(RunStatus::Superseded, now)).await,
        std::slice::from_ref(&first)
    );
    assert_eq!(
        purge_all(&store, &rule(RunStatus::Succeeded, now)).await,
        std::slice::from_ref(&tasked)
    );
    let seen = store.settled_runs(&ids).await.unwrap();
    assert!(
        seen.iter()
            .filter(|s| s.run_id != second)
            .all(|s| s.settled && s.purged)
    );
    assert!(
        store
            .known_tasks(&["task-2".into(), "nope".into()])
            .await
            .unwrap()
            .is_empty()
    );
}

/// Two purgers at once purge each run once.
pub async fn concurrent_purgers_purge_each_run_once(db: &TestDb) {
    let (store, clock): (Store, ManualClock) = db.manual().await;
    let mut runs = Vec::new();
    for _ in 0..40 {
        runs.push(cancelled(&store, "a").await);
    }
    clock.advance(DAY);
    let rule = rule(RunStatus::Cancelled, store.now());
    let (one, two) = tokio::join!(purge_all(&store, &rule), purge_all(&store, &rule));
    let mut all: Vec<String> = one.into_iter().chain(two).collect();
    all.sort();
    runs.sort();
    assert_eq!(all, runs);
}
