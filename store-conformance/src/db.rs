//! A fresh database per test on each backend: a temp SQLite file or a fresh PostgreSQL schema.

use std::sync::Arc;

use nightshift_store::{Clock, ManualClock, Store, StoreConfig, Synchronous, SystemClock};

use crate::pg;

/// Which backend a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// A database of one test: a temp SQLite file or a fresh PostgreSQL schema.
#[derive(Debug)]
pub struct TestDb {
    pub backend: Backend,
    pub config: StoreConfig,
    _dir: Option<tempfile::TempDir>,
}

impl TestDb {
    /// A fresh database on `backend`, or `None` (after printing why) when PostgreSQL is not
    /// available.
    pub async fn new(backend: Backend, test: &str) -> Option<TestDb> {
        match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().expect("temp dir");
                let path = dir.path().join("nightshift.db");
                let mut config = StoreConfig::for_url(format!("sqlite://{}", path.display()));
                // Tests with thousands of commits use NORMAL to keep the suite fast; the
                // queue's semantics do not depend on it (it only changes power-cut behaviour).
                config.synchronous = Synchronous::Normal;
                Some(TestDb {
                    backend,
                    config,
                    _dir: Some(dir),
                })
            }
            Backend::Postgres => {
                let Some(url) = pg::url().await else {
                    eprintln!(
                        "SKIPPED {test} on PostgreSQL: no server (set NIGHTSHIFT_TEST_PG_URL, or \
                         install initdb/pg_ctl)"
                    );
                    return None;
                };
                let schema = format!("nst_{}", uuid::Uuid::new_v4().simple());
                let mut config = StoreConfig::for_url(url);
                config.schema = Some(schema);
                config.max_connections = 12;
                Some(TestDb {
                    backend,
                    config,
                    _dir: None,
                })
            }
        }
    }

    /// A migrated store on this database with `clock`.
    pub async fn store_with(&self, clock: Arc<dyn Clock>) -> Store {
        let store = Store::connect(&self.config, clock).await.expect("connect");
        store.migrate().await.expect("migrate");
        store
    }

    /// A migrated store with the system clock.
    pub async fn store(&self) -> Store {
        self.store_with(Arc::new(SystemClock)).await
    }

    /// A migrated store with a manual clock, and the clock.
    pub async fn manual(&self) -> (Store, ManualClock) {
        let clock = ManualClock::starting_now();
        (self.store_with(Arc::new(clock.clone())).await, clock)
    }

    /// Runs one statement on this test's database beside the store, for a test that damages
    /// or plants rows: `sql` is written with SQLite's `?1`, `?2`, … (turned into `$1`, … for
    /// PostgreSQL) and `args` are bound in order. Returns the rows it changed.
    pub async fn execute(&self, sql: &str, args: &[Arg]) -> u64 {
        macro_rules! bound {
            ($query:expr) => {{
                let mut query = $query;
                for arg in args {
                    query = match arg {
                        Arg::Int(n) => query.bind(*n),
                        Arg::Text(t) => query.bind(t.clone()),
                        Arg::Bytes(b) => query.bind(b.clone()),
                    };
                }
                query
            }};
        }
        match self.backend {
            Backend::Sqlite => {
                let mut conn =
                    <sqlx::SqliteConnection as sqlx::Connection>::connect(&self.config.url)
                        .await
                        .unwrap();
                bound!(sqlx::query(sqlx::AssertSqlSafe(sql.to_string())))
                    .execute(&mut conn)
                    .await
                    .unwrap()
                    .rows_affected()
            }
            Backend::Postgres => {
                let schema = self.config.schema.clone().unwrap();
                let opts: sqlx::postgres::PgConnectOptions = self.config.url.parse().unwrap();
                let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect_with(
                    &opts.options([("search_path", schema.as_str())]),
                )
                .await
                .unwrap();
                let sql = sql.replace('?', "$");
                bound!(sqlx::query(sqlx::AssertSqlSafe(sql)))
                    .execute(&mut conn)
                    .await
                    .unwrap()
                    .rows_affected()
            }
        }
    }

    /// Drops the PostgreSQL schema (best effort; SQLite files go with the temp dir).
    pub async fn cleanup(self) {
        if let (Backend::Postgres, Some(schema)) = (self.backend, &self.config.schema) {
            let url = self.config.url.clone();
            if let Ok(mut conn) = <sqlx::PgConnection as sqlx::Connection>::connect(&url).await {
                let drop = format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE");
                let _ = sqlx::query(sqlx::AssertSqlSafe(drop))
                    .execute(&mut conn)
                    .await;
            }
        }
    }
}

/// A value bound by [`TestDb::execute`].
#[derive(Debug, Clone)]
pub enum Arg {
    Int(i64),
    Text(String),
    Bytes(Vec<u8>),
}

/// Runs the async test body `$body` (a fn taking `TestDb`) once per backend, as two tests
/// named `sqlite` and `postgres` inside a module named after the test.
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident => $body:ident;)+) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn sqlite() {
                    let db = $crate::TestDb::new($crate::Backend::Sqlite, stringify!($name))
                        .await
                        .expect("sqlite is always available");
                    super::$body(&db).await;
                    db.cleanup().await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn postgres() {
                    let Some(db) =
                        $crate::TestDb::new($crate::Backend::Postgres, stringify!($name)).await
                    else {
                        return;
                    };
                    super::$body(&db).await;
                    db.cleanup().await;
                }
            }
        )+
    };
}
