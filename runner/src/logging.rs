//! # Logs
//!
//! How the binary writes its log: `[log] format = "text"` (the default: one human-readable
//! line per event, coloured on a terminal) or `"json"` (one JSON object per line, for a log
//! store to index). Either way:
//!
//! - every line is redacted with every secret the config names before it is written (the
//!   writer is `crate::redaction::LogWriter`);
//! - every line written while a job runs carries the job's span: `run_id`, `job_id`,
//!   `attempt`, `kind`, `lane` and `agent` (in text as the `job{…}:` prefix; in JSON under
//!   `"span"`), so one run's lines are found by its id;
//! - the level filter is `RUST_LOG` when it is set (the `tracing_subscriber::EnvFilter`
//!   syntax, e.g. `RUST_LOG=debug` or `RUST_LOG=info,nightshift_llm=debug`), else the
//!   command's default.
//!
//! The logger is set once per process ([`init`]); the binary sets it after reading the
//! config, since the format is part of it.

use serde::Deserialize;
use tracing_subscriber::EnvFilter;

/// The `[log]` settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// `"text"` (default) or `"json"`.
    pub format: LogFormat,
}

/// How each log line is written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// One human-readable line per event; ANSI colours only on a terminal.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, the event's fields (the
    /// message as `message`) and the current span's fields under `span`.
    Json,
}

/// The level filter: `RUST_LOG` when it is set and valid, else `default` (such as
/// `"info,sqlx=warn"`). A malformed `RUST_LOG` falls back to the default and says so once
/// the logger is up.
fn filter(default: &str) -> (EnvFilter, Option<String>) {
    match std::env::var(EnvFilter::DEFAULT_ENV) {
        Ok(v) if !v.trim().is_empty() => match EnvFilter::try_new(&v) {
            Ok(f) => (f, None),
            Err(e) => (
                EnvFilter::new(default),
                Some(format!(
                    "RUST_LOG={v:?} is not a valid filter ({e}); logging at {default:?} instead"
                )),
            ),
        },
        _ => (EnvFilter::new(default), None),
    }
}

/// Sets the process's logger: `format`, filtered by `RUST_LOG` or `default_filter`, written
/// to stderr through the redacting writer. A second call does nothing (the first logger
/// stays).
pub fn init(format: LogFormat, default_filter: &str) {
    let (filter, complaint) = filter(default_filter);
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(crate::redaction::LogWriter);
    let installed = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
    };
    if installed.is_ok()
        && let Some(complaint) = complaint
    {
        tracing::warn!("{complaint}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_is_text_by_default_and_json_by_name() {
        let c: LogConfig = toml::from_str("").unwrap();
        assert_eq!(c.format, LogFormat::Text);
        let c: LogConfig = toml::from_str("format = \"json\"").unwrap();
        assert_eq!(c.format, LogFormat::Json);
        let e = toml::from_str::<LogConfig>("format = \"xml\"").unwrap_err();
        assert!(e.to_string().contains("unknown variant `xml`"), "{e}");
    }
}
