//! The runtime's [`ModelGateway`], made of the real providers: one shared [`ModelClient`]
//! per (provider, model, key) from a [`ClientRegistry`], and per agent a chain of its main
//! model followed by its fallbacks.

use std::collections::HashMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use nightshift_agent::{AgentDef, ModelFailure, ModelGateway};
use nightshift_llm::{
    ClientRegistry, ModelClient, ModelRequest, ModelResponse, ProviderError, send_with_fallback,
};
use tokio_util::sync::CancellationToken;

use crate::config::Config;

/// Model chains by agent name.
pub struct Gateway {
    chains: HashMap<String, Vec<Arc<ModelClient>>>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("agents", &self.chains.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Gateway {
    /// Builds every agent's chain (the config was validated: providers exist).
    pub fn build(config: &Config) -> anyhow::Result<Gateway> {
        let registry = ClientRegistry::new();
        let mut chains = HashMap::new();
        for agent in &config.agents {
            let mut chain = Vec::new();
            let links = std::iter::once(format!("{}/{}", agent.provider, agent.model)).chain(
                agent.fallback.iter().map(|f| {
                    if f.contains('/') {
                        f.clone()
                    } else {
                        format!("{}/{f}", agent.provider)
                    }
                }),
            );
            for link in links {
                let (provider, model) = link.split_once('/').expect("provider/model");
                let mut provider_config = config.providers[provider].clone();
                if let Some(script) = &provider_config.script {
                    provider_config.script = Some(config.resolve_path(script));
                }
                let client = registry.client(&provider_config, model).map_err(|e| {
                    anyhow::anyhow!(
                        "agents.{}: cannot set up {provider}/{model}: {}: {}",
                        agent.name,
                        e.key,
                        e.message
                    )
                })?;
                chain.push(client);
            }
            chains.insert(agent.name.clone(), chain);
        }
        Ok(Gateway { chains })
    }
}

impl ModelGateway for Gateway {
    fn call<'a>(
        &'a self,
        agent: &'a AgentDef,
        req: &'a ModelRequest,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ModelResponse, ModelFailure>> {
        Box::pin(async move {
            let Some(chain) = self.chains.get(&agent.config.name) else {
                return Err(ModelFailure::Fatal(format!(
                    "no model is configured for agent {}",
                    agent.config.name
                )));
            };
            send_with_fallback(chain, req, cancel)
                .await
                .map_err(failure)
        })
    }
}

/// How the loop should take a provider's error.
fn failure(e: ProviderError) -> ModelFailure {
    match e {
        ProviderError::Cancelled => ModelFailure::Cancelled,
        ProviderError::ContextTooLong { message, .. } => ModelFailure::ContextTooLong(message),
        // The model's own doing, already retried: waiting as for an outage would not help.
        e @ ProviderError::BadToolCall(_) => ModelFailure::Fatal(e.to_string()),
        // The message leads with the real cause (status, type, message), also when the
        // circuit is open; the hint is the breaker's next probe or the provider's retry-after.
        e if e.is_transient() => ModelFailure::Unavailable {
            retry_in: e.retry_hint(),
            error: e.to_string(),
        },
        e => ModelFailure::Fatal(e.to_string()),
    }
}
