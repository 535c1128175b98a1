//! `nightshift serve`: the daemon with the process-wide settings that are the binary's, and
//! SIGHUP turned into a config reload (see `nightshift_runner::reload`).

use anyhow::Context;
use nightshift_store::Store;
use nightshift_worker::shutdown_on_signals;

use nightshift_runner::config::{Config, Overrides};
use nightshift_runner::{daemon, reload};

/// The daemon (see `nightshift_runner::daemon`), with the process-wide settings that are the
/// binary's: not dumpable (processes of the daemon's user cannot read its memory or
/// environment), SIGTERM/SIGINT turned into the shutdown and SIGHUP into a reload.
pub(crate) async fn serve(
    store: &Store,
    config: &Config,
    path: Option<std::path::PathBuf>,
    overrides: Overrides,
) -> anyhow::Result<()> {
    nightshift_sandbox::harden_daemon()
        .map_err(|e| anyhow::anyhow!("cannot harden the daemon: {e}"))?;
    let shutdown = shutdown_on_signals().context("cannot install signal handlers")?;
    // SIGHUP reloads the config file; it never stops the daemon (its default action would
    // kill it at once), also while it starts.
    let hangups = reload::hangups()?;
    let running = daemon::start(config, store.clone(), shutdown).await?;
    reload::on_sighup(hangups, running.reloader(), path, overrides);
    let stopped = running.wait().await;
    // The spans of the last jobs are still queued for the collector (a no-op without traces).
    tokio::task::spawn_blocking(nightshift_telemetry::traces::shutdown)
        .await
        .ok();
    stopped?;
    Ok(())
}
