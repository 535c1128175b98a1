//! `nightshift.toml`: every setting optional, layered file → environment → flags. Unknown keys
//! and invalid values are errors that name the key and say what is allowed.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use nightshift_store::StoreConfig;
use nightshift_worker::PoolConfig;
use serde::Deserialize;

/// The default config path, read only if it exists.
pub const DEFAULT_PATH: &str = "nightshift.toml";
/// Overrides `database.url`.
pub const DATABASE_URL_ENV: &str = "NIGHTSHIFT_DATABASE_URL";

/// The whole configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// `[database]`: where the store lives.
    pub database: StoreConfig,
    /// `[worker]`: the worker pool.
    pub worker: PoolConfig,
}

/// Overrides from the command line.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub database_url: Option<String>,
    pub slots: Option<usize>,
}

impl Config {
    /// Parses TOML text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> anyhow::Result<Config> {
        toml::from_str(text).map_err(|e| {
            let message = e.message();
            let location = e
                .span()
                .map(|span| {
                    let line = text[..span.start].matches('\n').count() + 1;
                    format!(" (line {line})")
                })
                .unwrap_or_default();
            anyhow::anyhow!("{origin}{location}: {message}")
        })
    }

    /// Loads the config: the file at `path` (or `./nightshift.toml` when it exists), then
    /// `NIGHTSHIFT_DATABASE_URL`, then `overrides`; then validates the result.
    pub fn load(path: Option<&Path>, overrides: &Overrides) -> anyhow::Result<Config> {
        let mut config = match path {
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .with_context(|| format!("cannot read the config file {}", p.display()))?;
                Config::parse(&text, &p.display().to_string())?
            }
            None => {
                let p = PathBuf::from(DEFAULT_PATH);
                match std::fs::read_to_string(&p) {
                    Ok(text) => Config::parse(&text, DEFAULT_PATH)?,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Config::default(),
                    Err(e) => bail!("cannot read {DEFAULT_PATH}: {e}"),
                }
            }
        };
        if let Ok(url) = std::env::var(DATABASE_URL_ENV)
            && !url.trim().is_empty()
        {
            config.database.url = url;
        }
        if let Some(url) = &overrides.database_url {
            config.database.url = url.clone();
        }
        if let Some(slots) = overrides.slots {
            config.worker.slots = slots;
        }
        config.validate()?;
        Ok(config)
    }

    /// Checks every section.
    pub fn validate(&self) -> anyhow::Result<()> {
        self.database
            .validate()
            .map_err(|e| anyhow::anyhow!("invalid config: {e}"))?;
        self.worker
            .validate()
            .map_err(|e| anyhow::anyhow!("invalid config: {e}"))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_keys_and_bad_values_name_the_key() {
        let err = Config::parse("[worker]\nslot = 3\n", "x.toml")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("x.toml (line 2)") && err.contains("unknown field `slot`"),
            "{err}"
        );
        assert!(err.contains("`slots`"), "lists the allowed keys: {err}");
        let err = Config::parse("[worker]\nslots = -1\n", "x.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 2") && err.contains("-1"), "{err}");
        let err = Config::parse("[database]\nsynchronous = \"off\"\n", "x.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("`full`") && err.contains("off"), "{err}");
        let c = Config::parse("[worker]\nslots = 0\n", "x.toml").unwrap();
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("worker.slots")
        );
        assert_eq!(Config::parse("", "x").unwrap(), Config::default());
    }
}
