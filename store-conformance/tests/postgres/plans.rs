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
//! is a unit test in `postgres.rs`).
//!
//! The listings are read on a long analyzed history: each shape of `Store::runs_page`, as
//! planned with its values (the store sends them unprepared, since a generic plan fetched
//! and sorted every run of a filter), walks an index of migration 13 newest first; the
//! statements of `Store::queue_overview`, under custom and generic plans, read the live
//! jobs' partial indexes. None scans `runs` or `jobs` whole or sorts a filter's every row.

use nightshift_store::{
    NewRun, POSTGRES_CLAIM_PLANNER_SETTINGS, POSTGRES_CLAIMING_PLAN_CACHE_MODE,
    POSTGRES_OVERVIEW_PLANNER_SETTINGS, POSTGRES_WARM_SETTINGS,
};
use nightshift_store_conformance::{Backend, TestDb};
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

/// The one-statement settle and the transactional claims, from every lane (`jobs_claim`) and
/// from one (`jobs_claim_lane`), read their index by priority under statistics that
/// expect an empty queue, with the default planner settings and with the store's settings
/// for claiming transactions (their generic plans, and the custom plans they make) and for
/// the warm connection.
#[tokio::test]
async fn claims_read_due_jobs_by_priority_whatever_the_statistics() {
    let Some(db) = TestDb::new(Backend::Postgres, "claim_plans").await else {
        return;
    };
    let mut conn = queue_after_a_quiet_analyze(&db, 5_000).await;
    // A claiming transaction plans each statement anew: its custom plans are read too.
    let rounds = SETTINGS
        .into_iter()
        .map(str::to_string)
        .chain([claiming_session()]);
    for (round, settings) in rounds.enumerate() {
        execute_all(&mut conn, [settings]).await;
        let name = |statement: &str| format!("{statement}_{round}");
        if round < SETTINGS.len() {
            // (settle.sql runs on the warm connection only, never in a claiming transaction.)
            let settle_name = name("settle");
            let settle =
                generic_plan(&mut conn, &settle_name, SETTLE, SETTLE_TYPES, SETTLE_ARGS).await;
            assert_reads_due_jobs_by_priority(&settle, "jobs_claim");
        }
        let claim_args = "9999999999999, 'w', 30000, NULL, 4";
        let claim = generic_plan(&mut conn, &name("claim"), CLAIM, CLAIM_TYPES, claim_args).await;
        assert_reads_due_jobs_by_priority(&claim, "jobs_claim");
        let lane_args = "9999999999999, 'w', 30000, 'default', 4";
        let lane_name = name("claim_lane");
        let one_lane =
            generic_plan(&mut conn, &lane_name, CLAIM_LANE, CLAIM_TYPES, lane_args).await;
        assert_reads_due_jobs_by_priority(&one_lane, "jobs_claim_lane");
    }
    conn.close().await.unwrap();
    db.cleanup().await;
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

/// What a claim reads does not grow with the jobs that sleep until later (armed wakeups,
/// retries, delayed runs) when it finds fewer due jobs than it may take, the idle pool's
/// every claim: the buffers the settle and the claims touch with 1,000 sleeping jobs and with
/// 40,000 differ by the deeper indexes' extra levels (the settle read 74 and 96 when this was
/// written; when it walked the whole claim index in claim order, passing every sleeping job's
/// entry, 66 and 376). Each claim runs under `EXPLAIN ANALYZE` in a transaction rolled back,
/// so the due jobs stay due.
#[tokio::test]
async fn what_a_claim_reads_does_not_grow_with_sleeping_jobs() {
    let Some(db) = TestDb::new(Backend::Postgres, "sleeping_plans").await else {
        return;
    };
    let store = db.store().await;
    let now = store.now();
    for (priority, lane) in [(0, "default"), (5, "default"), (0, "batch")] {
        let new = NewRun::new("agent", "due").priority(priority).lane(lane);
        store.enqueue(&new).await.unwrap();
    }
    store.close().await;
    let mut conn = connect_in_schema(&db).await;
    let sleepers = |from: i64, to: i64| {
        // Sleeping copies of a due job over three priorities, one of which no due job has.
        format!(
            "INSERT INTO jobs (run_id, kind, lane, priority, payload, run_at, attempts, \
             max_attempts, status, lease_token, created_at, updated_at) \
             SELECT j.run_id, j.kind, j.lane, (ARRAY[0, 5, 9])[1 + g % 3], j.payload, \
             {now} + 3600000 + g, 0, j.max_attempts, 'queued', 0, j.created_at, j.updated_at \
             FROM (SELECT * FROM jobs LIMIT 1) j, generate_series({from}, {to}) g"
        )
    };
    let statements = [
        sleepers(1, 1_000),
        "VACUUM ANALYZE jobs".to_string(),
        POSTGRES_WARM_SETTINGS.to_string(),
    ];
    execute_all(&mut conn, statements).await;
    let claims = [
        (
            SETTLE,
            SETTLE_TYPES,
            SETTLE_ARGS.replace("9999999999999", &(now + 1000).to_string()),
        ),
        (
            CLAIM,
            CLAIM_TYPES,
            format!("{}, 'w', 30000, NULL, 16", now + 1000),
        ),
        (
            CLAIM_LANE,
            CLAIM_TYPES,
            format!("{}, 'w', 30000, 'default', 16", now + 1000),
        ),
    ];
    let statement_names = ["settle", "claim", "claim_lane"];
    let mut read = Vec::new();
    for (round, sleeping) in [1_000, 40_000].into_iter().enumerate() {
        if sleeping > 1_000 {
            let more = [sleepers(1_001, sleeping), "VACUUM ANALYZE jobs".to_string()];
            execute_all(&mut conn, more).await;
        }
        let mut buffers = Vec::new();
        for (i, (sql, types, args)) in claims.iter().enumerate() {
            let name = format!("claim_{round}_{i}");
            let prepare = format!("PREPARE {name}({types}) AS {sql}");
            execute_all(&mut conn, ["BEGIN".to_string(), prepare]).await;
            let (touched, claimed) =
                run_and_count_buffers(&mut conn, &format!("EXECUTE {name}({args})")).await;
            execute_all(&mut conn, ["ROLLBACK".to_string()]).await;
            // Every due job is claimed (the lane claim takes the default lane's two).
            assert_eq!(
                claimed,
                if i == 2 { 2 } else { 3 },
                "{statement_names:?}[{i}]"
            );
            buffers.push(touched);
        }
        read.push(buffers);
    }
    for (i, statement) in statement_names.into_iter().enumerate() {
        let (few, many) = (read[0][i], read[1][i]);
        assert!(
            many <= few + 50,
            "{statement} read {few} buffers with 1,000 sleeping jobs, {many} with 40,000"
        );
    }
    conn.close().await.unwrap();
    db.cleanup().await;
}

/// Timing the next claim (`next_due.sql`, every idle pool's wait) and the overview's oldest
/// due job (`listing/oldest_due.sql`) read the first entry of jobs_next_due, whatever the
/// statistics say: here they were taken while one job was queued and 20,000 sleeping jobs
/// came after, and under custom and generic plans each reads a handful of buffers. Written as
/// `MIN(run_at)`, both were planned as an aggregate over every entry of the index (and a heap
/// fetch each, as nothing was vacuumed): 1,079 buffers and 7-10 ms per idle wait with 20,000
/// runs asleep, which put a PostgreSQL pickup at 4-10 ms instead of under 2.
#[tokio::test]
async fn next_due_reads_one_entry_of_jobs_next_due() {
    let Some(db) = TestDb::new(Backend::Postgres, "next_due_plan").await else {
        return;
    };
    let store = db.store().await;
    let now = store.now();
    store.enqueue(&NewRun::new("agent", "due")).await.unwrap();
    store.close().await;
    let mut conn = connect_in_schema(&db).await;
    let statements = [
        "ALTER TABLE jobs SET (autovacuum_enabled = false)".to_string(),
        "ANALYZE jobs".to_string(),
        format!(
            "INSERT INTO jobs (run_id, kind, lane, priority, payload, run_at, attempts, \
             max_attempts, status, lease_token, created_at, updated_at) \
             SELECT j.run_id, j.kind, j.lane, j.priority, j.payload, {now} + 3600000 + g, 0, \
             j.max_attempts, 'queued', 0, j.created_at, j.updated_at \
             FROM (SELECT * FROM jobs LIMIT 1) j, generate_series(1, 20000) g"
        ),
    ];
    execute_all(&mut conn, statements).await;
    let statements = [
        ("next_due", NEXT_DUE, "", ""),
        // Every queued job counts as due: the overview of a backlog.
        ("oldest_due", OLDEST_DUE, "bigint", "9223372036854775807"),
    ];
    for (m, mode) in PLAN_MODES.into_iter().enumerate() {
        execute_all(&mut conn, [mode.to_string()]).await;
        for (name, sql, types, args) in statements {
            let prepared = format!("{name}_{m}");
            // Prepares it and explains it under this mode's plan.
            let plan = generic_plan(&mut conn, &prepared, sql, types, args).await;
            let execute = if args.is_empty() {
                format!("EXECUTE {prepared}")
            } else {
                format!("EXECUTE {prepared}({args})")
            };
            assert!(
                plan.contains("jobs_next_due"),
                "{name} under {mode}:\n{plan}"
            );
            let (touched, _) = run_and_count_buffers(&mut conn, &execute).await;
            assert!(
                touched <= 20,
                "{name} under {mode} read {touched} buffers with 20,000 jobs asleep:\n{plan}"
            );
        }
    }
    conn.close().await.unwrap();
    db.cleanup().await;
}

/// Every job and run a settle, an end or a claim writes is reached through its primary key,
/// never by a scan of the whole table (which a join on the id got when the statistics made it
/// look cheap) nor of every running job (`jobs_lease_expiry`, for the ends): so the generic
/// plan, which the warm connection always uses, costs the same whatever the statistics.
#[tokio::test]
async fn writes_reach_their_rows_by_key_whatever_the_statistics() {
    let Some(db) = TestDb::new(Backend::Postgres, "key_plans").await else {
        return;
    };
    let mut conn = busy_queue_analyzed(&db, 2_000).await;
    for (round, settings) in SETTINGS.into_iter().enumerate() {
        execute_all(&mut conn, [settings.to_string()]).await;
        for (name, sql, types, args) in write_statements() {
            let plan = generic_plan(&mut conn, &format!("{name}_{round}"), sql, types, args).await;
            assert!(!plan.contains("Seq Scan"), "{name} scans a table:\n{plan}");
            assert_writes_by_key(name, &plan);
        }
    }
    conn.close().await.unwrap();
    db.cleanup().await;
}

/// The statements that write jobs and runs (settle, end, claim, mark running), each with its
/// parameter types and arguments.
fn write_statements() -> [(&'static str, &'static str, &'static str, &'static str); 5] {
    let finish_args = "'{}', '{}', '{}', '{}', '{}', '{}', '{}', 1";
    [
        ("settle", SETTLE, SETTLE_TYPES, SETTLE_ARGS),
        ("finish_jobs", FINISH_JOBS, FINISH_TYPES, finish_args),
        ("claim", CLAIM, CLAIM_TYPES, "1, 'w', 30000, NULL, 4"),
        (
            "claim_lane",
            CLAIM_LANE,
            CLAIM_TYPES,
            "1, 'w', 30000, 'default', 4",
        ),
        ("mark_runs", MARK_RUNS, "bigint, text[]", "1, '{}'"),
    ]
}

/// The indexes `plan` reads the rows its statement writes through (`jobs j…` and `runs r…`,
/// the aliases the write statements give them), one per scan: the index of an index scan,
/// those of a bitmap heap scan's bitmap index scans, `Seq Scan` for a table scan.
fn write_scans(plan: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = plan.lines().collect();
    let indent = |line: &str| line.len() - line.trim_start().len();
    let mut scans = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        let Some(scan) = line.find(" Scan") else {
            continue;
        };
        let target = line[scan..].split(" on ").nth(1).unwrap_or("");
        let mut words = target.split_whitespace();
        let (table, alias) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
        let written = match table {
            "jobs" => alias == "j" || alias.starts_with("j_"),
            "runs" => alias == "r" || alias.starts_with("r_"),
            _ => false,
        };
        if !written {
            continue;
        }
        let what = format!("{table} {alias}");
        if line.contains("Seq Scan") {
            scans.push((what, "Seq Scan".to_string()));
        } else if line.contains("Bitmap Heap Scan") {
            let below = lines[at + 1..]
                .iter()
                .take_while(|l| indent(l) > indent(line))
                .filter_map(|l| l.split("Bitmap Index Scan on ").nth(1));
            for index in below {
                let index = index.split_whitespace().next().unwrap_or("");
                scans.push((what.clone(), index.to_string()));
            }
        } else if let Some(using) = line.split(" using ").nth(1) {
            let index = using.split_whitespace().next().unwrap_or("");
            scans.push((what, index.to_string()));
        } else {
            // A scan this reader does not know (a TID scan, say): never taken as by key.
            scans.push((what, format!("an unrecognised scan: {}", line.trim())));
        }
    }
    scans
}

/// Every row `plan` writes is reached through its table's primary key: never by a scan of
/// the whole table, nor of every running job (`jobs_lease_expiry`), nor of an index that
/// holds the id after other columns (the listing indexes of migration 13), which the planner
/// would walk whole to find one id.
fn assert_writes_by_key(name: &str, plan: &str) {
    let scans = write_scans(plan);
    assert!(
        !scans.is_empty(),
        "{name}: no scan of a written row in:\n{plan}"
    );
    for (what, index) in scans {
        let table = what.split(' ').next().unwrap_or("");
        assert_eq!(
            index,
            format!("{table}_pkey"),
            "{name} reaches {what} through {index}, not its primary key:\n{plan}"
        );
    }
}

/// Before any `ANALYZE` (a new deployment, a fresh schema: the planner then guesses the
/// tables' sizes from their files), empty or grown to a few hundred or thousand runs, the
/// write statements' generic plans on the warm connection's settings reach every row by
/// key. (With a join on the run's id as an index condition, a settle's plan on these tables
/// looked each ended run up by walking `runs_trigger_created` or `runs_created`.)
#[tokio::test]
async fn writes_on_tables_never_analyzed_reach_their_rows_by_key() {
    let Some(db) = TestDb::new(Backend::Postgres, "fresh_key_plans").await else {
        return;
    };
    let mut conn = new_schema_unvacuumed(&db, &[POSTGRES_WARM_SETTINGS]).await;
    let mut runs = 0;
    for (state, grown_to) in [0, 300, 3_000].into_iter().enumerate() {
        execute_all(&mut conn, runs_with_finished_jobs(runs, grown_to)).await;
        runs = grown_to;
        for (name, sql, types, args) in write_statements() {
            let plan = generic_plan(&mut conn, &format!("{name}_{state}"), sql, types, args).await;
            assert_writes_by_key(&format!("{name} with {runs} runs"), &plan);
        }
    }
    conn.close().await.unwrap();
    db.cleanup().await;
}

/// A claiming transaction on the shared pool plans each statement anew: its statements,
/// executed often while the tables were small (where every plan scans them whole, and
/// `plan_cache_mode = auto` would keep that generic plan), reach their rows by key once the
/// tables have grown, with no `ANALYZE` between.
#[tokio::test]
async fn claiming_transactions_plan_for_the_tables_present_size() {
    let Some(db) = TestDb::new(Backend::Postgres, "claiming_plans").await else {
        return;
    };
    let settings = [
        POSTGRES_CLAIM_PLANNER_SETTINGS,
        POSTGRES_CLAIMING_PLAN_CACHE_MODE,
    ];
    let mut conn = new_schema_unvacuumed(&db, &settings).await;
    execute_all(&mut conn, runs_with_finished_jobs(0, 10)).await;
    // The statements claiming transactions run, with values that name rows.
    let finish_args = "'{1,2,3}', '{1,1,1}', '{succeeded,succeeded,succeeded}', \
                       '{NULL,NULL,NULL}', '{succeeded,succeeded,succeeded}', \
                       '{NULL,NULL,NULL}', '{NULL,NULL,NULL}', 1";
    let statements = write_statements().map(|(name, sql, types, args)| match name {
        "finish_jobs" => (name, sql, types, finish_args),
        "mark_runs" => (name, sql, types, "1, '{run-1,run-2}'"),
        _ => (name, sql, types, args),
    });
    let statements = &statements[1..];
    assert_eq!(
        statements[0].0, "finish_jobs",
        "settle.sql runs on the warm connection only"
    );
    for &(name, sql, types, args) in statements {
        let prepare = format!("PREPARE {name}({types}) AS {sql}");
        let execute = format!("EXECUTE {name}({args})");
        let mut run = vec![prepare];
        run.extend(std::iter::repeat_n(execute, 8));
        execute_all(&mut conn, run).await;
    }
    execute_all(&mut conn, runs_with_finished_jobs(10, 3_000)).await;
    for &(name, _, _, args) in statements {
        let plan = explain(&mut conn, &format!("EXPLAIN EXECUTE {name}({args})")).await;
        assert_writes_by_key(&format!("{name} after growth"), &plan);
    }
    conn.close().await.unwrap();
    db.cleanup().await;
}

/// A batch of ends reads the ends' arrays, the jobs and the runs about once each, whatever its
/// size: on the warm connection (generic plans) and in a claiming transaction (custom plans).
/// A join of runs to the ended jobs as a filter made a nested loop that read the runs once per
/// ended job (256 ends: 0.75 s), and one that unnested the arrays once per job took 25 ms.
#[tokio::test]
async fn a_batch_of_ends_reads_each_table_once() {
    let Some(db) = TestDb::new(Backend::Postgres, "batch_plans").await else {
        return;
    };
    let store = db.store().await;
    let runs: Vec<NewRun> = (0..600)
        .map(|i| NewRun::new("agent", format!("p{i}")))
        .collect();
    store.enqueue_many(&runs).await.unwrap();
    let lease = std::time::Duration::from_secs(600);
    let leased = store.claim("w", None, 256, lease).await.unwrap();
    assert_eq!(leased.len(), 256);
    store.close().await;
    let list = |f: &dyn Fn(&nightshift_store::LeasedJob) -> String| {
        leased.iter().map(f).collect::<Vec<_>>().join(",")
    };
    let ids = list(&|l| l.job().id.to_string());
    let tokens = list(&|l| l.job().lease_token.to_string());
    let states = list(&|_| "succeeded".to_string());
    let nulls = list(&|_| "NULL".to_string());
    let ends = format!(
        "'{{{ids}}}', '{{{tokens}}}', '{{{states}}}', '{{{nulls}}}', '{{{states}}}', \
         '{{{nulls}}}', '{{{nulls}}}'"
    );
    let mut conn = connect_in_schema(&db).await;
    let sessions = [POSTGRES_WARM_SETTINGS.to_string(), claiming_session()];
    for (round, session) in sessions.into_iter().enumerate() {
        execute_all(&mut conn, [session]).await;
        let statements = [
            (
                "finish_jobs",
                FINISH_JOBS,
                FINISH_TYPES,
                format!("{ends}, 1"),
            ),
            (
                "settle",
                SETTLE,
                SETTLE_TYPES,
                format!("{ends}, 1, 'w', 30000, 0, 'c'"),
            ),
        ];
        for (name, sql, types, args) in statements {
            let name = format!("{name}_{round}");
            let prepare = format!("PREPARE {name}({types}) AS {sql}");
            execute_all(&mut conn, ["BEGIN".to_string(), prepare]).await;
            let analyze = format!("EXPLAIN (ANALYZE, COSTS OFF) EXECUTE {name}({args})");
            let plan = explain(&mut conn, &analyze).await;
            execute_all(&mut conn, ["ROLLBACK".to_string()]).await;
            let ended = plan
                .lines()
                .find(|l| l.contains("Update on jobs j"))
                .unwrap_or("");
            assert!(ended.contains("rows=256 loops=1"), "{name}:\n{plan}");
            // Rows read from jobs, runs or the arrays, over all of a scan's loops: a scan
            // repeated per ended job reads 256 × 256.
            let read = ["Function Scan on ", " on runs r ", " on jobs j "];
            for line in plan.lines().filter(|l| read.iter().any(|o| l.contains(o))) {
                let rows = actual(line, "rows=") * actual(line, "loops=");
                assert!(rows <= 512, "{name} reads {rows} rows in: {line}\n{plan}");
            }
        }
    }
    conn.close().await.unwrap();
    db.cleanup().await;
}

/// The number after `key` in an `EXPLAIN ANALYZE` line's actual figures (`rows=`, `loops=`).
fn actual(line: &str, key: &str) -> u64 {
    let after = line.rsplit("(actual ").next().unwrap_or("");
    let value = after.split(key).nth(1).unwrap_or("");
    value
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {line}"))
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

/// A settle planned while the tables are empty (a new deployment, or one analyzed while
/// idle) is planned the same: on the warm connection, whose generic plan is kept until the
/// tables are analyzed again, it walks `jobs_claim` and scans no table whole (which would be
/// cheapest for the empty tables and slowest for the burst that fills them). Which index it
/// reaches a run by its id through is a toss-up on tables analyzed empty (every index costs
/// the planner the same), so the warm connection remakes its plans as the tables grow
/// (`store/src/warm.rs`): once they have, the plan made again reaches every row by key.
#[tokio::test]
async fn the_warm_settle_plan_made_on_empty_tables_scans_no_table() {
    let Some(db) = TestDb::new(Backend::Postgres, "empty_plans").await else {
        return;
    };
    let setup = ["ANALYZE jobs", "ANALYZE runs", POSTGRES_WARM_SETTINGS];
    let mut conn = new_schema_unvacuumed(&db, &setup).await;
    let plan = generic_plan(&mut conn, "settle", SETTLE, SETTLE_TYPES, SETTLE_ARGS).await;
    assert!(!plan.contains("Seq Scan"), "{plan}");
    assert_reads_due_jobs_by_priority(&plan, "jobs_claim");
    let mut grow = runs_with_finished_jobs(0, 3_000);
    grow.push("DISCARD PLANS".to_string());
    execute_all(&mut conn, grow).await;
    let remade = explain(&mut conn, &format!("EXPLAIN EXECUTE settle({SETTLE_ARGS})")).await;
    assert_writes_by_key("settle remade with 3,000 runs", &remade);
    assert_reads_due_jobs_by_priority(&remade, "jobs_claim");
    conn.close().await.unwrap();
    db.cleanup().await;
}

// ---- Listings: `Store::runs_page` and `Store::queue_overview` (store/sql/postgres/listing/).

const PAGE: &str = nightshift_store::sql::postgres::LISTING_PAGE;
const PAGE_STATUS: &str = nightshift_store::sql::postgres::LISTING_PAGE_STATUS;
const PAGE_AGENT: &str = nightshift_store::sql::postgres::LISTING_PAGE_AGENT;
const PAGE_TRIGGER: &str = nightshift_store::sql::postgres::LISTING_PAGE_TRIGGER;
const PAGE_KEY: &str = nightshift_store::sql::postgres::LISTING_PAGE_KEY;
const EXACT: &str = nightshift_store::sql::postgres::LISTING_EXACT;
const LIVE_JOBS: &str = nightshift_store::sql::postgres::LISTING_LIVE_JOBS;
const OLDEST_DUE: &str = nightshift_store::sql::postgres::LISTING_OLDEST_DUE;
const LEASES: &str = nightshift_store::sql::postgres::LISTING_LEASES;

/// `$1` status, `$2` agent, `$3` trigger, `$4` key, `$5`/`$6` since/until, `$7` text,
/// `$8`/`$9` the cursor, `$10` the limit (see `listing/page.sql`).
const PAGE_TYPES: &str = "text, text, text, text, bigint, bigint, text, bigint, text, bigint";
const EXACT_TYPES: &str = "text, text, text, text, text, bigint, bigint, bigint, text";
/// No bounds: the first page's cursor and an open time range.
const OPEN: &str = "-9223372036854775808, 9223372036854775807";
const FIRST_PAGE: &str = "9223372036854775807, ''";

/// The plan modes the queue overview's statements are read under: the reader pool keeps
/// PostgreSQL's default (`auto`), which uses custom plans first and may settle on the
/// generic one; both must read an index. (The page statements are sent unprepared, so they
/// always get a custom plan: see `store/src/listing/binds.rs`.)
const PLAN_MODES: [&str; 2] = [
    "SET plan_cache_mode = force_custom_plan",
    "SET plan_cache_mode = force_generic_plan",
];

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
