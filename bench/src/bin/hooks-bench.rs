//! # hooks-bench
//!
//! Measures webhook intake end to end over HTTP on loopback and prints one table: signed
//! GitHub `pull_request` deliveries (the 22 KB `opened` payload from `tests/fixtures/github/`,
//! each for its own pull request number, so each run has its own concurrency key)
//! posted by 8 concurrent clients to `POST /hooks/github` of the real API router, each
//! verified (HMAC-SHA256), parsed, routed, templated, claimed in `webhook_deliveries`,
//! enqueued as a run and recorded before the 202 comes back. Then the same deliveries are
//! sent again: each redelivery is answered 200 from the deliveries table, enqueueing nothing.
//! Per backend: deliveries per second and p50/p99 latency from sending to the answer, with
//! no worker running, so nothing else competes for the store. First, the same requests to a handler
//! that only reads the body and answers 202: what loopback HTTP alone allows. Beside each
//! backend's rows (measured just before them, printed after), **the schema alone**: a
//! delivery's three rows (its `done` record, its run, its start job, with the keys and
//! context a delivery gives them) committed without HTTP or any of the store's code — one
//! statement per delivery from as many connections as senders on PostgreSQL, one transaction
//! per delivery on SQLite's single writer — so the gap to the commit rate splits into what
//! the schema costs and what the intake adds (`÷ schema`).
//!
//! Last, per backend, **the intake beside a busy pool**, as in a daemon that runs what its
//! webhooks start: a pool of 16 slots running 1 ms jobs first drains the runs the new
//! deliveries left queued (its rate alone), then keeps running while as many new deliveries
//! again arrive; the rows give the deliveries' rate and latency meanwhile and the pool's, and
//! a note says whether the pool kept up and how the two compare with their costs simply
//! added.
//!
//! Usage: `cargo run --release -p nightshift-bench --bin hooks-bench [-- --quick]
//! [--sqlite-only | --postgres-only]`. SQLite is a file in a temp dir with the production
//! pragmas (WAL, `synchronous=FULL`); PostgreSQL comes from `NIGHTSHIFT_BENCH_PG_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`), in a fresh schema dropped afterwards.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use nightshift_runner::api::{ApiState, router};
use nightshift_runner::config::Config;
use nightshift_scheduler::hooks::HookSet;
use nightshift_scheduler::hooks::config::HmacAlgorithm;
use nightshift_scheduler::hooks::signature::hmac;
use nightshift_store::{Store, StoreConfig, SystemClock};

const SECRET: &str = "bench-webhook-secret";
const CLIENTS: usize = 8;

const CONFIG: &str = r#"
[providers.p]
kind = "scripted"
script = "unused.json"

[[agents]]
name = "reviewer"
provider = "p"
model = "m"

[[hooks]]
name = "github"
signature = "github"
secret_env = "BENCH_SECRET"

[[hooks.routes]]
name = "review"
event = "pull_request"
match = { action = ["opened", "synchronize", "reopened"], pull_request.draft = false }
agent = "reviewer"
prompt = "Review pull request #{{ pull_request.number }} in {{ repository.full_name }}: {{ pull_request.title }}"
concurrency_key = "pr-{{ repository.full_name }}-{{ pull_request.number }}"
"#;

/// One signed request, ready to send.
#[derive(Clone)]
struct Delivery {
    id: String,
    signature: String,
    body: Arc<Vec<u8>>,
}

struct Measured {
    per_second: f64,
    p50_ms: f64,
    p99_ms: f64,
}

#[tokio::main]
async fn main() -> Result<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    let n = if quick { 300 } else { 2000 };
    let dir = tempfile::tempdir()?;
    let backends = nightshift_bench::backends(dir.path(), "hooks").await;
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/github/pull_request.opened.json"
    );
    let fixture: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixture).with_context(|| fixture.to_string())?)?;
    // Each delivery has its own id and pull request (so its own run and concurrency key, as
    // deliveries from a busy repository do), and is signed for its own body.
    let all: Vec<Delivery> = (0..2 * n)
        .map(|i| {
            let mut json = fixture.clone();
            json["number"] = (1000 + i).into();
            json["pull_request"]["number"] = (1000 + i).into();
            let body = serde_json::to_vec(&json).expect("the fixture serialises");
            let signature = format!(
                "sha256={}",
                hmac(HmacAlgorithm::Sha256, SECRET.as_bytes(), &[&body])
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>()
            );
            Delivery {
                id: format!("bench-{i:06}-{}", std::process::id()),
                signature,
                body: Arc::new(body),
            }
        })
        .collect();
    // The first half for the intake alone, the second for the intake beside a busy pool.
    let (deliveries, beside_pool) = all.split_at(n);
    let body_kb = deliveries[0].body.len() / 1024;
    let mut notes = Vec::new();

    println!(
        "## Webhook intake: {n} signed GitHub deliveries ({body_kb} KB each, one pull request each), {CLIENTS} concurrent clients, HTTP on loopback"
    );
    println!(
        "{:<12} {:<34} {:>14} {:>9} {:>9} {:>14} {:>7} {:>9}",
        "backend", "case", "deliveries/s", "p50 ms", "p99 ms", "commits/s", "ratio", "÷ schema"
    );
    // What loopback HTTP alone allows on this machine: the same requests to a handler that
    // only reads the body and answers 202, with the same client and runtime.
    let transport = post_all(&serve_transport_only().await?, deliveries, 202).await?;
    println!(
        "{:<12} {:<34} {:>14.0} {:>9.2} {:>9.2} {:>14} {:>7} {:>9}",
        "—",
        "HTTP only: read body → 202",
        transport.per_second,
        transport.p50_ms,
        transport.p99_ms,
        "—",
        "—",
        "—"
    );
    for (name, config) in &backends {
        // The store's commit rate, measured just before: SQLite's single-row commits (one
        // writer), PostgreSQL's single-row INSERTs from as many clients as senders.
        let commits = match &config.schema {
            None => {
                nightshift_bench::sqlite_commit_rate(dir.path(), if quick { 500 } else { 3000 })
                    .await?
            }
            Some(_) => {
                nightshift_bench::pg_insert_rate(config, CLIENTS, if quick { 1000 } else { 6000 })
                    .await?
            }
        };
        let alone = schema_alone(dir.path(), config, n as u64).await?;
        let store = Store::connect(config, Arc::new(SystemClock)).await?;
        store.migrate().await?;
        let base = serve(&store).await?;
        let first = post_all(&base, deliveries, 202).await?;
        let queued = || async {
            let counts = store.job_counts().await?;
            Ok::<_, anyhow::Error>(counts.iter().map(|jobs| jobs.count).sum::<i64>())
        };
        if queued().await? != n as i64 {
            bail!("{name}: expected {n} jobs, found {}", queued().await?);
        }
        let again = post_all(&base, deliveries, 200).await?;
        if queued().await? != n as i64 {
            bail!("{name}: a redelivery enqueued a job");
        }
        for (case, m) in [
            ("new delivery → 202 (run enqueued)", &first),
            ("redelivery → 200 (deduped)", &again),
        ] {
            println!(
                "{name:<12} {case:<34} {:>14.0} {:>9.2} {:>9.2} {commits:>14.0} {:>6.2}x {:>8.2}x",
                m.per_second,
                m.p50_ms,
                m.p99_ms,
                m.per_second / commits,
                m.per_second / alone
            );
        }
        let mixed = intake_beside_pool(&store, &base, beside_pool, n as u64).await?;
        store.close().await;
        nightshift_bench::drop_schema(config).await;
        println!(
            "{name:<12} {:<34} {alone:>14.0} {:>9} {:>9} {commits:>14.0} {:>6.2}x {:>9}",
            "schema alone: 3 rows, 1 commit",
            "—",
            "—",
            alone / commits,
            "1x"
        );
        mixed.print(name, commits, alone);
        notes.push(mixed.note(name, first.per_second));
    }
    println!();
    println!(
        "Each 202 is answered after the delivery is claimed, its run and start job committed and \
         the delivery recorded; latency is from sending the request to reading the answer. \
         commits/s is the store's own commit rate measured just before (SQLite: single-row \
         commits; PostgreSQL: single-row INSERTs from 8 clients), and ratio the deliveries' \
         share of it. The schema-alone row commits each delivery's record, run and start job \
         with plain SQL (PostgreSQL: one statement each, 8 connections; SQLite: one \
         transaction each, its one writer), no HTTP and no Nightshift code, measured just \
         before the deliveries; ÷ schema is each row's share of it. The pool rows run the \
         deliveries' runs with a pool of {SLOTS} slots (1 ms jobs): first alone, draining the \
         runs the new deliveries left queued; then while {n} more new deliveries arrive, each \
         of whose runs it takes as it comes."
    );
    for note in notes {
        println!("{note}");
    }
    Ok(())
}

/// The pool's slots in the rows with a pool.
const SLOTS: usize = 16;

/// What the pool and the intake did side by side (and the pool alone, before).
struct Mixed {
    /// Runs per second the pool completed alone, draining a queue.
    pool_alone: f64,
    /// The deliveries sent while the pool ran.
    intake: Measured,
    /// Runs per second the pool completed while those deliveries arrived.
    pool_beside: f64,
    /// Runs still queued or running when the last delivery was answered.
    behind: u64,
}

impl Mixed {
    /// Its three rows of the table.
    fn print(&self, name: &str, commits: f64, alone: f64) {
        println!(
            "{name:<12} {:<34} {:>14.0} {:>9} {:>9} {:>14} {:>7} {:>9}",
            format!("pool of {SLOTS} alone: runs done/s"),
            self.pool_alone,
            "—",
            "—",
            "—",
            "—",
            "—"
        );
        let m = &self.intake;
        println!(
            "{name:<12} {:<34} {:>14.0} {:>9.2} {:>9.2} {commits:>14.0} {:>6.2}x {:>8.2}x",
            "new delivery → 202, pool running",
            m.per_second,
            m.p50_ms,
            m.p99_ms,
            m.per_second / commits,
            m.per_second / alone
        );
        println!(
            "{name:<12} {:<34} {:>14.0} {:>9} {:>9} {:>14} {:>7} {:>9}",
            "… the pool meanwhile: runs done/s", self.pool_beside, "—", "—", "—", "—", "—"
        );
    }

    /// How the two shared the machine: the intake's rate beside the pool as a share of its
    /// rate alone, whether the pool kept up, and what simply adding their costs would allow
    /// (each delivery its intake's time alone plus its run's time in the pool alone).
    fn note(&self, name: &str, intake_alone: f64) -> String {
        let added = 1.0 / (1.0 / intake_alone + 1.0 / self.pool_alone);
        format!(
            "{name}: with the pool running, new deliveries went at {:.0}/s ({:.0}% of their rate \
             alone) and the pool ran {:.0} runs/s, {} behind at the last 202; their costs \
             simply added would allow both {added:.0}/s, so side by side they did {:.2}× that.",
            self.intake.per_second,
            self.intake.per_second / intake_alone * 100.0,
            self.pool_beside,
            self.behind,
            self.intake.per_second.min(self.pool_beside) / added
        )
    }
}

/// Runs a pool of [`SLOTS`] on `store`, where the `queued` runs the new deliveries enqueued
/// wait: measures it draining them alone, then sends `deliveries` (all new) to `url` while it
/// runs, and waits for it to finish their runs too.
async fn intake_beside_pool(
    store: &Store,
    url: &str,
    deliveries: &[Delivery],
    queued: u64,
) -> Result<Mixed> {
    use nightshift_bench::pool::{Worker, start_pool};
    use std::sync::atomic::{AtomicU64, Ordering};
    let completed = Arc::new(AtomicU64::new(0));
    let done = || completed.load(Ordering::Relaxed);
    let (stop, task) = start_pool(store, Worker::one_ms(&completed), SLOTS);
    let start = Instant::now();
    wait_until(|| done() >= queued, "the pool to drain the queue").await?;
    let pool_alone = queued as f64 / start.elapsed().as_secs_f64();
    let before = done();
    let start = Instant::now();
    let intake = post_all(url, deliveries, 202).await?;
    let window = start.elapsed().as_secs_f64();
    let in_window = done() - before;
    let all = queued + deliveries.len() as u64;
    wait_until(|| done() >= all, "the pool to run every delivery's run").await?;
    stop.cancel();
    task.await??;
    Ok(Mixed {
        pool_alone,
        intake,
        pool_beside: in_window as f64 / window,
        behind: deliveries.len() as u64 - in_window,
    })
}

/// Waits for `cond`, checking every millisecond, for at most two minutes.
async fn wait_until(cond: impl Fn() -> bool, what: &str) -> Result<()> {
    let give_up = Instant::now() + std::time::Duration::from_secs(120);
    while !cond() {
        if Instant::now() > give_up {
            bail!("gave up waiting for {what}");
        }
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    Ok(())
}

/// The API router with the bench hook, on a loopback port; returns its base URL.
async fn serve(store: &Store) -> Result<String> {
    let config = Config::parse(CONFIG, "bench config")?;
    let hooks = HookSet::build(&config.hooks, &["reviewer"], |_| Some(SECRET.into()))
        .map_err(anyhow::Error::msg)?;
    let state = ApiState {
        store: store.clone(),
        intake: nightshift_scheduler::Intake::new(store.clone(), ["reviewer"]),
        tokens: nightshift_runner::api_tokens::ApiTokens::single("bench"),
        hooks: Arc::new(hooks),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}/hooks/github", listener.local_addr()?);
    tokio::spawn(async move {
        let _ = axum::serve(listener, router(state)).await;
    });
    Ok(base)
}

/// A loopback server whose every POST reads the body and answers 202 with a small JSON body,
/// as the hook does, and nothing else; returns its URL.
async fn serve_transport_only() -> Result<String> {
    let app = axum::Router::new().route(
        "/hooks/github",
        axum::routing::post(|body: axum::body::Bytes| async move {
            (
                axum::http::StatusCode::ACCEPTED,
                axum::Json(serde_json::json!({ "bytes": body.len() })),
            )
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/hooks/github", listener.local_addr()?);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(url)
}

/// Sends every delivery once, `CLIENTS` at a time, expecting `status` for each.
async fn post_all(url: &str, deliveries: &[Delivery], status: u16) -> Result<Measured> {
    let http = nightshift_llm::http::build_client(nightshift_llm::HttpTimeouts::default())
        .map_err(anyhow::Error::msg)?;
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let deliveries = Arc::new(deliveries.to_vec());
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let (http, next, deliveries, url) = (
            http.clone(),
            next.clone(),
            deliveries.clone(),
            url.to_string(),
        );
        tasks.push(tokio::spawn(async move {
            let mut ms = Vec::new();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(d) = deliveries.get(i) else {
                    return Ok::<_, anyhow::Error>(ms);
                };
                let sent = Instant::now();
                let resp = http
                    .post(&url)
                    .header("X-GitHub-Event", "pull_request")
                    .header("X-GitHub-Delivery", &d.id)
                    .header("X-Hub-Signature-256", &d.signature)
                    .header("content-type", "application/json")
                    .body(d.body.as_ref().clone())
                    .send()
                    .await?;
                let got = resp.status().as_u16();
                let text = resp.text().await?;
                if got != status {
                    bail!(
                        "delivery {} answered {got}, expected {status}: {text}",
                        d.id
                    );
                }
                ms.push(sent.elapsed().as_secs_f64() * 1000.0);
            }
        }));
    }
    let mut ms = Vec::new();
    for t in tasks {
        ms.extend(t.await??);
    }
    let elapsed = start.elapsed().as_secs_f64();
    ms.sort_by(f64::total_cmp);
    Ok(Measured {
        per_second: ms.len() as f64 / elapsed,
        p50_ms: nightshift_bench::percentile(&ms, 0.50),
        p99_ms: nightshift_bench::percentile(&ms, 0.99),
    })
}

/// What the schema itself allows a delivery: its `done` record, its run and its start job
/// (their rows, index entries and constraints; the run with the idempotency key, concurrency
/// key and context a delivery of the bench's route gives it) committed with plain SQL into a
/// freshly migrated store that nothing else uses, `n` deliveries; per second.
async fn schema_alone(dir: &std::path::Path, base: &StoreConfig, n: u64) -> Result<f64> {
    let mut config = base.clone();
    match &base.schema {
        None => config.url = format!("sqlite://{}", dir.join("schema-alone.db").display()),
        Some(schema) => config.schema = Some(format!("{schema}_alone")),
    }
    let store = Store::connect(&config, Arc::new(SystemClock)).await?;
    store.migrate().await?;
    store.close().await;
    let rate = match &config.schema {
        None => sqlite_deliveries_alone(&config, n).await?,
        Some(_) => pg_deliveries_alone(&config, n).await?,
    };
    nightshift_bench::drop_schema(&config).await;
    Ok(rate)
}

/// The context a delivery of the bench's fixture gives its run.
const CONTEXT: &str = r#"{"github":{"repo":"octo-org/hello-world","number":1000,"head_sha":"7fd1a60b01f91b314f59955a4e4d4e80d8edf11d","installation_id":1}}"#;

/// One transaction per delivery on one connection (SQLite's single writer): the record, then
/// the run and its job through the `enqueue_start` view.
async fn sqlite_deliveries_alone(config: &StoreConfig, n: u64) -> Result<f64> {
    use sqlx::Connection;
    let mut conn = nightshift_bench::sqlite_connection(config).await?;
    let record = "INSERT INTO webhook_deliveries (hook, delivery_id, event, status, runs, \
                  received, first_received_at, last_received_at, finished_at) \
                  VALUES ('github', ?1, 'pull_request', 'done', ?2, 1, ?3, ?3, ?3)";
    let run = "INSERT INTO enqueue_start (run_id, agent, trigger_kind, input, idempotency_key, \
               now, lane, priority, run_at, max_attempts, notify, context, concurrency_key) \
               VALUES (?1, 'reviewer', 'webhook', ?2, ?3, ?4, 'default', 0, ?4, 3, TRUE, ?5, ?6)";
    let start = Instant::now();
    for i in 0..n {
        let now = nightshift_store::Clock::now(&SystemClock);
        let (delivery, run_id) = (format!("alone-{i:06}"), uuid::Uuid::now_v7().to_string());
        sqlx::query("BEGIN IMMEDIATE").execute(&mut conn).await?;
        sqlx::query(record)
            .bind(&delivery)
            .bind(runs_record(&run_id, i))
            .bind(now)
            .execute(&mut conn)
            .await?;
        sqlx::query(run)
            .bind(&run_id)
            .bind(prompt(i))
            .bind(format!("webhook:github:review:{delivery}"))
            .bind(now)
            .bind(CONTEXT)
            .bind(format!("pr-octo-org/hello-world-{}", 1000 + i))
            .execute(&mut conn)
            .await?;
        sqlx::query("COMMIT").execute(&mut conn).await?;
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    conn.close().await?;
    Ok(rate)
}

/// One statement per delivery (the record, the run and its job), `CLIENTS` connections.
async fn pg_deliveries_alone(config: &StoreConfig, n: u64) -> Result<f64> {
    let sql = "WITH record AS (\
         INSERT INTO webhook_deliveries (hook, delivery_id, event, status, runs, received, \
         first_received_at, last_received_at, finished_at) \
         VALUES ('github', $1, 'pull_request', 'done', $2, 1, $6, $6, $6)), \
         run AS (\
         INSERT INTO runs (id, agent, status, trigger_kind, input, idempotency_key, \
         concurrency_key, notify, context, created_at, updated_at) \
         VALUES ($3, 'reviewer', 'queued', 'webhook', $4, $5, $7, TRUE, $8, $6, $6) RETURNING id) \
         INSERT INTO jobs (run_id, kind, lane, priority, payload, run_at, max_attempts, \
         status, created_at, updated_at, concurrency_key) \
         SELECT run.id, 'start', 'default', 0, $4, $6, 3, 'queued', $6, $6, $7 FROM run";
    nightshift_bench::pg_statement_rate(config, CLIENTS, n, sql, |statement, i| {
        let delivery = format!("alone-{i:06}");
        let run_id = uuid::Uuid::now_v7().to_string();
        statement
            .bind(delivery.clone())
            .bind(runs_record(&run_id, i))
            .bind(run_id)
            .bind(prompt(i))
            .bind(format!("webhook:github:review:{delivery}"))
            .bind(nightshift_store::Clock::now(&SystemClock))
            .bind(format!("pr-octo-org/hello-world-{}", 1000 + i))
            .bind(CONTEXT)
    })
    .await
}

/// The prompt the bench's route renders for pull request `1000 + i`, with the trace line.
fn prompt(i: u64) -> String {
    format!(
        "Review pull request #{} in octo-org/hello-world: Retry uploads when the storage \
         backend answers 503\n\n[webhook github delivery=alone-{i:06} event=pull_request]",
        1000 + i
    )
}

/// The record a delivery keeps of the run it started.
fn runs_record(run_id: &str, i: u64) -> String {
    serde_json::json!([{
        "route": "review", "kind": "start", "run_id": run_id, "job_id": i + 1,
        "duplicate": false, "skipped": false, "superseded": []
    }])
    .to_string()
}
