//! `[retention]`: how long finished runs are kept, per end state, by default and per agent
//! (`[retention.agents.NAME]`), and what of them is kept past that.
//!
//! What it guarantees: every value is checked at load, and a refusal names its key
//! (`retention.keep_days`, `retention.agents.bot.keep_days_by_status.failed`); an override
//! of an agent the config does not define is refused. [`RetentionConfig::rules`] turns the
//! table into purge rules that never overlap: an agent with an override is purged only by
//! its own rules, every other agent (a removed one included) by the default's.

use std::collections::BTreeMap;
use std::time::Duration;

use nightshift_store::{Millis, PurgeRule, RunStatus};
use serde::Deserialize;

use crate::config::Invalid;

/// The default of `keep_days`.
pub const DEFAULT_KEEP_DAYS: u32 = 30;
/// The longest a run may be kept by a number of days (100 years); `purge = false` keeps
/// forever.
pub const MAX_KEEP_DAYS: u32 = 36_500;
const DAY_MS: i64 = 86_400_000;

/// Days to keep runs that ended in each end state; an end state left out takes `keep_days`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DaysByStatus {
    pub succeeded: Option<u32>,
    pub failed: Option<u32>,
    pub cancelled: Option<u32>,
    pub superseded: Option<u32>,
    pub budget_exhausted: Option<u32>,
    pub max_rounds: Option<u32>,
}

impl DaysByStatus {
    /// (end state, days set for it), every end state in `RunStatus` order.
    fn each(&self) -> [(RunStatus, Option<u32>); 6] {
        [
            (RunStatus::Succeeded, self.succeeded),
            (RunStatus::Failed, self.failed),
            (RunStatus::Cancelled, self.cancelled),
            (RunStatus::BudgetExhausted, self.budget_exhausted),
            (RunStatus::MaxRounds, self.max_rounds),
            (RunStatus::Superseded, self.superseded),
        ]
    }
}

/// The `[retention]` table.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionConfig {
    /// Whether finished runs are purged at all once their time is up. Default true.
    pub purge: bool,
    /// Days a finished run is kept after it ended, any end state. Default 30.
    pub keep_days: u32,
    /// Days per end state, over `keep_days`.
    pub keep_days_by_status: DaysByStatus,
    /// Keep a purged run's row (status, times, totals, input, result, error) as its summary,
    /// marked purged; false removes it too. Default true.
    pub keep_summary: bool,
    /// Keep a run's workspace after the run ended (until it is purged); false removes it
    /// once the run ended and nothing runs in it. Default false.
    pub keep_workspace: bool,
    /// Runs purged per transaction, 1 to 10000. Default 500.
    pub batch_size: u32,
    /// The least rest after a batch, in ms (0 to 60000); the purger also rests at least nine
    /// times what the batch took. Default 50.
    pub pause_ms: u64,
    /// How often the purger looks again once nothing is left, and how often each daemon
    /// sweeps its data directory, in seconds (1 to 86400). Default 60.
    pub interval_seconds: u64,
    /// Per-agent overrides: any key above but the batch settings.
    pub agents: BTreeMap<String, AgentRetention>,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        Self {
            purge: true,
            keep_days: DEFAULT_KEEP_DAYS,
            keep_days_by_status: DaysByStatus::default(),
            keep_summary: true,
            keep_workspace: false,
            batch_size: 500,
            pause_ms: 50,
            interval_seconds: 60,
            agents: BTreeMap::new(),
        }
    }
}

/// `[retention.agents.NAME]`: what differs for one agent; a key left out takes the default's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentRetention {
    pub purge: Option<bool>,
    pub keep_days: Option<u32>,
    pub keep_days_by_status: DaysByStatus,
    pub keep_summary: Option<bool>,
    pub keep_workspace: Option<bool>,
}

fn check_days(at: String, days: Option<u32>) -> Result<(), Invalid> {
    match days {
        Some(d) if d == 0 || d > MAX_KEEP_DAYS => Err(Invalid::value(
            at,
            format!("is {d}; use 1 to {MAX_KEEP_DAYS} days, or purge = false to keep forever"),
        )),
        _ => Ok(()),
    }
}

fn check_by_status(at: &str, days: &DaysByStatus) -> Result<(), Invalid> {
    for (status, d) in days.each() {
        check_days(format!("{at}.keep_days_by_status.{status}"), d)?;
    }
    Ok(())
}

impl RetentionConfig {
    /// Checks every value; `agents` are the configured agents' names.
    pub(crate) fn validate(&self, agents: &[&str]) -> Result<(), Invalid> {
        check_days("retention.keep_days".into(), Some(self.keep_days))?;
        check_by_status("retention", &self.keep_days_by_status)?;
        if !(1..=10_000).contains(&self.batch_size) {
            return Err(Invalid::value(
                "retention.batch_size",
                format!("is {}; use 1 to 10000 runs", self.batch_size),
            ));
        }
        if self.pause_ms > 60_000 {
            return Err(Invalid::value(
                "retention.pause_ms",
                format!("is {}; use 0 to 60000", self.pause_ms),
            ));
        }
        if !(1..=86_400).contains(&self.interval_seconds) {
            return Err(Invalid::value(
                "retention.interval_seconds",
                format!("is {}; use 1 to 86400", self.interval_seconds),
            ));
        }
        for (name, agent) in &self.agents {
            let at = format!("retention.agents.{name}");
            if !agents.contains(&name.as_str()) {
                return Err(Invalid::table(
                    at,
                    "names no agent of [[agents]]; remove it or define the agent",
                ));
            }
            check_days(format!("{at}.keep_days"), agent.keep_days)?;
            check_by_status(&at, &agent.keep_days_by_status)?;
        }
        Ok(())
    }

    /// Whether runs of `agent` keep their workspace after they end.
    pub fn keeps_workspace(&self, agent: &str) -> bool {
        self.agents
            .get(agent)
            .and_then(|a| a.keep_workspace)
            .unwrap_or(self.keep_workspace)
    }

    /// How long runs of `agent` (`None`: an agent without an override) that ended as
    /// `status` are kept; `None`: forever.
    pub fn kept_for(&self, agent: Option<&str>, status: RunStatus) -> Option<Duration> {
        let over = agent.and_then(|a| self.agents.get(a));
        let purge = over.and_then(|o| o.purge).unwrap_or(self.purge);
        if !purge || !status.is_terminal() {
            return None;
        }
        let pick = |d: &DaysByStatus| d.each().into_iter().find(|(s, _)| *s == status)?.1;
        let days = over
            .and_then(|o| pick(&o.keep_days_by_status).or(o.keep_days))
            .or_else(|| pick(&self.keep_days_by_status))
            .unwrap_or(self.keep_days);
        Some(Duration::from_secs(u64::from(days) * 86_400))
    }

    /// The purge rules at `now`: for each agent with an override and for every other agent,
    /// each end state it purges, with its cutoff.
    pub fn rules(&self, now: Millis) -> Vec<PurgeRule> {
        let overridden: Vec<String> = self.agents.keys().cloned().collect();
        let mut scopes: Vec<Option<&str>> = vec![None];
        scopes.extend(self.agents.keys().map(|a| Some(a.as_str())));
        let mut rules = Vec::new();
        for agent in scopes {
            let keep_summary = agent
                .and_then(|a| self.agents.get(a)?.keep_summary)
                .unwrap_or(self.keep_summary);
            for status in RunStatus::ALL.iter().filter(|s| s.is_terminal()) {
                let Some(kept) = self.kept_for(agent, *status) else {
                    continue;
                };
                let days = i64::try_from(kept.as_secs() / 86_400).unwrap_or(i64::MAX);
                rules.push(PurgeRule {
                    status: *status,
                    ended_before: now.saturating_sub(days.saturating_mul(DAY_MS)),
                    agent: agent.map(str::to_string),
                    except_agents: if agent.is_none() {
                        overridden.clone()
                    } else {
                        Vec::new()
                    },
                    keep_summary,
                });
            }
        }
        rules
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> RetentionConfig {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn the_defaults_keep_every_end_state_30_days_with_a_summary() {
        let c = RetentionConfig::default();
        let rules = c.rules(100 * DAY_MS);
        assert_eq!(rules.len(), 6);
        assert!(rules.iter().all(|r| r.ended_before == 70 * DAY_MS
            && r.keep_summary
            && r.agent.is_none()
            && r.except_agents.is_empty()));
        assert!(!c.keeps_workspace("any"));
        assert_eq!(c.kept_for(None, RunStatus::Running), None);
    }

    #[test]
    fn an_agent_override_beats_the_default_and_the_default_leaves_that_agent_out() {
        let c = parse(
            "keep_days = 10\nkeep_days_by_status = { failed = 40 }\n\
             [agents.bot]\nkeep_days = 2\nkeep_summary = false\nkeep_workspace = true\n\
             [agents.quiet]\npurge = false\n",
        );
        assert!(c.validate(&["bot", "quiet"]).is_ok());
        let day = |d: u64| Some(Duration::from_secs(d * 86_400));
        assert_eq!(c.kept_for(None, RunStatus::Succeeded), day(10));
        assert_eq!(c.kept_for(None, RunStatus::Failed), day(40));
        assert_eq!(c.kept_for(Some("bot"), RunStatus::Failed), day(2));
        assert_eq!(c.kept_for(Some("quiet"), RunStatus::Failed), None);
        let rules = c.rules(100 * DAY_MS);
        let default: Vec<_> = rules.iter().filter(|r| r.agent.is_none()).collect();
        assert_eq!(default.len(), 6);
        assert!(default.iter().all(|r| r.except_agents == ["bot", "quiet"]));
        let bot: Vec<_> = rules
            .iter()
            .filter(|r| r.agent.as_deref() == Some("bot"))
            .collect();
        assert_eq!(bot.len(), 6);
        assert!(
            bot.iter()
                .all(|r| !r.keep_summary && r.ended_before == 98 * DAY_MS)
        );
        assert!(!rules.iter().any(|r| r.agent.as_deref() == Some("quiet")));
        assert!(c.keeps_workspace("bot") && !c.keeps_workspace("quiet"));
    }

    #[test]
    fn bad_values_are_refused_naming_their_key() {
        let cases = [
            ("keep_days = 0", "retention.keep_days is 0"),
            (
                "keep_days_by_status = { failed = 40000 }",
                "retention.keep_days_by_status.failed is 40000",
            ),
            ("batch_size = 0", "retention.batch_size is 0"),
            ("pause_ms = 70000", "retention.pause_ms is 70000"),
            ("interval_seconds = 0", "retention.interval_seconds is 0"),
            (
                "[agents.ghost]\nkeep_days = 3",
                "retention.agents.ghost: names no agent",
            ),
            (
                "[agents.bot]\nkeep_days_by_status = { cancelled = 0 }",
                "retention.agents.bot.keep_days_by_status.cancelled is 0",
            ),
        ];
        for (text, expected) in cases {
            let e = parse(text).validate(&["bot"]).unwrap_err().to_string();
            assert!(e.starts_with(expected), "{text}: {e}");
        }
        let unknown = toml::from_str::<RetentionConfig>("keep_days_by_status = { queued = 1 }");
        assert!(
            unknown
                .unwrap_err()
                .to_string()
                .contains("unknown field `queued`")
        );
    }
}
