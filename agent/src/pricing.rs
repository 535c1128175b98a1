//! What a model call costs, so that a cost budget (`budgets.max_cost_usd`) always means
//! something.
//!
//! What it guarantees:
//! - **Known models are priced out of the box.** [`PriceTable::builtin`] holds the list prices
//!   of the Anthropic and OpenAI models in [`BUILTIN`] (USD per million tokens: input, output,
//!   cache writes, cache reads). A model id is looked up as given, then without a date suffix
//!   (`claude-sonnet-4-5-20250929` → `claude-sonnet-4-5`) or a `-latest` suffix, so the id a
//!   provider answers with finds the same price as the one configured.
//! - **Overridable.** A `[prices."MODEL"]` table in the config replaces or adds an entry for
//!   every agent; an agent's own `pricing` is the price of its main model.
//! - **Never silently free.** [`ModelPrices::for_agent`] refuses an agent that has a cost
//!   budget while one of its models (main or fallback) has no price, naming the key and
//!   the model; an agent without a cost budget may use unpriced models (their calls count
//!   $0, and docs/concepts/models.md says so).
//!
//! The choice of a price is a pure function of the table and the ids; nothing here does I/O.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::config::ConfigError;

/// USD per million tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Pricing {
    pub input: f64,
    pub output: f64,
    pub cache_write: f64,
    pub cache_read: f64,
}

/// A price of a [`Pricing`] that is not a finite number of dollars at least 0; `Display`
/// follows the config key it came from ("has input = -1; …").
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[error("has {name} = {value}; a price is US dollars per million tokens, 0 or more")]
pub struct BadPrice {
    /// Which price: `input`, `output`, `cache_write` or `cache_read`.
    pub name: &'static str,
    pub value: f64,
}

impl Pricing {
    /// The cost of one call's usage.
    pub fn cost(&self, u: &nightshift_llm::Usage) -> f64 {
        let per = |tokens: u64, price: f64| tokens as f64 * price / 1_000_000.0;
        per(u.input_tokens, self.input)
            + per(u.output_tokens, self.output)
            + per(u.cache_creation_input_tokens, self.cache_write)
            + per(u.cache_read_input_tokens, self.cache_read)
    }

    /// `Err` names the first price that is not a finite number of dollars at least 0, worded
    /// to follow the key ("has input = -1; …").
    pub fn check(&self) -> Result<(), BadPrice> {
        for (name, value) in [
            ("input", self.input),
            ("output", self.output),
            ("cache_write", self.cache_write),
            ("cache_read", self.cache_read),
        ] {
            if !(value.is_finite() && value >= 0.0) {
                return Err(BadPrice { name, value });
            }
        }
        Ok(())
    }

    const fn of(input: f64, output: f64, cache_write: f64, cache_read: f64) -> Pricing {
        Pricing {
            input,
            output,
            cache_write,
            cache_read,
        }
    }
}

/// Anthropic's list prices: cache writes (5-minute) at 1.25x input, cache reads at 0.1x.
const fn anthropic(input: f64, output: f64) -> Pricing {
    Pricing::of(input, output, input * 1.25, input / 10.0)
}

/// OpenAI's list prices: cached input is billed at `cached`; a cache write costs nothing
/// extra (it is ordinary input).
const fn openai(input: f64, cached: f64, output: f64) -> Pricing {
    Pricing::of(input, output, input, cached)
}

/// The built-in prices, USD per million tokens, as the providers list them (December 2026).
/// Long-context surcharges (over 200k input tokens) and batch discounts are not modelled.
pub const BUILTIN: &[(&str, Pricing)] = &[
    // Anthropic
    ("claude-opus-4-5", anthropic(5.0, 25.0)),
    ("claude-opus-4-1", anthropic(15.0, 75.0)),
    ("claude-opus-4-0", anthropic(15.0, 75.0)),
    ("claude-opus-4", anthropic(15.0, 75.0)),
    ("claude-sonnet-4-5", anthropic(3.0, 15.0)),
    ("claude-sonnet-4-0", anthropic(3.0, 15.0)),
    ("claude-sonnet-4", anthropic(3.0, 15.0)),
    ("claude-3-7-sonnet", anthropic(3.0, 15.0)),
    ("claude-3-5-sonnet", anthropic(3.0, 15.0)),
    ("claude-haiku-4-5", anthropic(1.0, 5.0)),
    ("claude-3-5-haiku", anthropic(0.8, 4.0)),
    ("claude-3-opus", anthropic(15.0, 75.0)),
    ("claude-3-haiku", Pricing::of(0.25, 1.25, 0.30, 0.03)),
    // OpenAI
    ("gpt-5", openai(1.25, 0.125, 10.0)),
    ("gpt-5-mini", openai(0.25, 0.025, 2.0)),
    ("gpt-5-nano", openai(0.05, 0.005, 0.40)),
    ("gpt-4.1", openai(2.0, 0.50, 8.0)),
    ("gpt-4.1-mini", openai(0.40, 0.10, 1.60)),
    ("gpt-4.1-nano", openai(0.10, 0.025, 0.40)),
    ("gpt-4o", openai(2.50, 1.25, 10.0)),
    ("gpt-4o-mini", openai(0.15, 0.075, 0.60)),
    ("o1", openai(15.0, 7.50, 60.0)),
    ("o3", openai(2.0, 0.50, 8.0)),
    ("o3-mini", openai(1.10, 0.55, 4.40)),
    ("o4-mini", openai(1.10, 0.275, 4.40)),
];

/// Model ids to prices: the built-in list with the config's `[prices]` laid over it.
#[derive(Debug, Clone, PartialEq)]
pub struct PriceTable {
    entries: BTreeMap<String, Pricing>,
}

impl Default for PriceTable {
    fn default() -> Self {
        Self::builtin()
    }
}

impl PriceTable {
    /// The built-in prices ([`BUILTIN`]).
    pub fn builtin() -> Self {
        Self {
            entries: BUILTIN
                .iter()
                .map(|(model, price)| (model.to_string(), *price))
                .collect(),
        }
    }

    /// The built-in prices with `overrides` (`[prices."MODEL"]`) replacing or adding entries.
    /// `Err` names the bad entry's key.
    pub fn with_overrides(overrides: &BTreeMap<String, Pricing>) -> Result<Self, ConfigError> {
        let mut table = Self::builtin();
        for (model, price) in overrides {
            if model.trim().is_empty() {
                return Err(ConfigError::value(
                    "prices",
                    "has an entry with an empty model id; key each entry by the model id \
                     agents use, like [prices.\"claude-sonnet-4-5\"]",
                ));
            }
            price
                .check()
                .map_err(|e| ConfigError::value(format!("prices.\"{model}\""), e.to_string()))?;
            table.entries.insert(model.clone(), *price);
        }
        Ok(table)
    }

    /// The price of `model`: as given, then without a date or `-latest` suffix.
    pub fn lookup(&self, model: &str) -> Option<Pricing> {
        self.entries
            .get(model)
            .or_else(|| self.entries.get(base_id(model)))
            .copied()
    }
}

/// `model` without a trailing release date (`-20250929`, `-2025-09-29`) or `-latest`.
pub fn base_id(model: &str) -> &str {
    if let Some(stripped) = model.strip_suffix("-latest") {
        return stripped;
    }
    let bytes = model.as_bytes();
    let digits = |s: &[u8]| s.iter().all(u8::is_ascii_digit);
    // -YYYYMMDD
    if bytes.len() > 9 && bytes[bytes.len() - 9] == b'-' && digits(&bytes[bytes.len() - 8..]) {
        return &model[..model.len() - 9];
    }
    // -YYYY-MM-DD
    if bytes.len() > 11 {
        let tail = &bytes[bytes.len() - 11..];
        if tail[0] == b'-'
            && digits(&tail[1..5])
            && tail[5] == b'-'
            && digits(&tail[6..8])
            && tail[8] == b'-'
            && digits(&tail[9..11])
        {
            return &model[..model.len() - 11];
        }
    }
    model
}

/// The prices of one agent's models (main and fallbacks), resolved when the config loads,
/// and the table they came from (a fork may answer with another model the table prices).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelPrices {
    /// The main model's id and price, when it has one.
    main: Option<(String, Pricing)>,
    /// Every model of the agent that has a price, by id.
    by_model: BTreeMap<String, Pricing>,
    /// Every price the config knows (built-in and `[prices]`).
    table: PriceTable,
}

impl ModelPrices {
    /// The prices of `agent`'s models from `table`, its own `pricing` taking the main model.
    /// `Err` when the agent has a cost budget and a model of its has no price: the error
    /// names `agents.NAME.budgets.max_cost_usd` and the model, and says how to add one.
    pub fn for_agent(agent: &crate::AgentConfig, table: &PriceTable) -> Result<Self, ConfigError> {
        let mut prices = ModelPrices {
            table: table.clone(),
            ..ModelPrices::default()
        };
        let mut unpriced = Vec::new();
        for (i, model) in agent.model_ids().into_iter().enumerate() {
            let price = match (&agent.pricing, i) {
                (Some(own), 0) => Some(*own),
                _ => table.lookup(&model),
            };
            match price {
                Some(p) => {
                    if i == 0 {
                        prices.main = Some((model.clone(), p));
                    }
                    prices.by_model.insert(model, p);
                }
                None => unpriced.push(model),
            }
        }
        if agent.budgets.max_cost_usd.is_some() && !unpriced.is_empty() {
            return Err(ConfigError::value(
                format!("agents.{}.budgets.max_cost_usd", agent.name),
                format!(
                    "cannot be kept: Nightshift has no price for model {} (it knows Anthropic's \
                     and OpenAI's models; see docs/concepts/models.md, \"Model prices\"); add a \
                     [prices.\"{}\"] table with input, output, cache_write and cache_read in \
                     USD per million tokens, or set the agent's `pricing`",
                    unpriced
                        .iter()
                        .map(|m| format!("'{m}'"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    unpriced[0]
                ),
            ));
        }
        Ok(prices)
    }

    /// What a call answered by `model` with `usage` cost: the agent's price for that model
    /// (the id as the provider answered it, or without its date suffix), else the table's
    /// (a fork told to answer with another model), else the main model's, else 0.
    pub fn cost(&self, model: &str, usage: &nightshift_llm::Usage) -> f64 {
        let price = self.own(model).or_else(|| self.table.lookup(model));
        let price = price.or(self.main.as_ref().map(|(_, p)| *p));
        price.map_or(0.0, |p| p.cost(usage))
    }

    /// The agent's own price for `model` (its id, or its id without a date suffix).
    fn own(&self, model: &str) -> Option<Pricing> {
        self.by_model
            .get(model)
            .or_else(|| {
                self.by_model
                    .iter()
                    .find(|(id, _)| base_id(id) == base_id(model))
                    .map(|(_, p)| p)
            })
            .copied()
    }

    /// Whether `model` has a price of its own (the agent's, or the table's: its id, or its
    /// id without a date suffix), not only the main model's it would be charged at.
    pub fn knows(&self, model: &str) -> bool {
        self.own(model).is_some() || self.table.lookup(model).is_some()
    }

    /// Whether the main model has a price.
    pub fn main_is_priced(&self) -> bool {
        self.main.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nightshift_llm::Usage;

    fn agent(json: serde_json::Value) -> crate::AgentConfig {
        let mut base =
            serde_json::json!({"name": "a", "provider": "p", "model": "claude-sonnet-4-5"});
        base.as_object_mut()
            .unwrap()
            .extend(json.as_object().unwrap().clone());
        serde_json::from_value(base).unwrap()
    }

    fn usage(input: u64, output: u64, write: u64, read: u64) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
            cache_creation_input_tokens: write,
            cache_read_input_tokens: read,
        }
    }

    #[test]
    fn dated_and_latest_ids_find_the_base_price() {
        let t = PriceTable::builtin();
        let sonnet = t.lookup("claude-sonnet-4-5").unwrap();
        assert_eq!(t.lookup("claude-sonnet-4-5-20250929"), Some(sonnet));
        assert_eq!(t.lookup("claude-sonnet-4-5-latest"), Some(sonnet));
        assert_eq!(t.lookup("gpt-4o-2024-08-06"), t.lookup("gpt-4o"));
        assert_eq!(t.lookup("gpt-4o-mini"), Some(openai(0.15, 0.075, 0.60)));
        assert_eq!(t.lookup("llama3.1:8b"), None);
        assert_eq!(base_id("o3"), "o3");
        assert_eq!(base_id("x-2025"), "x-2025");
    }

    #[test]
    fn a_call_costs_its_tokens_at_each_kinds_price() {
        let sonnet = PriceTable::builtin().lookup("claude-sonnet-4-5").unwrap();
        // 1M input at $3, 1M output at $15, 1M cache writes at $3.75, 1M reads at $0.30.
        let cost = sonnet.cost(&usage(1_000_000, 1_000_000, 1_000_000, 1_000_000));
        assert!((cost - 22.05).abs() < 1e-9, "{cost}");
    }

    #[test]
    fn overrides_replace_and_add_and_bad_ones_name_their_key() {
        let mut over = BTreeMap::new();
        over.insert("local-llama".to_string(), Pricing::of(0.1, 0.2, 0.0, 0.0));
        over.insert("gpt-4o".to_string(), Pricing::of(1.0, 2.0, 1.0, 0.5));
        let t = PriceTable::with_overrides(&over).unwrap();
        assert_eq!(
            t.lookup("local-llama"),
            Some(Pricing::of(0.1, 0.2, 0.0, 0.0))
        );
        assert_eq!(t.lookup("gpt-4o").unwrap().input, 1.0);
        over.insert("bad".to_string(), Pricing::of(-1.0, 0.0, 0.0, 0.0));
        let err = PriceTable::with_overrides(&over).unwrap_err().to_string();
        assert!(err.contains("prices.\"bad\" has input = -1"), "{err}");
    }

    #[test]
    fn a_cost_budget_over_an_unpriced_model_is_refused_naming_the_key_and_model() {
        let t = PriceTable::builtin();
        let a = agent(serde_json::json!({"model": "llama3.1:8b",
                                         "budgets": {"max_cost_usd": 1.0}}));
        let err = ModelPrices::for_agent(&a, &t).unwrap_err().to_string();
        assert!(
            err.contains("agents.a.budgets.max_cost_usd") && err.contains("'llama3.1:8b'"),
            "{err}"
        );
        assert!(err.contains("[prices.\"llama3.1:8b\"]"), "says how: {err}");
        // A fallback without a price is refused too.
        let a = agent(serde_json::json!({"fallback": ["other/mystery-1"],
                                         "budgets": {"max_cost_usd": 1.0}}));
        let err = ModelPrices::for_agent(&a, &t).unwrap_err().to_string();
        assert!(err.contains("'mystery-1'"), "{err}");
        // Without a budget an unpriced model is allowed (its calls count $0).
        let a = agent(serde_json::json!({"model": "llama3.1:8b"}));
        let prices = ModelPrices::for_agent(&a, &t).unwrap();
        assert_eq!(prices.cost("llama3.1:8b", &usage(1000, 1000, 0, 0)), 0.0);
        // The agent's own pricing prices its main model.
        let a = agent(serde_json::json!({"model": "llama3.1:8b",
            "pricing": {"input": 1.0, "output": 2.0},
            "budgets": {"max_cost_usd": 1.0}}));
        let prices = ModelPrices::for_agent(&a, &t).unwrap();
        assert!((prices.cost("llama3.1:8b", &usage(1_000_000, 0, 0, 0)) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn the_answering_models_price_is_used_dated_or_not() {
        let a = agent(serde_json::json!({"fallback": ["claude-haiku-4-5"],
                                         "budgets": {"max_cost_usd": 1.0}}));
        let prices = ModelPrices::for_agent(&a, &PriceTable::builtin()).unwrap();
        let u = usage(1_000_000, 0, 0, 0);
        assert!((prices.cost("claude-sonnet-4-5-20250929", &u) - 3.0).abs() < 1e-9);
        assert!((prices.cost("claude-haiku-4-5", &u) - 1.0).abs() < 1e-9);
        assert!((prices.cost("claude-haiku-4-5-20251001", &u) - 1.0).abs() < 1e-9);
        // A reply naming some other model is priced as the main model.
        assert!((prices.cost("surprise", &u) - 3.0).abs() < 1e-9);
    }

    #[test]
    fn a_model_only_the_table_prices_is_known_and_charged_at_its_own_price() {
        // A fork told to answer with claude-opus-4-1: not the agent's, but the table's.
        let over = BTreeMap::from([("local-7b".to_string(), Pricing::of(0.5, 0.5, 0.0, 0.0))]);
        let table = PriceTable::with_overrides(&over).unwrap();
        let prices = ModelPrices::for_agent(&agent(serde_json::json!({})), &table).unwrap();
        let u = usage(1_000_000, 0, 0, 0);
        assert!(prices.knows("claude-opus-4-1") && prices.knows("claude-opus-4-1-20250805"));
        assert!((prices.cost("claude-opus-4-1-20250805", &u) - 15.0).abs() < 1e-9);
        assert!(prices.knows("local-7b"));
        assert!((prices.cost("local-7b", &u) - 0.5).abs() < 1e-9);
        assert!(!prices.knows("surprise"));
    }
}
