//! The lease holders' writes and the settle's ends: each reaches its rows by key whatever
//! the statistics (also on tables never analyzed), claiming transactions plan for the tables'
//! present size, a batch of ends reads each table once, and the warm settle's plan made on
//! empty tables scans no table.

use nightshift_store::{
    NewRun, POSTGRES_CLAIM_PLANNER_SETTINGS, POSTGRES_CLAIMING_PLAN_CACHE_MODE,
    POSTGRES_WARM_SETTINGS,
};
use nightshift_store_conformance::{Backend, TestDb};
use sqlx::Connection;

use super::{
    CLAIM, CLAIM_LANE, CLAIM_TYPES, FINISH_JOBS, FINISH_TYPES, MARK_RUNS, SETTINGS, SETTLE,
    SETTLE_ARGS, SETTLE_TYPES, assert_reads_due_jobs_by_priority, busy_queue_analyzed,
    claiming_session, connect_in_schema, execute_all, explain, generic_plan, new_schema_unvacuumed,
    runs_with_finished_jobs,
};

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
