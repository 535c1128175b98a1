//! How a long text is shown collapsed: its head, then the whole text one click away, and for
//! a result its tail.
//!
//! What it guarantees: a head and a tail never overlap, so no part of a text is shown twice;
//! a text short enough to show whole (or whose head and tail would be all of it) is shown
//! once, whole (PURE).

/// How much of a tool result is shown before it is collapsed.
const HEAD: usize = 400;
/// How much of a collapsed text its head and its tail show, each at most.
const SHOWN_LINES: usize = 4;
const SHOWN_CHARS: usize = 300;

/// The result head shown before `<details>`: whether the text needs collapsing.
pub fn is_long(text: &str) -> bool {
    text.len() > HEAD || text.lines().count() > 8
}

/// How a long text is shown collapsed: its head and its tail, each at most [`SHOWN_LINES`]
/// lines and [`SHOWN_CHARS`] characters, never overlapping (the tail starts after the
/// head), so no part of it is shown twice; `None` when it is shown whole (it is not long,
/// or its head and tail together are all of it) (pure).
pub fn head_and_tail(text: &str) -> Option<(&str, &str)> {
    if !is_long(text) {
        return None;
    }
    let by_lines = text
        .match_indices('\n')
        .nth(SHOWN_LINES - 1)
        .map_or(text.len(), |(i, _)| i);
    let by_chars = text
        .char_indices()
        .nth(SHOWN_CHARS)
        .map_or(text.len(), |(i, _)| i);
    let head_end = by_lines.min(by_chars);
    let body = text.trim_end_matches('\n');
    let from_lines = body
        .rmatch_indices('\n')
        .nth(SHOWN_LINES - 1)
        .map_or(0, |(i, _)| i + 1);
    let from_chars = text
        .char_indices()
        .rev()
        .nth(SHOWN_CHARS - 1)
        .map_or(0, |(i, _)| i);
    let tail_start = from_lines.max(from_chars);
    if tail_start <= head_end {
        return None;
    }
    Some((&text[..head_end], &text[tail_start..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_and_tails_never_overlap_and_short_texts_are_whole() {
        assert_eq!(head_and_tail("one line"), None);
        let lines: String = (1..=9).map(|i| format!("l{i}\n")).collect();
        let (head, tail) = head_and_tail(&lines).unwrap();
        assert_eq!((head, tail), ("l1\nl2\nl3\nl4", "l6\nl7\nl8\nl9\n"));
        // 500 characters on one line: a 300-character head and tail would overlap, so the
        // text is shown whole.
        assert_eq!(head_and_tail(&"x".repeat(500)), None);
        let long = format!("{}{}", "a".repeat(400), "b".repeat(400));
        let (head, tail) = head_and_tail(&long).unwrap();
        assert_eq!((head.len(), tail.len()), (300, 300));
        assert!(head.chars().all(|c| c == 'a') && tail.chars().all(|c| c == 'b'));
        let wide = "é".repeat(700);
        let (head, tail) = head_and_tail(&wide).unwrap();
        assert_eq!((head.chars().count(), tail.chars().count()), (300, 300));
    }
}
