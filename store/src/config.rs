//! Settings of the store, read from the `[database]` table of `nightshift.toml`.
//! Every field is optional; [`StoreConfig::validate`] explains any value it refuses.

use serde::Deserialize;

/// How SQLite syncs commits to disk (`PRAGMA synchronous`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Synchronous {
    /// Sync the WAL on every commit: a commit survives a power cut. The default.
    #[default]
    Full,
    /// Like `full`, and also sync the directory after the WAL is reset.
    Extra,
    /// Sync only at checkpoints: faster; the last commits may be lost on a power cut (not on
    /// a process crash).
    Normal,
}

/// The `[database]` settings.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// `sqlite://PATH` (the embedded default, `sqlite://nightshift.db`) or
    /// `postgres://USER@HOST:PORT/DB`.
    pub url: String,
    /// PostgreSQL only: the schema holding Nightshift's tables (created by `migrate`).
    /// Default: the connection's search path (normally `public`).
    pub schema: Option<String>,
    /// SQLite only: `full` (default), `extra` or `normal`.
    pub synchronous: Synchronous,
    /// SQLite only: how long a writer waits for another process's lock, in ms. Default 5000.
    pub busy_timeout_ms: u64,
    /// SQLite only: each connection's page cache, in MiB (1-4096). Default
    /// [`DEFAULT_CACHE_MIB`]. SQLite's own default (2 MiB) is smaller than the index pages a
    /// queue of a few thousand jobs touches, and every miss is a read from the file: a claim
    /// or an ack then costs several times more. Memory grows to at most this much per
    /// connection (the writer and each reader), and only as pages are read.
    pub cache_mib: Option<u32>,
    /// Connections per pool. Default 10 (SQLite: readers; it always has one writer.
    /// PostgreSQL: the shared pool; one more is kept for the worker pool's settles).
    pub max_connections: u32,
    /// How long to wait for a connection before giving up, in ms. Default 5000.
    pub connect_timeout_ms: u64,
}

/// The embedded default database.
pub const DEFAULT_URL: &str = "sqlite://nightshift.db";

/// The SQLite page cache per connection when `database.cache_mib` is not set, in MiB.
pub const DEFAULT_CACHE_MIB: u32 = 32;

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            url: DEFAULT_URL.to_string(),
            schema: None,
            synchronous: Synchronous::Full,
            busy_timeout_ms: 5000,
            cache_mib: None,
            max_connections: 10,
            connect_timeout_ms: 5000,
        }
    }
}

/// Which backend a URL selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    Sqlite,
    Postgres,
}

impl StoreConfig {
    /// A config for `url` with every other setting at its default.
    pub fn for_url(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            ..Self::default()
        }
    }

    /// The backend the URL selects, or an error saying which URLs are understood.
    pub fn backend(&self) -> Result<BackendKind, ConfigError> {
        let url = self.url.trim();
        if url.starts_with("sqlite:") {
            Ok(BackendKind::Sqlite)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(BackendKind::Postgres)
        } else {
            Err(ConfigError::UnsupportedUrl {
                shown: redact_url(url),
            })
        }
    }

    /// Checks every value; the error names the key and says what is allowed.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let kind = self.backend()?;
        if let Some(schema) = &self.schema {
            if kind != BackendKind::Postgres {
                return Err(ConfigError::SchemaNeedsPostgres);
            }
            let ok = !schema.is_empty()
                && schema.len() <= 48
                && schema
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
                && !schema.starts_with(|c: char| c.is_ascii_digit());
            if !ok {
                return Err(ConfigError::BadSchema {
                    schema: schema.clone(),
                });
            }
        }
        if let Some(mib) = self.cache_mib {
            if kind != BackendKind::Sqlite {
                return Err(ConfigError::CacheNeedsSqlite);
            }
            if !(1..=4096).contains(&mib) {
                return Err(ConfigError::BadCacheMib { mib });
            }
        }
        if self.max_connections == 0 {
            return Err(ConfigError::AtLeastOne {
                key: "database.max_connections",
            });
        }
        if self.connect_timeout_ms == 0 {
            return Err(ConfigError::AtLeastOne {
                key: "database.connect_timeout_ms",
            });
        }
        Ok(())
    }
}

/// What is wrong with a [`StoreConfig`]: each message names the key and says what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "database.url '{shown}' is not a supported database URL; use sqlite://PATH (for \
         example sqlite://nightshift.db) or postgres://USER@HOST:PORT/DATABASE"
    )]
    UnsupportedUrl {
        /// The URL with any password hidden.
        shown: String,
    },
    #[error("database.schema applies only to PostgreSQL URLs; remove it or use a postgres:// URL")]
    SchemaNeedsPostgres,
    #[error(
        "database.schema '{schema}' is not allowed; use 1-48 lowercase letters, digits and \
         underscores, not starting with a digit"
    )]
    BadSchema { schema: String },
    #[error("database.cache_mib applies only to SQLite URLs; remove it or use a sqlite:// URL")]
    CacheNeedsSqlite,
    #[error("database.cache_mib {mib} is not allowed; use 1-4096 (MiB per connection)")]
    BadCacheMib { mib: u32 },
    #[error("{key} must be at least 1")]
    AtLeastOne { key: &'static str },
}

/// The URL with any password replaced by `***`, for messages and logs.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let Some((auth, host)) = rest.split_once('@') else {
        return url.to_string();
    };
    match auth.split_once(':') {
        Some((user, _password)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_urls_and_schemas_are_explained() {
        let err = StoreConfig::for_url("mysql://root:hunter2@db/x")
            .validate()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("sqlite://PATH") && !err.contains("hunter2"),
            "{err}"
        );
        let mut c = StoreConfig::for_url("postgres://u@localhost/db");
        c.schema = Some("Bad-Name".into());
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("database.schema 'Bad-Name'")
        );
        let mut c = StoreConfig::for_url("sqlite://x.db");
        c.schema = Some("ok".into());
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("only to PostgreSQL")
        );
        assert!(StoreConfig::default().validate().is_ok());
        let mut c = StoreConfig::for_url("postgres://u@localhost/db");
        c.cache_mib = Some(64);
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("database.cache_mib applies only to SQLite")
        );
        let mut c = StoreConfig::for_url("sqlite://x.db");
        for (mib, ok) in [(0, false), (1, true), (4096, true), (4097, false)] {
            c.cache_mib = Some(mib);
            assert_eq!(c.validate().is_ok(), ok, "cache_mib {mib}");
        }
        c.cache_mib = Some(0);
        assert!(c.validate().unwrap_err().to_string().contains("use 1-4096"));
    }
}
