//! The [`ForkGuard`] of a config: the agents it configures, the models each may answer a
//! fork with (its own, or one the price table knows), and the daemon's redactor as of now.
//! The API, the dashboard and the CLI check every fork and rerun through it before anything
//! is written.

use nightshift_agent::fork::ForkGuard;

use crate::config::Config;

/// The guard of `config`, storing through the redactor installed last
/// ([`crate::redaction::installed`]: the daemon's, as of its newest reload).
pub fn of(config: &Config) -> anyhow::Result<ForkGuard> {
    let table = config.price_table()?;
    ForkGuard::new(crate::redaction::installed(), &config.agents, &table)
        .map_err(|e| anyhow::anyhow!("invalid config: {e}"))
}
