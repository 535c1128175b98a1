//! # hooks-bench
//!
//! Measures webhook intake end to end over HTTP on loopback and prints one table: signed
//! GitHub `pull_request` deliveries (the 22 KB `opened` payload from `tests/fixtures/github/`,
//! each for its own pull request number, so each run has its own concurrency key)
//! posted by 8 concurrent clients to `POST /hooks/github` of the real API router, each
//! verified (HMAC-SHA256), parsed, routed, templated, claimed in `webhook_deliveries`,
//! enqueued as a run and recorded before the 202 comes back. Then the same deliveries are
//! sent again: each redelivery is answered 200 from the deliveries table, enqueueing nothing.
//! Per backend: deliveries per second and p50/p99 latency from sending to the answer. No
//! worker runs, so nothing else competes for the store. First, the same requests to a handler
//! that only reads the body and answers 202: what loopback HTTP alone allows.
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
use nightshift_store::{Store, SystemClock};

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
    let deliveries: Vec<Delivery> = (0..n)
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
    let body_kb = deliveries[0].body.len() / 1024;

    println!(
        "## Webhook intake: {n} signed GitHub deliveries ({body_kb} KB each, one pull request each), {CLIENTS} concurrent clients, HTTP on loopback"
    );
    println!(
        "{:<12} {:<34} {:>14} {:>9} {:>9} {:>14} {:>7}",
        "backend", "case", "deliveries/s", "p50 ms", "p99 ms", "commits/s", "ratio"
    );
    // What loopback HTTP alone allows on this machine: the same requests to a handler that
    // only reads the body and answers 202, with the same client and runtime.
    let transport = post_all(&serve_transport_only().await?, &deliveries, 202).await?;
    println!(
        "{:<12} {:<34} {:>14.0} {:>9.2} {:>9.2} {:>14} {:>7}",
        "—",
        "HTTP only: read body → 202",
        transport.per_second,
        transport.p50_ms,
        transport.p99_ms,
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
        let store = Store::connect(config, Arc::new(SystemClock)).await?;
        store.migrate().await?;
        let base = serve(&store).await?;
        let first = post_all(&base, &deliveries, 202).await?;
        let queued = || async {
            let counts = store.job_counts().await?;
            Ok::<_, anyhow::Error>(counts.iter().map(|jobs| jobs.count).sum::<i64>())
        };
        if queued().await? != n as i64 {
            bail!("{name}: expected {n} jobs, found {}", queued().await?);
        }
        let again = post_all(&base, &deliveries, 200).await?;
        if queued().await? != n as i64 {
            bail!("{name}: a redelivery enqueued a job");
        }
        for (case, m) in [
            ("new delivery → 202 (run enqueued)", &first),
            ("redelivery → 200 (deduped)", &again),
        ] {
            println!(
                "{name:<12} {case:<34} {:>14.0} {:>9.2} {:>9.2} {commits:>14.0} {:>6.2}x",
                m.per_second,
                m.p50_ms,
                m.p99_ms,
                m.per_second / commits
            );
        }
        store.close().await;
        nightshift_bench::drop_schema(config).await;
    }
    println!();
    println!(
        "Each 202 is answered after the delivery is claimed, its run and start job committed and \
         the delivery recorded; latency is from sending the request to reading the answer. \
         commits/s is the store's own commit rate measured just before (SQLite: single-row \
         commits; PostgreSQL: single-row INSERTs from 8 clients), and ratio the deliveries' \
         share of it."
    );
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
        token: Arc::new("bench".into()),
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
