//! How a run ended, as its log says: [`Ending`], the `finished` event's fields. This is the one
//! translation between that logged form and the store's [`RunEnd`]: every end survives the
//! round trip, a success logged without a result takes the last reply, and a status this
//! version does not know fails the run rather than guessing.

use serde::{Deserialize, Serialize};

use crate::events::{EndStatus, RunEvent};
use nightshift_store::RunEnd;

/// How the run ended, once it has: the `finished` event's fields. The one translation between
/// this logged form and the store's [`RunEnd`] is [`Ending::of`] and [`Ending::run_end`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ending {
    pub status: EndStatus,
    /// The result of a success, the error of a failure, or why a budget stopped the run.
    pub detail: Option<String>,
}

impl Ending {
    /// The ending that logs `end`.
    pub fn of(end: &RunEnd) -> Ending {
        let (status, detail) = match end {
            RunEnd::Succeeded { result } => (EndStatus::Succeeded, result.clone()),
            RunEnd::Failed { error } => (EndStatus::Failed, Some(error.clone())),
            RunEnd::Cancelled => (EndStatus::Cancelled, None),
            RunEnd::Superseded => (EndStatus::Superseded, None),
            RunEnd::BudgetExhausted { detail } => {
                (EndStatus::BudgetExhausted, Some(detail.clone()))
            }
            RunEnd::MaxRounds { detail } => (EndStatus::MaxRounds, Some(detail.clone())),
        };
        Ending { status, detail }
    }

    /// The `finished` event that records this ending.
    pub fn event(self) -> RunEvent {
        RunEvent::Finished {
            status: self.status,
            detail: self.detail,
        }
    }

    /// The end this logged ending completes the run with. A success logged without a result
    /// takes `final_text` (the last reply); a status this version does not know fails the
    /// run.
    pub fn run_end(&self, final_text: impl FnOnce() -> Option<String>) -> RunEnd {
        let detail_or = |d: &str| self.detail.clone().unwrap_or_else(|| d.to_string());
        match self.status {
            EndStatus::Succeeded => RunEnd::Succeeded {
                result: self.detail.clone().or_else(final_text),
            },
            EndStatus::Cancelled => RunEnd::Cancelled,
            EndStatus::Superseded => RunEnd::Superseded,
            EndStatus::BudgetExhausted => RunEnd::BudgetExhausted {
                detail: detail_or("a budget ran out"),
            },
            EndStatus::MaxRounds => RunEnd::MaxRounds {
                detail: detail_or("the round cap was reached"),
            },
            EndStatus::Failed | EndStatus::Other(_) => RunEnd::Failed {
                error: detail_or("the run failed"),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::RunState;
    use serde_json::json;

    #[test]
    fn every_run_end_survives_its_logged_ending() {
        let ends = [
            RunEnd::Succeeded {
                result: Some("done".into()),
            },
            RunEnd::Succeeded { result: None },
            RunEnd::Failed {
                error: "boom".into(),
            },
            RunEnd::Cancelled,
            RunEnd::BudgetExhausted {
                detail: "cost".into(),
            },
            RunEnd::MaxRounds {
                detail: "40 rounds".into(),
            },
        ];
        for end in ends {
            let ending = Ending::of(&end);
            assert_eq!(ending.status.run_status(), end.run_status(), "{end:?}");
            assert_eq!(ending.run_end(|| None), end);
        }
    }

    #[test]
    fn a_logged_ending_without_detail_fills_in_what_the_end_needs() {
        let ending = |status| Ending {
            status,
            detail: None,
        };
        let last = || Some("the last reply".to_string());
        assert_eq!(
            ending(EndStatus::Succeeded).run_end(last),
            RunEnd::Succeeded {
                result: Some("the last reply".into())
            }
        );
        assert_eq!(
            ending(EndStatus::Superseded).run_end(last),
            RunEnd::Superseded
        );
        assert_eq!(
            ending(EndStatus::BudgetExhausted).run_end(last),
            RunEnd::BudgetExhausted {
                detail: "a budget ran out".into()
            }
        );
        assert_eq!(
            ending(EndStatus::MaxRounds).run_end(last),
            RunEnd::MaxRounds {
                detail: "the round cap was reached".into()
            }
        );
        assert_eq!(
            ending(EndStatus::Other("exploded".into())).run_end(last),
            RunEnd::Failed {
                error: "the run failed".into()
            }
        );
    }

    #[test]
    fn an_ending_keeps_its_wire_name_in_a_checkpointed_state() {
        let mut s = RunState::default();
        s.apply(
            1,
            &RunEvent::Finished {
                status: EndStatus::BudgetExhausted,
                detail: Some("cost".into()),
            },
        )
        .unwrap();
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(
            json["ending"],
            json!({"status": "budget_exhausted", "detail": "cost"})
        );
        let back: RunState = serde_json::from_value(json).unwrap();
        assert_eq!(back.ending, s.ending);
    }
}
