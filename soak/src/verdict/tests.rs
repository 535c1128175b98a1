//! The verdict on hand-made logs: a complete run breaks nothing; a short run, a side effect
//! run twice, a repeated turn, a lost run and an interrupted side effect are each found.

use serde_json::{Value, json};

use super::judge::short_reason;
use super::*;
use crate::script::{AGENTS, CLASSES, final_text, turn_text};
use crate::truth::{EventRow, LedgerLine, RunRow, Truth};

const RUN: &str = "run-1";

fn event(seq: i64, kind: &str, payload: Value) -> EventRow {
    EventRow {
        run_id: RUN.into(),
        seq,
        kind: kind.into(),
        payload: payload.to_string(),
    }
}

fn reply(text: &str) -> Value {
    json!({"message": {"role": "assistant", "content": [{"type": "text", "text": text}]}})
}

/// A complete, uninterrupted log of one `soak-short` run and its ledger.
fn complete() -> (Vec<Accepted>, Truth) {
    let agent = &AGENTS[0];
    let mut events = vec![event(1, "run_started", json!({}))];
    let mut ledger = Vec::new();
    let mut seq = 2;
    let mut push = |kind: &str, p: Value, events: &mut Vec<EventRow>| {
        events.push(event(seq, kind, p));
        seq += 1;
    };
    for turn in 0..agent.tool_turns {
        push("assistant_message", reply(&turn_text(turn)), &mut events);
        for (class, tool) in CLASSES {
            let call = format!("t{turn}_{class}");
            let key = format!("{RUN}:{call}");
            push(
                "tool_started",
                json!({"call_id": call, "name": tool, "input": {"turn": turn},
                       "durability": class, "idempotency_key": key}),
                &mut events,
            );
            push(
                "tool_result",
                json!({"call_id": call, "content": "done", "is_error": false}),
                &mut events,
            );
            ledger.push(LedgerLine {
                run_id: RUN.into(),
                call_id: call,
                idempotency_key: key,
                class: class.into(),
            });
        }
    }
    push("assistant_message", reply(&final_text(agent)), &mut events);
    let truth = Truth {
        runs: vec![RunRow {
            id: RUN.into(),
            agent: agent.name.into(),
            status: "succeeded".into(),
            result: Some(final_text(agent)),
            error: None,
            turns: agent.tool_turns as i64 + 1,
        }],
        events,
        ledger,
        ..Truth::default()
    };
    let accepted = vec![Accepted {
        run_id: RUN.into(),
        agent: agent.name.into(),
    }];
    (accepted, truth)
}

#[test]
fn a_complete_run_breaks_nothing() {
    let (accepted, truth) = complete();
    let r = judge(Context::default(), &accepted, &truth);
    assert_eq!(r.broken(), Vec::<String>::new());
    assert_eq!((r.succeeded, r.short.len(), r.side_effect_max), (1, 0, 1));
    assert_eq!(r.executions["idempotent"], (2, 2));
    let table = r.render();
    let row = table
        .lines()
        .find(|l| l.contains("every scripted call"))
        .unwrap();
    assert!(row.contains(" 1 of 1 | ok"), "{row}");
}

#[test]
fn a_succeeded_run_with_fewer_calls_and_turns_than_its_script_is_short() {
    let (accepted, mut truth) = complete();
    // Drop the last tool turn's reply and its three calls (start and result each).
    let cut = truth
        .events
        .iter()
        .position(|e| e.payload.contains(&turn_text(1)))
        .unwrap();
    truth.events.drain(cut..cut + 7);
    let r = judge(Context::default(), &accepted, &truth);
    assert_eq!(r.short.len(), 1, "{:?}", r.short);
    let why = &r.short[0].1;
    assert!(why.contains("model turns [1]"), "{why}");
    assert!(
        why.contains("side_effect@1,idempotent@1,read_only@1"),
        "{why}"
    );
    assert!(!r.broken().is_empty());
}

#[test]
fn a_missing_result_alone_makes_a_run_short() {
    let (accepted, mut truth) = complete();
    let i = truth
        .events
        .iter()
        .position(|e| e.kind == "tool_result" && e.payload.contains("t0_read_only"))
        .unwrap();
    truth.events.remove(i);
    let r = judge(Context::default(), &accepted, &truth);
    assert_eq!(r.short.len(), 1);
    assert!(r.short[0].1.contains("read_only@0"), "{:?}", r.short);
    assert_eq!(r.results_not_once.len(), 1);
}

#[test]
fn a_side_effect_run_twice_a_repeated_turn_and_a_lost_run_are_broken() {
    let (mut accepted, mut truth) = complete();
    let twice = truth
        .ledger
        .iter()
        .find(|l| l.class == "side_effect")
        .unwrap()
        .clone();
    truth.ledger.push(twice);
    let dup = truth
        .events
        .iter()
        .find(|e| e.kind == "assistant_message")
        .unwrap()
        .clone();
    truth.events.push(EventRow { seq: 99, ..dup });
    accepted.push(Accepted {
        run_id: "never-stored".into(),
        agent: AGENTS[0].name.into(),
    });
    let r = judge(Context::default(), &accepted, &truth);
    assert_eq!(r.side_effect_max, 2);
    assert_eq!(r.executions["side_effect"], (3, 2), "one re-run");
    assert_eq!(r.duplicated_turns, 1);
    assert_eq!(r.lost, vec!["never-stored (no row)".to_string()]);
    let broken = r.broken().join("\n");
    for what in [
        "accepted runs lost",
        "side-effect calls executed",
        "duplicated model turns",
    ] {
        assert!(broken.contains(what), "{what} in {broken}");
    }
}

#[test]
fn an_interrupted_side_effect_is_counted_as_outcome_unknown() {
    let (accepted, mut truth) = complete();
    let result = truth
        .events
        .iter_mut()
        .find(|e| e.kind == "tool_result" && e.payload.contains("t1_side_effect"))
        .unwrap();
    result.payload = json!({"call_id": "t1_side_effect", "content": "interrupted",
                            "is_error": true, "interrupted": true})
    .to_string();
    truth.ledger.retain(|l| l.call_id != "t1_side_effect");
    let r = judge(Context::default(), &accepted, &truth);
    assert_eq!((r.outcome_unknown, r.outcome_unknown_ran), (1, 0));
    assert_eq!(
        short_reason("lease expired: worker vm:1:ab stopped during attempt 5 of 5\nmore"),
        "lease expired: worker N stopped during attempt N of N"
    );
    assert_eq!(r.side_effect_never_ran, 1);
    assert_eq!(r.broken(), Vec::<String>::new(), "reported, not repeated");
}
