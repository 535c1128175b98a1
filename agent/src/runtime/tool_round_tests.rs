//! The plan of a tool round, without a store or a tool box.

use super::*;
use crate::state::{CallResult, StartedCall};

fn call(id: &str) -> PendingCall {
    PendingCall {
        call_id: id.into(),
        name: "tool".into(),
        input: serde_json::json!({}),
        started: None,
        result: None,
        unparsed: None,
    }
}

fn started(id: &str, durability: ToolClass) -> PendingCall {
    PendingCall {
        started: Some(StartedCall {
            durability,
            idempotency_key: format!("logged-{id}"),
        }),
        ..call(id)
    }
}

fn plain() -> CallFacts {
    CallFacts {
        control: false,
        input_error: None,
        needs_approval: false,
        durability: ToolClass::SideEffect,
    }
}

fn key(call: &PendingCall) -> String {
    format!("new-{}", call.call_id)
}

fn plans(round: &[Planned]) -> Vec<(&str, &CallPlan)> {
    round
        .iter()
        .map(|p| (p.call.call_id.as_str(), &p.plan))
        .collect()
}

fn decided(approved: bool, reason: Option<&str>) -> Decision {
    Decision {
        approved,
        reason: reason.map(str::to_string),
    }
}

#[test]
fn answered_calls_are_left_out_and_new_ones_start_under_a_new_key() {
    let done = PendingCall {
        result: Some(CallResult {
            content: "ok".into(),
            is_error: false,
        }),
        ..call("a")
    };
    let facts = |_: &PendingCall| CallFacts {
        durability: ToolClass::Idempotent,
        ..plain()
    };
    let round = plan_round(&[done, call("b")], facts, &BTreeMap::new(), key);
    assert_eq!(
        plans(&round),
        [(
            "b",
            &CallPlan::Start {
                key: "new-b".into(),
                durability: ToolClass::Idempotent
            }
        )]
    );
}

#[test]
fn started_calls_are_replayed_from_the_log_or_reported_interrupted() {
    let pending = [
        started("r", ToolClass::ReadOnly),
        started("i", ToolClass::Idempotent),
        started("s", ToolClass::SideEffect),
    ];
    // Nothing about a started call is asked again: the log decides.
    let round = plan_round(
        &pending,
        |_| panic!("facts of a started call"),
        &BTreeMap::new(),
        |_| panic!("a new key for a started call"),
    );
    assert_eq!(
        plans(&round),
        [
            (
                "r",
                &CallPlan::Replay {
                    key: "logged-r".into()
                }
            ),
            (
                "i",
                &CallPlan::Replay {
                    key: "logged-i".into()
                }
            ),
            ("s", &CallPlan::Interrupted),
        ]
    );
}

#[test]
fn a_bad_input_is_refused_before_anyone_is_asked_to_approve_it() {
    let facts = |_: &PendingCall| CallFacts {
        input_error: Some("no".into()),
        needs_approval: true,
        ..plain()
    };
    let round = plan_round(&[call("a"), call("b")], facts, &BTreeMap::new(), key);
    assert_eq!(
        plans(&round),
        [
            ("a", &CallPlan::RefuseInput("no".into())),
            ("b", &CallPlan::RefuseInput("no".into())),
        ]
    );
}

#[test]
fn a_control_tool_is_never_refused_for_its_input() {
    let facts = |_: &PendingCall| CallFacts {
        control: true,
        input_error: Some("no".into()),
        ..plain()
    };
    let round = plan_round(&[call("w")], facts, &BTreeMap::new(), key);
    assert!(round[0].control);
    assert!(matches!(round[0].plan, CallPlan::Start { .. }));
}

#[test]
fn approval_asks_and_ends_the_round_denial_answers_and_a_yes_starts() {
    let facts = |c: &PendingCall| CallFacts {
        needs_approval: c.call_id != "free",
        ..plain()
    };
    let decisions = BTreeMap::from([
        ("yes".to_string(), decided(true, None)),
        ("no".to_string(), decided(false, Some("too risky"))),
    ]);
    let pending = [
        call("yes"),
        call("no"),
        call("free"),
        call("ask"),
        call("after"),
    ];
    let round = plan_round(&pending, facts, &decisions, key);
    let start = |id: &str| CallPlan::Start {
        key: format!("new-{id}"),
        durability: ToolClass::SideEffect,
    };
    assert_eq!(
        plans(&round),
        [
            ("yes", &start("yes")),
            (
                "no",
                &CallPlan::Denied(approval::denied_notice(Some("too risky")))
            ),
            ("free", &start("free")),
            ("ask", &CallPlan::AskApproval),
        ],
        "nothing after a call that waits for approval is planned"
    );
}

#[test]
fn a_decision_for_a_call_that_needs_none_changes_nothing() {
    let decisions = BTreeMap::from([("a".to_string(), decided(false, None))]);
    let round = plan_round(&[call("a")], |_| plain(), &decisions, key);
    assert!(matches!(round[0].plan, CallPlan::Start { .. }));
}

#[test]
fn arguments_that_were_not_json_are_answered_with_an_error_and_never_run() {
    let broken = PendingCall {
        name: "pay".into(),
        unparsed: Some("{\"amount\": 5,".into()),
        ..call("a")
    };
    let round = plan_round(&[broken, call("b")], |_| plain(), &BTreeMap::new(), key);
    let CallPlan::RefuseInput(notice) = &round[0].plan else {
        panic!("{:?}", round[0].plan);
    };
    assert!(
        notice.contains("not valid JSON")
            && notice.contains("{\"amount\": 5,")
            && notice.contains("Call pay again"),
        "{notice}"
    );
    assert!(
        matches!(round[1].plan, CallPlan::Start { .. }),
        "the others run"
    );
}
