//! Every write path gives the same answers: the same enqueues and webhook deliveries made down
//! each path of the store's write seam (`nightshift_store::writes`), chosen on purpose with
//! `Store::force_writes` rather than left to load, answer alike, and each path is counted as
//! taken where the seam's table says it is.

use std::collections::BTreeMap;

use nightshift_store::{
    ConcurrencyPolicy, DeliveryTaken, DeliveryWork, Enqueued, ForcedWrites, NewRun, RunStatus,
    Store, WritePath,
};

use crate::{Backend, TestDb};

/// What a script of writes answered, with the run ids left out (they differ per path).
#[derive(Debug, PartialEq)]
struct Answers {
    /// (duplicate, skipped, how many runs it superseded) per enqueue.
    enqueues: Vec<(bool, bool, usize)>,
    /// Whether the first take of a delivery enqueued, and a second found it done.
    delivery: (bool, bool),
    /// Per run of the batch: created.
    many: Vec<bool>,
    /// The superseded run's status.
    superseded: RunStatus,
}

fn counts(store: &Store) -> BTreeMap<WritePath, u64> {
    store.write_paths_taken().into_iter().collect()
}

/// The paths taken between `before` and now, with how often.
fn taken_since(store: &Store, before: &BTreeMap<WritePath, u64>) -> BTreeMap<WritePath, u64> {
    counts(store)
        .into_iter()
        .map(|(path, n)| (path, n - before.get(&path).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// The same writes, tagged `tag` so that two scripts on one database do not meet.
async fn script(store: &Store, tag: &str) -> Answers {
    let shape = |e: &Enqueued| (e.duplicate, e.skipped, e.superseded.len());
    let key = format!("key-{tag}");
    let plain = NewRun::new("a", "plain").idempotency_key(format!("idem-{tag}"));
    let first = store.enqueue(&plain).await.unwrap();
    let again = store.enqueue(&plain).await.unwrap();
    assert_eq!(
        again.run_id, first.run_id,
        "{tag}: the idempotency key finds it"
    );
    let older = store
        .enqueue(&NewRun::new("a", "older").concurrency(&key, ConcurrencyPolicy::Supersede))
        .await
        .unwrap();
    let newer = store
        .enqueue(&NewRun::new("a", "newer").concurrency(&key, ConcurrencyPolicy::Supersede))
        .await
        .unwrap();
    assert_eq!(newer.superseded, vec![older.run_id.clone()], "{tag}");

    let work = DeliveryWork::Start(NewRun::new("a", "delivered"));
    let delivery = format!("d-{tag}");
    let taken = store
        .take_webhook_delivery("gh", &delivery, "push", work.clone(), "pushes")
        .await
        .unwrap();
    let retaken = store
        .take_webhook_delivery("gh", &delivery, "push", work, "pushes")
        .await
        .unwrap();
    let many = store
        .enqueue_many(&[NewRun::new("a", "m0"), NewRun::new("a", "m1")])
        .await
        .unwrap();
    Answers {
        enqueues: [&first, &again, &older, &newer].map(shape).to_vec(),
        delivery: (
            matches!(taken, DeliveryTaken::Enqueued(_)),
            matches!(retaken, DeliveryTaken::Done(_)),
        ),
        many: many
            .iter()
            .map(|r| r.as_ref().is_ok_and(|e| !e.duplicate))
            .collect(),
        superseded: store.run(&older.run_id).await.unwrap().unwrap().status,
    }
}

pub async fn every_path_answers_alike(db: &TestDb) {
    let alone = db.store().await;
    alone.force_writes(ForcedWrites::Alone);
    let before = counts(&alone);
    let by_callers = script(&alone, "alone").await;
    let paths = taken_since(&alone, &before);
    assert_eq!(
        paths,
        BTreeMap::from([
            (WritePath::RunStatement, 2),
            (WritePath::RunTransaction, 2),
            (WritePath::DeliveryAlone, 2),
            (WritePath::ManyRuns, 1),
        ]),
        "forced alone, every write is its caller's"
    );

    let grouped = db.store().await;
    grouped.force_writes(ForcedWrites::Grouped);
    let before = counts(&grouped);
    let by_writers = script(&grouped, "grouped").await;
    let paths = taken_since(&grouped, &before);
    let expected = match db.backend {
        // SQLite's group takes every single enqueue and delivery (one writer).
        Backend::Sqlite => BTreeMap::from([
            (WritePath::GroupRuns, 4),
            (WritePath::GroupLoneDelivery, 2),
            (WritePath::ManyRuns, 1),
        ]),
        // PostgreSQL's takes the runs that decide nothing; deciding runs and deliveries are
        // their callers' transactions, side by side.
        Backend::Postgres => BTreeMap::from([
            (WritePath::GroupRuns, 2),
            (WritePath::RunTransaction, 2),
            (WritePath::DeliveryAlone, 2),
            (WritePath::ManyRuns, 1),
        ]),
    };
    assert_eq!(paths, expected, "forced grouped");

    assert_eq!(
        by_callers, by_writers,
        "the same writes answer alike on every path"
    );
    assert_eq!(
        by_callers,
        Answers {
            enqueues: vec![
                (false, false, 0),
                (true, false, 0),
                (false, false, 0),
                (false, false, 1)
            ],
            delivery: (true, true),
            many: vec![true, true],
            superseded: RunStatus::Superseded,
        }
    );
}

/// Concurrent deliveries through the group's writers (batches of several when they arrive
/// while one is written): each answered as alone, none lost, none doubled.
pub async fn concurrent_grouped_deliveries_answer_as_alone(db: &TestDb) {
    let store = db.store().await;
    store.force_writes(ForcedWrites::Grouped);
    let before = counts(&store);
    let takes = (0..24).map(|i| {
        let store = store.clone();
        async move {
            let work = DeliveryWork::Start(NewRun::new("a", format!("burst {i}")));
            store
                .take_webhook_delivery("gh", &format!("burst-{}", i % 12), "push", work, "pushes")
                .await
                .unwrap()
        }
    });
    let answers = futures::future::join_all(takes).await;
    let started: Vec<&Enqueued> = answers
        .iter()
        .filter_map(|a| match a {
            DeliveryTaken::Enqueued(e) => Some(e),
            DeliveryTaken::Done(_) => None,
        })
        .collect();
    assert_eq!(
        started.len(),
        12,
        "each of the 12 deliveries starts one run"
    );
    let runs: std::collections::HashSet<&str> = started.iter().map(|e| e.run_id.as_str()).collect();
    assert_eq!(runs.len(), 12);
    let done = answers.len() - started.len();
    assert_eq!(done, 12, "its copy is answered from its row");
    let paths = taken_since(&store, &before);
    let grouped: u64 = [
        WritePath::GroupLoneDelivery,
        WritePath::GroupDeliveriesTogether,
        WritePath::GroupOneTransaction,
    ]
    .iter()
    .filter_map(|p| paths.get(p))
    .sum();
    match db.backend {
        Backend::Sqlite => assert!(
            grouped >= 1 && !paths.contains_key(&WritePath::DeliveryAlone),
            "SQLite's group wrote them: {paths:?}"
        ),
        Backend::Postgres => assert_eq!(
            paths.get(&WritePath::DeliveryAlone),
            Some(&24),
            "PostgreSQL's deliveries are their callers': {paths:?}"
        ),
    }
}

/// Takes `deliveries` (hook `gh`, each id with its work) and enqueues `runs`, all at once,
/// on a store forced to write them in batches of exactly that many (deliveries and runs have
/// writers of their own, so a call gives one or the other).
async fn one_batch(
    store: &Store,
    deliveries: Vec<(&str, DeliveryWork)>,
    runs: &[&str],
) -> (Vec<nightshift_store::Result<DeliveryTaken>>, Vec<Enqueued>) {
    store.force_writes(ForcedWrites::Batches(deliveries.len().max(runs.len())));
    let takes = deliveries
        .into_iter()
        .map(|(id, work)| store.take_webhook_delivery("gh", id, "push", work, "pushes"));
    let enqueues = runs.iter().map(|p| {
        let new = NewRun::new("a", *p);
        async move { store.enqueue(&new).await }
    });
    let (taken, enqueued) = futures::future::join(
        futures::future::join_all(takes),
        futures::future::join_all(enqueues),
    )
    .await;
    store.force_writes(ForcedWrites::Natural);
    (taken, enqueued.into_iter().map(Result::unwrap).collect())
}

fn plain(id: &str) -> (&str, DeliveryWork) {
    (
        id,
        DeliveryWork::Start(NewRun::new("a", format!("delivery {id}"))),
    )
}

/// How many of `taken` started a run.
fn started(taken: &[nightshift_store::Result<DeliveryTaken>]) -> usize {
    taken
        .iter()
        .filter(|t| matches!(t, Ok(DeliveryTaken::Enqueued(_))))
        .count()
}

/// Each path of the group writer that only a batch of a certain shape takes is taken on
/// purpose, with a batch of exactly that shape (`ForcedWrites::Batches`), and answers as
/// the writes would alone. On SQLite (whose deliveries have a writer of their own):
/// distinct deliveries starting plain runs go together (three statements); a batch with a
/// start whose concurrency policy decides, or two copies of one delivery, goes in one
/// transaction, item by item (the copy is answered from the first's record); and a batch
/// with an item its transaction refuses (a resume of no run) is given up and each item is
/// written again alone, so the refusal is that item's alone. PostgreSQL's group takes runs
/// only: a batch of them is one `group_runs` write.
pub async fn batch_shapes_take_their_paths(db: &TestDb) {
    let store = db.store().await;
    let before = counts(&store);
    let (_, runs) = one_batch(&store, Vec::new(), &["r1", "r2", "r3"]).await;
    assert!(runs.iter().all(|e| !e.duplicate && !e.skipped));
    assert_eq!(
        taken_since(&store, &before),
        BTreeMap::from([(WritePath::GroupRuns, 1)])
    );
    if db.backend == Backend::Postgres {
        return;
    }

    let before = counts(&store);
    let (taken, _) = one_batch(&store, vec![plain("d1"), plain("d2"), plain("d3")], &[]).await;
    assert_eq!(started(&taken), 3, "three deliveries, three runs");
    assert_eq!(
        taken_since(&store, &before),
        BTreeMap::from([(WritePath::GroupDeliveriesTogether, 1)])
    );

    let before = counts(&store);
    let keyed = NewRun::new("a", "keyed").concurrency("key-d5", ConcurrencyPolicy::Skip);
    let batch = vec![plain("d4"), ("d5", DeliveryWork::Start(keyed))];
    let (taken, _) = one_batch(&store, batch, &[]).await;
    assert_eq!(started(&taken), 2);
    assert_eq!(
        taken_since(&store, &before),
        BTreeMap::from([(WritePath::GroupOneTransaction, 1)])
    );

    let before = counts(&store);
    let (taken, _) = one_batch(&store, vec![plain("d6"), plain("d6")], &[]).await;
    assert_eq!(started(&taken), 1, "one of the copies starts the run");
    let run = taken.iter().find_map(|t| match t {
        Ok(DeliveryTaken::Enqueued(e)) => Some(e.run_id.clone()),
        _ => None,
    });
    let copy = taken.iter().find_map(|t| match t {
        Ok(DeliveryTaken::Done(row)) => Some(row.recorded_runs().unwrap()),
        _ => None,
    });
    assert_eq!(
        copy.map(|runs| runs.into_iter().map(|r| r.run_id).collect::<Vec<_>>()),
        run.map(|r| vec![r]),
        "the copy is answered with the first's run"
    );
    assert_eq!(
        taken_since(&store, &before),
        BTreeMap::from([(WritePath::GroupOneTransaction, 1)])
    );

    let before = counts(&store);
    let nobody = nightshift_store::NewResume {
        run_id: "no-such-run".into(),
        payload: "{}".into(),
        dedupe_key: None,
        job: Default::default(),
    };
    let batch = vec![plain("d7"), ("d8", DeliveryWork::Resume(nobody))];
    let (taken, _) = one_batch(&store, batch, &[]).await;
    assert!(
        matches!(taken[0], Ok(DeliveryTaken::Enqueued(_))),
        "{taken:?}"
    );
    assert!(
        taken[1].is_err(),
        "the resume of no run is refused: {taken:?}"
    );
    assert_eq!(
        taken_since(&store, &before),
        BTreeMap::from([
            (WritePath::GroupOneTransaction, 1),
            (WritePath::GroupRetriedAlone, 2),
            (WritePath::GroupLoneDelivery, 2),
        ])
    );
    // Ten runs in all, none lost, none doubled.
    assert_eq!(store.list_runs(None, 1000).await.unwrap().len(), 10);
}
