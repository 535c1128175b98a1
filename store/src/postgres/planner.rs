//! How PostgreSQL plans the statements that must stay fast whatever the tables' statistics
//! say: claims read `jobs_claim` in order (no sort), the warm connection keeps generic
//! plans without whole-table scans, claiming transactions plan anew, and the queue overview
//! never uses a bitmap scan. Each setting is applied only where it is needed, and the tests
//! below check that nothing else is planned differently.

/// The planner setting of [`CLAIM_PLANNER_SETTINGS`], written once for its two uses.
macro_rules! claim_planner_setting {
    () => {
        "enable_sort = off"
    };
}

/// How claims are planned: reading an index in claim order, never sorting the queued jobs.
///
/// A claim takes the first few due jobs in claim order; `jobs_claim` holds them in that
/// order within each priority (`claim.sql` steps through the priorities), so the read stops
/// after the claim's limit. When the table's statistics expect only a handful of queued jobs
/// (analyzed while the queue was empty, or before a burst), the planner prefers a bitmap scan
/// of `jobs_claim_lane` or `jobs_next_due` and a sort, whose cost grows with the queue
/// (several times slower with thousands queued; the numbers are in `bench/MEASUREMENTS.md`).
/// PostgreSQL has no index hints; with sorting disabled, the ordered read is the one plan left
/// without a sort, whatever the statistics. Only connections and transactions that claim get
/// this setting: the warm connection of the one-statement settle (for its session) and the
/// claiming transactions (`SET LOCAL`).
pub const CLAIM_PLANNER_SETTINGS: &str = concat!("SET ", claim_planner_setting!());

/// The session of the warm connection, which runs `settle.sql` only: claims planned as
/// [`CLAIM_PLANNER_SETTINGS`] says, always the generic plan, and no scan of a whole table.
///
/// With `plan_cache_mode` left at `auto`, PostgreSQL compares the generic plan's estimate
/// with the custom plans' and, once the tables hold a few thousand rows, plans every
/// execution anew, and planning becomes a large share of every settle
/// (`bench/MEASUREMENTS.md`). `settle.sql` reaches every row it writes through its key and walks
/// `jobs_claim` for its claim, so that plan is right for any statistics. A generic plan is
/// kept until the tables are analyzed again, though, and one made while they were nearly
/// empty would scan them whole (the cheapest way to read one page) while a burst fills them;
/// with sequential scans disabled, every table access keeps its index path, which
/// `settle.sql` has for all of them. The suite's `plans` tests read the plan under empty,
/// quiet and busy statistics.
pub const WARM_SETTINGS: &str = concat!(
    "SET ",
    claim_planner_setting!(),
    "; SET enable_seqscan = off; SET plan_cache_mode = force_generic_plan"
);

/// The planner setting of [`OVERVIEW_PLANNER_SETTINGS`], written once for its two uses.
macro_rules! overview_planner_setting {
    () => {
        "enable_bitmapscan = off"
    };
}

/// How the queue overview's reads are planned: never a bitmap scan.
///
/// The overview counts live jobs from `jobs_live_state_lane` and lists leases from
/// `jobs_lease_expiry`, partial indexes that keep the entries of jobs that have since finished
/// until vacuum removes them: after a burst, tens of thousands. A bitmap scan, which the
/// planner prefers for a count, checks each such entry against the table on every call and
/// never marks it (6.7 ms a call with 60,000 of them, until vacuum); an index scan marks the
/// dead entries on its first pass (the same 6 ms once), and later calls skip them (0.05 ms).
/// The suite's `plans` tests read both.
pub const OVERVIEW_PLANNER_SETTINGS: &str = concat!("SET ", overview_planner_setting!());

/// The start of the queue overview's read-only transaction (see
/// [`OVERVIEW_PLANNER_SETTINGS`]).
pub(crate) const BEGIN_OVERVIEW: &str =
    concat!("BEGIN READ ONLY; SET LOCAL ", overview_planner_setting!());

/// The setting of [`CLAIMING_PLAN_CACHE_MODE`], written once for its two uses.
macro_rules! claiming_plan_cache_mode {
    () => {
        "plan_cache_mode = force_custom_plan"
    };
}

/// How a claiming transaction's statements are planned: each anew, from its values and the
/// tables' present size.
///
/// Claiming transactions run on the shared pool, where `plan_cache_mode` is `auto`: after
/// five executions PostgreSQL keeps a statement's generic plan when it looks no costlier than
/// the custom ones had, and while the tables are small (a new deployment) both are scans of
/// whole tables, so that plan is kept, a scan of `jobs` and `runs` per claim and per end,
/// until the tables are next analyzed or vacuumed, however large they have grown. These
/// transactions are the settle's path once a second (the rescue of expired leases), for
/// claims that name lanes and for keyed jobs: planning each statement costs less than one
/// such scan. (The warm connection keeps generic plans and remakes them as the tables grow,
/// `warm.rs`.)
pub const CLAIMING_PLAN_CACHE_MODE: &str = concat!("SET ", claiming_plan_cache_mode!());

/// The start of a claiming transaction (see [`CLAIM_PLANNER_SETTINGS`] and
/// [`CLAIMING_PLAN_CACHE_MODE`]).
pub(crate) const BEGIN_CLAIMING: &str = concat!(
    "BEGIN; SET LOCAL ",
    claim_planner_setting!(),
    "; SET LOCAL ",
    claiming_plan_cache_mode!()
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Backend;
    use crate::config::StoreConfig;
    use crate::postgres::PgBackend;

    /// What `SHOW <setting>` says on `conn`.
    async fn show<'c, E: sqlx::PgExecutor<'c>>(setting: &'static str, conn: E) -> String {
        let sql = format!("SHOW {setting}");
        sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .fetch_one(conn)
            .await
            .unwrap()
    }

    /// A claim for one lane (a pool's reserved slots) is claim_lane.sql, whose lane is an
    /// equality on jobs_claim_lane (plans.rs checks its plan); other claims are claim.sql.
    #[test]
    fn a_claim_for_one_lane_has_its_own_statement() {
        let one = ["interactive".to_string()];
        let (sql, lane) = PgBackend::claim_statement(Some(&one));
        assert_eq!(sql, crate::backend::sql!("postgres", "claim_lane"));
        assert_eq!(lane.as_deref(), Some("interactive"));
        let (sql, lanes) = PgBackend::claim_statement(None);
        assert_eq!(sql, crate::backend::sql!("postgres", "claim"));
        assert_eq!(lanes, None);
        let two = ["a".to_string(), "b".to_string()];
        let (sql, lanes) = PgBackend::claim_statement(Some(&two));
        assert_eq!(sql, crate::backend::sql!("postgres", "claim"));
        assert_eq!(lanes.as_deref(), Some(r#"["a","b"]"#));
    }

    /// Claims are planned with sorting disabled, on the warm connection and in claiming
    /// transactions, and nothing else is: the setting of a claiming transaction ends with it.
    /// Likewise the queue overview's transaction alone reads without bitmap scans.
    /// The warm connection (settle.sql only) always takes the generic plan, a claiming
    /// transaction always plans anew; nothing else changes how plans are cached.
    #[tokio::test]
    async fn claims_and_only_claims_are_planned_without_sorting() {
        let Ok(url) = std::env::var("NIGHTSHIFT_TEST_PG_URL") else {
            eprintln!(
                "SKIPPED claims_and_only_claims_are_planned_without_sorting: no NIGHTSHIFT_TEST_PG_URL"
            );
            return;
        };
        let mut config = StoreConfig::for_url(url);
        config.max_connections = 1;
        let backend = PgBackend::connect(&config).await.unwrap();
        let mut warm = backend
            .warm
            .take()
            .await
            .expect("the warm connection opens");
        assert_eq!(show("enable_sort", warm.conn()).await, "off");
        assert_eq!(
            show("plan_cache_mode", warm.conn()).await,
            "force_generic_plan"
        );
        assert_eq!(show("enable_seqscan", warm.conn()).await, "off");
        warm.keep(0);
        let mut claiming = backend.begin_claiming().await.unwrap();
        assert_eq!(show("enable_sort", &mut *claiming).await, "off");
        assert_eq!(
            show("plan_cache_mode", &mut *claiming).await,
            "force_custom_plan"
        );
        assert!(BEGIN_CLAIMING.ends_with(&CLAIMING_PLAN_CACHE_MODE.replace("SET ", "SET LOCAL ")));
        assert_eq!(show("enable_seqscan", &mut *claiming).await, "on");
        claiming.commit().await.unwrap();
        assert_eq!(
            show("enable_sort", &backend.pool).await,
            "on",
            "the pool's one connection, after the claiming transaction"
        );
        assert_eq!(show("plan_cache_mode", &backend.pool).await, "auto");
        let mut other = backend.begin().await.unwrap();
        assert_eq!(show("enable_sort", &mut *other).await, "on");
        assert_eq!(show("enable_bitmapscan", &mut *other).await, "on");
        other.rollback().await.unwrap();
        // The queue overview reads without bitmap scans, read only, and only it does.
        let mut overview = crate::listing::LiveReads::live_reader(&backend)
            .await
            .unwrap();
        assert_eq!(show("enable_bitmapscan", &mut *overview).await, "off");
        assert_eq!(show("transaction_read_only", &mut *overview).await, "on");
        assert_eq!(show("enable_sort", &mut *overview).await, "on");
        drop(overview);
        assert_eq!(
            show("enable_bitmapscan", &backend.pool).await,
            "on",
            "the pool's one connection, after the overview's transaction"
        );
        backend.close().await;
    }
}
