//! The notifications page: a dead notice shown without its URL's secret parts and
//! redelivered from the page (refused without CSRF first).

use std::time::Duration;

use nightshift_store::{AttemptOutcome, DeliveryStatus, NewDelivery, NewRun};
use nightshift_tests::TestDb;
use reqwest::StatusCode;

use super::{back_to, element, get, refused_then, row};
use crate::dashboard::{Dash, csrf_of};

pub(super) async fn notifications_page(db: &TestDb) {
    let store = db.store().await;
    store.set_notifying_agents(["helper"]);
    let run_id = store
        .enqueue(&NewRun::new("helper", "p"))
        .await
        .unwrap()
        .run_id;
    store.cancel_run(&run_id).await.unwrap();
    let outbox = store.run_outbox(&run_id).await.unwrap().remove(0);
    let url = "https://receiver.example/hooks/T0/SECRETPATH?token=abc";
    store
        .expand_outbox(
            outbox.id,
            &[NewDelivery {
                url: url.into(),
                secret_env: "NS_NOTIFY_SECRET_VAR".into(),
                max_attempts: 1,
            }],
        )
        .await
        .unwrap();
    let claimed = store
        .claim_notifications(10, Duration::from_secs(30))
        .await
        .unwrap()
        .remove(0);
    let outcome = AttemptOutcome::Failed {
        error: format!("HTTP 500: <script>boom</script>\n{}", "trace ".repeat(100)),
        status_code: Some(500),
        retry_at: store.now() + 1_000,
    };
    assert!(store.record_attempt(&claimed, &outcome).await.unwrap());
    let id = claimed.delivery_id.clone();
    let status = || async { store.notification(&id).await.unwrap().unwrap().status };
    assert_eq!(status().await, DeliveryStatus::Dead);

    let d = Dash::start_with(store.clone(), nightshift_runner::hooks::none()).await;
    let cookie = d.sign_in().await;
    let (code, _, page) = get(&d, "/ui/notifications?status=dead", Some(&cookie)).await;
    assert_eq!(code, StatusCode::OK);
    assert!(
        page.contains("id=\"notification-filters\"")
            && page.contains("<option value=\"dead\" selected>")
    );
    let r = row(&page, &format!("data-delivery-id=\"{id}\""));
    assert!(r.contains("class=\"status\" data-status=\"dead\""), "{r}");
    assert!(r.contains("data-action=\"redeliver\""), "{r}");
    assert!(r.contains(">1/1<"), "attempts: {r}");
    assert!(r.contains(&format!("href=\"/ui/runs/{run_id}\"")), "{r}");
    let err = element(r, "class=\"last-error\"", "</td>");
    assert!(
        err.contains("<details><summary>HTTP 500: &lt;script&gt;boom"),
        "collapsed and escaped: {err}"
    );
    assert!(!page.contains("<script>boom"));
    assert!(r.contains("https://receiver.example/…"), "{r}");
    assert!(
        !page.contains("SECRETPATH") && !page.contains("token=abc"),
        "the URL's path is hidden"
    );
    assert!(!page.contains("NS_NOTIFY_SECRET_VAR"));
    let (_, _, pending) = d
        .get("/ui/notifications?status=pending", Some(&cookie))
        .await;
    assert!(!pending.contains(&format!("data-delivery-id=\"{id}\"")));
    assert!(pending.contains("No pending notifications"));

    let path = format!("/ui/notifications/{id}/redeliver");
    let still_dead = || async { assert_eq!(status().await, DeliveryStatus::Dead, "still dead") };
    let done = refused_then(&d, &cookie, &path, "x=1", still_dead).await;
    let to = back_to(&done, "/ui/notifications");
    assert_eq!(status().await, DeliveryStatus::Pending, "sent again");
    let (_, _, after) = get(&d, &to, Some(&cookie)).await;
    assert!(
        after.contains(&format!("Delivery {id} is pending again")),
        "{after}"
    );
    let r = row(&after, &format!("data-delivery-id=\"{id}\""));
    assert!(r.contains("data-status=\"pending\"") && !r.contains("data-action=\"redeliver\""));
    // Again: refused by the store (only a dead one is sent again), shown as the flash.
    let csrf = csrf_of(&after);
    let again = d
        .post_form(&path, &format!("csrf={csrf}"), Some(&cookie), None)
        .await;
    let (_, _, shown) = d
        .get(&back_to(&again, "/ui/notifications"), Some(&cookie))
        .await;
    assert!(
        shown.contains("only a dead delivery can be sent again"),
        "{shown}"
    );
    assert_eq!(status().await, DeliveryStatus::Pending);
}
