//! The claim's plans: whatever the statistics say, a claim reads the due jobs of each
//! priority as a range of `jobs_claim` and stops at its limit; what it reads does not grow
//! with sleeping jobs; and `next_due` reads one entry of `jobs_next_due`.

use nightshift_store::{NewRun, POSTGRES_WARM_SETTINGS};
use nightshift_store_conformance::{Backend, TestDb};
use sqlx::Connection;

use super::{
    CLAIM, CLAIM_LANE, CLAIM_TYPES, NEXT_DUE, OLDEST_DUE, PLAN_MODES, SETTINGS, SETTLE,
    SETTLE_ARGS, SETTLE_TYPES, assert_reads_due_jobs_by_priority, claiming_session,
    connect_in_schema, execute_all, generic_plan, queue_after_a_quiet_analyze,
    run_and_count_buffers,
};

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
