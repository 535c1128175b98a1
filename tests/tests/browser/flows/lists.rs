//! The lists: the queue and the filtered runs list update live, filters and pages narrow the
//! runs list, and the schedules page (a trigger's flash names its run) and the webhooks page
//! (a delivery links to the run it started) lead to their runs.

use std::time::Duration;

use nightshift_store::RunStatus;
use nightshift_tests::Backend;
use serde_json::json;

use super::{click, ids, setup, sign_in, teardown};

#[tokio::test]
async fn the_queue_and_the_filtered_runs_list_update_live() {
    let Some((db, serve, b)) = setup(Backend::Sqlite, "browser_live_lists").await else {
        return;
    };
    sign_in(&b, &serve).await;
    // The queue: a running job's lease and state arrive without a reload.
    b.goto(&serve.url("/ui/queue")).await;
    b.find("table#leases tr.empty").await;
    b.js("window.__same_page = 1; return true").await;
    let held = serve.enqueue("slow", "Hold the gate.", json!({})).await;
    b.find("table#leases tr[data-job-id]").await;
    b.find("table#queue-states tr[data-state=running]").await;
    assert_eq!(
        b.js("return window.__same_page").await,
        json!(1),
        "no reload"
    );

    // The runs list, filtered to one agent: its new runs arrive and change status live;
    // another agent's never show, and the filter form keeps its choice.
    b.goto(&serve.url("/ui/runs?agent=slow")).await;
    b.find(&format!(
        "tr[data-run-id='{held}'] td.status[data-status=running]"
    ))
    .await;
    b.js("window.__same_page = 2; return true").await;
    let other = serve.enqueue("reviewer", "Review PR #9", json!({})).await;
    let second = serve.enqueue("slow", "Hold it again.", json!({})).await;
    b.find(&format!("table#runs tr[data-run-id='{second}']"))
        .await;
    assert_eq!(
        ids(&b).await.first(),
        Some(&second),
        "the new run on top, newest first"
    );
    std::fs::write(serve.gate("go"), "").unwrap();
    for id in [&held, &second] {
        b.find(&format!(
            "tr[data-run-id='{id}'] td.status[data-status=succeeded]"
        ))
        .await;
    }
    serve.wait_for(&other, RunStatus::Succeeded).await;
    serve.wait_for(&second, RunStatus::Succeeded).await;
    // A second after both ended the list has been sent again at least once: still
    // filtered.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert_eq!(ids(&b).await, vec![second.clone(), held.clone()]);
    assert_eq!(
        b.js("return document.querySelector('form#filters select[name=agent]').value")
            .await,
        json!("slow")
    );
    assert_eq!(
        b.js("return window.__same_page").await,
        json!(2),
        "no reload"
    );
    teardown(db, serve, b).await;
}

#[tokio::test]
async fn filters_and_pages_narrow_the_runs_list() {
    let Some((db, serve, b)) = setup(Backend::Sqlite, "browser_filters").await else {
        return;
    };
    sign_in(&b, &serve).await;
    let done = serve
        .enqueue("reviewer", "Review PR #1000", json!({}))
        .await;
    serve.wait_for(&done, RunStatus::Succeeded).await;
    // 53 more, held an hour in the queue so they stay as they are.
    let mut all = vec![done.clone()];
    for i in 0..53 {
        let key = if i % 2 == 0 { "repo-a" } else { "repo-b" };
        all.push(
            serve
                .enqueue(
                    "reviewer",
                    &format!("Review PR #{i}"),
                    json!({"delay_seconds": 3600, "concurrency_key": key, "idempotency_key": format!("pr-{i}")}),
                )
                .await,
        );
    }
    b.goto(&serve.url("/ui/runs")).await;
    b.find("table#runs tr[data-run-id]").await;
    let first = ids(&b).await;
    assert_eq!(first.len(), 50, "a page holds 50");
    assert_eq!(first[0], *all.last().unwrap(), "newest first");
    click(&b, "a#next-page").await;
    b.until(
        "the second page",
        "return location.search.includes('cursor=')",
    )
    .await;
    let second = ids(&b).await;
    assert_eq!(second.len(), 4, "{second:?}");
    assert!(
        b.all("a#next-page").await.is_empty(),
        "no page after the last"
    );
    let mut seen: Vec<String> = first.iter().chain(second.iter()).cloned().collect();
    seen.sort();
    let mut want = all.clone();
    want.sort();
    assert_eq!(seen, want, "every run once over the two pages");

    // Status through the form.
    b.goto(&serve.url("/ui/runs")).await;
    b.js("document.querySelector('form#filters select[name=status]').value = 'succeeded'; return true").await;
    click(&b, "form#filters button[type=submit]").await;
    b.until(
        "the status filter",
        "return location.search.includes('status=succeeded')",
    )
    .await;
    assert_eq!(ids(&b).await, vec![done.clone()]);
    // A key, then text of a prompt.
    b.goto(&serve.url("/ui/runs")).await;
    b.find("form#filters input[name=key]")
        .await
        .send_keys("repo-b")
        .await
        .unwrap();
    click(&b, "form#filters button[type=submit]").await;
    b.until(
        "the key filter",
        "return location.search.includes('key=repo-b')",
    )
    .await;
    assert_eq!(ids(&b).await.len(), 26);
    b.goto(&serve.url("/ui/runs")).await;
    b.find("form#filters input[name=q]")
        .await
        .send_keys("PR #17")
        .await
        .unwrap();
    click(&b, "form#filters button[type=submit]").await;
    b.until("the search", "return location.search.includes('q=')")
        .await;
    assert_eq!(ids(&b).await, vec![all[18].clone()], "only 'Review PR #17'");
    teardown(db, serve, b).await;
}

#[tokio::test]
async fn a_schedule_is_triggered_from_its_page_and_a_delivery_leads_to_its_run() {
    let Some((db, serve, b)) = setup(Backend::Sqlite, "browser_schedules_hooks").await else {
        return;
    };
    sign_in(&b, &serve).await;
    b.goto(&serve.url("/ui/schedules")).await;
    let row = "table#schedules tr[data-schedule=nightly-digest]";
    let local = b
        .find(&format!("{row} td.next-local"))
        .await
        .text()
        .await
        .unwrap();
    let utc = b
        .find(&format!("{row} td.next-utc"))
        .await
        .text()
        .await
        .unwrap();
    assert!(
        !local.trim().is_empty() && !utc.trim().is_empty(),
        "next fires: {local} / {utc}"
    );
    assert_ne!(local, utc, "07:00 in Berlin is not 07:00 UTC");
    click(&b, &format!("{row} form[data-action=trigger] button")).await;
    let flash = b.find(".flash").await.text().await.unwrap();
    assert!(flash.contains("enqueued"), "{flash}");
    let runs = serve
        .store
        .runs_page(
            &nightshift_store::RunFilter {
                trigger: Some(nightshift_store::Trigger::Schedule),
                ..Default::default()
            },
            None,
            10,
        )
        .await
        .unwrap()
        .runs;
    assert_eq!(runs.len(), 1, "one run from the schedule: {runs:?}");
    assert!(
        flash.contains(&runs[0].id),
        "the flash names the run: {flash}"
    );

    assert_eq!(serve.deliver("delivery-1", "main").await, 202);
    b.goto(&serve.url("/ui/hooks")).await;
    let delivery = "section.hook[data-hook=ci] table.deliveries tr[data-delivery-id]";
    b.find(delivery).await;
    click(&b, &format!("{delivery} a[href^='/ui/runs/']")).await;
    b.find("ol#timeline > li[data-kind=prompt]").await;
    let prompt = b
        .find("ol#timeline > li[data-kind=prompt]")
        .await
        .text()
        .await
        .unwrap();
    assert!(prompt.contains("CI finished on main"), "{prompt}");
    teardown(db, serve, b).await;
}
