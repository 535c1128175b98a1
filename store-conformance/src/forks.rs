//! Forks (`AsOperator::fork_run`, `Store::events`, `Store::forks_of`): a fork's log is its
//! ancestors' events, each up to the lowest fork point below it, then its own, which start
//! right after its fork point; a fork of a missing or purged run, or at a negative point, is
//! refused and makes nothing; a repeated idempotency key makes one fork.

use std::time::Duration;

use nightshift_store::{Error, NewFork, NewRun, PurgeRule, RunStatus, Store};

use crate::TestDb;

const LEASE: Duration = Duration::from_secs(30);

/// Claims run `run_id`'s job and appends `count` events naming the run; returns their seqs.
async fn append(store: &Store, run_id: &str, name: &str, count: usize) -> Vec<i64> {
    let lease = store.claim("w", None, 1, LEASE).await.unwrap().remove(0);
    assert_eq!(lease.job().run_id, run_id);
    let mut seqs = Vec::new();
    for i in 0..count {
        let payload = format!("{{\"run\":\"{name}\",\"i\":{i}}}");
        seqs.push(lease.append_event("note", &payload).await.unwrap());
    }
    lease.ack(Some("ok".into())).await.unwrap();
    seqs
}

fn fork_of(parent: &str, fork_seq: i64, name: &str) -> NewFork {
    NewFork {
        parent: parent.to_string(),
        fork_seq,
        run: NewRun::new("a", name),
        event_type: "forked".into(),
        event_payload: format!("{{\"run\":\"{name}\",\"parent\":\"{parent}\"}}"),
    }
}

/// (seq, run the row belongs to, the payload's `run`) of each event of `run_id` after `after`.
async fn log(store: &Store, run_id: &str, after: i64) -> Vec<(i64, String, String)> {
    store
        .events(run_id, after)
        .await
        .unwrap()
        .into_iter()
        .map(|e| {
            let v: serde_json::Value = serde_json::from_str(&e.payload).unwrap();
            (e.seq, e.run_id, v["run"].as_str().unwrap().to_string())
        })
        .collect()
}

fn names(log: &[(i64, String, String)]) -> Vec<(i64, &str)> {
    log.iter().map(|(s, _, n)| (*s, n.as_str())).collect()
}

pub async fn a_forks_log_is_its_ancestors_up_to_each_fork_point(db: &TestDb) {
    let store = db.store().await;
    let op = store.as_operator("test:forks");
    let a = store.enqueue(&NewRun::new("a", "A")).await.unwrap().run_id;
    assert_eq!(
        append(&store, &a, "A", 10).await,
        (1..=10).collect::<Vec<_>>()
    );
    let b = op.fork_run(&fork_of(&a, 6, "B")).await.unwrap().run_id;
    assert_eq!(
        append(&store, &b, "B", 2).await,
        [8, 9],
        "own events follow the marker"
    );
    let c = op.fork_run(&fork_of(&b, 4, "C")).await.unwrap().run_id;
    let d = op.fork_run(&fork_of(&b, 8, "D")).await.unwrap().run_id;

    let b_log = log(&store, &b, 0).await;
    let expect_b: Vec<(i64, &str)> = (1..=6)
        .map(|s| (s, "A"))
        .chain([(7, "B"), (8, "B"), (9, "B")])
        .collect();
    assert_eq!(names(&b_log), expect_b);
    assert!(
        b_log[..6].iter().all(|(_, row, _)| *row == a),
        "read through A's rows"
    );
    assert_eq!(
        names(&log(&store, &c, 0).await),
        [(1, "A"), (2, "A"), (3, "A"), (4, "A"), (5, "C")],
        "below its parent's fork point, a fork reads the grandparent alone"
    );
    let d_log = log(&store, &d, 0).await;
    let expect_d: Vec<(i64, &str)> = (1..=6)
        .map(|s| (s, "A"))
        .chain([(7, "B"), (8, "B"), (9, "D")])
        .collect();
    assert_eq!(names(&d_log), expect_d);
    assert_eq!(
        names(&log(&store, &d, 5).await),
        [(6, "A"), (7, "B"), (8, "B"), (9, "D")],
        "a read after a seq crosses the fork points"
    );
    assert_eq!(
        names(&log(&store, &a, 0).await).len(),
        10,
        "the parent's own log is untouched"
    );
    let forks: Vec<(String, i64)> = store
        .forks_of(&b)
        .await
        .unwrap()
        .into_iter()
        .map(|f| (f.id, f.fork_seq))
        .collect();
    assert_eq!(forks, [(c.clone(), 4), (d.clone(), 8)]);
    let run = store.run(&d).await.unwrap().unwrap();
    assert_eq!(
        (run.forked_from.as_deref(), run.fork_seq),
        (Some(b.as_str()), Some(8))
    );
}

pub async fn a_fork_that_cannot_be_makes_nothing_and_a_key_makes_one(db: &TestDb) {
    let (store, clock) = db.manual().await;
    let op = store.as_operator("test:forks");
    let a = store.enqueue(&NewRun::new("a", "A")).await.unwrap().run_id;
    append(&store, &a, "A", 3).await;
    let runs_before = store.list_runs(None, 100).await.unwrap().len();
    assert!(matches!(
        op.fork_run(&fork_of("no-such-run", 1, "X")).await,
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(
        op.fork_run(&fork_of(&a, -1, "X")).await,
        Err(Error::Invalid(_))
    ));
    assert_eq!(store.list_runs(None, 100).await.unwrap().len(), runs_before);

    let mut keyed = fork_of(&a, 2, "K");
    keyed.run.idempotency_key = Some("fork-once".into());
    let first = op.fork_run(&keyed).await.unwrap();
    let again = op.fork_run(&keyed).await.unwrap();
    assert!(!first.duplicate && again.duplicate && again.run_id == first.run_id);
    assert_eq!(
        names(&log(&store, &first.run_id, 0).await),
        [(1, "A"), (2, "A"), (3, "K")],
        "one marker"
    );

    // Once the fork is purged, the parent goes too, and cannot be forked any more.
    let lease = store.claim("w", None, 1, LEASE).await.unwrap().remove(0);
    lease.ack(Some("ok".into())).await.unwrap();
    clock.advance(Duration::from_secs(60));
    let rule = PurgeRule {
        status: RunStatus::Succeeded,
        ended_before: store.now(),
        agent: None,
        except_agents: Vec::new(),
        keep_summary: true,
    };
    let first_batch = store.purge_batch(&rule, 10).await.unwrap();
    assert_eq!(
        first_batch.runs,
        vec![first.run_id.clone()],
        "the parent waits for its fork"
    );
    assert_eq!(
        store.purge_batch(&rule, 10).await.unwrap().runs,
        vec![a.clone()]
    );
    assert!(matches!(
        op.fork_run(&fork_of(&a, 1, "Y")).await,
        Err(Error::NotFound { .. })
    ));
}
