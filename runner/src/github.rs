//! `[github]`: how the daemon authenticates to GitHub for the GitHub tools — GitHub Apps
//! (`[[github.apps]]`, the private key by environment variable or file, never inline) and/or
//! a personal or fine-grained token by environment variable — and the API they talk to
//! (GitHub Enterprise Server: `base_url`).
//!
//! `GithubConfig::validate` checks the shape at load; [`access`] reads the keys and builds
//! the daemon's [`GithubAccess`] at start (an unset variable, an unreadable file or a key
//! that is not an RSA PEM refuses the start, naming the key). The key and the token are
//! daemon-held secrets: redacted everywhere ([`GithubConfig::secret_values`]), never shown
//! to a model, sent only to the configured API.

use std::path::PathBuf;
use std::sync::Arc;

use nightshift_github::{Api, App, AppKey, GithubAccess, Secret};
use serde::Deserialize;

use crate::config::{Config, Invalid};

/// The `[github]` settings.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GithubConfig {
    /// The REST API: `https://api.github.com` (default), or an Enterprise Server's
    /// `https://HOST/api/v3`.
    pub base_url: String,
    /// An environment variable holding a personal or fine-grained token, used for a
    /// repository no configured App is installed on.
    pub token_env: Option<String>,
    /// GitHub Apps, tried in order: the first installed on a repository serves it.
    pub apps: Vec<GithubApp>,
    /// The verdicts `github_review` may post: `COMMENT` (default), `REQUEST_CHANGES`,
    /// `APPROVE`. Keep APPROVE out unless a bot's approval is meant to count: a pull request
    /// can ask the model to approve it.
    pub review_events: Vec<String>,
    /// How long a request to GitHub may wait for its answer (each read of it); a write whose
    /// answer does not come in time is looked up before it is sent again. Default 60.
    pub timeout_seconds: u64,
}

impl Default for GithubConfig {
    fn default() -> Self {
        GithubConfig {
            base_url: nightshift_github::GITHUB_API.into(),
            token_env: None,
            apps: Vec::new(),
            review_events: vec!["COMMENT".into()],
            timeout_seconds: 60,
        }
    }
}

/// One `[[github.apps]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GithubApp {
    /// A name for logs and errors.
    pub name: String,
    /// The App's id (a number) or client id (`Iv23…`).
    pub app_id: AppId,
    /// An environment variable holding the App's private key (the PEM text).
    pub private_key_env: Option<String>,
    /// A file holding the App's private key (relative to the config file's directory).
    pub private_key_file: Option<PathBuf>,
    /// The installation every repository goes through; default: the one installed on the
    /// repository (`GET /repos/{owner}/{repo}/installation`).
    pub installation_id: Option<u64>,
}

/// An App id: GitHub's numeric id, or its client id.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum AppId {
    Number(u64),
    Text(String),
}

impl std::fmt::Display for AppId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AppId::Number(n) => write!(f, "{n}"),
            AppId::Text(t) => f.write_str(t),
        }
    }
}

impl GithubConfig {
    /// Whether any credential is configured (else the GitHub tools say GitHub is not).
    pub(crate) fn is_configured(&self) -> bool {
        self.token_env.is_some() || !self.apps.is_empty()
    }

    /// The shape: names unique, one key source per App, a usable base URL.
    pub(crate) fn validate(&self) -> Result<(), Invalid> {
        nightshift_github::check_base_url(&self.base_url)?;
        nightshift_agent::github::check_review_events("github.review_events", &self.review_events)?;
        if !(1..=600).contains(&self.timeout_seconds) {
            return Err(Invalid::value(
                "github.timeout_seconds",
                format!(
                    "= {} is out of range; give 1 to 600 (default 60)",
                    self.timeout_seconds
                ),
            ));
        }
        let mut names = std::collections::BTreeSet::new();
        for app in &self.apps {
            let at = format!("github.apps[{}]", app.name);
            if app.name.trim().is_empty() {
                return Err(Invalid::table(
                    "github.apps",
                    "an App has an empty name; name each App",
                ));
            }
            if !names.insert(app.name.as_str()) {
                return Err(Invalid::table(
                    at,
                    "the name is used twice; App names must be unique",
                ));
            }
            if app.app_id.to_string().trim().is_empty() {
                return Err(Invalid::value(
                    format!("{at}.app_id"),
                    "is empty; write the App's id from its settings page",
                ));
            }
            match (&app.private_key_env, &app.private_key_file) {
                (Some(_), None) | (None, Some(_)) => {}
                _ => {
                    return Err(Invalid::table(
                        at,
                        "give exactly one of private_key_env (a variable holding the PEM) or \
                         private_key_file (a path to the .pem file); keys are never written in \
                         the config itself",
                    ));
                }
            }
        }
        Ok(())
    }

    /// The environment variables holding GitHub credentials.
    pub(crate) fn secret_envs(&self) -> Vec<String> {
        self.token_env
            .iter()
            .chain(self.apps.iter().filter_map(|a| a.private_key_env.as_ref()))
            .cloned()
            .collect()
    }

    /// The private keys held in files, as (what names it, the PEM), for redaction; files
    /// that cannot be read are left out (the start refuses them).
    pub(crate) fn key_files(&self, config: &Config) -> Vec<(String, String)> {
        self.apps
            .iter()
            .filter_map(|a| {
                let path = config.resolve_path(a.private_key_file.as_ref()?);
                let pem = std::fs::read_to_string(path).ok()?;
                Some((format!("github.apps[{}].private_key_file", a.name), pem))
            })
            .collect()
    }
}

/// The daemon's GitHub credentials, or `None` when `[github]` configures none. An unset
/// variable, an unreadable file or a key that is not an RSA PEM is an error naming the key.
pub fn access(config: &Config) -> anyhow::Result<Option<Arc<GithubAccess>>> {
    let gh = &config.github;
    if !gh.is_configured() {
        return Ok(None);
    }
    let answer = std::time::Duration::from_secs(gh.timeout_seconds);
    let http = nightshift_llm::http::build_client(nightshift_llm::HttpTimeouts {
        connect: std::time::Duration::from_secs(10).min(answer),
        read_idle: answer,
        total: answer.saturating_mul(2),
    })
    .map_err(|e| anyhow::anyhow!("cannot build the GitHub HTTP client: {e}"))?;
    let api =
        Api::new(http, &gh.base_url).map_err(|e| anyhow::anyhow!("invalid config: github.{e}"))?;
    let mut apps = Vec::new();
    // What the tools' markers are signed with: every credential's secret text.
    let mut marker_secret = Vec::new();
    for app in &gh.apps {
        let at = format!("github.apps[{}]", app.name);
        let pem = match (&app.private_key_env, &app.private_key_file) {
            (Some(var), _) => std::env::var(var)
                .ok()
                .filter(|v| !v.trim().is_empty())
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "invalid config: {at}.private_key_env names ${var}, which is not set; \
                         export the App's private key (the .pem text) in it"
                    )
                })?,
            (None, Some(file)) => {
                let path = config.resolve_path(file);
                std::fs::read_to_string(&path).map_err(|e| {
                    anyhow::anyhow!(
                        "invalid config: {at}.private_key_file: cannot read {}: {e}",
                        path.display()
                    )
                })?
            }
            (None, None) => unreachable!("validated: one key source"),
        };
        marker_secret.extend_from_slice(pem.as_bytes());
        let key = AppKey::from_pem(app.app_id.to_string(), pem.as_bytes())
            .map_err(|e| anyhow::anyhow!("invalid config: {at}: {e}"))?;
        apps.push(App::new(&app.name, api.clone(), key, app.installation_id));
    }
    let token = match &gh.token_env {
        None => None,
        Some(var) => Some(Secret::new(
            std::env::var(var)
                .ok()
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "invalid config: github.token_env names ${var}, which is not set; export \
                         the token in it, or remove token_env"
                    )
                })?,
        )),
    };
    if let Some(token) = &token {
        marker_secret.extend_from_slice(token.expose().as_bytes());
    }
    Ok(Some(Arc::new(
        GithubAccess::new(api, apps, token)
            .with_review_events(gh.review_events.clone())
            .with_marker_secret(&marker_secret),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(github: &str) -> Result<Config, String> {
        let text = format!(
            "[providers.p]\nkind = \"scripted\"\nscript = \"s.json\"\n\
             [[agents]]\nname = \"a\"\nprovider = \"p\"\nmodel = \"m\"\n\n{github}"
        );
        let config = Config::parse(&text, "github test").map_err(|e| e.to_string())?;
        config.validate().map_err(|e| e.to_string())?;
        Ok(config)
    }

    #[test]
    fn the_shape_is_checked_at_load_naming_the_key() {
        let ok = config(
            "[github]\nbase_url = \"https://ghe.example.com/api/v3\"\n\
             [[github.apps]]\nname = \"bot\"\napp_id = 123\nprivate_key_env = \"BOT_KEY\"\n\
             [[github.apps]]\nname = \"other\"\napp_id = \"Iv23liAbc\"\n\
             private_key_file = \"other.pem\"\ninstallation_id = 9\n",
        )
        .unwrap();
        assert_eq!(ok.github.apps[0].app_id.to_string(), "123");
        assert_eq!(ok.github.apps[1].app_id.to_string(), "Iv23liAbc");
        assert_eq!(ok.github.secret_envs(), ["BOT_KEY"]);
        assert!(!config("").unwrap().github.is_configured());
        for (github, says) in [
            (
                "[[github.apps]]\nname = \"bot\"\napp_id = 1\n",
                "github.apps[bot]: give exactly one of private_key_env",
            ),
            (
                "[github]\ntimeout_seconds = 0\n",
                "github.timeout_seconds = 0 is out of range; give 1 to 600",
            ),
            (
                "[github]\ntimeout_seconds = 601\n",
                "github.timeout_seconds = 601 is out of range; give 1 to 600",
            ),
            (
                "[[github.apps]]\nname = \"bot\"\napp_id = 1\nprivate_key_env = \"K\"\n\
                 private_key_file = \"k.pem\"\n",
                "github.apps[bot]: give exactly one",
            ),
            (
                "[[github.apps]]\nname = \"bot\"\napp_id = 1\nprivate_key_env = \"K\"\n\
                 [[github.apps]]\nname = \"bot\"\napp_id = 2\nprivate_key_env = \"L\"\n",
                "github.apps[bot]: the name is used twice",
            ),
            (
                "[github]\nbase_url = \"api.github.com\"\n",
                "github.base_url \"api.github.com\" is not a URL",
            ),
            (
                "[[github.apps]]\nname = \"bot\"\napp_id = 1\nprivate_key = \"-----BEGIN\"\n",
                "unknown field `private_key`",
            ),
        ] {
            let e = config(github).unwrap_err();
            assert!(e.contains(says), "{github}: {e}");
        }
    }

    #[test]
    fn the_start_refuses_a_key_it_cannot_use_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let unset = config(
            "[[github.apps]]\nname = \"bot\"\napp_id = 1\n\
             private_key_env = \"NIGHTSHIFT_GITHUB_TEST_NEVER_SET\"\n",
        )
        .unwrap();
        let e = access(&unset).unwrap_err().to_string();
        assert!(
            e.contains("github.apps[bot].private_key_env names $NIGHTSHIFT_GITHUB_TEST_NEVER_SET"),
            "{e}"
        );
        let mut missing =
            config("[[github.apps]]\nname = \"bot\"\napp_id = 1\nprivate_key_file = \"bot.pem\"\n")
                .unwrap();
        missing.base_dir = dir.path().to_path_buf();
        let e = access(&missing).unwrap_err().to_string();
        assert!(
            e.contains("github.apps[bot].private_key_file: cannot read"),
            "{e}"
        );
        std::fs::write(dir.path().join("bot.pem"), "not a key").unwrap();
        let e = access(&missing).unwrap_err().to_string();
        assert!(
            e.contains("github.apps[bot]") && e.contains("not an RSA key"),
            "{e}"
        );
        let unset_token =
            config("[github]\ntoken_env = \"NIGHTSHIFT_GITHUB_TEST_NEVER_SET\"\n").unwrap();
        let e = access(&unset_token).unwrap_err().to_string();
        assert!(e.contains("github.token_env names"), "{e}");
    }
}
