//! Listing runs (`Store::runs_page`) and the queue overview on both backends: each filter
//! alone and combined, keyset pagination across equal creation times and concurrent enqueues,
//! malformed cursors, search by id, key and prompt text. (`GET /v1/runs` over real HTTP is in
//! the suite: `tests/tests/suite/runs_list.rs`.)

use std::collections::HashSet;
use std::time::Duration;

use nightshift_store::{
    Clock, ConcurrencyPolicy, Error, JobState, NewRun, RunFilter, RunStatus, Store, Trigger,
};

use crate::TestDb;

/// Enqueues `new` at the clock's current time and returns its id.
/// Which of the seeded runs (by index) a filter case should list.
type Matches = Box<dyn Fn(usize) -> bool>;

async fn add(store: &Store, new: NewRun) -> String {
    store.enqueue(&new).await.unwrap().run_id
}

fn ids(page: &nightshift_store::RunPage) -> Vec<String> {
    page.runs.iter().map(|r| r.id.clone()).collect()
}

/// Every run matching `filter`, walked page by page with `limit`.
async fn walk(store: &Store, filter: &RunFilter, limit: i64) -> Vec<String> {
    let mut all = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = store
            .runs_page(filter, cursor.as_deref(), limit)
            .await
            .unwrap();
        assert!(page.runs.len() as i64 <= limit);
        all.extend(ids(&page));
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return all,
        }
    }
}

pub async fn filters(db: &TestDb) {
    let (store, clock) = db.manual().await;
    let mut expected: Vec<(String, &str, Trigger, Option<&str>, i64)> = Vec::new();
    for i in 0..24 {
        let agent = ["alpha", "beta", "gamma"][i % 3];
        let trigger = [Trigger::Api, Trigger::Webhook][i % 2];
        let key = (i % 4 == 0).then_some("pr-7");
        let mut new = NewRun::new(agent, format!("prompt {i}"));
        new.trigger = trigger;
        if let Some(key) = key {
            new = new.concurrency(key, ConcurrencyPolicy::Queue);
        }
        let at = clock.now();
        expected.push((add(&store, new).await, agent, trigger, key, at));
        clock.advance(Duration::from_secs(1));
    }
    // Every fifth run cancelled.
    for (id, ..) in expected.iter().step_by(5) {
        store.cancel_run(id).await.unwrap();
    }
    let status_of = |i: usize| {
        if i.is_multiple_of(5) {
            RunStatus::Cancelled
        } else {
            RunStatus::Queued
        }
    };
    let since = expected[6].4;
    let until = expected[18].4;
    let cases: Vec<(RunFilter, Matches)> = vec![
        (RunFilter::default(), Box::new(|_| true)),
        (
            RunFilter {
                status: Some(RunStatus::Cancelled),
                ..Default::default()
            },
            Box::new(move |i| status_of(i) == RunStatus::Cancelled),
        ),
        (
            RunFilter {
                agent: Some("beta".into()),
                ..Default::default()
            },
            Box::new(|i| i % 3 == 1),
        ),
        (
            RunFilter {
                trigger: Some(Trigger::Webhook),
                ..Default::default()
            },
            Box::new(|i| i % 2 == 1),
        ),
        (
            RunFilter {
                concurrency_key: Some("pr-7".into()),
                ..Default::default()
            },
            Box::new(|i| i % 4 == 0),
        ),
        (
            RunFilter {
                since: Some(since),
                until: Some(until),
                ..Default::default()
            },
            Box::new(|i| (6..18).contains(&i)),
        ),
        (
            RunFilter {
                agent: Some("alpha".into()),
                trigger: Some(Trigger::Api),
                status: Some(RunStatus::Queued),
                ..Default::default()
            },
            Box::new(move |i| i % 3 == 0 && i % 2 == 0 && status_of(i) == RunStatus::Queued),
        ),
        (
            RunFilter {
                concurrency_key: Some("pr-7".into()),
                status: Some(RunStatus::Cancelled),
                since: Some(since),
                ..Default::default()
            },
            Box::new(move |i| i % 4 == 0 && i % 5 == 0 && i >= 6),
        ),
        (
            RunFilter {
                agent: Some("nobody".into()),
                ..Default::default()
            },
            Box::new(|_| false),
        ),
    ];
    for (filter, wanted) in cases {
        let want: Vec<String> = (0..expected.len())
            .rev()
            .filter(|i| wanted(*i))
            .map(|i| expected[i].0.clone())
            .collect();
        assert!(
            filter.agent.as_deref() == Some("nobody") || !want.is_empty(),
            "{filter:?}"
        );
        assert_eq!(walk(&store, &filter, 3).await, want, "{filter:?}");
        let page = store.runs_page(&filter, None, 200).await.unwrap();
        for run in &page.runs {
            let i = expected.iter().position(|e| e.0 == run.id).unwrap();
            assert_eq!(
                (run.agent.as_str(), run.trigger_kind, run.status),
                (expected[i].1, expected[i].2, status_of(i))
            );
            assert_eq!(run.concurrency_key.as_deref(), expected[i].3);
        }
    }
    let empty = RunFilter {
        since: Some(until),
        until: Some(since),
        ..Default::default()
    };
    let err = store.runs_page(&empty, None, 10).await.unwrap_err();
    assert!(
        matches!(&err, Error::Invalid(m) if m.contains("since")),
        "{err}"
    );
    store.close().await;
}

pub async fn pagination(db: &TestDb) {
    let (store, clock) = db.manual().await;
    // Groups of runs sharing one created_at, so the keyset has to break ties by id.
    let mut made = Vec::new();
    for group in 0..7 {
        for _ in 0..(group % 3 + 1) * 3 {
            made.push((clock.now(), add(&store, NewRun::new("a", "p")).await));
        }
        clock.advance(Duration::from_millis(1));
    }
    made.sort_by(|a, b| b.cmp(a));
    let want: Vec<String> = made.iter().map(|(_, id)| id.clone()).collect();
    for limit in [1, 2, 4, 5, 200] {
        let got = walk(&store, &RunFilter::default(), limit).await;
        assert_eq!(got, want, "limit {limit}");
        assert_eq!(got.iter().collect::<HashSet<_>>().len(), got.len());
    }

    // A run enqueued after the first page does not shift the next one.
    let first = store
        .runs_page(&RunFilter::default(), None, 4)
        .await
        .unwrap();
    assert_eq!(ids(&first), want[..4]);
    let newer = add(&store, NewRun::new("a", "later")).await;
    let same_time = {
        clock.set(made[0].0);
        add(&store, NewRun::new("a", "same time")).await
    };
    let second = store
        .runs_page(&RunFilter::default(), first.next_cursor.as_deref(), 4)
        .await
        .unwrap();
    assert_eq!(ids(&second), want[4..8]);
    let head = store
        .runs_page(&RunFilter::default(), None, 1)
        .await
        .unwrap();
    assert_eq!(ids(&head), vec![newer]);
    assert!(
        walk(&store, &RunFilter::default(), 3)
            .await
            .contains(&same_time)
    );

    // The limit is clamped, and the last page has no cursor.
    let all = store
        .runs_page(&RunFilter::default(), None, 10_000)
        .await
        .unwrap();
    assert_eq!(all.runs.len(), want.len() + 2);
    assert_eq!(all.next_cursor, None);
    let one = store
        .runs_page(&RunFilter::default(), None, 0)
        .await
        .unwrap();
    assert_eq!(one.runs.len(), 1);

    for bad in ["", "zz", "not a cursor", "72313a"] {
        let err = store
            .runs_page(&RunFilter::default(), Some(bad), 4)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, Error::Invalid(m) if m.contains("next_cursor")),
            "{bad}: {err}"
        );
    }
    store.close().await;
}

pub async fn search(db: &TestDb) {
    let (store, _clock) = db.manual().await;
    let keyed = add(
        &store,
        NewRun::new("a", "deploy the site").idempotency_key("key-42"),
    )
    .await;
    let pct = add(&store, NewRun::new("a", "disk at 100% full")).await;
    let under = add(&store, NewRun::new("a", "rename foo_bar to baz")).await;
    let decoy = add(&store, NewRun::new("a", "disk at 1000 full; fooXbar")).await;
    let long = add(
        &store,
        NewRun::new("b", format!("{}NEEDLE", "x".repeat(300))),
    )
    .await;
    let find = |s: &str| {
        let store = store.clone();
        let s = s.to_string();
        async move {
            let filter = RunFilter {
                search: Some(s),
                ..Default::default()
            };
            ids(&store.runs_page(&filter, None, 50).await.unwrap())
        }
    };
    assert_eq!(find(&keyed).await, vec![keyed.clone()], "by id");
    assert_eq!(find("key-42").await, vec![keyed.clone()], "by key");
    assert_eq!(find("100%").await, vec![pct.clone()], "% is literal");
    assert_eq!(find("0% f").await, vec![pct.clone()]);
    assert_eq!(find("foo_bar").await, vec![under.clone()], "_ is literal");
    assert_eq!(find("DISK AT").await, vec![decoy.clone(), pct.clone()]);
    assert_eq!(find("needle").await, vec![long.clone()], "past the head");
    assert!(find("nothing like it").await.is_empty());
    // Search combines with the other filters.
    let filter = RunFilter {
        search: Some("disk".into()),
        agent: Some("b".into()),
        ..Default::default()
    };
    assert!(
        store
            .runs_page(&filter, None, 50)
            .await
            .unwrap()
            .runs
            .is_empty()
    );
    let page = store
        .runs_page(&RunFilter::default(), None, 50)
        .await
        .unwrap();
    let summary = page.runs.iter().find(|r| r.id == long).unwrap();
    assert_eq!(summary.prompt_head, "x".repeat(200));
    let keyed_summary = page.runs.iter().find(|r| r.id == keyed).unwrap();
    assert_eq!(keyed_summary.idempotency_key.as_deref(), Some("key-42"));
    store.close().await;
}

pub async fn overview(db: &TestDb) {
    let (store, _clock) = db.manual().await;
    for i in 0..5 {
        let lane = if i < 3 { "default" } else { "batch" };
        store
            .enqueue(&NewRun::new("a", format!("p{i}")).lane(lane))
            .await
            .unwrap();
    }
    store.register_worker("w1", "host", 7).await.unwrap();
    let leased = store
        .claim(
            "w1",
            Some(&["batch".to_string()]),
            1,
            Duration::from_secs(30),
        )
        .await
        .unwrap();
    assert_eq!(leased.len(), 1);
    let done = store
        .claim(
            "w1",
            Some(&["default".to_string()]),
            1,
            Duration::from_secs(30),
        )
        .await
        .unwrap()
        .remove(0);
    done.ack(None).await.unwrap();
    let o = store.queue_overview().await.unwrap();
    let counts: Vec<(&str, JobState, i64)> = o
        .by_state_lane
        .iter()
        .map(|c| (c.lane.as_str(), c.state, c.count))
        .collect();
    assert_eq!(
        counts,
        vec![
            ("batch", JobState::Queued, 1),
            ("default", JobState::Queued, 2),
            ("batch", JobState::Running, 1),
        ]
    );
    assert!(o.oldest_queued_at.is_some());
    assert_eq!(o.workers.len(), 1);
    assert_eq!(o.leases.len(), 1);
    let lease = &o.leases[0];
    assert_eq!(
        (
            lease.lane.as_str(),
            lease.owner.as_deref(),
            lease.agent.as_str()
        ),
        ("batch", Some("w1"), "a")
    );
    assert_eq!(
        lease.worker_heartbeat_at,
        Some(o.workers[0].last_heartbeat_at)
    );
    store.close().await;
}
