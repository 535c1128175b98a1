//! The batch statements against a real SQLite file: the answers and rows are those of taking
//! each delivery in turn, and batches they do not take are left untouched.

use super::*;
use crate::backend::Backend;
use crate::model::{ConcurrencyPolicy, NewRun};
use crate::sqlite::SqliteBackend;
use crate::webhooks::take::delivery_runs;

fn start(id: &str, new: NewRun) -> Taking {
    Taking {
        hook: "gh".into(),
        delivery_id: id.into(),
        event: "pull_request".into(),
        work: DeliveryWork::Start(new),
        run_id: uuid::Uuid::now_v7().to_string(),
        notify: false,
        route: "pr".into(),
        now: 1_000,
    }
}

/// Takes `takings` together (in a transaction of their own, committed).
async fn together(b: &SqliteBackend, takings: &[Taking]) -> Option<Vec<DeliveryTaken>> {
    let refs: Vec<&Taking> = takings.iter().collect();
    take_together(b, &refs).await.unwrap()
}

/// The rows of `table` (one of this test's names).
async fn count(b: &SqliteBackend, table: &'static str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
        .fetch_one(&mut *b.writer().await.unwrap())
        .await
        .unwrap()
}

#[tokio::test]
async fn a_batch_answers_as_each_delivery_would_alone() {
    let (b, dir) = crate::sqlite::tests::migrated("together").await;
    let first = start("d-0", NewRun::new("a", "before").idempotency_key("w-0"));
    let Some(taken) = together(&b, std::slice::from_ref(&first)).await else {
        panic!("one plain start is taken together");
    };
    assert!(matches!(&taken[..], [DeliveryTaken::Enqueued(e)] if e.run_id == first.run_id));
    let batch = [
        start(
            "d-1",
            NewRun::new("a", "keyed")
                .idempotency_key("w-1")
                .concurrency("pr-1", ConcurrencyPolicy::Queue),
        ),
        // A NUL rides in the JSON list as `\u0000` and reads back intact.
        start(
            "d-2",
            NewRun::new("a", "same \0 key").idempotency_key("shared"),
        ),
        start(
            "d-3",
            NewRun::new("a", "same key again").idempotency_key("shared"),
        ),
        start(
            "d-0",
            NewRun::new("a", "a redelivery").idempotency_key("w-0"),
        ),
    ];
    let taken = together(&b, &batch)
        .await
        .expect("the batch is taken together");
    let [
        DeliveryTaken::Enqueued(keyed),
        DeliveryTaken::Enqueued(shared),
        DeliveryTaken::Enqueued(again),
        DeliveryTaken::Done(redelivered),
    ] = &taken[..]
    else {
        panic!("one answer per delivery, in order: {taken:?}");
    };
    assert_eq!(keyed.run_id, batch[0].run_id);
    assert!(!keyed.duplicate && !shared.duplicate);
    // The second delivery's run lost its idempotency key to the first's, in the same batch.
    assert!(again.duplicate);
    assert_eq!(
        (&again.run_id, again.job_id),
        (&shared.run_id, shared.job_id)
    );
    // The done delivery counted its arrival and enqueued nothing.
    assert_eq!(
        (redelivered.received, redelivered.status),
        (2, WebhookDeliveryStatus::Done)
    );
    assert_eq!(count(&b, "runs").await, 3, "d-0's, d-1's and d-2's");
    assert_eq!(count(&b, "jobs").await, 3);
    let mut w = b.writer().await.unwrap();
    for (id, enqueued) in [("d-1", keyed), ("d-2", shared), ("d-3", again)] {
        let row = SqliteBackend::get_webhook_delivery(&mut w, "gh", id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(row.status, WebhookDeliveryStatus::Done, "{id}");
        let own = delivery_runs("pr", "start", enqueued);
        assert_eq!(row.recorded_runs().unwrap(), own, "{id}: its own record");
    }
    let input: String = sqlx::query_scalar("SELECT input FROM runs WHERE id = ?1")
        .bind(&shared.run_id)
        .fetch_one(&mut *w)
        .await
        .unwrap();
    assert_eq!(input, "same \0 key");
    let key: Option<String> =
        sqlx::query_scalar("SELECT concurrency_key FROM jobs WHERE run_id = ?1")
            .bind(&keyed.run_id)
            .fetch_one(&mut *w)
            .await
            .unwrap();
    assert_eq!(
        key.as_deref(),
        Some("pr-1"),
        "the start job carries its run's key"
    );
    drop(w);
    b.close().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn batches_it_does_not_take_are_left_untouched() {
    let (b, dir) = crate::sqlite::tests::migrated("together-not").await;
    let plain = || start("d-1", NewRun::new("a", "plain").idempotency_key("w-1"));
    let skip = start(
        "d-2",
        NewRun::new("a", "decides").concurrency("pr-2", ConcurrencyPolicy::Skip),
    );
    let resume = Taking {
        work: DeliveryWork::Resume(crate::model::NewResume {
            run_id: "r".into(),
            payload: "{}".into(),
            dedupe_key: None,
            job: Default::default(),
        }),
        ..start("d-3", NewRun::new("a", "unused"))
    };
    for batch in [
        vec![plain(), skip],
        vec![plain(), plain()],
        vec![plain(), resume],
    ] {
        assert!(together(&b, &batch).await.is_none(), "{batch:?}");
        assert_eq!(count(&b, "webhook_deliveries").await, 0, "{batch:?}");
        assert_eq!(count(&b, "runs").await, 0, "{batch:?}");
    }
    b.close().await;
    let _ = std::fs::remove_dir_all(dir);
}
