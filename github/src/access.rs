//! Which credential a request about a repository uses: the installation token of the first
//! configured App installed on it (found with `GET /repos/{owner}/{repo}/installation` under
//! the App's JWT, or the installation the config names), else the personal token, else
//! nothing — and the error then says what to configure.

use std::time::{Duration, Instant};

use reqwest::Method;

use crate::api::{Api, Auth, GithubError};
use crate::app::AppKey;
use crate::keyed::Keyed;
use crate::tokens::{InstallationTokens, Secret};

/// One configured App.
#[derive(Debug)]
pub struct App {
    name: String,
    key: AppKey,
    tokens: InstallationTokens,
    /// The installation the config names (every repository goes through it).
    installation: Option<u64>,
    /// Installations found per repository (`None`: the App is not installed there), and
    /// when: a "not installed" is asked again after [`NOT_INSTALLED_TTL`]. One lookup at a
    /// time per repository; lookups about other repositories never wait for it.
    found: Keyed<String, Option<(Option<u64>, Instant)>>,
}

/// How long "this App is not installed on that repository" is believed: installing the App
/// takes effect within this, without a restart.
const NOT_INSTALLED_TTL: Duration = Duration::from_secs(300);

impl App {
    pub fn new(name: impl Into<String>, api: Api, key: AppKey, installation: Option<u64>) -> App {
        App {
            name: name.into(),
            tokens: InstallationTokens::new(api, key.clone()),
            key,
            installation,
            found: Keyed::new(),
        }
    }

    /// The App's installation on `repo`, if it has one.
    async fn installation_for(&self, api: &Api, repo: &str) -> Result<Option<u64>, GithubError> {
        if let Some(id) = self.installation {
            return Ok(Some(id));
        }
        let mut found = self.found.lock(repo.to_string()).await;
        if let Some((known, at)) = *found
            && (known.is_some() || at.elapsed() < NOT_INSTALLED_TTL)
        {
            return Ok(known);
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
        *found = Some((id, Instant::now()));
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
    marker_key: Vec<u8>,
}

impl GithubAccess {
    pub fn new(api: Api, apps: Vec<App>, token: Option<Secret>) -> GithubAccess {
        GithubAccess {
            api,
            apps,
            token,
            review_events: vec!["COMMENT".into()],
            marker_key: Vec::new(),
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
        self.token_for_delivery(repo, None).await
    }

    /// [`Self::token_for`], told the installation a webhook delivery about `repo` named:
    /// with one App configured (and no installation fixed in the config) that is its
    /// installation, so no lookup is needed.
    pub async fn token_for_delivery(
        &self,
        repo: &str,
        installation: Option<u64>,
    ) -> Result<Secret, GithubError> {
        if let ([app], Some(id)) = (self.apps.as_slice(), installation)
            && app.installation.is_none()
        {
            let mut found = app.found.lock(repo.to_string()).await;
            if !matches!(*found, Some((Some(_), _))) {
                *found = Some((Some(id), Instant::now()));
            }
        }
        for app in &self.apps {
            if let Some(installation) = app.installation_for(&self.api, repo).await? {
                return match app.tokens.token(installation).await {
                    // The installation is gone (the App was uninstalled, perhaps reinstalled
                    // under a new id): look again next time.
                    Err(e @ GithubError::Status { status: 404, .. }) => {
                        *app.found.lock(repo.to_string()).await = None;
                        Err(e)
                    }
                    done => done,
                };
            }
        }
        self.token.clone().ok_or_else(|| GithubError::NoCredential {
            repo: repo.to_string(),
            apps: self.apps.iter().map(|a| a.name.clone()).collect(),
        })
    }

    /// Forgets what is cached for `repo` — its token and the installation found for it
    /// (GitHub refused the token: revoked, or the App was reinstalled under a new id).
    pub async fn forget(&self, repo: &str) {
        for app in &self.apps {
            let found = app
                .found
                .lock(repo.to_string())
                .await
                .take()
                .and_then(|(id, _)| id);
            if let Some(id) = app.installation.or(found) {
                app.tokens.forget(id).await;
            }
        }
    }

    /// A short signature of `text` under a key derived from the configured credentials (the
    /// same on every daemon with the same config): markers carry it, so nobody without the
    /// credentials can write a marker the tools would take for their own.
    pub fn sign_marker(&self, text: &str) -> String {
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &self.marker_key);
        ring::hmac::sign(&key, text.as_bytes())
            .as_ref()
            .iter()
            .take(8)
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// Sets the secret material markers are signed with (the App keys and the token).
    pub fn with_marker_secret(mut self, material: &[u8]) -> GithubAccess {
        self.marker_key = ring::digest::digest(&ring::digest::SHA256, material)
            .as_ref()
            .to_vec();
        self
    }
}
