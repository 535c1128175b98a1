//! What a fork is checked against before anything is written: the agents configured now, and
//! the models each may answer a fork with.
//!
//! What it guarantees:
//! - **A fork that could never run is refused at once.** A run whose agent is not configured
//!   here, or a `model` the agent could not answer with and price, is a
//!   [`ForkError::Invalid`] naming the models it may ask for; nothing is stored. Without this
//!   the fork would be made and fail at its first call.
//! - **A bounded set of models.** A fork's model is the agent's own (`model`, or a fallback of
//!   the same provider) or one the price table knows (built-in or `[prices]`), so its cost is
//!   counted at its own price and an operator's typo never becomes a new client or a new
//!   metric label.
//! - **Stored redacted.** The guard carries the daemon's redactor as it is now, through which
//!   the fork's event and input are stored.

use std::collections::BTreeMap;

use nightshift_tools::Redactor;

use super::ForkError;
use crate::config::{AgentConfig, ConfigError};
use crate::pricing::{ModelPrices, PriceTable};

/// The agents a fork may be made for, with the models each may answer with, and the
/// redactor its event is stored through. The default knows no agent: it refuses every fork.
#[derive(Debug, Clone, Default)]
pub struct ForkGuard {
    redactor: Redactor,
    agents: BTreeMap<String, AgentModels>,
}

/// One agent's models: its own (main first, then its fallbacks of the same provider) and
/// every price it can charge a call at.
#[derive(Debug, Clone)]
struct AgentModels {
    provider: String,
    own: Vec<String>,
    prices: ModelPrices,
}

impl ForkGuard {
    /// The guard for `agents` as configured (prices from `table`), storing through
    /// `redactor`. `Err` only for an agent the config itself would refuse (a cost budget over
    /// an unpriced model).
    pub fn new(
        redactor: Redactor,
        agents: &[AgentConfig],
        table: &PriceTable,
    ) -> Result<Self, ConfigError> {
        let mut by_name = BTreeMap::new();
        for agent in agents {
            let own = std::iter::once(agent.model.clone())
                .chain(
                    agent
                        .fallback
                        .iter()
                        .filter_map(|f| match f.split_once('/') {
                            None => Some(f.clone()),
                            Some((p, m)) if p == agent.provider => Some(m.to_string()),
                            Some(_) => None,
                        }),
                )
                .collect();
            let models = AgentModels {
                provider: agent.provider.clone(),
                own,
                prices: ModelPrices::for_agent(agent, table)?,
            };
            by_name.insert(agent.name.clone(), models);
        }
        Ok(Self {
            redactor,
            agents: by_name,
        })
    }

    /// What a fork's event and input are stored through.
    pub fn redactor(&self) -> &Redactor {
        &self.redactor
    }

    /// Whether a run of `agent` may be forked here, answered by `model` (`None`: the
    /// agent's own). `Err` says which agents or models it may be instead.
    pub fn check(&self, agent: &str, model: Option<&str>) -> Result<(), ForkError> {
        let Some(models) = self.agents.get(agent) else {
            let known: Vec<&str> = self.agents.keys().map(String::as_str).collect();
            return Err(ForkError::Invalid(format!(
                "the run's agent '{agent}' is not configured here (agents: {}): a fork of it \
                 could never run; configure the agent again to fork its runs",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            )));
        };
        let Some(model) = model else { return Ok(()) };
        if models.own.iter().any(|m| m == model) || models.prices.knows(model) {
            return Ok(());
        }
        Err(ForkError::Invalid(format!(
            "agent {agent} cannot answer a fork with model '{model}': it is not the agent's \
             model or a fallback on provider {} ({}), and Nightshift has no price for it, so \
             its cost could not be counted; ask for one of those or a model with a price \
             (Anthropic's and OpenAI's are built in), or add a [prices.\"{model}\"] table to \
             the config",
            models.provider,
            models.own.join(", ")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(json: serde_json::Value) -> AgentConfig {
        let mut base = serde_json::json!({"name": "a", "provider": "p", "model": "local-7b",
                                          "fallback": ["local-3b", "other/remote-1"]});
        base.as_object_mut()
            .unwrap()
            .extend(json.as_object().unwrap().clone());
        serde_json::from_value(base).unwrap()
    }

    fn guard() -> ForkGuard {
        ForkGuard::new(
            Redactor::default(),
            &[agent(serde_json::json!({}))],
            &PriceTable::builtin(),
        )
        .unwrap()
    }

    #[test]
    fn the_agents_own_models_and_priced_ones_may_answer_a_fork() {
        let g = guard();
        for model in [
            None,
            Some("local-7b"),
            Some("local-3b"),
            Some("claude-opus-4-1"),
        ] {
            g.check("a", model).unwrap();
        }
        // Dated ids of priced models are the same models.
        g.check("a", Some("claude-sonnet-4-5-20250929")).unwrap();
    }

    #[test]
    fn an_unknown_model_is_refused_naming_what_may_be_asked() {
        let g = guard();
        for model in ["lcoal-7b", "remote-1"] {
            let err = g.check("a", Some(model)).unwrap_err().to_string();
            assert!(
                err.contains(&format!("model '{model}'"))
                    && err.contains("provider p (local-7b, local-3b)")
                    && err.contains(&format!("[prices.\"{model}\"]")),
                "{err}"
            );
        }
    }

    #[test]
    fn a_run_of_an_agent_not_configured_cannot_be_forked() {
        let err = guard().check("gone", None).unwrap_err().to_string();
        assert!(
            err.contains("'gone' is not configured here (agents: a)"),
            "{err}"
        );
        let err = ForkGuard::default()
            .check("a", None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("(agents: none)"), "{err}");
    }
}
