//! The runtime's [`ModelGateway`], made of the real providers: one shared [`ModelClient`]
//! per (provider, model, key) from a [`ClientRegistry`], and per agent a chain of its main
//! model followed by its fallbacks. A request for another model of the agent's provider (a
//! fork told to answer with it) goes to that model first, then the same fallbacks.

use std::collections::HashMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use nightshift_agent::{AgentDef, ModelFailure, ModelGateway};
use nightshift_llm::{
    ClientRegistry, ModelClient, ModelRequest, ModelResponse, ProviderError, send_with_fallback,
};
use nightshift_telemetry::traces;
use tokio_util::sync::CancellationToken;

use crate::config::Config;

/// One model of a chain: its client, and the configured provider name and model it is
/// counted under in the metrics.
struct Link {
    client: Arc<ModelClient>,
    provider: String,
    model: String,
}

/// Model chains by agent name.
pub(crate) struct Gateway {
    chains: HashMap<String, Vec<Link>>,
    /// Where the clients come from, for a model no chain holds.
    registry: ClientRegistry,
    /// Each agent's provider (name and resolved config), for a model no chain holds.
    providers: HashMap<String, (String, nightshift_llm::ProviderConfig)>,
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
    pub(crate) fn build(config: &Config) -> anyhow::Result<Gateway> {
        let registry = ClientRegistry::new();
        let mut chains = HashMap::new();
        let mut providers = HashMap::new();
        for agent in &config.agents {
            let mut own = config.providers[agent.provider.as_str()].clone();
            if let Some(script) = &own.script {
                own.script = Some(config.resolve_path(script));
            }
            providers.insert(agent.name.clone(), (agent.provider.clone(), own));
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
                let link = Link::new(client, provider, model);
                publish_breaker(&link);
                chain.push(link);
            }
            chains.insert(agent.name.clone(), chain);
        }
        Ok(Gateway {
            chains,
            registry,
            providers,
        })
    }

    /// `chain` with `model` (of the agent's provider) in place of its main link.
    fn chain_for_model(
        &self,
        agent: &AgentDef,
        chain: &[Link],
        model: &str,
    ) -> Result<Vec<Link>, ModelFailure> {
        let Some((provider, cfg)) = self.providers.get(&agent.config.name) else {
            return Err(ModelFailure::Fatal(format!(
                "no provider is configured for agent {}",
                agent.config.name
            )));
        };
        let client = self.registry.client(cfg, model).map_err(|e| {
            ModelFailure::Fatal(format!(
                "agents.{}: cannot set up {provider}/{model}: {}: {}",
                agent.config.name, e.key, e.message
            ))
        })?;
        let main = Link::new(client, provider, model);
        let rest = chain.iter().skip(1).map(|l| Link {
            client: l.client.clone(),
            provider: l.provider.clone(),
            model: l.model.clone(),
        });
        Ok(std::iter::once(main).chain(rest).collect())
    }
}

impl Link {
    /// A link of `client`, its failed attempts counted under `provider`/`model`.
    fn new(client: Arc<ModelClient>, provider: &str, model: &str) -> Link {
        let (p, m) = (provider.to_string(), model.to_string());
        client.on_failed_attempt(move |e| {
            if let Some(kind) = e.kind() {
                nightshift_telemetry::model_error(&p, &m, kind);
            }
        });
        Link {
            client,
            provider: provider.to_string(),
            model: model.to_string(),
        }
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
            let overridden;
            let chain = match chain.first() {
                Some(main) if !req.model.is_empty() && req.model != main.model => {
                    if agent.config.budgets.max_cost_usd.is_some()
                        && !agent.prices.knows(&req.model)
                    {
                        return Err(ModelFailure::Fatal(format!(
                            "agent {} keeps a cost budget and has no price for model {}: a fork \
                             can answer with the agent's model or its fallbacks, or add \
                             [prices.\"{}\"] to the config",
                            agent.config.name, req.model, req.model
                        )));
                    }
                    overridden = self.chain_for_model(agent, chain, &req.model)?;
                    overridden.as_slice()
                }
                _ => chain.as_slice(),
            };
            let clients: Vec<Arc<ModelClient>> = chain.iter().map(|l| l.client.clone()).collect();
            let Some(main) = chain.first() else {
                return Err(ModelFailure::Fatal(format!(
                    "agent {} has no model",
                    agent.config.name
                )));
            };
            let span = traces::model_call_span(main.client.provider_name(), &main.model);
            let began = std::time::Instant::now();
            let sent = span
                .wrap(send_with_fallback(&clients, req, cancel))
                .await
                .map_err(failure);
            record_call(agent, chain, &sent, began.elapsed(), &span);
            span.end();
            sent
        })
    }
}

/// How the loop should take a provider's error.
fn failure(e: ProviderError) -> ModelFailure {
    match e {
        ProviderError::Cancelled => ModelFailure::Cancelled,
        ProviderError::ContextTooLong { message, .. } => ModelFailure::ContextTooLong(message),
        // The message leads with the real cause (status, type, message), also when the
        // circuit is open; the hint is the breaker's next probe or the provider's retry-after.
        e if e.is_transient() => ModelFailure::Unavailable {
            retry_in: e.retry_hint(),
            error: e.to_string(),
        },
        e => ModelFailure::Fatal(e.to_string()),
    }
}

/// Counts a call through `chain` in the metrics: a reply under the link that answered (its
/// model named by the reply; the main link when none matches), a failure under the main link;
/// then every link's breaker. Records the reply (or the failure's kind) on the call's `span`.
fn record_call(
    agent: &AgentDef,
    chain: &[Link],
    sent: &Result<ModelResponse, ModelFailure>,
    took: std::time::Duration,
    span: &traces::TraceSpan,
) {
    let (link, status, tokens, cost_usd) = match sent {
        Ok(resp) => {
            let link = answering_link(chain, &resp.model);
            let u = &resp.usage;
            let tokens = nightshift_telemetry::Tokens {
                input: u.input_tokens,
                output: u.output_tokens,
                cache_read: u.cache_read_input_tokens,
                cache_write: u.cache_creation_input_tokens,
            };
            let cost_usd = agent.prices.cost(&resp.model, u);
            traces::record_model_reply(
                span,
                Ok(traces::ModelReply {
                    model: &resp.model,
                    input_tokens: u.input_tokens,
                    output_tokens: u.output_tokens,
                    cache_read_tokens: u.cache_read_input_tokens,
                    cache_write_tokens: u.cache_creation_input_tokens,
                    finish_reason: resp.stop_reason.as_str(),
                    cost_usd,
                    retries: resp.retries,
                }),
            );
            (link, "ok", tokens, cost_usd)
        }
        Err(e) => {
            traces::record_model_reply(span, Err(failure_status(e)));
            (chain.first(), failure_status(e), Default::default(), 0.0)
        }
    };
    if let Some(link) = link {
        nightshift_telemetry::model_call(&nightshift_telemetry::ModelCall {
            provider: &link.provider,
            model: &link.model,
            status,
            duration: took,
            tokens,
            cost_usd,
        });
    }
    chain.iter().for_each(publish_breaker);
}

/// The link whose model answered: named exactly by the reply, or the start of its name (a
/// provider may answer an alias with a dated snapshot), else the main link.
fn answering_link<'a>(chain: &'a [Link], answered: &str) -> Option<&'a Link> {
    chain
        .iter()
        .find(|l| l.model == answered)
        .or_else(|| {
            chain
                .iter()
                .find(|l| answered.starts_with(l.model.as_str()))
        })
        .or(chain.first())
}

/// The metrics' name of a failed call.
fn failure_status(e: &ModelFailure) -> &'static str {
    match e {
        ModelFailure::Unavailable { .. } => "unavailable",
        ModelFailure::Fatal(_) => "fatal",
        ModelFailure::ContextTooLong(_) => "context_too_long",
        ModelFailure::Cancelled => "cancelled",
    }
}

/// Sets the metrics' breaker gauge of `link`.
fn publish_breaker(link: &Link) {
    use nightshift_llm::BreakerState;
    use nightshift_telemetry::Breaker;
    let state = match link.client.breaker_state() {
        BreakerState::Closed { .. } => Breaker::Closed,
        BreakerState::HalfOpen { .. } => Breaker::HalfOpen,
        BreakerState::Open { .. } => Breaker::Open,
    };
    nightshift_telemetry::breaker(&link.provider, &link.model, state);
}
