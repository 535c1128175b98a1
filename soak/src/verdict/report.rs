//! A `Report` said two ways: the invariants it broke (each a sentence, with examples) and the
//! markdown table of its numbers.

use super::Report;
use crate::script::CLASSES;

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
