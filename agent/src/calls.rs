//! Tool-call identity is the runtime's, not the provider's.
//!
//! Providers and proxies hand out duplicate ids in one reply, omit them, or reuse them in a
//! later turn. Before a reply is logged, [`assign_ids`] gives every tool call in it an id that
//! is unique within the whole run: the provider's id is kept when it is well formed and new to
//! the run (so provider logs still match), and any other call gets a runtime id
//! (`ns_<turn>_<index>`). The history sent back therefore stays valid for every wire format,
//! and every call is answered exactly once.
//!
//! The idempotency key of a call ([`idempotency_key`]) is made of the run, the turn of the
//! reply and that run-unique id: unique per call across the run, and stable across crashes and
//! resumes because both parts come from the log.

use std::collections::BTreeSet;

use nightshift_llm::ContentBlock;
use nightshift_llm::conversation::valid_call_id;

/// Gives every tool call in `content` (the reply of model turn `turn`) an id unique within
/// the run; `seen` holds every id used so far in the run. Returns how many ids were replaced.
pub fn assign_ids(content: &mut [ContentBlock], turn: u64, seen: &BTreeSet<String>) -> usize {
    let mut used: BTreeSet<String> = BTreeSet::new();
    let mut replaced = 0;
    for (index, block) in content
        .iter_mut()
        .filter(|b| matches!(b, ContentBlock::ToolUse { .. }))
        .enumerate()
    {
        let ContentBlock::ToolUse { id, .. } = block else {
            unreachable!("filtered to tool calls")
        };
        let taken = |candidate: &str| seen.contains(candidate) || used.contains(candidate);
        if !valid_call_id(id) || taken(id) {
            let mut fresh = format!("ns_{turn}_{index}");
            while taken(&fresh) {
                // Only when a provider itself chose an id of the runtime's form.
                fresh.push('x');
            }
            *id = fresh;
            replaced += 1;
        }
        used.insert(id.clone());
    }
    replaced
}

/// The error result of a call to `name` whose arguments `raw` were not valid JSON: what was
/// wrong, what was written (the start of it) and what to do, so the model can correct it.
pub fn unparsed_notice(name: &str, raw: &str) -> String {
    let why = match serde_json::from_str::<serde_json::Value>(raw) {
        Err(e) => e.to_string(),
        Ok(_) => "it did not arrive whole".to_string(),
    };
    let shown: String = raw.chars().take(500).collect();
    let more = if shown.len() < raw.len() { " …" } else { "" };
    format!(
        "This call was not run: its arguments were not valid JSON ({why}). They were: \
         {shown}{more}\nCall {name} again with arguments that are one JSON object matching \
         its input schema (quote strings, escape quotes and newlines in them, no trailing \
         commas)."
    )
}

/// The idempotency key of call `call_id` of turn `turn` of run `run_id`.
pub fn idempotency_key(run_id: &str, turn: u64, call_id: &str) -> String {
    format!("{run_id}:{turn}:{call_id}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(id: &str) -> ContentBlock {
        ContentBlock::ToolUse {
            id: id.into(),
            name: "pay".into(),
            input: json!({}),
            unparsed: None,
        }
    }

    fn ids(content: &[ContentBlock]) -> Vec<String> {
        content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::ToolUse { id, .. } => Some(id.clone()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn good_new_ids_are_kept() {
        let mut content = vec![
            ContentBlock::Text { text: "x".into() },
            call("toolu_a"),
            call("toolu_b"),
        ];
        assert_eq!(assign_ids(&mut content, 1, &BTreeSet::new()), 0);
        assert_eq!(ids(&content), ["toolu_a", "toolu_b"]);
    }

    #[test]
    fn duplicate_missing_malformed_and_reused_ids_are_replaced() {
        let seen: BTreeSet<String> = ["call_0".to_string()].into();
        let mut content = vec![
            call("dup"),
            call("dup"),
            call(""),
            call("has space"),
            call("call_0"),
        ];
        assert_eq!(assign_ids(&mut content, 3, &seen), 4);
        assert_eq!(
            ids(&content),
            ["dup", "ns_3_1", "ns_3_2", "ns_3_3", "ns_3_4"]
        );
    }

    #[test]
    fn a_runtime_id_never_collides_with_one_a_provider_chose() {
        let seen: BTreeSet<String> = ["ns_2_1".to_string()].into();
        let mut content = vec![call("ns_2_0"), call("")];
        assign_ids(&mut content, 2, &seen);
        let got = ids(&content);
        assert_eq!(got[0], "ns_2_0");
        assert_ne!(got[1], "ns_2_1");
        assert!(!seen.contains(&got[1]) && got[1] != got[0]);
    }

    #[test]
    fn keys_differ_across_turns_for_the_same_id() {
        assert_ne!(
            idempotency_key("r", 1, "call_0"),
            idempotency_key("r", 2, "call_0")
        );
    }
}
