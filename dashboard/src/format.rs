//! How the pages show numbers and times: ages, durations, money, token counts and UTC
//! times. Pure functions of their inputs (the caller passes `now`), so every page agrees and
//! each rule is unit-tested.

use nightshift_store::Millis;

/// How long ago `at` was, as of `now`: `12s ago`, `5m ago`, `3h ago`, `4d ago`; a time in the
/// future reads `in 5m`.
pub fn age(now: Millis, at: Millis) -> String {
    let delta = now - at;
    let span = short_span(delta.unsigned_abs());
    if delta >= 0 {
        format!("{span} ago")
    } else {
        format!("in {span}")
    }
}

fn short_span(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..=59 => format!("{s}s"),
        60..=3_599 => format!("{}m", s / 60),
        3_600..=86_399 => format!("{}h", s / 3_600),
        _ => format!("{}d", s / 86_400),
    }
}

/// A duration in milliseconds: `850ms`, `12.3s`, `3m 04s`, `2h 05m`.
pub fn duration(ms: i64) -> String {
    let ms = ms.max(0);
    match ms {
        0..=999 => format!("{ms}ms"),
        1_000..=59_999 => format!("{:.1}s", ms as f64 / 1000.0),
        60_000..=3_599_999 => format!("{}m {:02}s", ms / 60_000, (ms / 1000) % 60),
        _ => format!("{}h {:02}m", ms / 3_600_000, (ms / 60_000) % 60),
    }
}

/// Dollars: four decimals under a dollar (`$0.0123`), two above (`$12.30`), `$0` for nothing.
pub fn money(usd: f64) -> String {
    if usd <= 0.0 {
        "$0".into()
    } else if usd < 1.0 {
        format!("${usd:.4}")
    } else {
        format!("${usd:.2}")
    }
}

/// A token count: `950`, `12.3k`, `4.5M`.
pub fn tokens(n: i64) -> String {
    match n {
        i64::MIN..=999 => n.to_string(),
        1_000..=999_999 => format!("{:.1}k", n as f64 / 1e3),
        _ => format!("{:.1}M", n as f64 / 1e6),
    }
}

/// The UTC time of `at` as RFC 3339 with seconds (`2026-12-02T11:49:11Z`), as `<time
/// datetime>` and `title` take it.
pub fn utc(at: Millis) -> String {
    chrono::DateTime::from_timestamp_millis(at)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_else(|| at.to_string())
}

/// A filter's time that is not a time; `Display` shows the text and the form to write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not a time; write it like 2026-12-02T11:00:00Z")]
pub struct NotATime(pub String);

/// Parses a filter's time: RFC 3339 (`2026-12-02T11:00:00Z`), or the `datetime-local` form a
/// browser sends (`2026-12-02T11:00`, read as UTC). An empty text is no bound.
pub fn parse_time(text: &str) -> Result<Option<Millis>, NotATime> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(Some(t.timestamp_millis()));
    }
    for form in ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S"] {
        if let Ok(t) = chrono::NaiveDateTime::parse_from_str(text, form) {
            return Ok(Some(t.and_utc().timestamp_millis()));
        }
    }
    Err(NotATime(text.to_string()))
}

/// The first line of `text`, cut to `max` characters with an ellipsis.
pub fn first_line(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or("");
    head(line, max)
}

/// The first `max` characters of `text`, with an ellipsis when cut.
pub fn head(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_string()
    } else {
        let cut: String = text.chars().take(max).collect();
        format!("{cut}…")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_in_the_largest_whole_unit_past_and_future() {
        let now = 1_000_000_000;
        assert_eq!(age(now, now - 12_000), "12s ago");
        assert_eq!(age(now, now - 5 * 60_000 - 59_000), "5m ago");
        assert_eq!(age(now, now - 3 * 3_600_000), "3h ago");
        assert_eq!(age(now, now - 4 * 86_400_000), "4d ago");
        assert_eq!(age(now, now + 5 * 60_000), "in 5m");
    }

    #[test]
    fn durations_money_and_tokens_are_short_and_exact_enough() {
        assert_eq!(duration(850), "850ms");
        assert_eq!(duration(12_340), "12.3s");
        assert_eq!(duration(184_000), "3m 04s");
        assert_eq!(duration(7_500_000), "2h 05m");
        assert_eq!(duration(-5), "0ms");
        assert_eq!(money(0.0), "$0");
        assert_eq!(money(0.01234), "$0.0123");
        assert_eq!(money(12.3), "$12.30");
        assert_eq!(tokens(950), "950");
        assert_eq!(tokens(12_345), "12.3k");
        assert_eq!(tokens(4_500_000), "4.5M");
    }

    #[test]
    fn times_are_shown_in_utc_and_filters_take_both_forms() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(parse_time(""), Ok(None));
        assert_eq!(parse_time("1970-01-01T00:01:00Z"), Ok(Some(60_000)));
        assert_eq!(parse_time("1970-01-01T00:01"), Ok(Some(60_000)));
        assert_eq!(
            parse_time(" yesterday ").unwrap_err().to_string(),
            "'yesterday' is not a time; write it like 2026-12-02T11:00:00Z"
        );
    }

    #[test]
    fn long_text_is_cut_on_characters_with_an_ellipsis() {
        assert_eq!(first_line("boom\nstack", 10), "boom");
        assert_eq!(head("ééééé", 3), "ééé…");
        assert_eq!(head("abc", 3), "abc");
    }
}
