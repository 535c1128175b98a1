//! Connecting and migrating: daemons starting together apply each migration once; bad
//! database URLs, unreachable servers and newer schemas give clear errors and change nothing.

use std::sync::Arc;

use nightshift_store::{Error, Store, StoreConfig, SystemClock};
use nightshift_tests::{Backend, TestDb, on_both_backends};

on_both_backends! {
    a_newer_schema_is_refused_and_left_alone => newer_schema_is_refused;
    concurrent_starters_migrate_once => concurrent_starters_migrate_once;
}

async fn concurrent_starters_migrate_once(db: &TestDb) {
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let config = db.config.clone();
        tasks.push(tokio::spawn(async move {
            let store = connect(&config).await.expect("connect");
            let report = store.migrate().await.expect("migrate");
            store.close().await;
            report.applied.len()
        }));
    }
    let mut applied = Vec::new();
    for t in tasks {
        applied.push(t.await.unwrap());
    }
    applied.sort();
    let migrations =
        std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../migrations/sqlite"))
            .unwrap()
            .count();
    assert_eq!(
        applied,
        vec![0, 0, 0, migrations],
        "exactly one starter applied the migrations"
    );
}

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

async fn newer_schema_is_refused(db: &TestDb) {
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
