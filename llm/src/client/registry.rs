//! [`ClientRegistry`]: one shared [`ModelClient`] per [`ClientKey`] (provider endpoint, key
//! variable, model), so every worker slot calling the same model shares its pauses and its
//! circuit breaker.
//!
//! Guarantees: a key's client is built once, on first use, and handed out to every later
//! caller; a build that fails (a bad provider config) stores nothing and returns its
//! [`ConfigError`], so the next call tries again.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::ModelClient;
use crate::config::{ConfigError, ProviderConfig, ProviderKind};

/// What identifies a shared client: the provider endpoint, the key's variable and the model.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClientKey {
    pub kind: ProviderKind,
    pub base_url: Option<String>,
    pub api_key_env: Option<String>,
    pub script: Option<PathBuf>,
    pub model: String,
}

impl ClientKey {
    pub fn new(cfg: &ProviderConfig, model: &str) -> Self {
        Self {
            kind: cfg.kind,
            base_url: cfg.resolved_base_url(),
            api_key_env: cfg.key_env().map(str::to_string),
            script: cfg.script.clone(),
            model: model.to_string(),
        }
    }
}

/// Hands out one shared [`ModelClient`] per [`ClientKey`].
#[derive(Debug, Default)]
pub struct ClientRegistry {
    clients: Mutex<HashMap<ClientKey, Arc<ModelClient>>>,
}

impl ClientRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// The client for `model` on the provider `cfg`, built on first use.
    pub fn client(
        &self,
        cfg: &ProviderConfig,
        model: &str,
    ) -> Result<Arc<ModelClient>, ConfigError> {
        self.get_or_insert_with(ClientKey::new(cfg, model), || {
            let provider = cfg.build_provider()?;
            Ok(ModelClient::new(provider, model, cfg.client_config()))
        })
    }

    /// The client under `key`, made by `make` if there is none yet.
    pub fn get_or_insert_with(
        &self,
        key: ClientKey,
        make: impl FnOnce() -> Result<ModelClient, ConfigError>,
    ) -> Result<Arc<ModelClient>, ConfigError> {
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = clients.get(&key) {
            return Ok(c.clone());
        }
        let client = Arc::new(make()?);
        clients.insert(key, client.clone());
        Ok(client)
    }

    pub fn len(&self) -> usize {
        self.clients.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
