//! The store's conformance cases on SQLite (`sqlite::<concern>::<case>`), and SQLite's own
//! tests: an in-memory database, a database in a missing directory, and a URL that names no
//! backend (which needs no database at all).

nightshift_store_conformance::exercise!(sqlite = Sqlite);

mod queue {
    use std::sync::Arc;
    use std::time::Duration;

    use nightshift_store::{ConcurrencyPolicy, JobCount, JobState, NewRun, RunStatus};

    const LEASE: Duration = Duration::from_secs(30);

    /// An in-memory SQLite database lives on its one connection: reads go through the writer, and
    /// the queue works end to end (enqueue, claim, ack, listing) on it.
    #[tokio::test]
    async fn an_in_memory_sqlite_store_reads_what_it_writes() {
        let config = nightshift_store::StoreConfig::for_url("sqlite::memory:");
        let store =
            nightshift_store::Store::connect(&config, Arc::new(nightshift_store::SystemClock))
                .await
                .unwrap();
        store.migrate().await.unwrap();
        let plain = store.enqueue(&NewRun::new("a", "plain")).await.unwrap();
        let keyed = store
            .enqueue(&NewRun::new("a", "keyed").concurrency("k", ConcurrencyPolicy::Queue))
            .await
            .unwrap();
        assert_eq!(store.list_runs(None, 10).await.unwrap().len(), 2);
        for _ in 0..2 {
            let lease = store.claim("w", None, 1, LEASE).await.unwrap().remove(0);
            lease.ack(Some("ok".into())).await.unwrap();
        }
        for id in [&plain.run_id, &keyed.run_id] {
            let run = store.run(id).await.unwrap().unwrap();
            assert_eq!(run.status, RunStatus::Succeeded, "{id}");
        }
        assert_eq!(
            store.job_counts().await.unwrap(),
            vec![JobCount {
                state: JobState::Succeeded,
                count: 2
            }]
        );
        store.close().await;
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
    async fn bad_database_url_is_explained() {
        let err = connect(&StoreConfig::for_url("mysql://root:secret@db/x"))
            .await
            .unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, Error::Config(_)), "{msg}");
        assert!(
            msg.contains("sqlite://PATH") && msg.contains("postgres://"),
            "{msg}"
        );
        assert!(!msg.contains("secret"), "the password is not shown: {msg}");
    }

    #[tokio::test]
    async fn sqlite_in_a_missing_directory_is_explained() {
        let err = connect(&StoreConfig::for_url(
            "sqlite:///nonexistent-dir/x/nightshift.db",
        ))
        .await
        .unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("check that the directory exists"), "{msg}");
    }
}
