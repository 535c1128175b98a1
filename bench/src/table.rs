//! The one table the bench prints, and its legend.
//!
//! Columns: metric | backend | N | ours | apalis (batch 1) | apalis (default batch) |
//! ours/apalis-b1 | ours/apalis-default. Each row says which way is better, and the ratio
//! columns are computed so that a ratio above 1 always means ours is better: for throughput
//! rows it is ours ÷ apalis, for latency rows apalis ÷ ours (marked `(inv)` in the cell).
//! Rows that compare nothing (the fsync baseline) leave the ratios empty.

use std::fmt::Write as _;

/// Which direction of a row's values is better, and so how its ratios are formed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Better {
    /// Throughput: ratio = ours ÷ apalis.
    Higher,
    /// Latency: ratio = apalis ÷ ours.
    Lower,
    /// No comparison (ratio columns left blank).
    Neither,
}

/// One cell of a value column.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Cell {
    /// A measured value.
    Value(f64),
    /// A value measured once and shown in two columns (printed with a `†`).
    Shared(f64),
    /// No value: not applicable, skipped or failed (the text says which).
    Text(String),
}

impl Cell {
    /// A cell from a measurement that may have failed.
    pub(crate) fn from_result<E>(r: &Result<f64, E>) -> Cell {
        match r {
            Ok(v) => Cell::Value(*v),
            Err(_) => Cell::Text("FAILED".into()),
        }
    }

    pub(crate) fn value(&self) -> Option<f64> {
        match self {
            Cell::Value(v) | Cell::Shared(v) => Some(*v),
            Cell::Text(_) => None,
        }
    }

    fn render(&self, decimals: usize) -> String {
        match self {
            Cell::Value(v) => number(*v, decimals),
            Cell::Shared(v) => format!("{}†", number(*v, decimals)),
            Cell::Text(t) => t.clone(),
        }
    }
}

/// One row of the table.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub(crate) metric: String,
    pub(crate) backend: String,
    pub(crate) n: String,
    pub(crate) ours: Cell,
    pub(crate) apalis_b1: Cell,
    pub(crate) apalis_default: Cell,
    pub(crate) better: Better,
    /// Decimal places of the value columns.
    pub(crate) decimals: usize,
}

/// The whole table.
#[derive(Debug, Default)]
pub(crate) struct Table {
    rows: Vec<Row>,
}

impl Table {
    pub(crate) fn push(&mut self, row: Row) {
        self.rows.push(row);
    }

    /// The table as aligned text, with a rule under the header.
    pub(crate) fn render(&self) -> String {
        let header = [
            "metric",
            "backend",
            "N",
            "ours",
            "apalis (batch 1)",
            "apalis (default batch)",
            "ours/apalis-b1",
            "ours/apalis-default",
        ];
        let mut lines: Vec<[String; 8]> = vec![header.map(String::from)];
        for r in &self.rows {
            lines.push([
                r.metric.clone(),
                r.backend.clone(),
                r.n.clone(),
                r.ours.render(r.decimals),
                r.apalis_b1.render(r.decimals),
                r.apalis_default.render(r.decimals),
                ratio(&r.ours, &r.apalis_b1, r.better),
                ratio(&r.ours, &r.apalis_default, r.better),
            ]);
        }
        let mut widths = [0usize; 8];
        for line in &lines {
            for (w, cell) in widths.iter_mut().zip(line) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        for (i, line) in lines.iter().enumerate() {
            let cells: Vec<String> = line
                .iter()
                .zip(widths)
                .enumerate()
                .map(|(col, (cell, w))| {
                    let pad = w - cell.chars().count();
                    if col < 3 {
                        format!("{cell}{}", " ".repeat(pad))
                    } else {
                        format!("{}{cell}", " ".repeat(pad))
                    }
                })
                .collect();
            let _ = writeln!(out, "| {} |", cells.join(" | "));
            if i == 0 {
                let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
                let _ = writeln!(out, "|-{}-|", rule.join("-|-"));
            }
        }
        out
    }
}

/// The legend printed under the table.
pub(crate) const LEGEND: &str = "\
Ratios: above 1 means ours is better. Throughput rows (jobs/s): ours / apalis.
Latency rows (ms, lower is better): apalis / ours, marked (inv).
enqueue: N jobs, one at a time, one transaction each; ours and apalis in 10 alternating chunks.
claim+ack: the same N jobs drained by 4 concurrent slots, from worker start until all N rows
  are marked done in the database. Ours and apalis (default batch) drain 3 times (refilled,
  alternating order) when their first drains took under 10 s; the cell is the median. The
  x-fsync rows divide it by the SQLite fsync-bound commit
  rate measured around that drain (500 commits just before and 500 just after, combined).
pickup: from the start of the enqueue call (so including its commit) to the handler's first
  line, on an idle worker; N is the number of samples. fsync row: N single-row commits.
† enqueue does not depend on apalis's batch size: it was timed once (into the default-batch
  queue) and is shown in both apalis columns; the batch-1 queue was filled with push_bulk.";

fn ratio(ours: &Cell, theirs: &Cell, better: Better) -> String {
    let (Some(o), Some(t)) = (ours.value(), theirs.value()) else {
        return "-".into();
    };
    match better {
        Better::Higher if t > 0.0 => format!("{:.2}x", o / t),
        Better::Lower if o > 0.0 => format!("{:.2}x (inv)", t / o),
        _ => "-".into(),
    }
}

/// `v` with `decimals` places and thousands separators in the integer part.
fn number(v: f64, decimals: usize) -> String {
    if !v.is_finite() {
        return format!("{v}");
    }
    let s = format!("{:.*}", decimals, v.abs());
    let (int, frac) = s
        .split_once('.')
        .map_or((s.as_str(), None), |(i, f)| (i, Some(f)));
    let mut grouped = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    let sign = if v < 0.0 { "-" } else { "" };
    match frac {
        Some(f) => format!("{sign}{grouped}.{f}"),
        None => format!("{sign}{grouped}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_ratios_read_the_right_way() {
        assert_eq!(number(1234567.891, 0), "1,234,568");
        assert_eq!(number(1234.5678, 2), "1,234.57");
        assert_eq!(number(999.0, 0), "999");
        assert_eq!(
            ratio(&Cell::Value(200.0), &Cell::Value(100.0), Better::Higher),
            "2.00x"
        );
        assert_eq!(
            ratio(&Cell::Value(2.0), &Cell::Value(8.0), Better::Lower),
            "4.00x (inv)"
        );
        assert_eq!(
            ratio(&Cell::Value(2.0), &Cell::Text("-".into()), Better::Higher),
            "-"
        );
    }
}
