//! Process signals, handled in one place: the first SIGTERM or SIGINT starts a graceful
//! shutdown; a second one exits at once.

use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

/// A token that fires on the first SIGTERM or SIGINT. A second signal exits the process with
/// status 130 without draining.
pub fn shutdown_on_signals() -> std::io::Result<CancellationToken> {
    let token = CancellationToken::new();
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let fired = token.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: shutting down gracefully"),
            _ = int.recv() => tracing::info!("SIGINT: shutting down gracefully"),
        }
        fired.cancel();
        tokio::select! {
            _ = term.recv() => {},
            _ = int.recv() => {},
        }
        tracing::warn!("second signal: exiting without draining");
        std::process::exit(130);
    });
    Ok(token)
}
