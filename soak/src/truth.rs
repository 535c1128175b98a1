//! Reading what really happened, after the daemons are stopped: the `runs` and `jobs` rows
//! straight from the database with sqlx (not through the store under test), each run's events
//! through `Store::events` (their payloads are stored as the run's compressed blobs since
//! schema v22, and reading them back byte for byte is the store's, held by the conformance
//! suite's `content::*` cases), and the tools' ledger file.
//!
//! Guarantees: rows come back as plain structs ([`Truth`]) ordered by run and sequence; a
//! ledger line that is not `run_id call_id idempotency_key class` is kept as
//! [`Truth::bad_ledger_lines`] rather than dropped.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use sqlx::Connection as _;

/// A row of `runs`.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct RunRow {
    pub id: String,
    pub agent: String,
    pub status: String,
    pub result: Option<String>,
    pub error: Option<String>,
    pub turns: i64,
}

/// A row of `jobs`.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct JobRow {
    pub run_id: String,
    pub status: String,
    pub attempts: i64,
}

/// A row of `run_events`.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct EventRow {
    pub run_id: String,
    pub seq: i64,
    #[sqlx(rename = "type")]
    pub kind: String,
    pub payload: String,
}

/// One execution of a tool, as its program wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerLine {
    pub run_id: String,
    pub call_id: String,
    pub idempotency_key: String,
    pub class: String,
}

/// Everything the verdict is computed from.
#[derive(Debug, Clone, Default)]
pub struct Truth {
    pub runs: Vec<RunRow>,
    pub jobs: Vec<JobRow>,
    pub events: Vec<EventRow>,
    pub ledger: Vec<LedgerLine>,
    pub bad_ledger_lines: Vec<String>,
}

const RUNS: &str = "SELECT id, agent, status, result, error, CAST(turns AS BIGINT) AS turns \
                    FROM {p}runs ORDER BY id";
const JOBS: &str = "SELECT run_id, status, CAST(attempts AS BIGINT) AS attempts \
                    FROM {p}jobs ORDER BY id";

fn sql(template: &str, prefix: &str) -> sqlx::AssertSqlSafe<String> {
    sqlx::AssertSqlSafe(template.replace("{p}", prefix))
}

/// Where a soak's database is.
#[derive(Debug, Clone)]
pub enum Db {
    Sqlite(PathBuf),
    Postgres { url: String, schema: String },
}

const TERMINAL: &str = "SELECT CAST(COUNT(*) AS BIGINT) FROM {p}runs WHERE status IN \
    ('succeeded', 'failed', 'cancelled', 'budget_exhausted', 'max_rounds', 'superseded')";

impl Db {
    /// The `url` the daemons' config takes, and the schema (PostgreSQL).
    pub fn url(&self) -> String {
        match self {
            Db::Sqlite(path) => format!("sqlite://{}", path.display()),
            Db::Postgres { url, .. } => url.clone(),
        }
    }

    pub fn schema(&self) -> Option<&str> {
        match self {
            Db::Sqlite(_) => None,
            Db::Postgres { schema, .. } => Some(schema),
        }
    }

    /// Reads every row the verdict needs.
    pub async fn read(&self) -> anyhow::Result<Truth> {
        match self {
            Db::Sqlite(path) => {
                let mut c = sqlite(path).await?;
                let runs: Vec<RunRow> = sqlx::query_as(sql(RUNS, "")).fetch_all(&mut c).await?;
                Ok(Truth {
                    jobs: sqlx::query_as(sql(JOBS, "")).fetch_all(&mut c).await?,
                    events: self.events(&runs).await?,
                    runs,
                    ..Truth::default()
                })
            }
            Db::Postgres { url, schema } => {
                let mut c = postgres(url).await?;
                let p = format!("\"{schema}\".");
                let runs: Vec<RunRow> = sqlx::query_as(sql(RUNS, &p)).fetch_all(&mut c).await?;
                Ok(Truth {
                    jobs: sqlx::query_as(sql(JOBS, &p)).fetch_all(&mut c).await?,
                    events: self.events(&runs).await?,
                    runs,
                    ..Truth::default()
                })
            }
        }
    }

    /// Every event of `runs`, in order, as the store reads them back.
    async fn events(&self, runs: &[RunRow]) -> anyhow::Result<Vec<EventRow>> {
        let mut config = nightshift_store::StoreConfig::for_url(self.url());
        config.schema = self.schema().map(str::to_string);
        let store = nightshift_store::Store::connect(
            &config,
            std::sync::Arc::new(nightshift_store::SystemClock),
        )
        .await
        .context("connecting the store to read the runs' events")?;
        let mut events = Vec::new();
        for run in runs {
            for e in store.events(&run.id, 0).await? {
                events.push(EventRow {
                    run_id: e.run_id,
                    seq: e.seq,
                    kind: e.event_type,
                    payload: e.payload,
                });
            }
        }
        store.close().await;
        Ok(events)
    }

    /// How many runs are in a terminal state now (0 before the schema exists).
    pub async fn terminal_runs(&self) -> anyhow::Result<i64> {
        Ok(match self {
            Db::Sqlite(path) => {
                let mut c = sqlite(path).await?;
                sqlx::query_scalar(sql(TERMINAL, ""))
                    .fetch_one(&mut c)
                    .await?
            }
            Db::Postgres { url, schema } => {
                let mut c = postgres(url).await?;
                let p = format!("\"{schema}\".");
                sqlx::query_scalar(sql(TERMINAL, &p))
                    .fetch_one(&mut c)
                    .await?
            }
        })
    }
}

async fn sqlite(path: &Path) -> anyhow::Result<sqlx::SqliteConnection> {
    let url = format!("sqlite://{}?mode=ro", path.display());
    sqlx::SqliteConnection::connect(&url)
        .await
        .with_context(|| format!("cannot open the soak's SQLite file {}", path.display()))
}

async fn postgres(url: &str) -> anyhow::Result<sqlx::PgConnection> {
    sqlx::PgConnection::connect(url)
        .await
        .with_context(|| format!("cannot connect to PostgreSQL at {url}"))
}

impl Truth {
    /// Adds the ledger's lines (a missing file is an empty ledger: no tool ever ran).
    pub fn with_ledger(mut self, path: &Path) -> anyhow::Result<Truth> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        };
        for line in text.lines() {
            match parse_ledger_line(line) {
                Some(l) => self.ledger.push(l),
                None => self.bad_ledger_lines.push(line.to_string()),
            }
        }
        Ok(self)
    }
}

/// `run_id call_id idempotency_key class`, exactly four fields.
pub fn parse_ledger_line(line: &str) -> Option<LedgerLine> {
    let mut it = line.split(' ');
    let l = LedgerLine {
        run_id: it.next()?.to_string(),
        call_id: it.next()?.to_string(),
        idempotency_key: it.next()?.to_string(),
        class: it.next()?.to_string(),
    };
    let empty = l.run_id.is_empty() || l.call_id.is_empty() || l.class.is_empty();
    (it.next().is_none() && !empty).then_some(l)
}

/// The line a tool appends for one execution (see [`parse_ledger_line`]).
pub fn ledger_line(run_id: &str, call_id: &str, key: &str, class: &str) -> String {
    let field = |s: &str| {
        if s.is_empty() {
            "-".to_string()
        } else {
            s.replace([' ', '\n'], "_")
        }
    };
    format!(
        "{} {} {} {}\n",
        field(run_id),
        field(call_id),
        field(key),
        field(class)
    )
}

/// Fails with a sentence saying what to do when PostgreSQL cannot be reached.
pub async fn check_postgres(url: &str) -> anyhow::Result<()> {
    postgres(url).await.map(drop).with_context(|| {
        "the PostgreSQL soak needs a server: start one, pass --pg-url, or run with \
         --backend sqlite"
            .to_string()
    })
}

/// Drops a PostgreSQL schema the soak made; failing to is reported, not fatal.
pub async fn drop_schema(url: &str, schema: &str) {
    let result = async {
        let mut c = postgres(url).await?;
        let sql = format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE");
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(&mut c)
            .await?;
        anyhow::Ok(())
    }
    .await;
    if let Err(e) = result {
        eprintln!("note: could not drop schema {schema}: {e:#}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ledger_lines_round_trip_and_bad_ones_are_refused() {
        let line = ledger_line("r1", "t0_side_effect", "r1:k", "side_effect");
        assert_eq!(
            parse_ledger_line(line.trim_end()),
            Some(LedgerLine {
                run_id: "r1".into(),
                call_id: "t0_side_effect".into(),
                idempotency_key: "r1:k".into(),
                class: "side_effect".into(),
            })
        );
        assert_eq!(ledger_line("r", "a b", "", "c"), "r a_b - c\n");
        assert_eq!(parse_ledger_line("r1 c1 k1"), None);
        assert_eq!(parse_ledger_line("r1 c1 k1 side_effect extra"), None);
    }
}
