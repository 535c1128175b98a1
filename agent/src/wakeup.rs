//! `schedule_wakeup`: the tool an agent calls to sleep and pick up later.
//!
//! It is a control tool, run by the loop itself rather than by the tool box, because it
//! changes what the loop does next: once the turn's tool calls all have results, the run is
//! checkpointed and parks as `waiting`, holding no worker, process or memory — only rows. A
//! `resume` job is armed for the due time; when it runs, the model finds a reminder at the
//! bottom of the same conversation saying when it slept, why, and how long it was out.
//!
//! The decision to sleep is part of the run's state (a `wakeup_scheduled` event is logged
//! before the call's result), so a worker that dies after the call still parks the run at
//! the same time: the wakeup is never lost and never set twice.

use nightshift_llm::ToolSpec;
use serde::{Deserialize, Serialize};

use crate::config::ConfigError;

/// The tool's name, as agents list it in `tools`.
pub const SCHEDULE_WAKEUP: &str = "schedule_wakeup";

/// Tools the loop runs itself; they are not looked up in the tool registry.
pub fn is_control_tool(name: &str) -> bool {
    name == SCHEDULE_WAKEUP
}

/// Limits on an agent's wakeups: `[agents.wakeups]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WakeupPolicy {
    /// The shortest sleep allowed, in seconds. Default 5.
    pub min_delay_seconds: u64,
    /// The longest sleep allowed, in seconds. Default 30 days.
    pub max_delay_seconds: u64,
    /// How many wakeups one run may set. Default 50.
    pub max_per_run: u32,
}

impl Default for WakeupPolicy {
    fn default() -> Self {
        Self {
            min_delay_seconds: 5,
            max_delay_seconds: 30 * 24 * 3600,
            max_per_run: 50,
        }
    }
}

impl WakeupPolicy {
    pub(crate) fn validate(&self, agent: &str) -> Result<(), ConfigError> {
        if self.min_delay_seconds > self.max_delay_seconds {
            return Err(ConfigError::table(
                format!("agents.{agent}.wakeups"),
                format!(
                    "min_delay_seconds ({}) is above max_delay_seconds ({})",
                    self.min_delay_seconds, self.max_delay_seconds
                ),
            ));
        }
        if self.max_delay_seconds > 366 * 24 * 3600 {
            return Err(ConfigError::value(
                format!("agents.{agent}.wakeups.max_delay_seconds"),
                "is above 366 days; use a schedule for anything that far out",
            ));
        }
        Ok(())
    }
}

/// The tool's definition, as the model sees it.
pub fn spec() -> ToolSpec {
    ToolSpec {
        name: SCHEDULE_WAKEUP.to_string(),
        description: "Sleep and continue this task later. Give either delay_seconds or at (an \
            RFC 3339 time), and the reason you are waiting. Your turn ends when the tool calls \
            of this reply are done; the run sleeps without using any resources and you are \
            woken in this same conversation at that time, with a reminder of why."
            .to_string(),
        input_schema: serde_json::json!({
            "type": "object",
            "properties": {
                "delay_seconds": {"type": "integer", "minimum": 1,
                    "description": "How long to sleep, in seconds."},
                "at": {"type": "string",
                    "description": "When to wake, as an RFC 3339 time (e.g. 2026-01-31T07:00:00Z)."},
                "reason": {"type": "string",
                    "description": "What you are waiting for; you will be reminded of it."}
            },
            "required": ["reason"],
            "additionalProperties": false
        }),
    }
}

/// A wakeup the run has set and not yet woken from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArmedWakeup {
    /// The `schedule_wakeup` call that set it.
    pub call_id: String,
    pub due_at: i64,
    pub reason: String,
    pub scheduled_at: i64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    delay_seconds: Option<i64>,
    at: Option<String>,
    reason: Option<String>,
}

/// Why a `schedule_wakeup` call was refused; `Display` is the error result the model gets
/// back, saying what to change.
#[derive(Debug, thiserror::Error)]
pub enum WakeupRefused {
    /// The input is not the tool's shape.
    #[error("invalid input: {0}; give delay_seconds or at, and reason")]
    BadInput(serde_json::Error),
    /// `reason` is missing or blank.
    #[error("say in `reason` what you are waiting for")]
    NoReason,
    /// The run has set as many wakeups as the policy allows.
    #[error(
        "this run has used all {max_per_run} of its wakeups; finish the task now or report what \
         is left"
    )]
    AllUsed { max_per_run: u32 },
    /// `at` is not an RFC 3339 time.
    #[error("`at` is not an RFC 3339 time ({0}); e.g. 2026-01-31T07:00:00Z")]
    BadTime(chrono::ParseError),
    /// Both or neither of `delay_seconds` and `at`.
    #[error("give exactly one of delay_seconds and at")]
    DelayOrTime,
    /// Sooner than the policy's shortest sleep.
    #[error("that is {delay_s} s from now; the shortest allowed sleep is {min} s")]
    TooSoon { delay_s: i64, min: u64 },
    /// Later than the policy's longest sleep.
    #[error("that is {delay_s} s from now; the longest allowed sleep is {max} s")]
    TooLate { delay_s: i64, max: u64 },
}

/// Checks a call's input against the policy; the wakeup to arm, or why not (the model gets it
/// back as an error result).
pub fn plan(
    call_id: &str,
    input: &serde_json::Value,
    now: i64,
    policy: &WakeupPolicy,
    used: u32,
) -> Result<ArmedWakeup, WakeupRefused> {
    let input: Input = serde_json::from_value(input.clone()).map_err(WakeupRefused::BadInput)?;
    let reason = input.reason.unwrap_or_default();
    if reason.trim().is_empty() {
        return Err(WakeupRefused::NoReason);
    }
    if used >= policy.max_per_run {
        return Err(WakeupRefused::AllUsed {
            max_per_run: policy.max_per_run,
        });
    }
    let due_at = match (input.delay_seconds, input.at) {
        (Some(d), None) => now.saturating_add(d.saturating_mul(1000)),
        (None, Some(at)) => chrono::DateTime::parse_from_rfc3339(&at)
            .map_err(WakeupRefused::BadTime)?
            .timestamp_millis(),
        _ => return Err(WakeupRefused::DelayOrTime),
    };
    let delay_s = (due_at - now) / 1000;
    let (min, max) = (policy.min_delay_seconds, policy.max_delay_seconds);
    if delay_s < i64::try_from(min).unwrap_or(i64::MAX) {
        return Err(WakeupRefused::TooSoon { delay_s, min });
    }
    if delay_s > i64::try_from(max).unwrap_or(i64::MAX) {
        return Err(WakeupRefused::TooLate { delay_s, max });
    }
    Ok(ArmedWakeup {
        call_id: call_id.to_string(),
        due_at,
        reason,
        scheduled_at: now,
    })
}

/// The tool result for an armed wakeup.
pub fn confirmation(w: &ArmedWakeup) -> String {
    format!(
        "Wakeup set for {}. Your turn ends once this reply's tool calls are done; you will be \
         woken here then.",
        rfc3339(w.due_at)
    )
}

/// The reminder the model reads when it wakes (or is woken early, `now < due_at`).
pub fn reminder(w: &ArmedWakeup, now: i64) -> String {
    let early = if now + 1000 < w.due_at {
        format!(
            " You were woken early: the wakeup was due at {}.",
            rfc3339(w.due_at)
        )
    } else {
        String::new()
    };
    format!(
        "[Wakeup] It is now {}. You went to sleep at {} ({} later) waiting for: {}.{early} \
         Check what has changed since then before you continue.",
        rfc3339(now),
        rfc3339(w.scheduled_at),
        human_duration(now - w.scheduled_at),
        w.reason
    )
}

/// `ms` as an RFC 3339 UTC time to the second.
pub(crate) fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_else(|| ms.to_string())
}

fn human_duration(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match s {
        0..120 => format!("{s} s"),
        120..7200 => format!("{} min", s / 60),
        7200..172_800 => format!("{} h {} min", s / 3600, (s % 3600) / 60),
        _ => format!("{} days {} h", s / 86_400, (s % 86_400) / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_delay_or_a_time_arms_a_wakeup_within_the_policy() {
        let p = WakeupPolicy::default();
        let w = plan(
            "c1",
            &json!({"delay_seconds": 60, "reason": "CI"}),
            1_000,
            &p,
            0,
        )
        .unwrap();
        assert_eq!(w.due_at, 61_000);
        assert_eq!(w.scheduled_at, 1_000);
        let at = plan(
            "c2",
            &json!({"at": "2026-01-01T00:10:00Z", "reason": "x"}),
            1_767_225_600_000,
            &p,
            0,
        )
        .unwrap();
        assert_eq!(at.due_at, 1_767_225_600_000 + 600_000);
    }

    #[test]
    fn bad_wakeups_say_what_to_change() {
        let p = WakeupPolicy::default();
        let err = |v: serde_json::Value, used| plan("c", &v, 0, &p, used).unwrap_err().to_string();
        assert!(err(json!({"delay_seconds": 1, "reason": "x"}), 0).contains("shortest"));
        assert!(err(json!({"delay_seconds": 99_999_999, "reason": "x"}), 0).contains("longest"));
        assert!(err(json!({"delay_seconds": 60}), 0).contains("reason"));
        assert!(err(json!({"reason": "x"}), 0).contains("exactly one"));
        assert!(err(json!({"at": "tomorrow", "reason": "x"}), 0).contains("RFC 3339"));
        assert_eq!(
            err(json!({"delay_seconds": 60, "reason": "x"}), 50),
            "this run has used all 50 of its wakeups; finish the task now or report what is left"
        );
        assert!(
            err(json!({"delay_seconds": 60, "reason": "x", "extra": 1}), 0).contains("invalid")
        );
    }

    #[test]
    fn the_reminder_says_when_and_why() {
        let w = ArmedWakeup {
            call_id: "c".into(),
            due_at: 3_600_000,
            reason: "the deploy to finish".into(),
            scheduled_at: 0,
        };
        let r = reminder(&w, 3_600_000);
        assert!(r.contains("1970-01-01T01:00:00Z"), "{r}");
        assert!(r.contains("60 min later"), "{r}");
        assert!(r.contains("the deploy to finish"), "{r}");
        assert!(!r.contains("early"), "{r}");
        assert!(reminder(&w, 60_000).contains("woken early"));
    }
}
