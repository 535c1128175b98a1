//! From matched windows to what is written: the covered bytes, as disjoint segments each
//! named after one secret, and where a stream may be cut without splitting one.
//!
//! Guarantees: every byte some match covers is inside exactly one segment, and each segment
//! becomes one `[REDACTED:NAME]`; overlapping matches of one secret make one segment (so a
//! secret printed whole is one marker), matches of different secrets that only touch stay
//! apart (two secrets side by side are two markers). All pure; no I/O.

/// Text bytes `start..end` are covered by a window of secret number `owner`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Hit {
    pub start: usize,
    pub end: usize,
    pub owner: u32,
}

/// The disjoint, ordered segments covering every hit. Where hits overlap, the one starting
/// first (the longer one on a tie) names the bytes it covers; the rest of a later hit of
/// another secret is a segment of its own.
pub(super) fn segments(mut hits: Vec<Hit>) -> Vec<Hit> {
    hits.sort_unstable_by(|a, b| a.start.cmp(&b.start).then(b.end.cmp(&a.end)));
    let mut out: Vec<Hit> = Vec::with_capacity(hits.len());
    for hit in hits {
        match out.last_mut() {
            Some(last) if hit.start < last.end => {
                if hit.end <= last.end {
                    continue;
                }
                if hit.owner == last.owner {
                    last.end = hit.end;
                } else {
                    let start = last.end;
                    out.push(Hit { start, ..hit });
                }
            }
            _ => out.push(hit),
        }
    }
    out
}

/// `text[from..to]` with each segment (clipped to the range) replaced by its marker.
pub(super) fn replace(
    text: &[u8],
    segments: &[Hit],
    names: &[String],
    from: usize,
    to: usize,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(to - from);
    let mut at = from;
    let first = segments.partition_point(|s| s.end <= from);
    for seg in &segments[first..] {
        if seg.start >= to {
            break;
        }
        let (start, end) = (seg.start.max(from), seg.end.min(to));
        out.extend_from_slice(&text[at..start]);
        let name = names
            .get(seg.owner as usize)
            .map(String::as_str)
            .unwrap_or("secret");
        out.extend_from_slice(b"[REDACTED:");
        out.extend_from_slice(name.as_bytes());
        out.push(b']');
        at = end;
    }
    out.extend_from_slice(&text[at..to]);
    out
}

/// How much a stream holds back at most, in bytes: a segment or a run of backslashes that
/// reaches further back than this is cut through (each side is still redacted; the marker is
/// then written twice).
pub(super) const MAX_HOLD: usize = 64 * 1024;

/// Where to cut a stream at or before `cut` (not before `floor`): never inside a segment (a
/// match decided now could grow with the next bytes) and never inside an escape (the next
/// piece must decode as the whole text would) — unless that would hold back more than
/// [`MAX_HOLD`] bytes.
pub(super) fn safe_cut(text: &[u8], segments: &[Hit], floor: usize, mut cut: usize) -> usize {
    let lowest = cut.saturating_sub(MAX_HOLD).max(floor);
    loop {
        let before = cut;
        cut = before_escape(text, lowest, cut);
        let i = segments.partition_point(|s| s.end <= cut);
        if let Some(seg) = segments.get(i)
            && seg.start < cut
        {
            cut = seg.start.max(lowest);
        }
        if cut == before {
            return cut;
        }
    }
}

/// `cut`, moved back to the start of a JSON escape it would split (`\uXXXX` is 6 bytes, and
/// a run of backslashes is read in pairs from its start; from `floor` when it starts before),
/// or of a `%XX`.
fn before_escape(text: &[u8], floor: usize, cut: usize) -> usize {
    let near = cut.saturating_sub(6).max(floor);
    if let Some(k) = text[near..cut].iter().position(|&b| b == b'\\') {
        let mut at = near + k;
        while at > floor && text[at - 1] == b'\\' {
            at -= 1;
        }
        if at == floor && floor > 0 && text[floor - 1] == b'\\' {
            // The run began before what may be held: keep its pairs from the floor.
            return near + k - (near + k - floor) % 2;
        }
        return at;
    }
    let near = cut.saturating_sub(2).max(floor);
    match text[near..cut].iter().position(|&b| b == b'%') {
        Some(k) => near + k,
        None => cut,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(start: usize, end: usize, owner: u32) -> Hit {
        Hit { start, end, owner }
    }

    #[test]
    fn overlapping_windows_of_one_secret_are_one_segment() {
        let segs = segments(vec![
            hit(2, 10, 0),
            hit(0, 8, 0),
            hit(1, 9, 0),
            hit(3, 5, 1),
        ]);
        assert_eq!(segs, vec![hit(0, 10, 0)]);
    }

    #[test]
    fn secrets_side_by_side_stay_apart_and_overlaps_are_split() {
        let segs = segments(vec![hit(0, 8, 0), hit(8, 16, 1), hit(16, 24, 1)]);
        assert_eq!(segs, vec![hit(0, 8, 0), hit(8, 16, 1), hit(16, 24, 1)]);
        let segs = segments(vec![hit(0, 8, 0), hit(5, 12, 1)]);
        assert_eq!(segs, vec![hit(0, 8, 0), hit(8, 12, 1)]);
    }

    #[test]
    fn replacement_clips_segments_to_the_range() {
        let names = vec!["A".to_string(), "B".to_string()];
        let text = b"xxAAAAyyBBBBzz";
        let segs = [hit(2, 6, 0), hit(8, 12, 1)];
        assert_eq!(
            replace(text, &segs, &names, 0, text.len()),
            b"xx[REDACTED:A]yy[REDACTED:B]zz"
        );
        assert_eq!(
            replace(text, &segs, &names, 4, 10),
            b"[REDACTED:A]yy[REDACTED:B]"
        );
    }

    #[test]
    fn a_cut_never_splits_a_segment_or_an_escape() {
        let text = b"abcdefghij\\u00e9klmnop%2Fq";
        assert_eq!(safe_cut(text, &[hit(2, 6, 0)], 0, 4), 2);
        assert_eq!(
            safe_cut(text, &[hit(2, 6, 0)], 3, 4),
            3,
            "not below the floor"
        );
        assert_eq!(safe_cut(text, &[], 0, 13), 10, "inside \\u00e9");
        assert_eq!(safe_cut(text, &[], 0, 24), 22, "inside %2F");
        assert_eq!(safe_cut(text, &[], 0, 8), 8);
        // A backslash run is read in pairs from its start.
        assert_eq!(safe_cut(b"ab\\\\\\\\n", &[], 0, 6), 2);
    }
}
