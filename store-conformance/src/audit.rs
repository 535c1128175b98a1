//! Operator actions and their audit rows commit together (`Store::as_operator`): an action
//! that took effect has its row, naming who did what to which run or target; a refused action
//! records nothing; and when the row cannot be stored, the action does not happen either.

use nightshift_store::{
    AuditEntry, CancelOutcome, ConcurrencyPolicy, Error, Missed, NewApproval, NewRun, Overlap,
    RunStatus, ScheduleDef, ScheduleSource, Store,
};

use crate::{Backend, TestDb};

const ALICE: &str = "cli:alice";

/// The trail, oldest first, as (actor, action, run, target, detail).
async fn trail(store: &Store) -> Vec<(String, String, Option<String>, String, Option<String>)> {
    let mut rows: Vec<AuditEntry> = store.audit_log(None, None, 1000).await.unwrap();
    rows.reverse();
    rows.into_iter()
        .map(|r| (r.actor, r.action, r.run_id, r.target, r.detail))
        .collect()
}

fn schedule(name: &str) -> ScheduleDef {
    ScheduleDef {
        name: name.into(),
        source: ScheduleSource::Api,
        cron: "0 7 * * *".into(),
        timezone: "UTC".into(),
        agent: "helper".into(),
        prompt: "digest".into(),
        overlap: Overlap::Allow,
        missed: Missed::Skip,
        enabled: true,
        next_fire_at: Some(4_102_444_800_000),
    }
}

async fn awaiting_approval(store: &Store) -> String {
    let run_id = store
        .enqueue(&NewRun::new("helper", "deploy it"))
        .await
        .unwrap()
        .run_id;
    store
        .request_approval(&NewApproval {
            run_id: &run_id,
            call_id: "call_1",
            tool: "deploy",
            input: "{}",
            input_hash: "h",
            expires_at: store.now() + 3_600_000,
        })
        .await
        .unwrap();
    run_id
}

/// Each action through the operator handle leaves one row with what it did; refused actions
/// leave none; the daemon's own actions (on `Store` itself) are not audited.
pub async fn actions_commit_with_their_rows(db: &TestDb) {
    let store = db.store().await;
    let op = store.as_operator(ALICE);
    let run = store
        .enqueue(&NewRun::new("helper", "a"))
        .await
        .unwrap()
        .run_id;
    assert_eq!(op.cancel_run(&run).await.unwrap(), CancelOutcome::Cancelled);
    // Refused: finished already, and unknown. Nothing recorded for either.
    assert!(matches!(op.cancel_run(&run).await, Err(Error::Conflict(_))));
    assert!(matches!(
        op.cancel_run("nope").await,
        Err(Error::NotFound { .. })
    ));
    let waiting = awaiting_approval(&store).await;
    op.decide_approval(&waiting, "call_1", false, Some("not today"))
        .await
        .unwrap();
    op.create_schedule(&schedule("nightly")).await.unwrap();
    assert!(matches!(
        op.create_schedule(&schedule("nightly")).await,
        Err(Error::Conflict(_))
    ));
    let changed = ScheduleDef {
        prompt: "q".into(),
        ..schedule("nightly")
    };
    op.update_schedule(&changed, false, Some("prompt"))
        .await
        .unwrap();
    let fired = op
        .enqueue(
            &NewRun::new("helper", "manual fire"),
            "schedule_trigger",
            "nightly",
        )
        .await
        .unwrap();
    op.delete_schedule("nightly").await.unwrap();
    assert!(op.delete_schedule("nightly").await.is_err());
    // The daemon's own cancel is not an operator's.
    let own = store
        .enqueue(&NewRun::new("helper", "b"))
        .await
        .unwrap()
        .run_id;
    store.cancel_run(&own).await.unwrap();

    let s = |v: &str| v.to_string();
    assert_eq!(
        trail(&store).await,
        vec![
            (s(ALICE), s("cancel"), Some(run.clone()), run.clone(), None),
            (
                s(ALICE),
                s("deny"),
                Some(waiting.clone()),
                format!("{waiting}/call_1"),
                Some(s("not today")),
            ),
            (s(ALICE), s("schedule_create"), None, s("nightly"), None),
            (
                s(ALICE),
                s("schedule_update"),
                None,
                s("nightly"),
                Some(s("prompt"))
            ),
            (
                s(ALICE),
                s("schedule_trigger"),
                Some(fired.run_id.clone()),
                s("nightly"),
                Some(s("enqueued")),
            ),
            (s(ALICE), s("schedule_delete"), None, s("nightly"), None),
        ]
    );
    let approval = store.approval(&waiting, "call_1").await.unwrap().unwrap();
    assert_eq!(approval.decided_by.as_deref(), Some(ALICE));
}

/// From now on every insert into `audit_log` fails, as a full disk or a lost connection
/// would fail it in the middle of an action's transaction.
async fn refuse_audit_rows(db: &TestDb) {
    match db.backend {
        Backend::Sqlite => {
            let pool = sqlx::SqlitePool::connect(&db.config.url).await.unwrap();
            sqlx::query(
                "CREATE TRIGGER refuse_audit BEFORE INSERT ON audit_log \
                 BEGIN SELECT RAISE(ABORT, 'audit rows refused by the test'); END",
            )
            .execute(&pool)
            .await
            .unwrap();
        }
        Backend::Postgres => {
            let schema = db.config.schema.clone().unwrap();
            let opts: sqlx::postgres::PgConnectOptions = db.config.url.parse().unwrap();
            let pool = sqlx::PgPool::connect_with(opts.options([("search_path", schema.as_str())]))
                .await
                .unwrap();
            sqlx::query(
                "CREATE FUNCTION refuse_audit() RETURNS trigger LANGUAGE plpgsql AS \
                 $$ BEGIN RAISE EXCEPTION 'audit rows refused by the test'; END $$",
            )
            .execute(&pool)
            .await
            .unwrap();
            sqlx::query(
                "CREATE TRIGGER refuse_audit BEFORE INSERT ON audit_log \
                 FOR EACH ROW EXECUTE FUNCTION refuse_audit()",
            )
            .execute(&pool)
            .await
            .unwrap();
        }
    }
}

/// An action whose audit row cannot be stored fails and changes nothing: the run is still
/// queued, the call still pending, the schedule still as it was, no run enqueued. The
/// daemon's own actions, which write no row, still work.
pub async fn no_row_no_action(db: &TestDb) {
    let store = db.store().await;
    let op = store.as_operator(ALICE);
    let run = store
        .enqueue(&NewRun::new("helper", "a"))
        .await
        .unwrap()
        .run_id;
    let waiting = awaiting_approval(&store).await;
    op.create_schedule(&schedule("kept")).await.unwrap();
    let runs_before = store.list_runs(None, 1000).await.unwrap().len();
    refuse_audit_rows(db).await;

    assert!(op.cancel_run(&run).await.is_err());
    let queued = store.run(&run).await.unwrap().unwrap();
    assert_eq!(queued.status, RunStatus::Queued);
    assert_eq!(
        queued.cancel_requested_at, None,
        "the cancel request was undone too"
    );

    assert!(
        op.decide_approval(&waiting, "call_1", true, None)
            .await
            .is_err()
    );
    let approval = store.approval(&waiting, "call_1").await.unwrap().unwrap();
    assert_eq!(approval.status, nightshift_store::ApprovalStatus::Pending);
    assert_eq!(approval.decided_by, None);

    assert!(op.create_schedule(&schedule("new")).await.is_err());
    assert_eq!(store.schedule("new").await.unwrap(), None);
    let changed = ScheduleDef {
        prompt: "changed".into(),
        ..schedule("kept")
    };
    assert!(op.update_schedule(&changed, true, None).await.is_err());
    assert_eq!(
        store.schedule("kept").await.unwrap().unwrap().prompt,
        "digest"
    );
    assert!(op.delete_schedule("kept").await.is_err());
    assert!(store.schedule("kept").await.unwrap().is_some());

    let mut fire = NewRun::new("helper", "manual fire");
    fire.idempotency_key = Some("fire-1".into());
    fire.concurrency_key = Some("schedule:kept".into());
    fire.concurrency_policy = ConcurrencyPolicy::Skip;
    assert!(op.enqueue(&fire, "schedule_trigger", "kept").await.is_err());
    assert_eq!(
        store.list_runs(None, 1000).await.unwrap().len(),
        runs_before,
        "no run was enqueued"
    );
    // The same enqueue by the daemon itself goes ahead: the key was not taken.
    assert!(!store.enqueue(&fire).await.unwrap().duplicate);
    assert_eq!(
        store.cancel_run(&run).await.unwrap(),
        CancelOutcome::Cancelled
    );
    assert!(trail(&store).await.iter().all(|r| r.1 == "schedule_create"));
}
