//! Bounded reads of a run's log: the newest few events of one type, for a reader that needs
//! only those (the dashboard's approvals inbox shows, for each waiting call, the model's
//! message that made it) and must not read a log of thousands of events to find them.
//!
//! What it guarantees: only the rows asked for come back, newest first; the database finds
//! them by walking the run's primary key `(run_id, seq)` backwards from the given seq, so the
//! cost does not grow with the events after that seq, nor with other runs' logs.
//!
//! Written once per backend in `store/sql/<backend>/events/newest_of_type.sql`, bound the same
//! way on both.

use crate::Result;
use crate::backend::{Backend as _, sql};
use crate::content;
use crate::model::Event;
use crate::postgres::PgBackend;
use crate::sqlite::SqliteBackend;
use crate::store::{AnyBackend, Store};
use crate::text::Text;

/// The most rows one read returns.
const MOST_EVENTS: i64 = 1000;

impl Store {
    /// Run `run_id`'s newest events of type `event_type` whose seq is below `before_seq`
    /// (`i64::MAX` for the newest of all), at most `limit` (clamped to 1–1000),
    /// newest first.
    pub async fn newest_events_of_type(
        &self,
        run_id: &str,
        event_type: &str,
        before_seq: i64,
        limit: i64,
    ) -> Result<Vec<Event>> {
        let limit = limit.clamp(1, MOST_EVENTS);
        match &self.inner.backend {
            AnyBackend::Sqlite(b) => {
                let mut c = b.reader().await?;
                let records = sqlx::query_as(sql!("sqlite", "events/newest_of_type"))
                    .bind(run_id)
                    .bind(Text(event_type))
                    .bind(before_seq)
                    .bind(limit)
                    .fetch_all(&mut *c)
                    .await?;
                content::events::<SqliteBackend>(&mut c, records).await
            }
            AnyBackend::Postgres(b) => {
                let mut c = b.reader().await?;
                let records = sqlx::query_as(sql!("postgres", "events/newest_of_type"))
                    .bind(run_id)
                    .bind(Text(event_type))
                    .bind(before_seq)
                    .bind(limit)
                    .fetch_all(&mut *c)
                    .await?;
                content::events::<PgBackend>(&mut c, records).await
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::Store;
    use crate::clock::SystemClock;
    use crate::config::{StoreConfig, Synchronous};
    use crate::model::NewRun;

    /// Two runs: `long`, with 600 events of which every 50th is a `turn` and the others
    /// `filler`, and `other`, with 60 `turn` events. Returns both run ids.
    async fn two_logs(store: &Store) -> (String, String) {
        let long = store
            .enqueue(&NewRun::new("a", "long"))
            .await
            .unwrap()
            .run_id;
        let other = store
            .enqueue(&NewRun::new("a", "other"))
            .await
            .unwrap()
            .run_id;
        let leases = store
            .claim("w-reads", None, 10, Duration::from_secs(600))
            .await
            .unwrap();
        assert_eq!(leases.len(), 2, "both runs' jobs claimed");
        for lease in &leases {
            let of_long = lease.job().run_id == long;
            let count = if of_long { 600 } else { 60 };
            for seq in 1..=count {
                let kind = if !of_long || seq % 50 == 0 {
                    "turn"
                } else {
                    "filler"
                };
                let payload = format!("{{\"seq\":{seq}}}");
                lease.append_event(kind, &payload).await.unwrap();
            }
        }
        (long, other)
    }

    async fn newest_of_a_type_and_only_those(store: &Store) {
        let (long, other) = two_logs(store).await;
        let seqs = |events: Vec<crate::model::Event>| -> Vec<i64> {
            events.iter().map(|e| e.seq).collect()
        };
        let newest = store
            .newest_events_of_type(&long, "turn", i64::MAX, 3)
            .await
            .unwrap();
        assert!(
            newest
                .iter()
                .all(|e| e.run_id == long && e.event_type == "turn")
        );
        assert!(newest[0].payload.contains("\"seq\":600"), "{newest:?}");
        assert_eq!(
            seqs(newest),
            [600, 550, 500],
            "newest first, at most the limit"
        );
        assert_eq!(
            seqs(
                store
                    .newest_events_of_type(&long, "turn", 500, 2)
                    .await
                    .unwrap()
            ),
            [450, 400],
            "only below the seq"
        );
        assert_eq!(
            seqs(
                store
                    .newest_events_of_type(&long, "turn", 120, 10)
                    .await
                    .unwrap()
            ),
            [100, 50],
            "fewer when fewer are there"
        );
        let others = store
            .newest_events_of_type(&other, "turn", i64::MAX, 2)
            .await
            .unwrap();
        assert!(others.iter().all(|e| e.run_id == other), "{others:?}");
        assert_eq!(seqs(others), [60, 59], "each run's own log");
        assert!(
            store
                .newest_events_of_type(&long, "nothing", i64::MAX, 10)
                .await
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            store
                .newest_events_of_type(&long, "filler", i64::MAX, 0)
                .await
                .unwrap()
                .len(),
            1,
            "a limit below one reads one"
        );
    }

    #[tokio::test]
    async fn newest_events_of_a_type_on_sqlite() {
        let dir = tempfile_dir("event-reads");
        let mut config = StoreConfig::for_url(format!("sqlite://{}", dir.join("e.db").display()));
        config.synchronous = Synchronous::Normal;
        let store = Store::connect(&config, Arc::new(SystemClock))
            .await
            .unwrap();
        store.migrate().await.unwrap();
        newest_of_a_type_and_only_those(&store).await;
        store.close().await;
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn newest_events_of_a_type_on_postgres() {
        let Ok(url) = std::env::var("NIGHTSHIFT_TEST_PG_URL") else {
            eprintln!("SKIPPED newest_events_of_a_type_on_postgres: no NIGHTSHIFT_TEST_PG_URL");
            return;
        };
        let schema = format!("nst_{}", uuid::Uuid::new_v4().simple());
        let mut config = StoreConfig::for_url(url.clone());
        config.schema = Some(schema.clone());
        let store = Store::connect(&config, Arc::new(SystemClock))
            .await
            .unwrap();
        store.migrate().await.unwrap();
        newest_of_a_type_and_only_those(&store).await;
        store.close().await;
        let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&url)
            .await
            .unwrap();
        let drop = format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE");
        sqlx::query(sqlx::AssertSqlSafe(drop))
            .execute(&mut conn)
            .await
            .unwrap();
    }

    /// A fresh directory under the system's temp directory.
    fn tempfile_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "nightshift-{name}-{}-{}",
            std::process::id(),
            uuid::Uuid::now_v7()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
