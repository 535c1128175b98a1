//! The store's conformance cases on PostgreSQL (`postgres::<concern>::<case>`), and
//! PostgreSQL's own tests: the query plans of the queue's statements (`plans`), the worker
//! pool's kept settle connection closed by the server, two Nightshift schemas in one database,
//! and an unreachable server explained. Every test makes its own schema on the server of
//! `NIGHTSHIFT_TEST_PG_URL` (else a throwaway cluster; else they print `SKIPPED`).

nightshift_store_conformance::exercise!(postgres = Postgres);

mod plans;

mod batch {
    use std::time::Duration;

    use nightshift_store::{ClaimRequest, Error, JobState, NewRun};

    const LEASE: Duration = Duration::from_secs(30);

    /// PostgreSQL: the worker pool's settles run on one kept connection (`warm.rs`). When the
    /// server closes it (a restart, an administrator's `pg_terminate_backend`), settles go on:
    /// after an idle second the connection is checked and replaced before use; a settle that
    /// meets the closed connection at once fails alone, claiming nothing, and the next opens a
    /// new connection.
    #[tokio::test]
    async fn postgres_settles_go_on_after_the_server_closes_their_connection() {
        let Some(mut db) = nightshift_store_conformance::TestDb::new(
            nightshift_store_conformance::Backend::Postgres,
            "warm_settle",
        )
        .await
        else {
            return;
        };
        // A name of this test's own, so that only its connections are closed.
        let name = format!("warm_{}", uuid::Uuid::new_v4().simple());
        let separator = if db.config.url.contains('?') {
            '&'
        } else {
            '?'
        };
        db.config.url = format!("{}{separator}application_name={name}", db.config.url);
        let store = db.store().await;
        for i in 0..8 {
            store
                .enqueue(&NewRun::new("a", format!("job {i}")))
                .await
                .unwrap();
        }
        let one = [ClaimRequest {
            lanes: None,
            limit: 1,
        }];
        // Settles a claim of one job and says how many it claimed. The first settle of a store,
        // and the first after each second, rescues expired leases in a transaction on the
        // shared pool; so each step settles twice, and the second takes the kept connection.
        let settle = async || {
            let settled = store.settle(&[], "w", &one, LEASE).await?;
            Ok::<usize, Error>(settled.claimed[0].len())
        };
        let running = async || {
            let counts = store.job_counts().await.unwrap();
            counts
                .into_iter()
                .find(|jobs| jobs.state == JobState::Running)
                .map_or(0, |jobs| jobs.count)
        };
        let mut admin = <sqlx::PgConnection as sqlx::Connection>::connect(&db.config.url)
            .await
            .unwrap();
        let close_settle_connection = async |admin: &mut sqlx::PgConnection| -> i64 {
            sqlx::query_scalar(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                 WHERE application_name = $1 AND pid <> pg_backend_pid() \
                   AND query LIKE '-- The one-statement settle%'",
            )
            .bind(&name)
            .fetch_one(admin)
            .await
            .unwrap()
        };

        assert_eq!((settle().await.unwrap(), settle().await.unwrap()), (1, 1));
        assert_eq!(
            close_settle_connection(&mut admin).await,
            1,
            "one connection ran the one-statement settle"
        );
        tokio::time::sleep(Duration::from_millis(1_200)).await;
        assert_eq!(
            (settle().await.unwrap(), settle().await.unwrap()),
            (1, 1),
            "after an idle second the closed connection is found out and replaced"
        );
        assert_eq!(running().await, 4);

        assert_eq!(close_settle_connection(&mut admin).await, 1);
        if settle().await.is_err() {
            assert_eq!(running().await, 4, "the failed settle claimed nothing");
        }
        assert_eq!(
            settle().await.unwrap(),
            1,
            "the next settle has a new connection"
        );
        let _ = sqlx::Connection::close(admin).await;
        store.close().await;
        db.cleanup().await;
    }
}

mod outbox {
    use std::time::Duration;

    use nightshift_store::{NewRun, RunStatus};
    use nightshift_store_conformance::TestDb;
    use nightshift_store_conformance::outbox::outbox;

    const LEASE: Duration = Duration::from_secs(30);

    /// Two Nightshift schemas in one PostgreSQL database (each with the trigger function written
    /// for its own schema by migration 8): a run ending in one leaves its outbox row there and
    /// none in the other, whichever schema the connection's search path names first.
    #[tokio::test]
    async fn postgres_schemas_in_one_database_keep_their_own_outbox() {
        let Some(a) = TestDb::new(
            nightshift_store_conformance::Backend::Postgres,
            "outbox_schemas",
        )
        .await
        else {
            return;
        };
        let Some(b) = TestDb::new(
            nightshift_store_conformance::Backend::Postgres,
            "outbox_schemas",
        )
        .await
        else {
            return;
        };
        let (store_a, store_b) = (a.store().await, b.store().await);
        let agents = ["agent".to_string()];
        for (store, result) in [(&store_a, "from a"), (&store_b, "from b")] {
            store.set_notifying_agents(&agents);
            let run = store.enqueue(&NewRun::new("agent", "p")).await.unwrap();
            let lease = store.claim("w", None, 1, LEASE).await.unwrap().remove(0);
            lease.ack(Some(result.into())).await.unwrap();
            assert_eq!(outbox(store, &run.run_id).await, [RunStatus::Succeeded]);
        }
        for store in [&store_a, &store_b] {
            let rows = store.unexpanded_outbox(&agents, 100).await.unwrap();
            assert_eq!(
                rows.len(),
                1,
                "one row per schema, none from the other: {rows:?}"
            );
            let run = store.run(&rows[0].run_id).await.unwrap();
            assert!(run.is_some(), "the row is this schema's own run");
        }
        a.cleanup().await;
        b.cleanup().await;
    }
}

/// Connecting: errors that explain themselves.
mod setup {
    use std::sync::Arc;

    use nightshift_store::{Error, Store, StoreConfig, SystemClock};

    async fn connect(config: &StoreConfig) -> Result<Store, Error> {
        Store::connect(config, Arc::new(SystemClock)).await
    }

    #[tokio::test]
    async fn unreachable_server_is_explained() {
        // Port 1 on loopback: nothing listens there.
        let err = connect(&StoreConfig::for_url(
            "postgres://nightshift:pw@127.0.0.1:1/db",
        ))
        .await
        .unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, Error::Connect { .. }), "{msg}");
        assert!(
            msg.contains("127.0.0.1:1/db") && msg.to_lowercase().contains("refused"),
            "{msg}"
        );
        assert!(msg.contains("check that PostgreSQL is running"), "{msg}");
    }
}
