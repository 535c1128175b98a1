//! The pure parts of listing runs: the opaque keyset cursor, which index leads a page, and
//! the heads of long texts shown in a summary. No I/O here.

use crate::clock::Millis;
use crate::{Error, Result};

use super::RunFilter;

/// The first version of the cursor's text, kept inside it so that a later format can tell
/// old cursors apart.
const VERSION: &str = "r1";
/// Characters of the prompt a summary shows.
pub const PROMPT_HEAD_CHARS: usize = 200;
/// Characters of the error's first line a summary shows.
pub const ERROR_HEAD_CHARS: usize = 200;

/// The keyset position `(created_at, id)` of the last run of a page, as an opaque string:
/// the hex of `r1:<created_at>:<id>`.
pub fn encode(created_at: Millis, id: &str) -> String {
    let text = format!("{VERSION}:{created_at}:{id}");
    let mut out = String::with_capacity(text.len() * 2);
    for b in text.bytes() {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// The keyset position a cursor made by [`encode`] holds, or `Error::Invalid` saying the
/// cursor is not one this store handed out.
pub fn decode(cursor: &str) -> Result<(Millis, String)> {
    let invalid = || {
        Error::Invalid(format!(
            "cursor '{}' is not one this server handed out; pass the next_cursor of the \
             previous page unchanged, or leave it out for the first page",
            shown(cursor)
        ))
    };
    if cursor.is_empty() || !cursor.len().is_multiple_of(2) || cursor.len() > 2048 {
        return Err(invalid());
    }
    let bytes = (0..cursor.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(cursor.get(i..i + 2).unwrap_or("zz"), 16))
        .collect::<std::result::Result<Vec<u8>, _>>()
        .map_err(|_| invalid())?;
    let text = String::from_utf8(bytes).map_err(|_| invalid())?;
    let mut parts = text.splitn(3, ':');
    let (Some(VERSION), Some(at), Some(id)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(invalid());
    };
    let at: Millis = at.parse().map_err(|_| invalid())?;
    if id.is_empty() {
        return Err(invalid());
    }
    Ok((at, id.to_string()))
}

/// A cursor as shown in an error: its first 40 characters.
fn shown(cursor: &str) -> String {
    let head: String = cursor.chars().take(40).collect();
    if head.len() < cursor.len() {
        format!("{head}…")
    } else {
        head
    }
}

/// Which index a page is read along: the first of the concurrency key, agent, status and
/// trigger filters that is set (in that order, the most selective first), or the creation
/// order. The other filters are checked on the rows read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// `runs_created` (`page.sql`).
    All,
    /// `runs_status` (`page_status.sql`).
    Status,
    /// `runs_agent_created` (`page_agent.sql`).
    Agent,
    /// `runs_trigger_created` (`page_trigger.sql`).
    Trigger,
    /// `runs_key_created` (`page_key.sql`).
    Key,
}

/// The index that leads a page of `filter`.
pub fn shape(filter: &RunFilter) -> Shape {
    if filter.concurrency_key.is_some() {
        Shape::Key
    } else if filter.agent.is_some() {
        Shape::Agent
    } else if filter.status.is_some() {
        Shape::Status
    } else if filter.trigger.is_some() {
        Shape::Trigger
    } else {
        Shape::All
    }
}

/// The first [`PROMPT_HEAD_CHARS`] characters of `prompt`.
pub fn prompt_head(prompt: &str) -> String {
    prompt.chars().take(PROMPT_HEAD_CHARS).collect()
}

/// The first line of `error`, cut at [`ERROR_HEAD_CHARS`] characters.
pub fn error_head(error: &str) -> String {
    let line = error.lines().next().unwrap_or("");
    line.chars().take(ERROR_HEAD_CHARS).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_ids_with_colons() {
        for (at, id) in [(0, "r"), (-5, "a:b:c"), (i64::MAX, "01J✓")] {
            assert_eq!(decode(&encode(at, id)).unwrap(), (at, id.to_string()));
        }
    }

    #[test]
    fn malformed_cursors_are_refused_with_a_reason() {
        let good = encode(7, "run");
        let other_version = good.replacen("7231", "7232", 1); // "r1:" → "r2:"
        for bad in [
            "",
            "abc",
            "zz",
            "not-hex!",
            &good[..good.len() - 1],
            &encode(7, "run").replace("3a", "2c"),
            &other_version,
        ] {
            let err = decode(bad).unwrap_err().to_string();
            assert!(err.contains("next_cursor"), "{bad}: {err}");
        }
    }

    #[test]
    fn the_most_selective_filter_leads() {
        let mut f = RunFilter {
            trigger: Some(crate::Trigger::Api),
            ..RunFilter::default()
        };
        assert_eq!(shape(&f), Shape::Trigger);
        f.status = Some(crate::RunStatus::Failed);
        assert_eq!(shape(&f), Shape::Status);
        f.agent = Some("a".into());
        assert_eq!(shape(&f), Shape::Agent);
        f.concurrency_key = Some("k".into());
        assert_eq!(shape(&f), Shape::Key);
        assert_eq!(shape(&RunFilter::default()), Shape::All);
    }

    #[test]
    fn heads_are_cut_by_characters_and_lines() {
        let long = "é".repeat(500);
        assert_eq!(prompt_head(&long).chars().count(), PROMPT_HEAD_CHARS);
        assert_eq!(error_head("first\nsecond"), "first");
        assert_eq!(error_head(&long).chars().count(), ERROR_HEAD_CHARS);
    }
}
