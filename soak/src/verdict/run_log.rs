//! One run's log read against its script: the replies (by the script turn each answers), the
//! scripted tool calls started and their results, and what a succeeded run lacks of its
//! script (its shortfall). Pure: events in, a `RunLog` out; an event it cannot parse is
//! skipped, so a log the soak did not write reads as short, never as complete.

use std::collections::{BTreeSet, HashMap};

use serde_json::Value;

use crate::script::{self, AgentScript, CLASSES};

/// The tool call a `tool_started` logged.
#[derive(Debug, Clone)]
pub(super) struct Started {
    pub(super) call_id: String,
    pub(super) class: &'static str,
    pub(super) turn: Option<u64>,
    pub(super) key: String,
}

/// What one run's log holds.
#[derive(Debug, Default)]
pub(super) struct RunLog {
    pub(super) replies: Vec<Option<usize>>,
    pub(super) started: Vec<Started>,
    pub(super) results: HashMap<String, Vec<Value>>,
}

fn class_of_tool(name: &str) -> Option<&'static str> {
    CLASSES.iter().find(|(_, t)| *t == name).map(|(c, _)| *c)
}

pub(super) fn parse_log(agent: Option<&AgentScript>, events: &[&crate::truth::EventRow]) -> RunLog {
    let mut log = RunLog::default();
    for e in events {
        let Ok(p) = serde_json::from_str::<Value>(&e.payload) else {
            continue;
        };
        match e.kind.as_str() {
            "assistant_message" => {
                let texts: Vec<&str> = p["message"]["content"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|b| b["type"] == "text")
                    .filter_map(|b| b["text"].as_str())
                    .collect();
                log.replies
                    .push(agent.and_then(|a| script::turn_of_reply(a, &texts)));
            }
            "tool_started" => {
                let name = p["name"].as_str().unwrap_or_default();
                if let Some(class) = class_of_tool(name) {
                    log.started.push(Started {
                        call_id: p["call_id"].as_str().unwrap_or_default().to_string(),
                        class,
                        turn: p["input"]["turn"].as_u64(),
                        key: p["idempotency_key"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string(),
                    });
                }
            }
            "tool_result" => {
                let id = p["call_id"].as_str().unwrap_or_default().to_string();
                log.results.entry(id).or_default().push(p);
            }
            _ => {}
        }
    }
    log
}

/// What a succeeded run's log lacks of its script, or `None` when it has all of it.
pub(super) fn shortfall(agent: &AgentScript, log: &RunLog, result: Option<&str>) -> Option<String> {
    let mut missing = Vec::new();
    let seen: BTreeSet<usize> = log.replies.iter().flatten().copied().collect();
    let turns: Vec<usize> = (0..=agent.tool_turns)
        .filter(|t| !seen.contains(t))
        .collect();
    if !turns.is_empty() {
        missing.push(format!("model turns {turns:?}"));
    }
    let mut calls = Vec::new();
    for turn in 0..agent.tool_turns {
        for (class, _) in CLASSES {
            let answered = log.started.iter().any(|s| {
                s.class == class
                    && s.turn == Some(turn as u64)
                    && log.results.get(&s.call_id).is_some_and(|r| !r.is_empty())
            });
            if !answered {
                calls.push(format!("{class}@{turn}"));
            }
        }
    }
    if !calls.is_empty() {
        missing.push(format!("tool calls {}", calls.join(",")));
    }
    if result != Some(script::final_text(agent).as_str()) {
        missing.push(format!("result {result:?}"));
    }
    (!missing.is_empty()).then(|| missing.join("; "))
}
