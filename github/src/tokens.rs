//! Installation access tokens: exchanged for an App JWT, cached per installation until
//! [`REFRESH_BEFORE_SECS`] before they expire, refreshed then. One exchange at a time per
//! installation: callers that need its token while one is being fetched wait for that one;
//! callers about other installations never wait for it (a slow or hung exchange holds up
//! only its own installation's requests).

use std::time::{SystemTime, UNIX_EPOCH};

use reqwest::Method;
use serde_json::json;

use crate::api::{Api, Auth, GithubError};
use crate::app::AppKey;
use crate::keyed::Keyed;

/// A token is refreshed when it expires in less than this (GitHub's tokens live an hour).
pub const REFRESH_BEFORE_SECS: i64 = 5 * 60;

/// A credential. Its `Debug` never shows it; [`Secret::expose`] is the one way to read it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The value, for the `Authorization` header (and for the redactor's list).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(…)")
    }
}

#[derive(Debug, Clone)]
struct Cached {
    token: Secret,
    expires_at: i64,
}

/// The installation tokens of one GitHub App, shared by every slot of the daemon.
pub struct InstallationTokens {
    api: Api,
    key: AppKey,
    cache: Keyed<u64, Option<Cached>>,
}

impl std::fmt::Debug for InstallationTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InstallationTokens")
            .field("app_id", &self.key.app_id())
            .finish_non_exhaustive()
    }
}

impl InstallationTokens {
    pub fn new(api: Api, key: AppKey) -> InstallationTokens {
        InstallationTokens {
            api,
            key,
            cache: Keyed::new(),
        }
    }

    /// A token of `installation_id` valid for at least [`REFRESH_BEFORE_SECS`].
    pub async fn token(&self, installation_id: u64) -> Result<Secret, GithubError> {
        let mut cached = self.cache.lock(installation_id).await;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        if let Some(c) = cached.as_ref()
            && c.expires_at - now > REFRESH_BEFORE_SECS
        {
            return Ok(c.token.clone());
        }
        let fresh = self.exchange(installation_id, now).await?;
        let token = fresh.token.clone();
        *cached = Some(fresh);
        Ok(token)
    }

    /// Drops the cached token of `installation_id` (GitHub refused it: revoked), so the next
    /// [`Self::token`] fetches a new one.
    pub async fn forget(&self, installation_id: u64) {
        *self.cache.lock(installation_id).await = None;
    }

    async fn exchange(&self, installation_id: u64, now: i64) -> Result<Cached, GithubError> {
        let path = format!("/app/installations/{installation_id}/access_tokens");
        let jwt = self.key.jwt(now).map_err(|reason| GithubError::Decode {
            method: Method::POST,
            path: path.clone(),
            reason: format!("signing the App JWT failed: {reason}"),
        })?;
        let answer = self
            .api
            .request(
                Method::POST,
                &path,
                Auth::Bearer(&Secret::new(jwt)),
                Some(&json!({})),
            )
            .await?;
        let decode = |reason: String| GithubError::Decode {
            method: Method::POST,
            path: path.clone(),
            reason,
        };
        let token = answer["token"]
            .as_str()
            .filter(|t| !t.is_empty())
            .ok_or_else(|| decode("no token in the answer".into()))?;
        let expires_at = answer["expires_at"]
            .as_str()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .ok_or_else(|| decode("no RFC 3339 expires_at in the answer".into()))?
            .timestamp();
        tracing::info!(
            app_id = self.key.app_id(),
            installation_id,
            expires_in_s = expires_at - now,
            "GitHub installation token fetched"
        );
        Ok(Cached {
            token: Secret::new(token),
            expires_at,
        })
    }
}
