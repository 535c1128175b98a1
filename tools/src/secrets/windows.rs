//! The window matcher: one Aho-Corasick automaton over every window of every secret and of
//! each of its forms ([`super::encodings::windows`]), run over the text and over each decoded
//! view of it ([`super::views`]), plus the token shapes (regular expressions); it reports
//! every covered range of the text with the secret it belongs to.
//!
//! Guarantees: every occurrence of a window — in the text, or decoded in a view, mapped back
//! to the text bytes it came from — is reported (overlapping ones too), and nothing else: a
//! window whose case matters is checked byte for byte (the automaton folds ASCII case for
//! the hex windows). A window shared by two secrets is reported for the one listed first.

use std::collections::HashMap;

use aho_corasick::{AhoCorasick, AhoCorasickKind};

use super::encodings;
use super::spans::Hit;
use super::views;

/// The most pattern bytes matched with a DFA (about 16 MiB of tables).
const DFA_UP_TO: usize = 32 * 1024;

/// What one pattern of the automaton is.
#[derive(Debug, Clone, Copy)]
struct Pattern {
    owner: u32,
    any_case: bool,
}

/// Every window of a set of secrets, ready to match.
pub(super) struct WindowMatcher {
    automaton: Option<AhoCorasick>,
    patterns: Vec<Pattern>,
    bytes: Vec<Vec<u8>>,
    /// Token shapes, each with its owner.
    shapes: Vec<(regex::bytes::Regex, u32)>,
    /// The most text bytes one match can cover (a window decoded from its longest escape, or
    /// a shape's longest text).
    reach: usize,
}

impl WindowMatcher {
    /// A matcher for `values` (owner `i` for `values[i]`, earlier owners winning shared
    /// windows) and `shapes` (regular expression, longest text, owner).
    pub fn new(values: &[&str], shapes: &[(&str, usize, u32)]) -> Self {
        let mut index: HashMap<Vec<u8>, usize> = HashMap::new();
        let mut patterns = Vec::new();
        let mut bytes: Vec<Vec<u8>> = Vec::new();
        for (owner, value) in values.iter().enumerate() {
            for window in encodings::windows(value) {
                match index.get(&window.bytes) {
                    Some(&i) => {
                        let p: &mut Pattern = &mut patterns[i];
                        p.any_case |= window.any_case;
                    }
                    None => {
                        index.insert(window.bytes.clone(), patterns.len());
                        patterns.push(Pattern {
                            owner: owner as u32,
                            any_case: window.any_case,
                        });
                        bytes.push(window.bytes);
                    }
                }
            }
        }
        let longest_window = bytes.iter().map(Vec::len).max().unwrap_or(0);
        let total: usize = bytes.iter().map(Vec::len).sum();
        // A DFA scans several times faster; past this size its tables (~500 bytes per pattern
        // byte) are too big, and a contiguous NFA serves (a PEM key alone is ~15,000 bytes).
        let kind = (total <= DFA_UP_TO).then_some(AhoCorasickKind::DFA);
        let automaton = (!bytes.is_empty()).then(|| {
            AhoCorasick::builder()
                .ascii_case_insensitive(true)
                .kind(kind)
                .build(&bytes)
                .expect("literal windows always build an automaton")
        });
        let reach = (longest_window * views::MAX_ESCAPE)
            .max(shapes.iter().map(|&(_, len, _)| len).max().unwrap_or(0));
        let shapes = shapes
            .iter()
            .map(|&(re, _, owner)| {
                let re = regex::bytes::Regex::new(re).expect("token shapes are valid regexes");
                (re, owner)
            })
            .collect();
        WindowMatcher {
            automaton,
            patterns,
            bytes,
            shapes,
            reach,
        }
    }

    /// Whether there is nothing to find.
    pub fn is_empty(&self) -> bool {
        self.automaton.is_none() && self.shapes.is_empty()
    }

    /// The most text bytes one match can cover.
    pub fn reach(&self) -> usize {
        self.reach
    }

    /// Every covered range of `text`, unordered, possibly overlapping.
    pub fn find(&self, text: &[u8]) -> Vec<Hit> {
        let mut hits = Vec::new();
        if let Some(automaton) = &self.automaton {
            self.scan(automaton, text, None, &mut hits);
            for view in views::all(text) {
                self.scan(automaton, &view.bytes, Some(&view), &mut hits);
            }
        }
        for (re, owner) in &self.shapes {
            hits.extend(re.find_iter(text).map(|m| Hit {
                start: m.start(),
                end: m.end(),
                owner: *owner,
            }));
        }
        hits
    }

    fn scan(
        &self,
        automaton: &AhoCorasick,
        haystack: &[u8],
        view: Option<&views::View>,
        hits: &mut Vec<Hit>,
    ) {
        for m in automaton.find_overlapping_iter(haystack) {
            let i = m.pattern().as_usize();
            let pattern = self.patterns[i];
            let found = &haystack[m.start()..m.end()];
            if !pattern.any_case && found != self.bytes[i].as_slice() {
                continue;
            }
            let (start, end) = match view {
                Some(view) => {
                    let (start, end) = view.source(m.start(), m.end());
                    if end - start == m.len() {
                        // Nothing decoded inside it: the text itself has it.
                        continue;
                    }
                    (start, end)
                }
                None => (m.start(), m.end()),
            };
            hits.push(Hit {
                start,
                end,
                owner: pattern.owner,
            });
        }
    }
}
