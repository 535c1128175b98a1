//! The soak's verdict (pure): from the accepted runs, the database rows and the ledger, the
//! numbers of the table and the invariants they break.
//!
//! Definitions, all from stored rows, never from what the daemons said:
//! - **lost**: a run the API acknowledged that has no row at the end, or whose status is not
//!   terminal after the bounded wait.
//! - **executions of a call**: ledger lines with its `(run_id, call_id)`; a side-effect call
//!   is one `tool_started` of a `side_effect` tool. Max must be 1.
//! - **outcome unknown**: `tool_result` events with `interrupted: true`.
//! - **re-runs of a class**: its ledger lines minus the distinct calls they belong to.
//! - **duplicated model turn**: an `assistant_message` whose script turn (the marker text
//!   the script put in that reply, i.e. the number of assistant messages in the request the
//!   scripted provider answered) was already logged earlier in the same run.
//! - **short of its script**: a succeeded run whose log lacks one of its script's replies,
//!   or a `tool_started` (tool and `turn` input) of one of its scripted calls, or that call's
//!   `tool_result`, or whose result is not the script's final text. This is exactly "fewer
//!   tool calls and model turns than the script asked for".

use std::collections::{BTreeMap, BTreeSet, HashMap};

use nightshift_store::RunStatus;
use serde_json::Value;

use super::script::{self, AgentScript, CLASSES};
use super::truth::Truth;

/// A run the API acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    pub run_id: String,
    pub agent: String,
}

/// How the soak went, besides what the database says.
#[derive(Debug, Clone, Default)]
pub struct Context {
    pub backend: String,
    pub daemons: usize,
    pub kills_planned: usize,
    pub kill_moments: usize,
    pub daemons_killed: usize,
    pub enqueue_refused: usize,
    pub seed: u64,
}

/// The numbers of one backend's table.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub ctx: Context,
    pub accepted: usize,
    pub terminal: usize,
    pub lost: Vec<String>,
    pub by_status: BTreeMap<String, usize>,
    pub max_job_attempts: i64,
    pub side_effect_calls: usize,
    pub side_effect_max: usize,
    pub side_effect_twice: Vec<String>,
    pub side_effect_never_ran: usize,
    pub outcome_unknown: usize,
    pub outcome_unknown_ran: usize,
    /// class → (executions, distinct calls executed)
    pub executions: BTreeMap<&'static str, (usize, usize)>,
    pub duplicated_turns: usize,
    pub runs_with_duplicated_turns: usize,
    pub unscripted_replies: usize,
    pub succeeded: usize,
    pub short: Vec<(String, String)>,
    pub results_not_once: Vec<String>,
    pub key_changed: Vec<String>,
    pub key_shared: Vec<String>,
    pub ok_without_execution: Vec<String>,
    pub turn_counter_mismatch: usize,
    pub foreign_ledger_lines: usize,
    pub failure_reasons: BTreeMap<String, usize>,
}

/// The tool call a `tool_started` logged.
#[derive(Debug, Clone)]
struct Started {
    call_id: String,
    class: &'static str,
    turn: Option<u64>,
    key: String,
}

/// What one run's log holds.
#[derive(Debug, Default)]
struct RunLog {
    replies: Vec<Option<usize>>,
    started: Vec<Started>,
    results: HashMap<String, Vec<Value>>,
}

fn class_of_tool(name: &str) -> Option<&'static str> {
    CLASSES.iter().find(|(_, t)| *t == name).map(|(c, _)| *c)
}

fn parse_log(agent: Option<&AgentScript>, events: &[&super::truth::EventRow]) -> RunLog {
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
fn shortfall(agent: &AgentScript, log: &RunLog, result: Option<&str>) -> Option<String> {
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

/// The first line of an error with every word holding a digit (worker ids, attempt numbers)
/// replaced by `N`, so that failures of one kind count as one row.
fn short_reason(e: &str) -> String {
    let e = e.lines().next().unwrap_or_default();
    let e: Vec<&str> = e
        .split(' ')
        .map(|w| {
            if w.contains(|c: char| c.is_ascii_digit()) {
                "N"
            } else {
                w
            }
        })
        .collect();
    let e = e.join(" ");
    let cut: String = e.chars().take(90).collect();
    if cut.len() < e.len() {
        format!("{cut}…")
    } else {
        cut
    }
}

/// Computes the report.
pub fn judge(ctx: Context, accepted: &[Accepted], truth: &Truth) -> Report {
    let mut r = Report {
        ctx,
        accepted: accepted.len(),
        ..Report::default()
    };
    let runs: HashMap<&str, &super::truth::RunRow> =
        truth.runs.iter().map(|x| (x.id.as_str(), x)).collect();
    let mut events: HashMap<&str, Vec<&super::truth::EventRow>> = HashMap::new();
    for e in &truth.events {
        events.entry(e.run_id.as_str()).or_default().push(e);
    }
    for j in &truth.jobs {
        r.max_job_attempts = r.max_job_attempts.max(j.attempts);
    }
    // Ledger: executions per call, and the keys each call ran with.
    let accepted_ids: BTreeSet<&str> = accepted.iter().map(|a| a.run_id.as_str()).collect();
    let mut per_call: BTreeMap<(&str, &str), (usize, BTreeSet<&str>)> = BTreeMap::new();
    for l in &truth.ledger {
        if !accepted_ids.contains(l.run_id.as_str()) {
            r.foreign_ledger_lines += 1;
            continue;
        }
        let entry = per_call
            .entry((l.run_id.as_str(), l.call_id.as_str()))
            .or_default();
        entry.0 += 1;
        entry.1.insert(l.idempotency_key.as_str());
        if let Some((class, _)) = CLASSES.iter().find(|(c, _)| *c == l.class) {
            let ex = r.executions.entry(class).or_default();
            ex.0 += 1;
            if entry.0 == 1 {
                ex.1 += 1;
            }
        }
    }
    r.foreign_ledger_lines += truth.bad_ledger_lines.len();
    for ((run, call), (_, keys)) in &per_call {
        if keys.len() > 1 {
            r.key_changed.push(format!("{run}/{call}"));
        }
    }

    for a in accepted {
        let Some(row) = runs.get(a.run_id.as_str()) else {
            r.lost.push(format!("{} (no row)", a.run_id));
            continue;
        };
        *r.by_status.entry(row.status.clone()).or_default() += 1;
        let status: Option<RunStatus> = row.status.parse().ok();
        if status.is_some_and(|s| s.is_terminal()) {
            r.terminal += 1;
        } else {
            r.lost.push(format!("{} ({})", a.run_id, row.status));
        }
        if status == Some(RunStatus::Failed) {
            let why = short_reason(row.error.as_deref().unwrap_or("(no error)"));
            *r.failure_reasons.entry(why).or_default() += 1;
        }
        let agent = script::agent(&a.agent);
        let log = parse_log(agent, events.get(a.run_id.as_str()).map_or(&[][..], |v| v));

        let mut seen = BTreeSet::new();
        let mut dups = 0;
        for reply in &log.replies {
            match reply {
                Some(t) if !seen.insert(*t) => dups += 1,
                Some(_) => {}
                None => r.unscripted_replies += 1,
            }
        }
        r.duplicated_turns += dups;
        r.runs_with_duplicated_turns += usize::from(dups > 0);
        if row.turns != log.replies.len() as i64 {
            r.turn_counter_mismatch += 1;
        }

        let mut keys: HashMap<&str, &str> = HashMap::new();
        for s in &log.started {
            let label = format!("{}/{}", a.run_id, s.call_id);
            if let Some(other) = keys.insert(s.key.as_str(), s.call_id.as_str())
                && other != s.call_id
            {
                r.key_shared.push(format!("{label} and {other}: {}", s.key));
            }
            let results = log.results.get(&s.call_id).map_or(&[][..], |v| v);
            let ran = per_call
                .get(&(a.run_id.as_str(), s.call_id.as_str()))
                .map_or(0, |(n, _)| *n);
            let started_times = log
                .started
                .iter()
                .filter(|o| o.call_id == s.call_id)
                .count();
            if results.len() > 1 || (status == Some(RunStatus::Succeeded) && results.is_empty()) {
                r.results_not_once
                    .push(format!("{label}: {} results", results.len()));
            }
            let interrupted = results.iter().any(|p| p["interrupted"] == true);
            let ok = results
                .iter()
                .any(|p| p["interrupted"] != true && p["is_error"] != true);
            if ok && ran == 0 {
                r.ok_without_execution.push(label.clone());
            }
            if interrupted {
                r.outcome_unknown += 1;
                r.outcome_unknown_ran += usize::from(ran > 0);
            }
            if s.class == "side_effect" {
                r.side_effect_calls += 1;
                r.side_effect_max = r.side_effect_max.max(ran);
                if ran > 1 || started_times > 1 {
                    r.side_effect_twice
                        .push(format!("{label}: ran {ran}, started {started_times}"));
                }
                r.side_effect_never_ran += usize::from(ran == 0);
            }
        }

        if status == Some(RunStatus::Succeeded) {
            r.succeeded += 1;
            let why = match agent {
                Some(agent) => shortfall(agent, &log, row.result.as_deref()),
                None => Some(format!("unknown agent {}", a.agent)),
            };
            if let Some(why) = why {
                r.short.push((a.run_id.clone(), why));
            }
        }
    }
    r.side_effect_twice.dedup();
    r
}

impl Report {
    /// The invariants this soak broke, each as a sentence; empty when it held them all.
    pub fn broken(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut check = |bad: usize, what: &str, examples: &[String]| {
            if bad > 0 {
                let ex: Vec<&str> = examples.iter().take(3).map(String::as_str).collect();
                out.push(format!("{bad} {what} (e.g. {})", ex.join("; ")));
            }
        };
        check(self.lost.len(), "accepted runs lost", &self.lost);
        check(
            self.side_effect_twice.len(),
            "side-effect calls executed or started more than once",
            &self.side_effect_twice,
        );
        let short: Vec<String> = self
            .short
            .iter()
            .map(|(id, why)| format!("{id}: missing {why}"))
            .collect();
        check(short.len(), "succeeded runs short of their script", &short);
        check(
            self.duplicated_turns,
            "duplicated model turns",
            &[format!("{} runs", self.runs_with_duplicated_turns)],
        );
        check(
            self.unscripted_replies,
            "logged replies the script never sent",
            &[],
        );
        check(
            self.results_not_once.len(),
            "tool calls not answered exactly once",
            &self.results_not_once,
        );
        check(
            self.key_changed.len(),
            "calls re-run with a different idempotency key",
            &self.key_changed,
        );
        check(
            self.key_shared.len(),
            "idempotency keys shared by two calls",
            &self.key_shared,
        );
        check(
            self.ok_without_execution.len(),
            "successful tool results with no execution in the ledger",
            &self.ok_without_execution,
        );
        check(
            self.foreign_ledger_lines,
            "ledger lines of no accepted run or unreadable",
            &[],
        );
        out
    }

    /// The table, in markdown: metric | value | invariant.
    pub fn render(&self) -> String {
        let c = &self.ctx;
        let mark = |ok: bool| if ok { "ok" } else { "BROKEN" };
        let mut rows: Vec<(String, String, &str)> = vec![
            (
                "daemons / kills (moments / SIGKILLs)".into(),
                format!(
                    "{} / {} of {} / {}",
                    c.daemons, c.kill_moments, c.kills_planned, c.daemons_killed
                ),
                "",
            ),
            ("seed".into(), c.seed.to_string(), ""),
            (
                "runs accepted (API 200/202)".into(),
                self.accepted.to_string(),
                "",
            ),
            (
                "enqueue requests refused".into(),
                c.enqueue_refused.to_string(),
                "",
            ),
            ("runs terminal".into(), self.terminal.to_string(), ""),
            (
                "runs lost (missing or not terminal)".into(),
                self.lost.len().to_string(),
                mark(self.lost.is_empty()),
            ),
        ];
        for (status, n) in &self.by_status {
            rows.push((format!("  status {status}"), n.to_string(), ""));
        }
        for (why, n) in &self.failure_reasons {
            rows.push((format!("  failed: {why}"), n.to_string(), ""));
        }
        rows.push((
            "max job attempts".into(),
            self.max_job_attempts.to_string(),
            "",
        ));
        rows.push((
            "side-effect calls (tool_started)".into(),
            self.side_effect_calls.to_string(),
            "",
        ));
        rows.push((
            "side-effect executions per call: max".into(),
            self.side_effect_max.to_string(),
            mark(self.side_effect_max <= 1),
        ));
        rows.push((
            "side-effect calls executed/started > 1".into(),
            self.side_effect_twice.len().to_string(),
            mark(self.side_effect_twice.is_empty()),
        ));
        rows.push((
            "side-effect calls never executed".into(),
            self.side_effect_never_ran.to_string(),
            "",
        ));
        rows.push((
            "calls reported outcome unknown (executed)".into(),
            format!("{} ({})", self.outcome_unknown, self.outcome_unknown_ran),
            "",
        ));
        for (class, _) in CLASSES {
            let (ex, calls) = self.executions.get(class).copied().unwrap_or_default();
            rows.push((
                format!("re-runs {class} (executions - calls)"),
                format!("{} ({ex} - {calls})", ex - calls),
                if class == "side_effect" {
                    mark(ex == calls)
                } else {
                    ""
                },
            ));
        }
        rows.push((
            "duplicated model turns (runs)".into(),
            format!(
                "{} ({})",
                self.duplicated_turns, self.runs_with_duplicated_turns
            ),
            mark(self.duplicated_turns == 0),
        ));
        rows.push((
            "tool calls not answered exactly once".into(),
            self.results_not_once.len().to_string(),
            mark(self.results_not_once.is_empty()),
        ));
        rows.push((
            "idempotency keys changed / shared".into(),
            format!("{} / {}", self.key_changed.len(), self.key_shared.len()),
            mark(self.key_changed.is_empty() && self.key_shared.is_empty()),
        ));
        rows.push((
            "ok results with no execution".into(),
            self.ok_without_execution.len().to_string(),
            mark(self.ok_without_execution.is_empty()),
        ));
        rows.push((
            "runs whose turn counter != logged replies".into(),
            self.turn_counter_mismatch.to_string(),
            "",
        ));
        rows.push((
            "succeeded runs with every scripted call and turn".into(),
            format!(
                "{} of {}",
                self.succeeded - self.short.len(),
                self.succeeded
            ),
            mark(self.short.is_empty()),
        ));
        let w0 = rows
            .iter()
            .map(|r| r.0.chars().count())
            .max()
            .unwrap_or(0)
            .max(6);
        let w1 = rows
            .iter()
            .map(|r| r.1.chars().count())
            .max()
            .unwrap_or(0)
            .max(5);
        let mut out = format!("### crash soak: {}\n\n", c.backend);
        out += &format!("| {:w0$} | {:>w1$} | invariant |\n", "metric", "value");
        out += &format!("|-{}-|-{}:|-----------|\n", "-".repeat(w0), "-".repeat(w1));
        for (m, v, i) in rows {
            let pad = w0 - m.chars().count();
            out += &format!("| {m}{} | {v:>w1$} | {i:9} |\n", " ".repeat(pad));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::script::{AGENTS, final_text, turn_text};
    use crate::truth::{EventRow, LedgerLine, RunRow};

    const RUN: &str = "run-1";

    fn event(seq: i64, kind: &str, payload: Value) -> EventRow {
        EventRow {
            run_id: RUN.into(),
            seq,
            kind: kind.into(),
            payload: payload.to_string(),
        }
    }

    fn reply(text: &str) -> Value {
        json!({"message": {"role": "assistant", "content": [{"type": "text", "text": text}]}})
    }

    /// A complete, uninterrupted log of one `soak-short` run and its ledger.
    fn complete() -> (Vec<Accepted>, Truth) {
        let agent = &AGENTS[0];
        let mut events = vec![event(1, "run_started", json!({}))];
        let mut ledger = Vec::new();
        let mut seq = 2;
        let mut push = |kind: &str, p: Value, events: &mut Vec<EventRow>| {
            events.push(event(seq, kind, p));
            seq += 1;
        };
        for turn in 0..agent.tool_turns {
            push("assistant_message", reply(&turn_text(turn)), &mut events);
            for (class, tool) in CLASSES {
                let call = format!("t{turn}_{class}");
                let key = format!("{RUN}:{call}");
                push(
                    "tool_started",
                    json!({"call_id": call, "name": tool, "input": {"turn": turn},
                           "durability": class, "idempotency_key": key}),
                    &mut events,
                );
                push(
                    "tool_result",
                    json!({"call_id": call, "content": "done", "is_error": false}),
                    &mut events,
                );
                ledger.push(LedgerLine {
                    run_id: RUN.into(),
                    call_id: call,
                    idempotency_key: key,
                    class: class.into(),
                });
            }
        }
        push("assistant_message", reply(&final_text(agent)), &mut events);
        let truth = Truth {
            runs: vec![RunRow {
                id: RUN.into(),
                agent: agent.name.into(),
                status: "succeeded".into(),
                result: Some(final_text(agent)),
                error: None,
                turns: agent.tool_turns as i64 + 1,
            }],
            events,
            ledger,
            ..Truth::default()
        };
        let accepted = vec![Accepted {
            run_id: RUN.into(),
            agent: agent.name.into(),
        }];
        (accepted, truth)
    }

    #[test]
    fn a_complete_run_breaks_nothing() {
        let (accepted, truth) = complete();
        let r = judge(Context::default(), &accepted, &truth);
        assert_eq!(r.broken(), Vec::<String>::new());
        assert_eq!((r.succeeded, r.short.len(), r.side_effect_max), (1, 0, 1));
        assert_eq!(r.executions["idempotent"], (2, 2));
        let table = r.render();
        let row = table
            .lines()
            .find(|l| l.contains("every scripted call"))
            .unwrap();
        assert!(row.contains(" 1 of 1 | ok"), "{row}");
    }

    #[test]
    fn a_succeeded_run_with_fewer_calls_and_turns_than_its_script_is_short() {
        let (accepted, mut truth) = complete();
        // Drop the last tool turn's reply and its three calls (start and result each).
        let cut = truth
            .events
            .iter()
            .position(|e| e.payload.contains(&turn_text(1)))
            .unwrap();
        truth.events.drain(cut..cut + 7);
        let r = judge(Context::default(), &accepted, &truth);
        assert_eq!(r.short.len(), 1, "{:?}", r.short);
        let why = &r.short[0].1;
        assert!(why.contains("model turns [1]"), "{why}");
        assert!(
            why.contains("side_effect@1,idempotent@1,read_only@1"),
            "{why}"
        );
        assert!(!r.broken().is_empty());
    }

    #[test]
    fn a_missing_result_alone_makes_a_run_short() {
        let (accepted, mut truth) = complete();
        let i = truth
            .events
            .iter()
            .position(|e| e.kind == "tool_result" && e.payload.contains("t0_read_only"))
            .unwrap();
        truth.events.remove(i);
        let r = judge(Context::default(), &accepted, &truth);
        assert_eq!(r.short.len(), 1);
        assert!(r.short[0].1.contains("read_only@0"), "{:?}", r.short);
        assert_eq!(r.results_not_once.len(), 1);
    }

    #[test]
    fn a_side_effect_run_twice_a_repeated_turn_and_a_lost_run_are_broken() {
        let (mut accepted, mut truth) = complete();
        let twice = truth
            .ledger
            .iter()
            .find(|l| l.class == "side_effect")
            .unwrap()
            .clone();
        truth.ledger.push(twice);
        let dup = truth
            .events
            .iter()
            .find(|e| e.kind == "assistant_message")
            .unwrap()
            .clone();
        truth.events.push(EventRow { seq: 99, ..dup });
        accepted.push(Accepted {
            run_id: "never-stored".into(),
            agent: AGENTS[0].name.into(),
        });
        let r = judge(Context::default(), &accepted, &truth);
        assert_eq!(r.side_effect_max, 2);
        assert_eq!(r.executions["side_effect"], (3, 2), "one re-run");
        assert_eq!(r.duplicated_turns, 1);
        assert_eq!(r.lost, vec!["never-stored (no row)".to_string()]);
        let broken = r.broken().join("\n");
        for what in [
            "accepted runs lost",
            "side-effect calls executed",
            "duplicated model turns",
        ] {
            assert!(broken.contains(what), "{what} in {broken}");
        }
    }

    #[test]
    fn an_interrupted_side_effect_is_counted_as_outcome_unknown() {
        let (accepted, mut truth) = complete();
        let result = truth
            .events
            .iter_mut()
            .find(|e| e.kind == "tool_result" && e.payload.contains("t1_side_effect"))
            .unwrap();
        result.payload = json!({"call_id": "t1_side_effect", "content": "interrupted",
                                "is_error": true, "interrupted": true})
        .to_string();
        truth.ledger.retain(|l| l.call_id != "t1_side_effect");
        let r = judge(Context::default(), &accepted, &truth);
        assert_eq!((r.outcome_unknown, r.outcome_unknown_ran), (1, 0));
        assert_eq!(
            short_reason("lease expired: worker vm:1:ab stopped during attempt 5 of 5\nmore"),
            "lease expired: worker N stopped during attempt N of N"
        );
        assert_eq!(r.side_effect_never_ran, 1);
        assert_eq!(r.broken(), Vec::<String>::new(), "reported, not repeated");
    }
}
