//! The judgement: every accepted run checked against the stored rows and the ledger, counted
//! into a `Report` by the definitions of the parent module. Pure: the same rows give the same
//! report. A run without a row, or whose status does not parse as terminal, counts as lost.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use nightshift_store::RunStatus;

use super::run_log::{parse_log, shortfall};
use super::{Accepted, Context, Report};
use crate::script::{self, CLASSES};
use crate::truth::Truth;

/// The first line of an error with every word holding a digit (worker ids, attempt numbers)
/// replaced by `N`, so that failures of one kind count as one row.
pub(super) fn short_reason(e: &str) -> String {
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
    let runs: HashMap<&str, &crate::truth::RunRow> =
        truth.runs.iter().map(|x| (x.id.as_str(), x)).collect();
    let mut events: HashMap<&str, Vec<&crate::truth::EventRow>> = HashMap::new();
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
