//! # dashboard-bench
//!
//! What an operator's pages cost with a long history: 100,000 runs (10,000 with `--quick`)
//! spread over 30 days and one run of 500 events, on SQLite and PostgreSQL. The real API
//! router (which serves the dashboard under `/ui`) listens on loopback; one client, signed
//! in with the token, asks for each page N times after a warm-up, one request at a time.
//! Server time is measured inside the server, around the whole router (routing, session
//! check, store reads, rendering; not the network), and printed as p50/p95/max per page with
//! both backends side by side. The store's `runs_page` call alone is timed the same way, so
//! what rendering adds is visible. The seed time is printed too.
//!
//! The history is inserted in transactions of plain `INSERT`s matching the real schema
//! (`nightshift_bench::dashboard_seed`); the 500-event run goes through the store's own
//! enqueue, claim, `append_event` and ack (`nightshift_bench::timeline_seed`). PostgreSQL's
//! tables are then `ANALYZE`d (what autovacuum does after a bulk load); SQLite is left as the
//! store leaves it (no `ANALYZE`).
//!
//! Usage: `cargo run --release -p nightshift-bench --bin dashboard-bench [-- --quick]
//! [--sqlite-only | --postgres-only]`. SQLite is a file in a temp dir with the production
//! pragmas; PostgreSQL comes from `NIGHTSHIFT_BENCH_PG_URL`, else `NIGHTSHIFT_TEST_PG_URL`, else
//! `postgres://postgres@127.0.0.1:5432/test`, in a fresh schema dropped afterwards.

use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use axum::extract::Request;
use axum::middleware::Next;
use nightshift_bench::{dashboard_seed, percentile, timeline_seed};
use nightshift_runner::api::{ApiState, router};
use nightshift_store::{NewRun, RunFilter, RunStatus, Store, StoreConfig, SystemClock, Trigger};
use sqlx::{AssertSqlSafe, Connection};

const TOKEN: &str = "bench-dashboard-token";
const AGENTS: [&str; 6] = [
    "reviewer",
    "triage",
    "deployer",
    "summariser",
    "oncall",
    "release-notes",
];
/// Runs per seeding transaction.
const BATCH: usize = 2_000;
/// Events of the long run.
const EVENTS: usize = 500;

/// What one case asks for.
enum Target {
    /// A page over HTTP; `bearer`: the API's token, else the session cookie.
    Http { path: String, bearer: bool },
    /// `Store::runs_page` alone, 50 runs.
    Store {
        filter: RunFilter,
        cursor: Option<String>,
    },
    /// `Store::queue_overview` alone.
    Overview,
}

struct Case {
    name: String,
    target: Target,
}

/// One case measured on one backend: server times (ms) and the rows the answer held.
#[derive(Debug, Clone)]
struct Stats {
    p50: f64,
    p95: f64,
    max: f64,
    rows: usize,
}

/// One backend's results.
struct Measured {
    backend: &'static str,
    seed_s: f64,
    events_s: f64,
    cases: Vec<(String, Stats)>,
}

/// Server times recorded by the timing layer, one per request.
type Times = Arc<Mutex<Vec<f64>>>;

#[tokio::main]
async fn main() -> Result<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    let (runs, requests, warm_up) = if quick {
        (10_000, 30, 5)
    } else {
        (100_000, 200, 20)
    };
    // Installs the rustls provider reqwest's features ask for (plain HTTP here).
    nightshift_llm::http::build_client(nightshift_llm::HttpTimeouts::default())
        .map_err(anyhow::Error::msg)?;
    let dir = tempfile::tempdir()?;
    let backends = nightshift_bench::backends(dir.path(), "dashboard").await;
    let mut all = Vec::new();
    for (name, config) in &backends {
        eprintln!("{name}: seeding {runs} runs and a {EVENTS}-event run…");
        let measured = measure_backend(name, config, runs, requests, warm_up).await;
        nightshift_bench::drop_schema(config).await;
        all.push(measured.with_context(|| name.to_string())?);
    }
    print_table(&all, runs, requests, warm_up);
    Ok(())
}

async fn measure_backend(
    name: &'static str,
    config: &StoreConfig,
    runs: usize,
    requests: usize,
    warm_up: usize,
) -> Result<Measured> {
    let store = Store::connect(config, Arc::new(SystemClock)).await?;
    store.migrate().await?;
    let started = Instant::now();
    let long_run = seed_long_run(&store).await?;
    let events_s = started.elapsed().as_secs_f64();
    let now = store.now();
    let started = Instant::now();
    seed_history(config, runs, now).await?;
    let seed_s = started.elapsed().as_secs_f64();
    let times: Times = Arc::default();
    let base = serve(&store, times.clone()).await?;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let cookie = sign_in(&http, &base).await?;
    let cases = cases(&store, &long_run, now).await?;
    let mut results = Vec::new();
    for case in cases {
        let stats = match &case.target {
            Target::Http { path, bearer } => {
                let url = format!("{base}{path}");
                let auth = if *bearer {
                    ("authorization", format!("Bearer {TOKEN}"))
                } else {
                    ("cookie", cookie.clone())
                };
                for _ in 0..warm_up {
                    get(&http, &url, &auth).await?;
                }
                times.lock().expect("times").clear();
                let mut rows = 0;
                for _ in 0..requests {
                    rows = get(&http, &url, &auth).await?;
                }
                let ms = std::mem::take(&mut *times.lock().expect("times"));
                if ms.len() != requests {
                    bail!(
                        "{}: {} server times for {requests} requests",
                        case.name,
                        ms.len()
                    );
                }
                stats(ms, rows)
            }
            Target::Store { filter, cursor } => {
                let mut ms = Vec::new();
                let mut rows = 0;
                for k in 0..warm_up + requests {
                    let t = Instant::now();
                    let page = store.runs_page(filter, cursor.as_deref(), 50).await?;
                    if k >= warm_up {
                        ms.push(t.elapsed().as_secs_f64() * 1e3);
                    }
                    rows = page.runs.len();
                }
                stats(ms, rows)
            }
            Target::Overview => {
                let mut ms = Vec::new();
                let mut rows = 0;
                for k in 0..warm_up + requests {
                    let t = Instant::now();
                    let o = store.queue_overview().await?;
                    if k >= warm_up {
                        ms.push(t.elapsed().as_secs_f64() * 1e3);
                    }
                    rows = o.leases.len();
                }
                stats(ms, rows)
            }
        };
        results.push((case.name, stats));
    }
    store.close().await;
    Ok(Measured {
        backend: name,
        seed_s,
        events_s,
        cases: results,
    })
}

/// The cases, in table order, with filter values that match many seeded runs.
async fn cases(store: &Store, long_run: &str, now: i64) -> Result<Vec<Case>> {
    let p = dashboard_seed::picks();
    // Page 50's cursor: 49 pages of 50 walked from the first (the dashboard's page size).
    let mut cursor = None;
    for _ in 0..49 {
        let page = store
            .runs_page(&RunFilter::default(), cursor.as_deref(), 50)
            .await?;
        cursor = Some(page.next_cursor.context("fewer than 50 pages of runs")?);
    }
    let cursor = cursor.expect("49 pages walked");
    let (since, until) = (now - 10 * 86_400_000, now - 9 * 86_400_000);
    let utc = nightshift_dashboard::format::utc;
    let filters: Vec<(&str, String, RunFilter, Option<String>)> = vec![
        ("runs page 1", String::new(), RunFilter::default(), None),
        (
            "runs page 50 (cursor)",
            format!("cursor={cursor}"),
            RunFilter::default(),
            Some(cursor.clone()),
        ),
        (
            "status=failed",
            format!("status={}", p.status),
            RunFilter {
                status: Some(RunStatus::from_str(p.status)?),
                ..RunFilter::default()
            },
            None,
        ),
        (
            "agent=deployer",
            format!("agent={}", p.agent),
            RunFilter {
                agent: Some(p.agent.into()),
                ..RunFilter::default()
            },
            None,
        ),
        (
            "trigger=schedule",
            format!("trigger={}", p.trigger),
            RunFilter {
                trigger: Some(Trigger::from_str(p.trigger)?),
                ..RunFilter::default()
            },
            None,
        ),
        (
            "key=schedule-nightly-report",
            format!("key={}", p.key),
            RunFilter {
                concurrency_key: Some(p.key.clone()),
                ..RunFilter::default()
            },
            None,
        ),
        (
            "since/until (one day)",
            format!("since={}&until={}", utc(since), utc(until)),
            RunFilter {
                since: Some(since),
                until: Some(until),
                ..RunFilter::default()
            },
            None,
        ),
        (
            "q=flaky (in ~4% of prompts)",
            format!("q={}", p.common_text),
            RunFilter {
                search: Some(p.common_text.into()),
                ..RunFilter::default()
            },
            None,
        ),
        (
            "q=<absent> (reads every run)",
            format!("q={}", p.absent_text.replace(' ', "+")),
            RunFilter {
                search: Some(p.absent_text.into()),
                ..RunFilter::default()
            },
            None,
        ),
    ];
    let mut out = Vec::new();
    for (name, query, _, _) in &filters {
        out.push(Case {
            name: format!("GET /ui/runs {name}"),
            target: Target::Http {
                path: format!("/ui/runs?{query}"),
                bearer: false,
            },
        });
    }
    out.push(Case {
        name: format!("GET /ui/runs/{{id}} ({EVENTS}-event timeline)"),
        target: Target::Http {
            path: format!("/ui/runs/{long_run}"),
            bearer: false,
        },
    });
    out.push(Case {
        name: "GET /v1/runs (API, 50 runs)".into(),
        target: Target::Http {
            path: "/v1/runs?limit=50".into(),
            bearer: true,
        },
    });
    out.push(Case {
        name: "GET /v1/runs page 50 (API, cursor)".into(),
        target: Target::Http {
            path: format!("/v1/runs?limit=50&cursor={cursor}"),
            bearer: true,
        },
    });
    for (name, _, filter, cursor) in filters {
        out.push(Case {
            name: format!("store runs_page: {name}"),
            target: Target::Store { filter, cursor },
        });
    }
    out.push(Case {
        name: "store queue_overview".into(),
        target: Target::Overview,
    });
    Ok(out)
}

/// GETs `url` expecting 200; the rows the answer holds (runs of a list, items of a timeline,
/// runs of the API's JSON).
async fn get(http: &reqwest::Client, url: &str, auth: &(&str, String)) -> Result<usize> {
    let resp = http.get(url).header(auth.0, &auth.1).send().await?;
    let status = resp.status();
    let body = resp.text().await?;
    if status != reqwest::StatusCode::OK {
        bail!(
            "GET {url} answered {status}: {}",
            body.chars().take(300).collect::<String>()
        );
    }
    if url.contains("/v1/") {
        let v: serde_json::Value = serde_json::from_str(&body)?;
        return Ok(v["runs"].as_array().map_or(0, Vec::len));
    }
    if url.contains("/ui/runs/") {
        return Ok(body.matches("<li id=\"item-").count());
    }
    Ok(body.matches("data-run-id=\"").count())
}

fn stats(mut ms: Vec<f64>, rows: usize) -> Stats {
    ms.sort_by(f64::total_cmp);
    Stats {
        p50: percentile(&ms, 0.50),
        p95: percentile(&ms, 0.95),
        max: *ms.last().expect("at least one sample"),
        rows,
    }
}

/// The long run, through the store's own calls: enqueued, claimed, its events appended one
/// by one, acked. Returns its id. Runs before the history is seeded, so that its job is the
/// only one queued.
async fn seed_long_run(store: &Store) -> Result<String> {
    let mut new = NewRun::new("reviewer", "Review pull request #1432 in acme/web");
    new.trigger = Trigger::Webhook;
    new.concurrency_key = Some("pr-acme/web-1432".into());
    let id = store.enqueue(&new).await?.run_id;
    let mut leased = store
        .claim("bench-worker", None, 1, Duration::from_secs(600))
        .await?;
    let Some(job) = leased.pop() else {
        bail!("the long run's job was not claimed");
    };
    if job.job().run_id != id {
        bail!("claimed another run's job");
    }
    for event in timeline_seed::events(EVENTS, store.now()) {
        job.append_event(event.kind(), &event.payload()).await?;
    }
    job.ack(Some("Review posted.".into())).await?;
    Ok(id)
}

/// Inserts `runs` seeded runs and their jobs, `BATCH` per transaction, on a connection of
/// its own; then `ANALYZE` on PostgreSQL.
async fn seed_history(config: &StoreConfig, runs: usize, now: i64) -> Result<()> {
    let batches = (0..runs).step_by(BATCH).map(move |from| {
        let rows: Vec<_> = (from..(from + BATCH).min(runs))
            .map(|i| dashboard_seed::run(i, runs, now))
            .collect();
        dashboard_seed::insert_sql(&rows, now)
    });
    if let Some(schema) = &config.schema {
        let mut conn = sqlx::PgConnection::connect(&config.url).await?;
        let path = format!("SET search_path = \"{schema}\"");
        sqlx::raw_sql(AssertSqlSafe(path))
            .execute(&mut conn)
            .await?;
        for sql in batches {
            sqlx::raw_sql(AssertSqlSafe(sql)).execute(&mut conn).await?;
        }
        sqlx::raw_sql("ANALYZE runs; ANALYZE jobs; ANALYZE run_events")
            .execute(&mut conn)
            .await?;
        conn.close().await?;
    } else {
        let options = sqlx::sqlite::SqliteConnectOptions::from_str(&config.url)?
            .busy_timeout(Duration::from_secs(30));
        let mut conn = sqlx::SqliteConnection::connect_with(&options).await?;
        for sql in batches {
            sqlx::raw_sql(AssertSqlSafe(sql)).execute(&mut conn).await?;
        }
        conn.close().await?;
    }
    Ok(())
}

/// The API router (dashboard included) on a loopback port, every request's server time
/// recorded in `times`; returns its base URL.
async fn serve(store: &Store, times: Times) -> Result<String> {
    let state = ApiState {
        store: store.clone(),
        intake: nightshift_scheduler::Intake::new(store.clone(), AGENTS),
        tokens: nightshift_runner::api_tokens::ApiTokens::single(TOKEN),
        hooks: nightshift_runner::hooks::none(),
    };
    let timed = axum::middleware::from_fn(move |req: Request, next: Next| {
        let times = times.clone();
        async move {
            let t = Instant::now();
            let resp = next.run(req).await;
            times
                .lock()
                .expect("times")
                .push(t.elapsed().as_secs_f64() * 1e3);
            resp
        }
    });
    let app = router(state).layer(timed);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(base)
}

/// Signs in with the token; the session cookie as a `Cookie` header value.
async fn sign_in(http: &reqwest::Client, base: &str) -> Result<String> {
    let resp = http
        .post(format!("{base}/ui/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={TOKEN}"))
        .send()
        .await?;
    let set = resp
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .context("signing in set no cookie")?;
    Ok(set.split(';').next().unwrap_or_default().to_string())
}

fn print_table(all: &[Measured], runs: usize, requests: usize, warm_up: usize) {
    println!(
        "## Dashboard and listing: {runs} runs over 30 days + one {EVENTS}-event run; \
         server time in ms, {requests} requests per row after {warm_up} warm-up, one at a time"
    );
    println!();
    let mut header = vec!["case".to_string(), "rows".to_string()];
    for m in all {
        for q in ["p50", "p95", "max"] {
            header.push(format!("{} {q}", m.backend));
        }
    }
    if all.len() == 2 {
        header.push(format!("{} / {} (p50)", all[1].backend, all[0].backend));
    }
    let mut lines = vec![header];
    let Some(first) = all.first() else {
        return;
    };
    for (k, (case, _)) in first.cases.iter().enumerate() {
        let rows: Vec<String> = all.iter().map(|m| m.cases[k].1.rows.to_string()).collect();
        let mut rows_cell = rows[0].clone();
        if rows.iter().any(|r| *r != rows[0]) {
            rows_cell = rows.join("/");
        }
        let mut line = vec![case.clone(), rows_cell];
        for m in all {
            let s = &m.cases[k].1;
            line.extend([s.p50, s.p95, s.max].map(|v| format!("{v:.2}")));
        }
        if all.len() == 2 {
            let (a, b) = (all[0].cases[k].1.p50, all[1].cases[k].1.p50);
            line.push(format!("{:.2}x", b / a));
        }
        lines.push(line);
    }
    let cols = lines[0].len();
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            lines
                .iter()
                .map(|l| l[c].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for (i, line) in lines.iter().enumerate() {
        let cells: Vec<String> = line
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(c, (cell, w))| {
                let pad = " ".repeat(w - cell.chars().count());
                if c == 0 {
                    format!("{cell}{pad}")
                } else {
                    format!("{pad}{cell}")
                }
            })
            .collect();
        println!("| {} |", cells.join(" | "));
        if i == 0 {
            let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
            println!("|-{}-|", rule.join("-|-"));
        }
    }
    println!();
    for m in all {
        println!(
            "{}: seeded {runs} runs (+ their jobs) in {:.1} s ({:.0} runs/s); the {EVENTS}-event \
             run (enqueue, claim, {EVENTS} append_event, ack) in {:.1} s",
            m.backend,
            m.seed_s,
            runs as f64 / m.seed_s,
            m.events_s
        );
    }
    println!(
        "rows: runs on the page (50 a page), items of the timeline; for queue_overview, live \
         leases. Store rows time the call in-process, no HTTP."
    );
}
