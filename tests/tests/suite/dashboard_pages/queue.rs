//! The queue page: the seeded jobs counted per state and lane, the leased job's worker and
//! the ages shown, as the store holds them.

use std::time::Duration;

use nightshift_store::NewRun;
use nightshift_tests::TestDb;
use reqwest::StatusCode;

use super::{element, get, row};
use crate::dashboard::Dash;

pub(super) async fn queue_page(db: &TestDb) {
    let store = db.store().await;
    let mut runs = Vec::new();
    for lane in ["default", "default", "batch"] {
        let e = store
            .enqueue(&NewRun::new("helper", "p").lane(lane))
            .await
            .unwrap();
        runs.push(e.run_id);
    }
    store.register_worker("w-dash", "host-1", 7).await.unwrap();
    let leased = store
        .claim(
            "w-dash",
            Some(&["batch".to_string()]),
            1,
            Duration::from_secs(600),
        )
        .await
        .unwrap();
    let job = leased[0].job().clone();
    assert_eq!(job.run_id, runs[2]);
    let d = Dash::start_with(store, nightshift_runner::hooks::none()).await;
    let cookie = d.sign_in().await;
    let (status, _, page) = get(&d, "/ui/queue", Some(&cookie)).await;
    assert_eq!(status, StatusCode::OK);
    let count = |state: &str, lane: &str| -> Option<String> {
        let marker = format!("data-state=\"{state}\" data-lane=\"{lane}\"");
        page.contains(&marker).then(|| {
            let r = row(&page, &marker);
            let c = element(r, "class=\"count\"", "</td>");
            c[c.find('>').unwrap() + 1..c.len() - "</td>".len()].to_string()
        })
    };
    assert_eq!(count("queued", "default").as_deref(), Some("2"));
    assert_eq!(count("running", "batch").as_deref(), Some("1"));
    assert_eq!(
        count("queued", "batch"),
        None,
        "pairs without jobs are left out"
    );
    let oldest = element(&page, "id=\"oldest-queued\"", "</span>");
    assert!(
        oldest.contains("<time datetime=\"") && oldest.contains("ago"),
        "{oldest}"
    );
    let worker = row(&page, "data-worker=\"w-dash\"");
    assert!(
        worker.contains("1 busy") && worker.contains("host-1"),
        "{worker}"
    );
    assert!(
        worker.contains("ago</time>"),
        "the heartbeat is an age: {worker}"
    );
    let lease = row(&page, &format!("data-job-id=\"{}\"", job.id));
    assert!(
        lease.contains(&format!("href=\"/ui/runs/{}\"", job.run_id)),
        "{lease}"
    );
    assert!(
        lease.contains("w-dash") && lease.contains(">in "),
        "{lease}"
    );
    let expires = job.lease_expires_at.expect("a running job's lease expires");
    assert!(
        !page.contains(&expires.to_string()),
        "ages, not epoch numbers"
    );
    assert!(
        page.contains("Last renewed or claimed"),
        "the column says what it is"
    );
}
