//! PostgreSQL's plans for the claim: whatever the table's statistics say, a claim reads
//! `jobs_claim` one priority at a time, each priority's due jobs as a range of the index, and
//! stops after its limit, never scanning and sorting every queued job nor passing every job
//! that sleeps until later (either makes each claim cost time in proportion to the queue).
//!
//! The statistics a quiet queue has before a burst are the dangerous ones: analyzed while no
//! job was queued, they make the planner expect a handful of queued rows, and a sort of a
//! handful looks free. Each test builds that state (every job done, `ANALYZE`, then all of
//! them queued again, autovacuum off for the table so it cannot refresh the statistics) and
//! reads the generic plan the statements get once prepared: with the default planner
//! settings (without migration 9 the claim's plan here is a scan of `jobs_next_due` and a
//! sort), and with the settings the store's claiming connections use (that they do use them
//! is a unit test in `store/src/postgres/planner.rs`).
//!
//! The listings are read on a long analyzed history: each shape of `Store::runs_page`, as
//! planned with its values (the store sends them unprepared, since a generic plan fetched
//! and sorted every run of a filter), walks an index of migration 13 newest first; the
//! statements of `Store::queue_overview`, under custom and generic plans, read the live
//! jobs' partial indexes. None scans `runs` or `jobs` whole or sorts a filter's every row.
//!
//! The claim's plans are checked in `claims`, the writes' and the settle's in `writes`, the
//! listings' in `listings`; what they share (the statements, the schemas they build, reading a
//! plan) is here.

mod claims;
mod listings;
mod writes;

use nightshift_store::{
    NewRun, POSTGRES_CLAIM_PLANNER_SETTINGS, POSTGRES_CLAIMING_PLAN_CACHE_MODE,
    POSTGRES_WARM_SETTINGS,
};
use nightshift_store_conformance::TestDb;
use sqlx::{AssertSqlSafe, Connection, PgConnection};

const SETTLE: &str = nightshift_store::sql::postgres::SETTLE;
const CLAIM: &str = nightshift_store::sql::postgres::CLAIM;
const CLAIM_LANE: &str = nightshift_store::sql::postgres::CLAIM_LANE;
const NEXT_DUE: &str = nightshift_store::sql::postgres::NEXT_DUE;
const FINISH_JOBS: &str = nightshift_store::sql::postgres::FINISH_JOBS;
const MARK_RUNS: &str = nightshift_store::sql::postgres::MARK_RUNS_RUNNING;

const SETTLE_TYPES: &str = "bigint[], bigint[], text[], text[], text[], text[], text[], bigint, \
                            text, bigint, bigint, text";
const SETTLE_ARGS: &str = "'{}', '{}', '{}', '{}', '{}', '{}', '{}', 9999999999999, 'w', \
                           30000, 4, 'c'";
const CLAIM_TYPES: &str = "bigint, text, bigint, text, bigint";
const FINISH_TYPES: &str = "bigint[], bigint[], text[], text[], text[], text[], text[], bigint";

/// The session a claiming transaction plans in, on a connection whose earlier settings may
/// have been the warm connection's: the pool's defaults, claims without sorting, and each
/// statement planned anew.
fn claiming_session() -> String {
    format!(
        "RESET enable_seqscan; {POSTGRES_CLAIM_PLANNER_SETTINGS}; \
         {POSTGRES_CLAIMING_PLAN_CACHE_MODE}"
    )
}

/// The planner settings plans are read under: PostgreSQL's defaults, those of claiming
/// transactions, and those of the warm connection that runs the pool's settles.
const SETTINGS: [&str; 3] = [
    "RESET enable_sort; RESET enable_seqscan",
    POSTGRES_CLAIM_PLANNER_SETTINGS,
    POSTGRES_WARM_SETTINGS,
];

/// A schema holding `queued` queued jobs whose statistics were taken while none was queued,
/// and a connection on it.
async fn queue_after_a_quiet_analyze(db: &TestDb, queued: usize) -> PgConnection {
    let store = db.store().await;
    store.enqueue(&NewRun::new("agent", "p")).await.unwrap();
    store.close().await;
    let mut conn = connect_in_schema(db).await;
    // Copies of the one enqueued job (plans read the jobs table only).
    let copies = format!(
        "INSERT INTO jobs (run_id, kind, lane, priority, payload, run_at, attempts, \
         max_attempts, status, lease_token, created_at, updated_at) \
         SELECT j.run_id, j.kind, j.lane, j.priority, j.payload, j.run_at, 0, \
         j.max_attempts, 'queued', 0, j.created_at, j.updated_at \
         FROM jobs j, generate_series(1, {}) g",
        queued - 1
    );
    let statements = [
        "ALTER TABLE jobs SET (autovacuum_enabled = false)".to_string(),
        copies,
        "UPDATE jobs SET status = 'succeeded'".to_string(),
        "ANALYZE jobs".to_string(),
        "UPDATE jobs SET status = 'queued'".to_string(),
        "SET plan_cache_mode = force_generic_plan".to_string(),
    ];
    execute_all(&mut conn, statements).await;
    conn
}

/// A connection whose search path is the test's schema.
async fn connect_in_schema(db: &TestDb) -> PgConnection {
    let schema = db
        .config
        .schema
        .as_deref()
        .expect("a PostgreSQL test schema");
    let mut conn = PgConnection::connect(&db.config.url).await.unwrap();
    execute_all(&mut conn, [format!("SET search_path = \"{schema}\"")]).await;
    conn
}

/// Runs `statements` in order on `conn`.
async fn execute_all(conn: &mut PgConnection, statements: impl IntoIterator<Item = String>) {
    for statement in statements {
        sqlx::raw_sql(AssertSqlSafe(statement))
            .execute(&mut *conn)
            .await
            .unwrap();
    }
}

/// A schema whose statistics were taken on a busy queue: `jobs` runs and their jobs, a fifth
/// of the jobs running; and a connection on it. (Small tables, where a scan of the whole
/// table is honestly the cheapest plan, would tell nothing.)
async fn busy_queue_analyzed(db: &TestDb, jobs: usize) -> PgConnection {
    let store = db.store().await;
    for i in 0..jobs {
        store
            .enqueue(&NewRun::new("agent", format!("p{i}")))
            .await
            .unwrap();
    }
    let lease = std::time::Duration::from_secs(600);
    let running = store.claim("w", None, jobs / 5, lease).await.unwrap();
    assert_eq!(running.len(), jobs / 5);
    store.close().await;
    let mut conn = connect_in_schema(db).await;
    let statements = [
        "ANALYZE jobs".to_string(),
        "ANALYZE runs".to_string(),
        "SET plan_cache_mode = force_generic_plan".to_string(),
    ];
    execute_all(&mut conn, statements).await;
    conn
}

/// The plan of `sql` prepared with parameter `types` and run with `args`: the generic one
/// unless the connection's `plan_cache_mode` forces custom plans.
async fn generic_plan(
    conn: &mut PgConnection,
    name: &str,
    sql: &str,
    types: &str,
    args: &str,
) -> String {
    let (types, args) = if types.is_empty() {
        (String::new(), String::new())
    } else {
        (format!("({types})"), format!("({args})"))
    };
    let prepare = format!("PREPARE {name}{types} AS {sql}");
    sqlx::query(AssertSqlSafe(prepare))
        .execute(&mut *conn)
        .await
        .unwrap();
    explain(conn, &format!("EXPLAIN EXECUTE {name}{args}")).await
}

/// The lines `explain` (an `EXPLAIN …` statement) prints, joined.
async fn explain(conn: &mut PgConnection, explain: &str) -> String {
    let lines: Vec<String> = sqlx::query_scalar(AssertSqlSafe(explain.to_string()))
        .fetch_all(&mut *conn)
        .await
        .unwrap();
    lines.join("\n")
}

/// The claim reads `index` one priority at a time (the skip scan over the queued jobs'
/// priorities), each priority's due jobs as a range of the index bounded by `run_at` (a
/// parameter, or its value in a custom plan), so jobs that are not due yet are never read;
/// and sorts nothing.
fn assert_reads_due_jobs_by_priority(plan: &str, index: &str) {
    let scan = format!("Index Scan using {index} on jobs q");
    let lines: Vec<&str> = plan.lines().collect();
    let at = lines.iter().position(|l| l.contains(&scan));
    let bounds = at.and_then(|at| lines.get(at + 1)).copied().unwrap_or("");
    assert!(
        bounds.contains("Index Cond:")
            && bounds.contains("(priority = p")
            && bounds.contains("(run_at <= "),
        "the claim should read {index} within a priority, up to the jobs due now:\n{plan}"
    );
    assert!(
        plan.contains("Recursive Union"),
        "the claim should step through the priorities:\n{plan}"
    );
    assert!(
        !plan.contains("Sort"),
        "the claim should never sort the queue:\n{plan}"
    );
    assert!(
        !plan.contains("jobs_next_due"),
        "jobs_next_due is for timing the next claim, never for a claim:\n{plan}"
    );
}

/// Runs `sql` under `EXPLAIN (ANALYZE, BUFFERS)`: the buffers it touched (found in the cache
/// or read) and the rows its top node returned.
async fn run_and_count_buffers(conn: &mut PgConnection, sql: &str) -> (i64, i64) {
    let explain = format!("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}");
    let plan: serde_json::Value = sqlx::query_scalar(AssertSqlSafe(explain))
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    let top = &plan[0]["Plan"];
    let touched =
        top["Shared Hit Blocks"].as_i64().unwrap() + top["Shared Read Blocks"].as_i64().unwrap();
    (touched, top["Actual Rows"].as_i64().unwrap())
}

/// A new schema whose tables autovacuum leaves alone (so no `ANALYZE` or vacuum changes their
/// statistics or the plans kept on them behind the test's back), and a connection on it that
/// ran `setup`.
async fn new_schema_unvacuumed(db: &TestDb, setup: &[&str]) -> PgConnection {
    db.store().await.close().await;
    let mut conn = connect_in_schema(db).await;
    let statements = [
        "ALTER TABLE jobs SET (autovacuum_enabled = false)",
        "ALTER TABLE runs SET (autovacuum_enabled = false)",
    ];
    let all = statements.iter().chain(setup).map(|s| s.to_string());
    execute_all(&mut conn, all).await;
    conn
}

/// Statements that add runs `from + 1 ..= to`, each with a finished start job.
fn runs_with_finished_jobs(from: usize, to: usize) -> Vec<String> {
    vec![
        format!(
            "INSERT INTO runs (id, agent, input, status, trigger_kind, created_at, updated_at) \
             SELECT 'run-' || g, 'agent', 'p', 'succeeded', 'api', g, g \
             FROM generate_series({}, {to}) g",
            from + 1
        ),
        format!(
            "INSERT INTO jobs (run_id, kind, lane, priority, payload, run_at, attempts, \
             max_attempts, status, lease_token, created_at, updated_at) \
             SELECT 'run-' || g, 'start', 'default', 0, '{{}}', g, 1, 3, 'succeeded', 1, g, g \
             FROM generate_series({}, {to}) g",
            from + 1
        ),
    ]
}

const OLDEST_DUE: &str = nightshift_store::sql::postgres::LISTING_OLDEST_DUE;

/// The plan modes the queue overview's statements are read under: the reader pool keeps
/// PostgreSQL's default (`auto`), which uses custom plans first and may settle on the
/// generic one; both must read an index. (The page statements are sent unprepared, so they
/// always get a custom plan: see `store/src/listing/binds.rs`.)
const PLAN_MODES: [&str; 2] = [
    "SET plan_cache_mode = force_custom_plan",
    "SET plan_cache_mode = force_generic_plan",
];
