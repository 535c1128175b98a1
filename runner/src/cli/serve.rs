//! `nightshift serve`: the daemon with the process-wide settings that are the binary's, and
//! the SIGHUP config check.

use anyhow::Context;
use nightshift_store::Store;
use nightshift_worker::shutdown_on_signals;

use nightshift_runner::config::{Config, Overrides};
use nightshift_runner::daemon;

/// The daemon (see `nightshift_runner::daemon`), with the process-wide settings that are the
/// binary's: not dumpable (processes of the daemon's user cannot read its memory or
/// environment), and SIGTERM/SIGINT turned into the shutdown.
pub(crate) async fn serve(
    store: &Store,
    config: &Config,
    path: Option<std::path::PathBuf>,
    overrides: Overrides,
) -> anyhow::Result<()> {
    nightshift_sandbox::harden_daemon()
        .map_err(|e| anyhow::anyhow!("cannot harden the daemon: {e}"))?;
    let shutdown = shutdown_on_signals().context("cannot install signal handlers")?;
    check_config_on_sighup(store.clone(), path, overrides)?;
    daemon::run(config, store.clone(), shutdown).await
}

/// What SIGHUP logs when the config file is valid.
const SIGHUP_VALID: &str = "SIGHUP: the config is valid, but this version applies a changed \
                            config only at a restart; still running on the config it started with";

/// SIGHUP never stops the daemon (its default action would kill it at once): the config file
/// is read and checked again as `serve` checks it at start, and the answer logged — an error
/// naming what is wrong, or that it is valid. Applying a changed config still takes a restart
/// (`systemctl restart` drains first); the log line says so.
fn check_config_on_sighup(
    store: Store,
    path: Option<std::path::PathBuf>,
    overrides: Overrides,
) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hup = signal(SignalKind::hangup()).context("cannot install the SIGHUP handler")?;
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            let checked = Config::load(path.as_deref(), &overrides)
                .and_then(|config| daemon::check(&config, &store));
            match checked {
                Ok(()) => tracing::warn!("{SIGHUP_VALID}"),
                Err(e) => tracing::error!(
                    error = %format!("{e:#}"),
                    "SIGHUP: the config is invalid; still running on the config it started with"
                ),
            }
        }
    });
    Ok(())
}
