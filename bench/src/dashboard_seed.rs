//! The runs `dashboard-bench` lists: a deterministic, realistic history of runs (and their
//! start jobs) as plain rows, and the SQL that inserts a batch of them. PURE: no I/O here.
//!
//! What it guarantees:
//! - **The real schema.** The statements name every column of `runs` and `jobs` the store's
//!   migrations define (up to version 13) except those left to their defaults (`runs.notify`,
//!   `jobs.id`, `jobs.progress_token`), with values inside the schema's CHECK sets, so the
//!   store reads the rows back as it reads its own. The same text runs on SQLite and
//!   PostgreSQL (literals only; quotes doubled).
//! - **A realistic mix.** Six agents of uneven weight; webhook, schedule, API and CLI
//!   triggers; concurrency keys per pull request and per schedule; mostly terminal statuses
//!   (a tenth failed, with errors), a few waiting or awaiting approval, and only the newest
//!   queued or running (a busy queue, not a backlog of 100,000). Creation times are spread
//!   evenly over [`SPAN_MS`] before `now`.
//! - **Deterministic.** Run `i` of `n` is the same on every call, so both backends list the
//!   same history and the filters the bench uses ([`Picks`]) match the same runs.

use std::fmt::Write as _;

/// How far back the seeded history reaches: 30 days.
pub const SPAN_MS: i64 = 30 * 24 * 3600 * 1000;

/// Agents and their weights (of 100).
const AGENTS: [(&str, u64); 6] = [
    ("reviewer", 35),
    ("triage", 25),
    ("deployer", 15),
    ("summariser", 15),
    ("oncall", 7),
    ("release-notes", 3),
];

/// Repositories pull requests come from.
const REPOS: [&str; 4] = ["acme/web", "acme/api", "acme/infra", "acme/mobile"];

/// Schedules that start runs.
const SCHEDULES: [&str; 5] = [
    "nightly-report",
    "hourly-triage",
    "weekly-digest",
    "dependency-audit",
    "cost-review",
];

/// PR titles; `flaky` appears in one of them (the bench's common text search).
const TITLES: [&str; 10] = [
    "Fix flaky login test on CI",
    "Bump serde from 1.0.210 to 1.0.215",
    "Add retry to the payment webhook handler",
    "Refactor the session store",
    "Docs: explain the deploy checklist",
    "Speed up the search index rebuild",
    "Drop the legacy v1 endpoints",
    "Handle empty carts at checkout",
    "Make the nightly export resumable",
    "Migrate the metrics dashboard to the new API",
];

/// How many runs at the newest end are live: this many running, then queued.
const RUNNING: usize = 8;
const QUEUED: usize = 30;

/// Filter values the bench asks for, chosen so that each matches many runs.
#[derive(Debug, Clone)]
pub struct Picks {
    pub status: &'static str,
    pub agent: &'static str,
    pub trigger: &'static str,
    /// A concurrency key held by many runs (a schedule's).
    pub key: String,
    /// Text in about a tenth of the prompts.
    pub common_text: &'static str,
    /// Text in no prompt (a search that reads every run).
    pub absent_text: &'static str,
}

/// The filter values [`run`] is built to match.
pub fn picks() -> Picks {
    Picks {
        status: "failed",
        agent: "deployer",
        trigger: "schedule",
        key: format!("schedule-{}", SCHEDULES[0]),
        common_text: "flaky",
        absent_text: "no prompt says this",
    }
}

/// One run and its start job, as rows.
#[derive(Debug, Clone, PartialEq)]
pub struct SeedRun {
    pub id: String,
    pub agent: &'static str,
    pub status: &'static str,
    pub trigger: &'static str,
    pub input: String,
    pub idempotency_key: Option<String>,
    pub concurrency_key: Option<String>,
    pub turns: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cache_read_tokens: i64,
    pub cache_write_tokens: i64,
    pub cost_usd: f64,
    pub result: Option<String>,
    pub error: Option<String>,
    pub cancel_requested_at: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    /// The start job's status (`jobs.status`).
    pub job_status: &'static str,
    pub attempts: i64,
}

/// splitmix64: the `k`th pseudo-random number of stream `i`.
fn rand(i: usize, k: u64) -> u64 {
    let mut z = (i as u64)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(k.wrapping_mul(0xBF58_476D_1CE4_E5B9));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn weighted<T: Copy>(choices: &[(T, u64)], r: u64) -> T {
    let total: u64 = choices.iter().map(|c| c.1).sum();
    let mut x = r % total;
    for (v, w) in choices {
        if x < *w {
            return *v;
        }
        x -= w;
    }
    choices[0].0
}

/// A UUIDv7-shaped id for a run created at `at` (ms), unique by `i`.
fn run_id(at: i64, i: usize) -> String {
    let ms = at as u64 & 0xFFFF_FFFF_FFFF;
    let r = rand(i, 99);
    format!(
        "{:08x}-{:04x}-7{:03x}-{:04x}-{:012x}",
        ms >> 16,
        ms & 0xFFFF,
        (r >> 52) & 0xFFF,
        0x8000 | ((r >> 36) & 0x3FFF),
        (i as u64) & 0xFFFF_FFFF_FFFF
    )
}

/// Run `i` (0 the oldest) of `n`, the newest created shortly before `now`.
pub fn run(i: usize, n: usize, now: i64) -> SeedRun {
    let spacing = (SPAN_MS / n.max(1) as i64).max(1);
    let created_at = now - 60_000 - (n - i) as i64 * spacing + (rand(i, 1) % spacing as u64) as i64;
    let from_newest = n - 1 - i;
    let agent = weighted(&AGENTS, rand(i, 2));
    let trigger = weighted(
        &[("webhook", 45), ("schedule", 25), ("api", 22), ("cli", 8)],
        rand(i, 3),
    );
    let (input, idempotency_key, concurrency_key) = match trigger {
        "webhook" => {
            let repo = REPOS[(rand(i, 4) % REPOS.len() as u64) as usize];
            let pr = 1 + rand(i, 5) % 2_000;
            let title = TITLES[(rand(i, 6) % TITLES.len() as u64) as usize];
            (
                format!(
                    "Review pull request #{pr} in {repo}: {title}. Read the diff, run the tests \
                     that touch the changed files and leave review comments on anything risky."
                ),
                Some(format!("github:{}", run_id(created_at, i + 7))),
                Some(format!("pr-{repo}-{pr}")),
            )
        }
        "schedule" => {
            let name = SCHEDULES[(rand(i, 4) % SCHEDULES.len() as u64) as usize];
            (
                format!(
                    "Scheduled {name}: collect what changed since the last run and post a short \
                     summary to #ops with links."
                ),
                Some(format!("schedule:{name}:{created_at}")),
                Some(format!("schedule-{name}")),
            )
        }
        _ => (
            format!(
                "Investigate ticket OPS-{}: the export job for tenant {} timed out twice; find \
                 why and propose a fix.",
                1 + rand(i, 4) % 9_000,
                rand(i, 5) % 400
            ),
            rand(i, 6)
                .is_multiple_of(3)
                .then(|| format!("req-{}", run_id(created_at, i + 11))),
            None,
        ),
    };
    let status = if from_newest < RUNNING {
        "running"
    } else if from_newest < RUNNING + QUEUED {
        "queued"
    } else {
        weighted(
            &[
                ("succeeded", 780),
                ("failed", 100),
                ("cancelled", 40),
                ("superseded", 30),
                ("budget_exhausted", 10),
                ("max_rounds", 10),
                ("waiting", 25),
                ("awaiting_approval", 5),
            ],
            rand(i, 7),
        )
    };
    let job_status = match status {
        "queued" => "queued",
        "running" => "running",
        "waiting" | "awaiting_approval" => "parked",
        "failed" => "dead",
        "cancelled" | "superseded" => "cancelled",
        _ => "succeeded",
    };
    let started = status != "queued";
    let ended = !matches!(
        status,
        "queued" | "running" | "waiting" | "awaiting_approval"
    );
    let turns = if started {
        1 + (rand(i, 8) % 24) as i64
    } else {
        0
    };
    let input_tokens = turns * (2_000 + (rand(i, 9) % 6_000) as i64);
    let output_tokens = turns * (150 + (rand(i, 10) % 700) as i64);
    let cache_read_tokens = input_tokens * 3;
    let cache_write_tokens = input_tokens / 4;
    let cost_usd = (input_tokens as f64 * 3.0 + output_tokens as f64 * 15.0) / 1e6;
    let started_at = started.then_some(created_at + 200 + (rand(i, 11) % 4_000) as i64);
    let finished_at = if ended {
        started_at.map(|s| s + 5_000 + (rand(i, 12) % 600_000) as i64)
    } else {
        None
    };
    let error = match status {
        "failed" => Some(
            [
                "provider anthropic: 529 overloaded_error: Overloaded\nafter 3 attempts over 41 s",
                "tool run_command: exit status 2: cargo test failed in 3 tests\nsee the tool result",
                "lease lost: the worker stopped heartbeating (job rescued 3 times)",
            ][(rand(i, 13) % 3) as usize]
                .to_string(),
        ),
        "budget_exhausted" => Some("budget exhausted: cost $2.00 of $2.00 spent".to_string()),
        "max_rounds" => Some("max_rounds reached: 40 rounds".to_string()),
        _ => None,
    };
    let result = (status == "succeeded").then(|| {
        "Posted the review: 3 comments, 1 suggested change. Tests pass locally.".to_string()
    });
    let cancel_requested_at = matches!(status, "cancelled" | "superseded")
        .then(|| finished_at.unwrap_or(created_at) - 100);
    SeedRun {
        id: run_id(created_at, i),
        agent,
        status,
        trigger,
        input,
        idempotency_key,
        concurrency_key,
        turns,
        input_tokens,
        output_tokens,
        cache_read_tokens,
        cache_write_tokens,
        cost_usd,
        result,
        error,
        cancel_requested_at,
        created_at,
        updated_at: finished_at.or(started_at).unwrap_or(created_at),
        started_at,
        finished_at,
        job_status,
        attempts: if started { 1 } else { 0 },
    }
}

/// `s` as an SQL string literal.
fn lit(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

fn opt_lit(s: &Option<String>) -> String {
    s.as_deref().map_or("NULL".into(), lit)
}

fn opt_num(n: Option<i64>) -> String {
    n.map_or("NULL".into(), |n| n.to_string())
}

/// One transaction inserting `runs` and their start jobs (`now` for the running jobs'
/// leases), as SQL text both backends run.
pub fn insert_sql(runs: &[SeedRun], now: i64) -> String {
    let mut sql = String::from(
        "BEGIN;\nINSERT INTO runs (id, agent, status, trigger_kind, input, idempotency_key, \
         concurrency_key, agent_hash, turns, input_tokens, output_tokens, cache_read_tokens, \
         cache_write_tokens, cost_usd, result, error, cancel_requested_at, created_at, \
         updated_at, started_at, finished_at) VALUES\n",
    );
    for (k, r) in runs.iter().enumerate() {
        let sep = if k + 1 < runs.len() { ",\n" } else { ";\n" };
        let _ = write!(
            sql,
            "({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {:.6}, {}, {}, {}, {}, {}, {}, {}){sep}",
            lit(&r.id),
            lit(r.agent),
            lit(r.status),
            lit(r.trigger),
            lit(&r.input),
            opt_lit(&r.idempotency_key),
            opt_lit(&r.concurrency_key),
            lit(&format!("sha256:{:016x}", rand(r.agent.len(), 42))),
            r.turns,
            r.input_tokens,
            r.output_tokens,
            r.cache_read_tokens,
            r.cache_write_tokens,
            r.cost_usd,
            opt_lit(&r.result),
            opt_lit(&r.error),
            opt_num(r.cancel_requested_at),
            r.created_at,
            r.updated_at,
            opt_num(r.started_at),
            opt_num(r.finished_at),
        );
    }
    sql.push_str(
        "INSERT INTO jobs (run_id, kind, lane, priority, payload, run_at, attempts, \
         max_attempts, dedupe_key, status, lease_owner, lease_token, lease_expires_at, \
         cancel_requested_at, last_error, created_at, updated_at, finished_at, \
         concurrency_key) VALUES\n",
    );
    for (k, r) in runs.iter().enumerate() {
        let sep = if k + 1 < runs.len() { ",\n" } else { ";\n" };
        let running = r.job_status == "running";
        let _ = write!(
            sql,
            "({}, 'start', 'default', 0, {}, {}, {}, 3, NULL, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}){sep}",
            lit(&r.id),
            lit(&r.input),
            r.created_at,
            r.attempts,
            lit(r.job_status),
            if running { "'bench-worker'" } else { "NULL" },
            r.attempts,
            opt_num(running.then_some(now + 30_000)),
            opt_num(r.cancel_requested_at),
            opt_lit(&r.error),
            r.created_at,
            r.updated_at,
            opt_num(r.finished_at),
            opt_lit(&r.concurrency_key),
        );
    }
    sql.push_str("COMMIT;\n");
    sql
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_history_is_deterministic_ordered_and_mixed() {
        let n = 10_000;
        let now = 1_800_000_000_000;
        let runs: Vec<SeedRun> = (0..n).map(|i| run(i, n, now)).collect();
        assert_eq!(runs[17], run(17, n, now));
        let mut ids: Vec<&str> = runs.iter().map(|r| r.id.as_str()).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), n, "ids are unique");
        assert!(runs[0].created_at >= now - SPAN_MS - 60_000);
        assert!(runs[n - 1].created_at < now);
        let count = |f: &dyn Fn(&SeedRun) -> bool| runs.iter().filter(|r| f(r)).count();
        let p = picks();
        assert_eq!(count(&|r| r.status == "running"), RUNNING);
        assert!(count(&|r| r.status == p.status) > n / 20);
        assert!(count(&|r| r.agent == p.agent) > n / 10);
        assert!(count(&|r| r.trigger == p.trigger) > n / 10);
        assert!(count(&|r| r.concurrency_key.as_deref() == Some(&p.key)) > n / 40);
        let common = count(&|r| r.input.to_lowercase().contains(p.common_text));
        assert!(common > n / 50 && common < n / 5, "{common}");
        assert_eq!(count(&|r| r.input.contains(p.absent_text)), 0);
        assert!(count(&|r| r.error.is_some()) >= count(&|r| r.status == "failed"));
    }

    #[test]
    fn literals_double_their_quotes() {
        assert_eq!(lit("it's"), "'it''s'");
        let sql = insert_sql(&[run(0, 1, 1_000_000_000)], 1_000_000_000);
        assert!(sql.starts_with("BEGIN;") && sql.ends_with("COMMIT;\n"));
        assert_eq!(sql.matches("INSERT INTO").count(), 2);
    }
}
