//! The checks of `[[agents]]` against the tables they name: `[providers.NAME]`, `[prices]`
//! and `[github]`.
//!
//! What it guarantees: [`Config::validate_models`] refuses, naming the agent and the key, a
//! provider that does not validate, an agent that does not, a name used twice, a model or
//! fallback whose provider is not configured, a cost budget over a model without a price,
//! a check run without a GitHub App, and `thinking = { type = "enabled" }` without
//! `budget_tokens` on an Anthropic model. The order of the checks is the order of the
//! messages a file with several problems gets, first one first.

use nightshift_agent::AgentConfig;

use super::{Config, Invalid, invalid};

impl Config {
    /// The providers, then each agent against them and the prices, then each agent's
    /// thinking (see the module doc).
    pub(super) fn validate_models(&self) -> anyhow::Result<()> {
        for (name, provider) in &self.providers {
            provider
                .validate()
                .map_err(|e| invalid(format!("providers.{name}.{}: {}", e.key, e.message)))?;
        }
        let prices = self.price_table()?;
        let mut seen = std::collections::BTreeSet::new();
        for agent in &self.agents {
            agent.validate().map_err(invalid)?;
            if agent.github.check_run.is_some() && self.github.apps.is_empty() {
                return Err(invalid(format!(
                    "agents.{}.github.check_run needs a GitHub App: only Apps can create check \
                     runs; add a [[github.apps]] entry (with the checks: write permission) or \
                     remove check_run",
                    agent.name
                )));
            }
            nightshift_agent::ModelPrices::for_agent(agent, &prices).map_err(invalid)?;
            if !seen.insert(agent.name.as_str()) {
                return Err(invalid(format!(
                    "agents: '{}' is defined twice; agent names must be unique",
                    agent.name
                )));
            }
            self.check_providers(agent).map_err(invalid)?;
        }
        for agent in &self.agents {
            self.check_thinking(agent).map_err(invalid)?;
            self.check_mcp(agent).map_err(invalid)?;
        }
        Ok(())
    }

    /// Each MCP server's secrets are in `runtime.secrets`, and an HTTP server's URL is on
    /// `runtime.http_allowlist` with every header secret allowed to go to its host: what
    /// would refuse every start is refused at load.
    fn check_mcp(&self, agent: &AgentConfig) -> Result<(), Invalid> {
        use nightshift_tools::{HttpAllowlist, SecretBindings};
        let known = self.runtime.secret_names();
        let allowlist = HttpAllowlist::new(self.runtime.http_allowlist.iter());
        let bindings = SecretBindings::from_specs(&self.runtime.secrets);
        for server in &agent.mcp {
            let at = |key: &str| format!("agents.{}.mcp.{}.{key}", agent.name, server.name);
            for (key, values) in [("env", &server.env), ("headers", &server.headers)] {
                for (name, value) in values {
                    for secret in SecretBindings::placeholders(value) {
                        if !known.iter().any(|k| k == secret) {
                            return Err(Invalid::table(
                                at(key),
                                format!(
                                    "{name} uses {{{{secret:{secret}}}}}, which is not in \
                                     runtime.secrets; add it there (the daemon reads it from \
                                     its environment and redacts it everywhere)"
                                ),
                            ));
                        }
                        if key == "env" && bindings.hosts(secret).is_some() {
                            return Err(Invalid::table(
                                at(key),
                                format!(
                                    "{name} uses {{{{secret:{secret}}}}}, which is bound to \
                                     hosts: a process could send it anywhere, so a bound \
                                     secret never goes into a stdio server's environment; \
                                     use an unbound secret, or an HTTP server with the secret \
                                     in its headers"
                                ),
                            ));
                        }
                    }
                }
            }
            if server.url.is_some() {
                crate::mcp_hub::check_http_target(server, &allowlist, &bindings)
                    .map_err(|(key, why)| Invalid::table(at(key), why))?;
            }
        }
        Ok(())
    }

    /// The agent's provider and each fallback's (`provider/model`) are configured.
    fn check_providers(&self, agent: &AgentConfig) -> Result<(), Invalid> {
        for model in std::iter::once(agent.provider.as_str()).chain(
            agent
                .fallback
                .iter()
                .filter_map(|f| f.split_once('/').map(|(p, _)| p)),
        ) {
            if !self.providers.contains_key(model) {
                let known: Vec<&str> = self.providers.keys().map(String::as_str).collect();
                return Err(Invalid::table(
                    format!("agents.{}", agent.name),
                    format!(
                        "provider '{model}' is not configured; add a [providers.{model}] table \
                         (configured: {})",
                        if known.is_empty() {
                            "none".to_string()
                        } else {
                            known.join(", ")
                        }
                    ),
                ));
            }
        }
        Ok(())
    }

    /// `thinking = { type = "enabled" }` needs `budget_tokens` on an Anthropic model (the
    /// Messages API refuses it without one), the agent's own or a fallback's.
    fn check_thinking(&self, agent: &AgentConfig) -> Result<(), Invalid> {
        let Some(t) = agent.thinking else {
            return Ok(());
        };
        if t.kind != nightshift_llm::ThinkingKind::Enabled || t.budget_tokens.is_some() {
            return Ok(());
        }
        let providers =
            std::iter::once(agent.provider.as_str()).chain(agent.fallback.iter().map(|f| {
                f.split_once('/')
                    .map_or(agent.provider.as_str(), |(p, _)| p)
            }));
        for name in providers {
            if self.providers.get(name).map(|p| p.kind)
                == Some(nightshift_llm::ProviderKind::Anthropic)
            {
                return Err(Invalid::table(
                    format!("agents.{}.thinking", agent.name),
                    format!(
                        "type = \"enabled\" needs budget_tokens on an Anthropic model \
                         (provider '{name}'); add budget_tokens = 1024 or more, below max_tokens"
                    ),
                ));
            }
        }
        Ok(())
    }
}
