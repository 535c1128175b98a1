//! An App's private key and the JWTs it signs (pure: the caller passes the time).

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde::Serialize;

/// How far back a JWT's `iat` is set, for clocks that drift (GitHub's advice: 60 s).
const IAT_SKEW_SECS: i64 = 60;
/// How long a JWT is valid (GitHub allows at most 10 minutes).
const JWT_LIFETIME_SECS: i64 = 9 * 60;

/// A GitHub App's id and private key.
#[derive(Clone)]
pub struct AppKey {
    app_id: String,
    key: EncodingKey,
}

impl std::fmt::Debug for AppKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppKey")
            .field("app_id", &self.app_id)
            .finish_non_exhaustive()
    }
}

/// A private key that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error(
    "the private key of GitHub App {app_id} is not an RSA key in PEM form ({reason}); use the \
     .pem file GitHub generated for the App (it starts with -----BEGIN RSA PRIVATE KEY-----)"
)]
pub struct KeyError {
    pub app_id: String,
    pub reason: String,
}

/// An App JWT that could not be signed; the message is the signer's.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct JwtError(jsonwebtoken::errors::Error);

#[derive(Serialize)]
struct Claims<'a> {
    iat: i64,
    exp: i64,
    iss: &'a str,
}

impl AppKey {
    /// The App `app_id` (its numeric id, or its client id) with the PEM private key `pem`
    /// (PKCS#1 as GitHub hands it out, or PKCS#8).
    pub fn from_pem(app_id: impl Into<String>, pem: &[u8]) -> Result<AppKey, KeyError> {
        let app_id = app_id.into();
        let key = EncodingKey::from_rsa_pem(pem).map_err(|e| KeyError {
            app_id: app_id.clone(),
            reason: e.to_string(),
        })?;
        let key = AppKey { app_id, key };
        // A key that parses may still not sign (a truncated file): find out now, not at the
        // first exchange.
        key.jwt(0).map_err(|e| KeyError {
            app_id: key.app_id.clone(),
            reason: e.to_string(),
        })?;
        Ok(key)
    }

    pub fn app_id(&self) -> &str {
        &self.app_id
    }

    /// The App JWT at `now` (seconds since the epoch).
    pub fn jwt(&self, now: i64) -> Result<String, JwtError> {
        let claims = Claims {
            iat: now - IAT_SKEW_SECS,
            exp: now + JWT_LIFETIME_SECS,
            iss: &self.app_id,
        };
        jsonwebtoken::encode(&Header::new(Algorithm::RS256), &claims, &self.key).map_err(JwtError)
    }
}
