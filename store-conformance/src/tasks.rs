//! Background commands' task rows: the first ending wins, a task whose owner stopped
//! refreshing it goes stale and is lost, a stop asked on any daemon reaches the owner, a
//! task's end wakes the run sleeping on it, and a cancelled run's tasks are its owner's
//! orphans.

use std::time::Duration;

use nightshift_store::{Error as StoreError, NewRun, NewTask, TaskBeat, TaskEnd, TaskStatus};

use crate::TestDb;

const LEASE: Duration = Duration::from_secs(30);

fn new_task<'a>(id: &'a str, run_id: &'a str, owner: &'a str) -> NewTask<'a> {
    NewTask {
        id,
        run_id,
        call_id: id,
        command: "make",
        owner,
        deadline_at: 10_000_000,
    }
}

fn end(status: TaskStatus) -> TaskEnd<'static> {
    TaskEnd {
        status,
        exit_code: Some(0),
        detail: "exit code 0",
        output_tail: "ok\n",
        output_bytes: 3,
    }
}

pub async fn task_rows(db: &TestDb) {
    let (store, clock) = db.manual().await;
    let run = store.enqueue(&NewRun::new("a", "x")).await.unwrap();
    store
        .start_task(&new_task("t1", &run.run_id, "daemon-a"))
        .await
        .unwrap();
    store
        .start_task(&new_task("t2", &run.run_id, "daemon-b"))
        .await
        .unwrap();
    assert_eq!(store.running_task_count(&run.run_id).await.unwrap(), 2);

    // daemon-a keeps refreshing t1; daemon-b went silent, so t2 is lost, not t1.
    clock.advance(Duration::from_secs(20));
    assert_eq!(
        store.heartbeat_tasks("daemon-a").await.unwrap(),
        vec![TaskBeat {
            id: "t1".to_string(),
            stop_requested: false
        }]
    );
    clock.advance(Duration::from_secs(15));
    let lost = store
        .mark_lost_tasks(Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(lost, vec!["t2".to_string()]);
    assert!(
        store.heartbeat_tasks("daemon-b").await.unwrap().is_empty(),
        "daemon-b learns its task no longer runs"
    );
    // A stop asked on any daemon reaches the owner at its next refresh.
    assert!(store.request_task_stop("t1").await.unwrap());
    assert!(
        !store.request_task_stop("t2").await.unwrap(),
        "t2 is not running"
    );
    assert_eq!(
        store.heartbeat_tasks("daemon-a").await.unwrap(),
        vec![TaskBeat {
            id: "t1".to_string(),
            stop_requested: true
        }]
    );
    let t2 = store.task("t2").await.unwrap().unwrap();
    assert_eq!(t2.status, TaskStatus::Lost);
    assert!(t2.detail.unwrap().contains("daemon-b"), "names the daemon");

    // The first ending wins: a lost task's late "success" changes nothing.
    assert_eq!(
        store
            .end_task("t2", &end(TaskStatus::Succeeded))
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store.task("t2").await.unwrap().unwrap().status,
        TaskStatus::Lost
    );
    assert_eq!(
        store
            .end_task("t1", &end(TaskStatus::Succeeded))
            .await
            .unwrap(),
        Some(run.run_id.clone())
    );
    let t1 = store.task("t1").await.unwrap().unwrap();
    assert_eq!(
        (t1.status, t1.exit_code, t1.output_tail.as_deref()),
        (TaskStatus::Succeeded, Some(0), Some("ok\n"))
    );
    assert!(matches!(
        store.end_task("nope", &end(TaskStatus::Failed)).await,
        Err(StoreError::NotFound { .. })
    ));
    assert!(matches!(
        store.end_task("t1", &end(TaskStatus::Running)).await,
        Err(StoreError::Invalid(_))
    ));

    // Only a sleeping run is woken for its ended tasks.
    assert!(
        store.tasks_to_wake(10).await.unwrap().is_empty(),
        "queued run"
    );
    let lease = store.claim("w", None, 1, LEASE).await.unwrap().remove(0);
    lease
        .park_until(store.now() + 3_600_000, "{}")
        .await
        .unwrap();
    let to_wake = store.tasks_to_wake(10).await.unwrap();
    assert_eq!(to_wake.len(), 2, "{to_wake:?}");
    store.mark_task_reported("t1").await.unwrap();
    store.mark_task_reported("t2").await.unwrap();
    assert!(store.tasks_to_wake(10).await.unwrap().is_empty());
    assert!(
        store
            .unreported_tasks(&run.run_id)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(store.tasks_of_run(&run.run_id).await.unwrap().len(), 2);
    assert_eq!(
        store
            .list_tasks(Some(TaskStatus::Lost), 10)
            .await
            .unwrap()
            .iter()
            .map(|t| t.id.as_str())
            .collect::<Vec<_>>(),
        vec!["t2"]
    );

    // A running task of a finished run is an orphan of its owner only.
    let other = store.enqueue(&NewRun::new("a", "y")).await.unwrap();
    store
        .start_task(&new_task("t3", &other.run_id, "daemon-a"))
        .await
        .unwrap();
    assert!(store.orphaned_tasks("daemon-a").await.unwrap().is_empty());
    store.cancel_run(&other.run_id).await.unwrap();
    assert_eq!(store.orphaned_tasks("daemon-a").await.unwrap(), vec!["t3"]);
    assert!(store.orphaned_tasks("daemon-b").await.unwrap().is_empty());
}
