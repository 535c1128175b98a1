//! How the CLI shows things to a person: relative times ("3m 12s ago"), durations, aligned
//! tables, first lines cut short, one-line summaries of events, and the `--since` values it
//! accepts. Every function here is pure (the caller passes `now`), so the output of both the
//! local and the remote path is decided in one place and unit-tested.

use serde_json::Value;

/// `ms` milliseconds as a person reads them: `850ms`, `12s`, `3m 12s`, `2h 5m`, `3d 4h`.
/// Negative spans count as zero.
pub(crate) fn duration(ms: i64) -> String {
    let ms = ms.max(0);
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let s = ms / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {}s", s / 60, s % 60),
        3600..86_400 => format!("{}h {}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// When `then` is, seen from `now` (both epoch ms): `3m 12s ago`, `in 5m 0s`, or `just now`
/// within a second either way.
pub(crate) fn ago(now: i64, then: i64) -> String {
    let delta = now - then;
    if delta.abs() < 1000 {
        "just now".to_string()
    } else if delta > 0 {
        format!("{} ago", duration(delta))
    } else {
        format!("in {}", duration(-delta))
    }
}

/// The first line of `text`, cut to at most `max` characters (the cut marked with `…`).
pub(crate) fn first_line(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or("").trim_end();
    let more_lines = text.trim_end().lines().nth(1).is_some();
    if line.chars().count() > max {
        let kept: String = line.chars().take(max.saturating_sub(1)).collect();
        format!("{kept}…")
    } else if more_lines {
        format!("{line} …")
    } else {
        line.to_string()
    }
}

/// Rows under a header, each column as wide as its widest cell, two spaces apart; the last
/// column is not padded.
pub(crate) fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut out = String::new();
        for (i, cell) in cells.enumerate() {
            if i > 0 {
                out.push_str("  ");
            }
            out.push_str(cell);
            let pad = widths[i].saturating_sub(cell.chars().count());
            out.extend(std::iter::repeat_n(' ', pad));
        }
        out.trim_end().to_string()
    };
    let mut out = line(&mut header.iter().copied());
    for row in rows {
        out.push('\n');
        out.push_str(&line(&mut row.iter().map(String::as_str)));
    }
    out
}

/// A `--since` value that is none of the forms it takes (the value, trimmed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "--since '{0}' is not a span like 30m, 2h or 7d, an RFC 3339 time like \
     2026-12-01T07:00:00Z, or epoch milliseconds"
)]
pub(crate) struct BadSince(String);

/// A `--since` value as epoch ms: a span back from `now` (`90s`, `15m`, `2h`, `7d`), an
/// RFC 3339 time, or epoch milliseconds; else why not, saying what to write.
pub(crate) fn since(value: &str, now: i64) -> Result<i64, BadSince> {
    let value = value.trim();
    if let Ok(ms) = value.parse::<i64>() {
        return Ok(ms);
    }
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(value) {
        return Ok(t.timestamp_millis());
    }
    let unit_ms = match value.chars().last() {
        Some('s') => 1_000,
        Some('m') => 60_000,
        Some('h') => 3_600_000,
        Some('d') => 86_400_000,
        _ => 0,
    };
    match value[..value.len().saturating_sub(1)].parse::<i64>() {
        Ok(n) if unit_ms > 0 && n >= 0 => Ok(now - n * unit_ms),
        _ => Err(BadSince(value.to_string())),
    }
}

/// An epoch-ms time as RFC 3339 in UTC, to the second.
pub(crate) fn utc(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_else(|| ms.to_string())
}

/// The most characters of text an event summary shows.
const SUMMARY_CHARS: usize = 100;

/// One line saying what an event holds: a message's text and tool calls, a tool result's
/// status and first line; other events their payload as compact JSON, cut short.
pub(crate) fn event_summary(event_type: &str, payload: &Value) -> String {
    match event_type {
        "user_message" | "assistant_message" => {
            let content = &payload["message"]["content"];
            let parts: Vec<String> = match content {
                Value::String(text) => vec![first_line(text, SUMMARY_CHARS)],
                Value::Array(blocks) => blocks.iter().filter_map(block_summary).collect(),
                _ => Vec::new(),
            };
            parts.join(" ")
        }
        "tool_result" => {
            let tag = if payload["interrupted"] == true {
                "interrupted"
            } else if payload["is_error"] == true {
                "error"
            } else {
                "ok"
            };
            let content = payload["content"].as_str().unwrap_or("");
            format!("[{tag}] {}", first_line(content, SUMMARY_CHARS))
        }
        _ => first_line(&payload.to_string(), SUMMARY_CHARS),
    }
}

fn block_summary(block: &Value) -> Option<String> {
    match block["type"].as_str()? {
        "text" => {
            let text = block["text"].as_str()?.trim();
            (!text.is_empty()).then(|| first_line(text, SUMMARY_CHARS))
        }
        "tool_use" => Some(format!(
            "→ {} {}",
            block["name"].as_str().unwrap_or("?"),
            first_line(&block["input"].to_string(), SUMMARY_CHARS / 2)
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn durations_read_in_the_two_largest_units() {
        assert_eq!(duration(850), "850ms");
        assert_eq!(duration(12_400), "12s");
        assert_eq!(duration(192_000), "3m 12s");
        assert_eq!(duration(2 * 3_600_000 + 5 * 60_000 + 7_000), "2h 5m");
        assert_eq!(duration(3 * 86_400_000 + 4 * 3_600_000), "3d 4h");
        assert_eq!(duration(-5), "0ms");
    }

    #[test]
    fn ages_say_ago_or_in() {
        assert_eq!(ago(1_000_000, 1_000_000 - 192_000), "3m 12s ago");
        assert_eq!(ago(1_000_000, 1_000_000 + 300_000), "in 5m 0s");
        assert_eq!(ago(1_000_000, 1_000_400), "just now");
    }

    #[test]
    fn first_lines_are_cut_and_marked() {
        assert_eq!(first_line("boom\nat line 2", 40), "boom …");
        assert_eq!(first_line("abcdef", 4), "abc…");
        assert_eq!(first_line("fine", 4), "fine");
        assert_eq!(first_line("", 4), "");
    }

    #[test]
    fn tables_align_columns_under_the_header() {
        let rows = vec![
            vec!["a".to_string(), "long cell".to_string(), "x".to_string()],
            vec!["bbbb".to_string(), "c".to_string(), "y".to_string()],
        ];
        assert_eq!(
            table(&["ID", "WHAT", "LAST"], &rows),
            "ID    WHAT       LAST\na     long cell  x\nbbbb  c          y"
        );
    }

    #[test]
    fn since_takes_spans_times_and_epoch_ms() {
        let now = 10 * 86_400_000;
        assert_eq!(since("30m", now), Ok(now - 1_800_000));
        assert_eq!(since("2d", now), Ok(now - 2 * 86_400_000));
        assert_eq!(since("1234", now), Ok(1234));
        assert_eq!(since("1970-01-01T00:00:01Z", now), Ok(1000));
        let err = since("yesterday", now).unwrap_err().to_string();
        assert!(
            err.contains("--since 'yesterday'") && err.contains("30m"),
            "{err}"
        );
        assert!(since("-3h", now).is_err());
    }

    #[test]
    fn event_summaries_show_text_tool_calls_and_results() {
        let assistant = json!({"message": {"role": "assistant", "content": [
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "t1", "name": "read_file", "input": {"path": "a.txt"}}
        ]}});
        assert_eq!(
            event_summary("assistant_message", &assistant),
            r#"Let me look. → read_file {"path":"a.txt"}"#
        );
        let result = json!({"call_id": "t1", "content": "line 1\nline 2", "is_error": true});
        assert_eq!(event_summary("tool_result", &result), "[error] line 1 …");
        let long = json!({"reason": "x".repeat(300)});
        assert_eq!(
            event_summary("wakeup_scheduled", &long).chars().count(),
            SUMMARY_CHARS
        );
    }
}
