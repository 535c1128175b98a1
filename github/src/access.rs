//! Which credential a request about a repository uses: the installation token of the first
//! configured App installed on it (found with `GET /repos/{owner}/{repo}/installation` under
//! the App's JWT, or the installation the config names), else the personal token, else
//! nothing — and the error then says what to configure.

use std::collections::HashMap;

use reqwest::Method;

use crate::api::{Api, Auth, GithubError};
use crate::app::AppKey;
use crate::tokens::{InstallationTokens, Secret};

/// One configured App.
#[derive(Debug)]
pub struct App {
    name: String,
    key: AppKey,
    tokens: InstallationTokens,
    /// The installation the config names (every repository goes through it).
    installation: Option<u64>,
    /// Installations found per repository (`None`: the App is not installed there).
    found: tokio::sync::Mutex<HashMap<String, Option<u64>>>,
}

impl App {
    pub fn new(name: impl Into<String>, api: Api, key: AppKey, installation: Option<u64>) -> App {
        App {
            name: name.into(),
            tokens: InstallationTokens::new(api, key.clone()),
            key,
            installation,
            found: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    /// The App's installation on `repo`, if it has one.
    async fn installation_for(&self, api: &Api, repo: &str) -> Result<Option<u64>, GithubError> {
        if let Some(id) = self.installation {
            return Ok(Some(id));
        }
        let mut found = self.found.lock().await;
        if let Some(known) = found.get(repo) {
            return Ok(*known);
        }
        let jwt = Secret::new(self.key.jwt(now()).map_err(|reason| GithubError::Decode {
            method: Method::GET,
            path: format!("/repos/{repo}/installation"),
            reason: format!("signing the App JWT of {} failed: {reason}", self.name),
        })?);
        let id = match api
            .request(
                Method::GET,
                &format!("/repos/{repo}/installation"),
                Auth::Bearer(&jwt),
                None,
            )
            .await
        {
            Ok(answer) => answer["id"].as_u64(),
            Err(GithubError::Status { status: 404, .. }) => None,
            Err(e) => return Err(e),
        };
        found.insert(repo.to_string(), id);
        Ok(id)
    }
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The daemon's GitHub: the API, the Apps and the personal token, shared by every slot.
#[derive(Debug)]
pub struct GithubAccess {
    api: Api,
    apps: Vec<App>,
    token: Option<Secret>,
    review_events: Vec<String>,
}

impl GithubAccess {
    pub fn new(api: Api, apps: Vec<App>, token: Option<Secret>) -> GithubAccess {
        GithubAccess {
            api,
            apps,
            token,
            review_events: vec!["COMMENT".into()],
        }
    }

    /// The review events (`COMMENT`, `REQUEST_CHANGES`, `APPROVE`) reviews may have; default
    /// `COMMENT` only.
    pub fn with_review_events(mut self, events: Vec<String>) -> GithubAccess {
        self.review_events = events;
        self
    }

    pub fn review_events(&self) -> &[String] {
        &self.review_events
    }

    pub fn api(&self) -> &Api {
        &self.api
    }

    /// The token for requests about `repo` (`owner/name`).
    pub async fn token_for(&self, repo: &str) -> Result<Secret, GithubError> {
        for app in &self.apps {
            if let Some(installation) = app.installation_for(&self.api, repo).await? {
                return app.tokens.token(installation).await;
            }
        }
        self.token.clone().ok_or_else(|| GithubError::NoCredential {
            repo: repo.to_string(),
            apps: self.apps.iter().map(|a| a.name.clone()).collect(),
        })
    }

    /// Forgets the cached token for `repo` (GitHub refused it: revoked or expired early).
    pub async fn forget(&self, repo: &str) {
        for app in &self.apps {
            let installation = match app.installation {
                Some(id) => Some(id),
                None => app.found.lock().await.get(repo).copied().flatten(),
            };
            if let Some(id) = installation {
                app.tokens.forget(id).await;
            }
        }
    }
}
