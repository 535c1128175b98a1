//! A worker process for the process tests: the real worker pool and signal handling, with a
//! handler whose work is described by the job's payload, so tests can kill it mid-job.
//!
//! Environment: `NS_DB_URL`, `NS_DB_SCHEMA` (optional), `NS_LEASE_MS`, `NS_HEARTBEAT_MS`,
//! `NS_GRACE_MS`, `NS_SLOTS`. Payload: `{"sleep_ms": N}` — the handler appends a `started`
//! event with its pid, sleeps N ms (stopping early on cancellation), appends `finished`, and
//! completes the run with its pid as the result.

use std::sync::Arc;
use std::time::Duration;

use nightshift_store::{RunEnd, Store, StoreConfig, SystemClock};
use nightshift_worker::{Handler, JobContext, JobOutcome, Pool, PoolConfig, shutdown_on_signals};

struct Sleeper;

impl Handler for Sleeper {
    async fn handle(&self, ctx: JobContext) -> JobOutcome {
        let pid = std::process::id();
        let payload: serde_json::Value =
            serde_json::from_str(&ctx.lease.job().payload).unwrap_or_default();
        let sleep_ms = payload["sleep_ms"].as_u64().unwrap_or(0);
        let started = serde_json::json!({ "pid": pid, "attempt": ctx.lease.job().attempts });
        if let Err(e) = ctx
            .lease
            .append_event("started", &started.to_string())
            .await
        {
            return JobOutcome::retry(e.to_string());
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(sleep_ms)) => {}
            () = ctx.cancel.cancelled() => return JobOutcome::Done(RunEnd::Cancelled),
        }
        let finished = serde_json::json!({ "pid": pid });
        if let Err(e) = ctx
            .lease
            .append_event("finished", &finished.to_string())
            .await
        {
            return JobOutcome::retry(e.to_string());
        }
        JobOutcome::succeeded(pid.to_string())
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let mut config = StoreConfig::for_url(std::env::var("NS_DB_URL")?);
    config.schema = std::env::var("NS_DB_SCHEMA").ok();
    let shutdown = shutdown_on_signals()?;
    let store = Store::connect(&config, Arc::new(SystemClock)).await?;
    store.migrate().await?;
    let pool_config = PoolConfig {
        slots: usize::try_from(env_u64("NS_SLOTS", 2))?,
        lease_ms: env_u64("NS_LEASE_MS", 1000),
        heartbeat_ms: env_u64("NS_HEARTBEAT_MS", 250),
        shutdown_grace_ms: env_u64("NS_GRACE_MS", 5000),
        poll_interval_ms: 100,
        ..PoolConfig::default()
    };
    pool_config.validate()?;
    let pool = Pool::new(store.clone(), Sleeper, pool_config);
    println!("ready {}", pool.worker_id());
    pool.run(shutdown).await?;
    store.close().await;
    Ok(())
}
