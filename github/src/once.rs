//! Writes that happen once although an answer is lost: the one rule every write Nightshift
//! makes to GitHub follows.
//!
//! GitHub has no idempotency keys, so each write carries something it can be found by — a
//! signed marker in a comment's or review's body, a check run's `external_id` — and
//! [`send_once`] does this:
//!
//! 1. **Send** the write. An answer (success or refusal) is the outcome.
//! 2. When the answer was lost after the request may have reached GitHub
//!    ([`GithubError::Ambiguous`]), **look** for what it would have made, after a pause for
//!    GitHub to finish what it may be doing. Found: that is the outcome — the write was done,
//!    only its answer was lost. Not there: GitHub did not do it, and it is **sent again**
//!    (once more at most, [`Patience::sends`]).
//! 3. When looking fails too (GitHub cannot be reached), the outcome stays unknown: the
//!    ambiguous error is returned, and the caller must look again before sending — the tools
//!    answer "unresolved" and their call is run again later under the same key.
//!
//! The caller looks once before the first send as well (a call run again after a crash finds
//! what its first run made); [`send_once`] starts after that look.

use std::future::Future;
use std::time::Duration;

use crate::api::GithubError;

/// How long [`send_once`] waits and how often it tries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Patience {
    /// The pause before looking for what a lost write may have made (doubled per look).
    pub settle: Duration,
    /// How many times to look after one lost answer before giving up on knowing.
    pub looks: u32,
    /// How many times in all the write may be sent.
    pub sends: u32,
}

impl Default for Patience {
    fn default() -> Self {
        Patience {
            settle: Duration::from_secs(2),
            looks: 3,
            sends: 2,
        }
    }
}

/// What a write ended in.
#[derive(Debug, Clone, PartialEq)]
pub enum Written<T> {
    /// Sent and answered.
    Sent(T),
    /// Its answer was lost, and looking found that GitHub had done it.
    FoundAfterLostAnswer(T),
}

impl<T> Written<T> {
    /// What was written, either way.
    pub fn into_inner(self) -> T {
        match self {
            Written::Sent(t) | Written::FoundAfterLostAnswer(t) => t,
        }
    }
}

/// What looking after a lost answer found.
#[derive(Debug)]
enum Looked<T> {
    Found(T),
    Absent,
    /// GitHub could not be asked (every look failed); the last failure.
    Unknown(GithubError),
}

/// What to do after a lost answer and a look: the decision, apart from the I/O.
#[derive(Debug)]
enum Next<T> {
    Done(Written<T>),
    SendAgain,
    GiveUp(GithubError),
}

fn decide<T>(looked: Looked<T>, sent: u32, patience: &Patience, lost: GithubError) -> Next<T> {
    match looked {
        Looked::Found(t) => Next::Done(Written::FoundAfterLostAnswer(t)),
        Looked::Absent if sent < patience.sends => Next::SendAgain,
        Looked::Absent => Next::GiveUp(lost),
        Looked::Unknown(why) => Next::GiveUp(match lost {
            GithubError::Ambiguous {
                method,
                path,
                reason,
            } => GithubError::Ambiguous {
                method,
                path,
                reason: format!("{reason}; looking for it failed too: {why}"),
            },
            other => other,
        }),
    }
}

/// Sends with `send`; when its answer is lost, looks with `look` (`Ok(None)`: not there)
/// before sending again. See the module documentation for the rule.
pub async fn send_once<T, S, SF, L, LF>(
    send: S,
    look: L,
    patience: &Patience,
) -> Result<Written<T>, GithubError>
where
    S: Fn() -> SF,
    SF: Future<Output = Result<T, GithubError>>,
    L: Fn() -> LF,
    LF: Future<Output = Result<Option<T>, GithubError>>,
{
    let mut sent = 0;
    loop {
        sent += 1;
        let lost = match send().await {
            Ok(t) => return Ok(Written::Sent(t)),
            Err(e) if e.is_ambiguous() => e,
            Err(e) => return Err(e),
        };
        tracing::warn!(error = %lost, "GitHub's answer to a write was lost; looking for what it did");
        let looked = look_after_lost_answer(&look, patience).await;
        match decide(looked, sent, patience, lost) {
            Next::Done(written) => return Ok(written),
            Next::SendAgain => continue,
            Next::GiveUp(e) => return Err(e),
        }
    }
}

/// Sends a write that does the same however often it is sent (a `PATCH` setting fields):
/// when its answer is lost, it is simply sent again after a pause, up to `patience.sends`
/// times in all; the last loss is returned when none is answered.
pub async fn send_idempotent<T, S, SF>(send: S, patience: &Patience) -> Result<T, GithubError>
where
    S: Fn() -> SF,
    SF: Future<Output = Result<T, GithubError>>,
{
    let mut sent = 0;
    loop {
        sent += 1;
        match send().await {
            Err(e) if e.is_ambiguous() && sent < patience.sends.max(1) => {
                tracing::warn!(error = %e, "GitHub's answer to a repeatable write was lost; sending it again");
                tokio::time::sleep(patience.settle).await;
            }
            done => return done,
        }
    }
}

/// Looks up to `patience.looks` times, pausing before each, until a look is answered.
async fn look_after_lost_answer<T, L, LF>(look: &L, patience: &Patience) -> Looked<T>
where
    L: Fn() -> LF,
    LF: Future<Output = Result<Option<T>, GithubError>>,
{
    let mut last = None;
    for n in 0..patience.looks.max(1) {
        tokio::time::sleep(patience.settle.saturating_mul(1 << n.min(8))).await;
        match look().await {
            Ok(Some(t)) => return Looked::Found(t),
            Ok(None) => return Looked::Absent,
            Err(e) => last = Some(e),
        }
    }
    Looked::Unknown(last.unwrap_or(GithubError::Transport {
        origin: String::new(),
        reason: "not looked".into(),
    }))
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use reqwest::Method;

    use super::*;

    fn lost() -> GithubError {
        GithubError::Ambiguous {
            method: Method::POST,
            path: "/x".into(),
            reason: "timed out".into(),
        }
    }

    fn unreachable() -> GithubError {
        GithubError::Transport {
            origin: "http://127.0.0.1:1".into(),
            reason: "connection refused".into(),
        }
    }

    const QUICK: Patience = Patience {
        settle: Duration::from_millis(1),
        looks: 3,
        sends: 2,
    };

    #[test]
    fn a_lost_answer_is_settled_by_what_looking_found() {
        let p = Patience::default();
        assert!(matches!(
            decide(Looked::Found(7), 1, &p, lost()),
            Next::Done(Written::FoundAfterLostAnswer(7))
        ));
        assert!(matches!(
            decide::<u8>(Looked::Absent, 1, &p, lost()),
            Next::SendAgain
        ));
        assert!(matches!(
            decide::<u8>(Looked::Absent, 2, &p, lost()),
            Next::GiveUp(GithubError::Ambiguous { .. })
        ));
        assert!(matches!(
            decide::<u8>(Looked::Unknown(unreachable()), 1, &p, lost()),
            Next::GiveUp(GithubError::Ambiguous { .. })
        ));
    }

    /// A fake GitHub in memory: the writes it stored, whether it answers them, and whether
    /// it can be asked at all.
    struct Remote {
        stored: Mutex<Vec<u32>>,
        answers: Mutex<Vec<bool>>,
        looks_fail: bool,
        sends: Mutex<u32>,
    }

    impl Remote {
        fn new(answers: &[bool], looks_fail: bool) -> Remote {
            Remote {
                stored: Mutex::new(Vec::new()),
                answers: Mutex::new(answers.iter().rev().copied().collect()),
                looks_fail,
                sends: Mutex::new(0),
            }
        }

        async fn send(&self) -> Result<u32, GithubError> {
            *self.sends.lock().unwrap() += 1;
            let answered = self.answers.lock().unwrap().pop().unwrap_or(true);
            self.stored.lock().unwrap().push(1);
            if answered { Ok(1) } else { Err(lost()) }
        }

        async fn look(&self) -> Result<Option<u32>, GithubError> {
            if self.looks_fail {
                return Err(unreachable());
            }
            Ok(self.stored.lock().unwrap().first().copied())
        }
    }

    #[tokio::test]
    async fn a_write_stored_but_unanswered_is_found_not_sent_again() {
        let remote = Remote::new(&[false], false);
        let got = send_once(|| remote.send(), || remote.look(), &QUICK).await;
        assert_eq!(got.unwrap(), Written::FoundAfterLostAnswer(1));
        assert_eq!(*remote.sends.lock().unwrap(), 1);
        assert_eq!(remote.stored.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn a_write_github_never_did_is_sent_again_and_a_refusal_is_final() {
        // Lost before GitHub stored anything: the look finds nothing, the second send lands.
        let remote = Remote::new(&[], false);
        let never = || async {
            *remote.sends.lock().unwrap() += 1;
            if *remote.sends.lock().unwrap() == 1 {
                Err(lost())
            } else {
                remote.send().await
            }
        };
        let got = send_once(never, || remote.look(), &QUICK).await;
        assert_eq!(got.unwrap(), Written::Sent(1));
        assert_eq!(remote.stored.lock().unwrap().len(), 1);

        let refused = send_once(
            || async {
                Err::<u32, _>(GithubError::Status {
                    status: 422,
                    method: Method::POST,
                    path: "/x".into(),
                    message: "invalid".into(),
                    documentation_url: None,
                })
            },
            || async { panic!("a refusal is not looked up") },
            &QUICK,
        )
        .await;
        assert!(matches!(
            refused,
            Err(GithubError::Status { status: 422, .. })
        ));
    }

    #[tokio::test]
    async fn when_github_cannot_be_asked_the_outcome_stays_unknown() {
        let remote = Remote::new(&[false], true);
        let got = send_once(|| remote.send(), || remote.look(), &QUICK).await;
        assert!(matches!(got, Err(GithubError::Ambiguous { .. })), "{got:?}");
        assert_eq!(
            *remote.sends.lock().unwrap(),
            1,
            "nothing sent again unseen"
        );
    }
}
