//! Migrating: daemons starting together apply each migration once; a newer schema gives a
//! clear error and is left alone. (The errors of connecting — a bad URL, an unreachable server,
//! a missing directory — need no test database: they are each backend's own tests, in
//! `tests/sqlite.rs` and `tests/postgres/main.rs`.)

use std::sync::Arc;

use crate::{Backend, TestDb};
use nightshift_store::{Error, Store, StoreConfig, SystemClock};

pub async fn concurrent_starters_migrate_once(db: &TestDb) {
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let config = db.config.clone();
        tasks.push(tokio::spawn(async move {
            let store = connect(&config).await.expect("connect");
            let report = store.migrate().await.expect("migrate");
            store.close().await;
            report.applied
        }));
    }
    let mut applied = Vec::new();
    for t in tasks {
        applied.push(t.await.unwrap());
    }
    applied.sort_by_key(Vec::len);
    let latest = nightshift_store::migrate::latest_version();
    assert!(
        applied[..3].iter().all(Vec::is_empty)
            && applied[3].len() == nightshift_store::migrate::migration_count()
            && applied[3].last() == Some(&latest),
        "exactly one starter applied the migrations: {applied:?}"
    );
}

async fn connect(config: &StoreConfig) -> Result<Store, Error> {
    Store::connect(config, Arc::new(SystemClock)).await
}

pub async fn newer_schema_is_refused(db: &TestDb) {
    let store = db.store().await;
    // Pretend a newer nightshift migrated this database.
    let future = "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
                  VALUES (9999, 'from the future', true, X'00', 0)";
    let future_pg = "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
                     VALUES (9999, 'from the future', true, '\\x00'::bytea, 0)";
    match db.backend {
        Backend::Sqlite => {
            let pool = sqlx::SqlitePool::connect(&db.config.url).await.unwrap();
            sqlx::query(future).execute(&pool).await.unwrap();
        }
        Backend::Postgres => {
            let schema = db.config.schema.clone().unwrap();
            let opts: sqlx::postgres::PgConnectOptions = db.config.url.parse().unwrap();
            let pool = sqlx::PgPool::connect_with(opts.options([("search_path", schema.as_str())]))
                .await
                .unwrap();
            sqlx::query(future_pg).execute(&pool).await.unwrap();
        }
    }
    let err = store.migrate().await.unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(
            err,
            Error::SchemaTooNew {
                database: 9999,
                binary
            } if binary == nightshift_store::migrate::latest_version()
        ),
        "{msg}"
    );
    assert!(
        msg.contains("upgrade nightshift") && msg.contains("nothing was changed"),
        "{msg}"
    );
    // Still usable by this binary's queries, and untouched.
    assert!(store.job_counts().await.unwrap().is_empty());
}
