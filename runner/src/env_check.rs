//! Every environment variable a config names, checked at once when the daemon starts: one
//! start reports all the missing ones, instead of one per start.
//!
//! What is required: the API key of each provider an agent uses (its `api_key_env`, or the
//! kind's default), each signed hook's `secret_env`, `[github]`'s `token_env` and every App's
//! `private_key_env`, every notify target's `secret_env`, and every `runtime.secrets` name. A
//! variable that is set but empty (or only whitespace) counts as missing. The values are never
//! read into the message: only the keys and the variables' names.

use crate::config::Config;

/// What names each variable `config` requires that `is_set` says is missing, as "KEY names
/// $VAR" phrases (pure: `is_set` is the only look at the environment).
pub(crate) fn missing(config: &Config, is_set: impl Fn(&str) -> bool) -> Vec<String> {
    let mut out = Vec::new();
    let mut need = |var: &str, what: String| {
        if !is_set(var) {
            out.push(what);
        }
    };
    for (name, provider) in used_providers(config) {
        if let Some(var) = provider.key_env() {
            need(
                var,
                format!("providers.{name}.api_key_env: environment variable {var} is not set"),
            );
        }
    }
    for token in &config.server.tokens {
        let var = &token.token_env;
        need(
            var,
            format!(
                "server.tokens.{}.token_env: the environment variable {var} is not set",
                token.name
            ),
        );
    }
    for hook in &config.hooks {
        if let Some(var) = &hook.secret_env {
            need(
                var,
                format!(
                    "hooks.{}.secret_env: the environment variable {var} is not set",
                    hook.name
                ),
            );
        }
    }
    if let Some(var) = &config.github.token_env {
        need(
            var,
            format!("github.token_env names ${var}, which is not set"),
        );
    }
    for app in &config.github.apps {
        if let Some(var) = &app.private_key_env {
            need(
                var,
                format!(
                    "github.apps[{}].private_key_env names ${var}, which is not set",
                    app.name
                ),
            );
        }
    }
    for agent in &config.agents {
        for (i, target) in agent.notify.iter().enumerate() {
            let var = &target.secret_env;
            need(
                var,
                format!(
                    "agents.{}.notify[{i}].secret_env names ${var}, which is not set",
                    agent.name
                ),
            );
        }
    }
    for secret in &config.runtime.secrets {
        let var = &secret.name;
        need(
            var,
            format!("runtime.secrets names ${var}, which is not set"),
        );
    }
    out
}

/// The providers some agent uses, as its main provider or in `fallback` (`provider/model`).
fn used_providers(config: &Config) -> Vec<(&String, &nightshift_llm::ProviderConfig)> {
    config
        .providers
        .iter()
        .filter(|(name, _)| {
            config.agents.iter().any(|a| {
                &a.provider == *name
                    || a.fallback
                        .iter()
                        .any(|f| f.split_once('/').is_some_and(|(p, _)| p == name.as_str()))
            })
        })
        .collect()
}

/// Refuses a config that names unset variables, listing every one.
pub(crate) fn require_all(config: &Config) -> anyhow::Result<()> {
    let missing = missing(config, |var| {
        std::env::var(var).is_ok_and(|v| !v.trim().is_empty())
    });
    match missing.len() {
        0 => Ok(()),
        1 => anyhow::bail!(
            "invalid config: {} (or is empty); export it, then start again",
            missing[0]
        ),
        n => anyhow::bail!(
            "invalid config: {n} environment variables are not set (or are empty); export each, \
             then start again:\n  - {}",
            missing.join("\n  - ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_missing_variable_is_named_at_once() {
        let text = "[providers.claude]\nkind = \"anthropic\"\n\
            [providers.spare]\nkind = \"openai\"\napi_key_env = \"SPARE_KEY\"\n\
            [providers.unused]\nkind = \"openai\"\napi_key_env = \"UNUSED_KEY\"\n\
            [[agents]]\nname = \"digest\"\nprovider = \"claude\"\nmodel = \"m\"\n\
            fallback = [\"spare/gpt\"]\n\
            [[agents.notify]]\nurl = \"https://example.com/n\"\nsecret_env = \"NOTIFY_SECRET\"\n\
            [github]\ntoken_env = \"GH_TOKEN\"\n\
            [runtime]\nsecrets = [\"SLACK_URL\"]\n";
        let config = Config::parse(text, "t").unwrap();
        let set = ["GH_TOKEN"];
        let missing = missing(&config, |v| set.contains(&v));
        assert_eq!(
            missing,
            [
                "providers.claude.api_key_env: environment variable ANTHROPIC_API_KEY is not set",
                "providers.spare.api_key_env: environment variable SPARE_KEY is not set",
                "agents.digest.notify[0].secret_env names $NOTIFY_SECRET, which is not set",
                "runtime.secrets names $SLACK_URL, which is not set",
            ],
            "an unused provider's key is not required; a set one is not named"
        );
        let tokens = Config::parse(
            "[[server.tokens]]\nname = \"ci\"\ntoken_env = \"CI_TOKEN\"\nrole = \"operator\"\n",
            "t",
        )
        .unwrap();
        assert_eq!(
            super::missing(&tokens, |_| false),
            ["server.tokens.ci.token_env: the environment variable CI_TOKEN is not set"]
        );
    }
}
