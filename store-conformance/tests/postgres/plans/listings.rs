//! The listings' plans on a long analyzed history: each shape of `Store::runs_page` walks an
//! index of migration 13 newest first, and the statements of `Store::queue_overview`, under
//! custom and generic plans, read the live jobs' partial indexes (a second overview after a
//! burst skips the finished jobs' entries).

use nightshift_store::{NewRun, POSTGRES_OVERVIEW_PLANNER_SETTINGS};
use nightshift_store_conformance::{Backend, TestDb};
use sqlx::{Connection, PgConnection};

use super::{
    OLDEST_DUE, PLAN_MODES, connect_in_schema, execute_all, generic_plan, run_and_count_buffers,
};

// ---- Listings: `Store::runs_page` and `Store::queue_overview` (store/sql/postgres/listing/).

const PAGE: &str = nightshift_store::sql::postgres::LISTING_PAGE;
const PAGE_STATUS: &str = nightshift_store::sql::postgres::LISTING_PAGE_STATUS;
const PAGE_AGENT: &str = nightshift_store::sql::postgres::LISTING_PAGE_AGENT;
const PAGE_TRIGGER: &str = nightshift_store::sql::postgres::LISTING_PAGE_TRIGGER;
const PAGE_KEY: &str = nightshift_store::sql::postgres::LISTING_PAGE_KEY;
const EXACT: &str = nightshift_store::sql::postgres::LISTING_EXACT;
const LIVE_JOBS: &str = nightshift_store::sql::postgres::LISTING_LIVE_JOBS;

const LEASES: &str = nightshift_store::sql::postgres::LISTING_LEASES;

/// `$1` status, `$2` agent, `$3` trigger, `$4` key, `$5`/`$6` since/until, `$7` text,
/// `$8`/`$9` the cursor, `$10` the limit (see `listing/page.sql`).
const PAGE_TYPES: &str = "text, text, text, text, bigint, bigint, text, bigint, text, bigint";
const EXACT_TYPES: &str = "text, text, text, text, text, bigint, bigint, bigint, text";
/// No bounds: the first page's cursor and an open time range.
const OPEN: &str = "-9223372036854775808, 9223372036854775807";
const FIRST_PAGE: &str = "9223372036854775807, ''";

/// A schema holding a long history, analyzed: `runs` runs over five agents, four triggers
/// and 200 concurrency keys (half of the runs have one), a tenth failed, each with its start
/// job (finished but for a few queued and running ones, leased by a registered worker); and
/// a connection on it.
async fn long_history_analyzed(db: &TestDb, runs: usize) -> PgConnection {
    db.store().await.close().await;
    let mut conn = connect_in_schema(db).await;
    let statements = [
        format!(
            "INSERT INTO runs (id, agent, status, trigger_kind, input, idempotency_key, \
             concurrency_key, turns, error, created_at, updated_at, started_at, finished_at) \
             SELECT 'run-' || lpad(g::text, 7, '0'), \
             (ARRAY['reviewer','triage','deployer','summariser','oncall'])[1 + g % 5], \
             CASE WHEN g > {runs} - 8 THEN 'running' WHEN g > {runs} - 40 THEN 'queued' \
                  WHEN g % 10 = 0 THEN 'failed' WHEN g % 50 = 1 THEN 'cancelled' \
                  ELSE 'succeeded' END, \
             (ARRAY['webhook','schedule','api','cli'])[1 + g % 4], \
             'Review pull request #' || g || ' in acme/web', \
             CASE WHEN g % 3 = 0 THEN 'idem-' || g END, \
             CASE WHEN g % 4 < 2 THEN 'key-' || (g % 200) END, \
             3, CASE WHEN g % 10 = 0 THEN 'provider: 529 overloaded' END, \
             1700000000000 + g * 1000, 1700000000000 + g * 1000 + 900, \
             1700000000000 + g * 1000 + 100, 1700000000000 + g * 1000 + 900 \
             FROM generate_series(1, {runs}) g"
        ),
        "INSERT INTO jobs (run_id, kind, lane, priority, payload, run_at, attempts, \
         max_attempts, status, lease_owner, lease_token, lease_expires_at, concurrency_key, \
         created_at, updated_at, finished_at) \
         SELECT r.id, 'start', 'default', 0, r.input, r.created_at, \
         CASE WHEN r.status = 'queued' THEN 0 ELSE 1 END, 3, \
         CASE r.status WHEN 'failed' THEN 'dead' WHEN 'running' THEN 'running' \
              WHEN 'queued' THEN 'queued' WHEN 'cancelled' THEN 'cancelled' \
              ELSE 'succeeded' END, \
         CASE WHEN r.status = 'running' THEN 'w' END, \
         CASE WHEN r.status = 'queued' THEN 0 ELSE 1 END, \
         CASE WHEN r.status = 'running' THEN r.created_at + 30000 END, r.concurrency_key, \
         r.created_at, r.updated_at, r.finished_at FROM runs r"
            .to_string(),
        "INSERT INTO workers (id, host, pid, started_at, last_heartbeat_at) \
         VALUES ('w', 'host', 1, 0, 0)"
            .to_string(),
        "ANALYZE runs".to_string(),
        "ANALYZE jobs".to_string(),
        "ANALYZE workers".to_string(),
    ];
    execute_all(&mut conn, statements).await;
    conn
}

/// Asserts `plan` reads `runs` newest first along `index` (or along `runs_created` when the
/// planner finds that the filter matches so many runs that the page fills sooner that way),
/// stopping after the page: no sort and no scan of a whole table.
fn assert_pages_along(name: &str, plan: &str, index: &str) {
    let along = |index: &str| plan.contains(&format!("Index Scan Backward using {index} on runs"));
    assert!(
        along(index) || along("runs_created"),
        "{name} should walk {index} newest first:\n{plan}"
    );
    assert!(!plan.contains("Sort"), "{name} sorts its rows:\n{plan}");
    assert!(!plan.contains("Seq Scan"), "{name} scans a table:\n{plan}");
}

/// Every shape of a runs page (no filter, first and deep page; status, agent, trigger or
/// concurrency key leading, common and rare values; a time range; a text search) walks an
/// index of migration 13 newest first and stops after the page, and the exact search
/// reaches its runs by key, as planned with their values (the store sends them unprepared)
/// on a long analyzed history.
#[tokio::test]
async fn runs_pages_walk_their_index() {
    let Some(db) = TestDb::new(Backend::Postgres, "listing_plans").await else {
        return;
    };
    let runs = 20_000;
    let mut conn = long_history_analyzed(&db, runs).await;
    execute_all(
        &mut conn,
        ["SET plan_cache_mode = force_custom_plan".to_string()],
    )
    .await;
    let deep = "1700000010000000, 'run-0010000'";
    let day = "1700000005000000, 1700000006000000";
    let open = |f: &str| format!("{f}, {OPEN}, NULL, {FIRST_PAGE}, 51");
    let pages = [
        ("all", PAGE, "runs_created", open("NULL, NULL, NULL, NULL")),
        (
            "deep",
            PAGE,
            "runs_created",
            format!("NULL, NULL, NULL, NULL, {OPEN}, NULL, {deep}, 51"),
        ),
        (
            "range",
            PAGE,
            "runs_created",
            format!("NULL, NULL, NULL, NULL, {day}, NULL, {FIRST_PAGE}, 51"),
        ),
        (
            "text",
            PAGE,
            "runs_created",
            format!("NULL, NULL, NULL, NULL, {OPEN}, '#12', {FIRST_PAGE}, 51"),
        ),
        (
            "status",
            PAGE_STATUS,
            "runs_status",
            open("'failed', NULL, NULL, NULL"),
        ),
        (
            "rare status",
            PAGE_STATUS,
            "runs_status",
            open("'cancelled', NULL, NULL, NULL"),
        ),
        (
            "absent status",
            PAGE_STATUS,
            "runs_status",
            open("'max_rounds', NULL, NULL, NULL"),
        ),
        (
            "agent",
            PAGE_AGENT,
            "runs_agent_created",
            open("NULL, 'deployer', NULL, NULL"),
        ),
        (
            "absent agent",
            PAGE_AGENT,
            "runs_agent_created",
            open("NULL, 'nobody', NULL, NULL"),
        ),
        (
            "trigger",
            PAGE_TRIGGER,
            "runs_trigger_created",
            open("NULL, NULL, 'schedule', NULL"),
        ),
        (
            "absent trigger",
            PAGE_TRIGGER,
            "runs_trigger_created",
            open("NULL, NULL, 'approval', NULL"),
        ),
        (
            "key",
            PAGE_KEY,
            "runs_key_created",
            open("NULL, NULL, NULL, 'key-7'"),
        ),
        (
            "status in a range",
            PAGE_STATUS,
            "runs_status",
            format!("'failed', NULL, NULL, NULL, {day}, NULL, {FIRST_PAGE}, 51"),
        ),
    ];
    for (k, (name, sql, index, args)) in pages.iter().enumerate() {
        let plan = generic_plan(&mut conn, &format!("page_{k}"), sql, PAGE_TYPES, args).await;
        assert_pages_along(name, &plan, index);
    }
    let args = format!("'idem-300', NULL, NULL, NULL, NULL, {OPEN}, {FIRST_PAGE}");
    let exact = generic_plan(&mut conn, "exact", EXACT, EXACT_TYPES, &args).await;
    assert!(!exact.contains("Seq Scan"), "exact scans a table:\n{exact}");
    for index in ["runs_pkey", "runs_idempotency_key_key"] {
        assert!(exact.contains(index), "exact should use {index}:\n{exact}");
    }
    conn.close().await.unwrap();
    db.cleanup().await;
}

/// The queue overview's statements read the live jobs from their partial indexes
/// (`jobs_live_state_lane`, `jobs_next_due`, `jobs_lease_expiry`) and a leased job's run by
/// its key, never scanning `jobs` or `runs` (which hold the whole history), under custom
/// and generic plans.
#[tokio::test]
async fn the_queue_overview_reads_live_jobs_from_their_indexes() {
    let Some(db) = TestDb::new(Backend::Postgres, "overview_plans").await else {
        return;
    };
    let mut conn = long_history_analyzed(&db, 20_000).await;
    // As the store reads the overview: in a transaction planned without bitmap scans.
    execute_all(&mut conn, [POSTGRES_OVERVIEW_PLANNER_SETTINGS.to_string()]).await;
    for (round, mode) in PLAN_MODES.into_iter().enumerate() {
        execute_all(&mut conn, [mode.to_string()]).await;
        let plans = [
            ("live_jobs", LIVE_JOBS, "", "", "jobs_live_state_lane"),
            (
                "oldest_due",
                OLDEST_DUE,
                "bigint",
                "9999999999999",
                "jobs_next_due",
            ),
            ("leases", LEASES, "", "", "jobs_lease_expiry"),
        ];
        for (name, sql, types, args, index) in plans {
            let plan = generic_plan(&mut conn, &format!("{name}_{round}"), sql, types, args).await;
            assert!(
                plan.contains(index),
                "{name} ({mode}) should read {index}:\n{plan}"
            );
            for table in ["Seq Scan on jobs", "Seq Scan on runs", "Bitmap"] {
                assert!(!plan.contains(table), "{name} ({mode}): {table}:\n{plan}");
            }
        }
    }
    conn.close().await.unwrap();
    db.cleanup().await;
}

/// After a burst, the live-job index holds an entry for each state every finished job passed
/// through until vacuum removes them. Read as the store reads the overview (no bitmap scans),
/// a count marks them dead and later ones skip them; with a bitmap scan (what the planner
/// prefers for a count it expects to be large), every count reads them all again.
/// Buffers touched under `EXPLAIN ANALYZE`, autovacuum off for the table.
#[tokio::test]
async fn a_second_overview_after_a_burst_skips_the_finished_jobs_entries() {
    let Some(db) = TestDb::new(Backend::Postgres, "overview_burst").await else {
        return;
    };
    let store = db.store().await;
    let mut conn = connect_in_schema(&db).await;
    execute_all(
        &mut conn,
        ["ALTER TABLE jobs SET (autovacuum_enabled = false)".into()],
    )
    .await;
    let burst: Vec<NewRun> = (0..3_000)
        .map(|i| NewRun::new("agent", format!("p{i}")))
        .collect();
    for one in store.enqueue_many(&burst).await.unwrap() {
        one.unwrap();
    }
    let lease = std::time::Duration::from_secs(600);
    let mut finished = 0;
    loop {
        let got = store.claim("w", None, 500, lease).await.unwrap();
        if got.is_empty() {
            break;
        }
        finished += got.len();
        for job in got {
            job.ack(None).await.unwrap();
        }
    }
    assert_eq!(finished, 3_000);
    store.enqueue(&NewRun::new("agent", "live")).await.unwrap();
    store.close().await;
    execute_all(&mut conn, ["ANALYZE jobs".into()]).await;
    // With bitmap scans only: every count reads every dead entry again.
    let bitmap_only = "SET enable_indexscan = off; SET enable_indexonlyscan = off";
    execute_all(&mut conn, [bitmap_only.to_string()]).await;
    let mut bitmap = Vec::new();
    for _ in 0..2 {
        bitmap.push(run_and_count_buffers(&mut conn, LIVE_JOBS).await.0);
    }
    assert!(
        bitmap[1] * 2 > bitmap[0] && bitmap[1] > 50,
        "a bitmap scan reads the dead entries every time: {bitmap:?}"
    );
    // As the store reads: the first count reads them too and marks them; later ones skip
    // them. (An entry can be marked only once no snapshot can see its job's old version: other
    // tests share the database, and one of theirs may still hold such a snapshot for a moment,
    // so the counts are repeated until one skips them.)
    let store_reads = format!(
        "RESET enable_indexscan; RESET enable_indexonlyscan; {POSTGRES_OVERVIEW_PLANNER_SETTINGS}"
    );
    execute_all(&mut conn, [store_reads]).await;
    let first = run_and_count_buffers(&mut conn, LIVE_JOBS).await.0;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut later = Vec::new();
    loop {
        let read = run_and_count_buffers(&mut conn, LIVE_JOBS).await.0;
        later.push(read);
        if read * 10 < bitmap[1] {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the store's later counts should skip the dead entries: first {first}, then \
             {later:?}; bitmap scans {bitmap:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    conn.close().await.unwrap();
    db.cleanup().await;
}
