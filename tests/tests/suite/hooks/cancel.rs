//! Routes that cancel, mention-only routes and ignored deliveries, over real HTTP on both
//! backends: `pull_request.closed` cancels the review of that pull request (queued, running or
//! parked) and a redelivery of it cancels nothing new; a comment route that requires a
//! mention takes only comments that mention the bot; a hook with `unmatched = "ignore"`
//! answers the actions it has no route for with 200.

use std::time::Duration;

use nightshift_store::{Heartbeat, RunStatus};
use nightshift_tests::TestDb;
use reqwest::StatusCode;
use serde_json::Value;

use super::harness::{HOOKS, Intake, fixture, run_id};

/// The test hooks with the GitHub hook as the review-bot example writes it: reviews start on
/// open/push, comments that mention the bot steer them, closing the pull request cancels its
/// review, and every other action is ignored.
fn config() -> String {
    let (head, _) = HOOKS.split_once("[[hooks]]").unwrap();
    format!(
        r#"{head}
[[hooks]]
name = "github"
signature = "github"
secret_env = "NS_TEST_GITHUB_SECRET"
unmatched = "ignore"

[[hooks.routes]]
name = "review"
event = "pull_request"
match = {{ action = ["opened", "synchronize", "reopened"] }}
agent = "reviewer"
prompt = "Review #{{{{ pull_request.number }}}} at {{{{ pull_request.head.sha }}}}"
concurrency_key = "pr-{{{{ repository.full_name }}}}-{{{{ pull_request.number }}}}"

[[hooks.routes]]
name = "comment"
event = "issue_comment"
match = {{ action = "created", comment.body = {{ contains = "@nightshift-bot" }} }}
kind = "resume"
run_key = "pr-{{{{ repository.full_name }}}}-{{{{ issue.number }}}}"
prompt = "{{{{ comment.user.login }}}} commented: {{{{ comment.body }}}}"

[[hooks.routes]]
name = "closed"
event = "pull_request"
match = {{ action = "closed" }}
kind = "cancel"
run_key = "pr-{{{{ repository.full_name }}}}-{{{{ pull_request.number }}}}"
"#
    )
}

fn with(name: &str, edit: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut body: Value = serde_json::from_slice(&fixture(name)).unwrap();
    edit(&mut body);
    serde_json::to_vec(&body).unwrap()
}

fn action(a: &str) -> Vec<u8> {
    with("pull_request.opened", |b| b["action"] = a.into())
}

fn comment(text: &str) -> Vec<u8> {
    with("issue_comment.created", |b| {
        b["comment"]["body"] = text.into()
    })
}

async fn status(intake: &Intake, run: &str) -> RunStatus {
    intake.store.run(run).await.unwrap().unwrap().status
}

pub(super) async fn cancel_routes_mentions_and_ignored(db: &TestDb) {
    let intake = Intake::start(db).await;
    intake.reload(&config());

    // Queued: closing cancels it at once; the answer names the run.
    let (code, opened) = intake
        .github("pull_request", "d-open-1", action("opened"))
        .await;
    assert_eq!(code, StatusCode::ACCEPTED, "{opened}");
    let queued = run_id(&opened);
    let (code, closed) = intake
        .github("pull_request", "d-close-1", action("closed"))
        .await;
    assert_eq!(code, StatusCode::ACCEPTED, "{closed}");
    assert_eq!(closed["runs"][0]["kind"], "cancel");
    assert_eq!(closed["runs"][0]["run_id"], queued.as_str());
    assert_eq!(status(&intake, &queued).await, RunStatus::Cancelled);

    // Running: its job is asked to stop at its next heartbeat (its side effects are fenced).
    let (_, reopened) = intake
        .github("pull_request", "d-open-2", action("reopened"))
        .await;
    let running = run_id(&reopened);
    let lease = intake
        .store
        .claim("w", None, 1, Duration::from_secs(30))
        .await
        .unwrap()
        .remove(0);
    assert_eq!(lease.job().run_id, running);
    // A redelivery of the first close cancels nothing new.
    let again = intake
        .github_redelivered("pull_request", "d-close-1", action("closed"), &queued)
        .await;
    assert_eq!(again["runs"][0]["run_id"], queued.as_str());
    assert_eq!(status(&intake, &running).await, RunStatus::Running);
    let (code, closed) = intake
        .github("pull_request", "d-close-2", action("closed"))
        .await;
    assert_eq!(code, StatusCode::ACCEPTED, "{closed}");
    assert_eq!(closed["runs"][0]["run_id"], running.as_str());
    assert_eq!(
        lease.heartbeat(Duration::from_secs(30)).await.unwrap(),
        Heartbeat::CancelRequested
    );
    // The worker stops the job as the pool does on a cancel request.
    let stopped = nightshift_worker::JobOutcome::Done(nightshift_store::RunEnd::Cancelled);
    nightshift_worker::apply_outcome(&lease, &stopped, &Default::default())
        .await
        .unwrap();
    assert_eq!(status(&intake, &running).await, RunStatus::Cancelled);

    // Parked: cancelled at once, its wakeup never fires.
    let (_, pushed) = intake
        .github("pull_request", "d-open-3", action("synchronize"))
        .await;
    let parked = run_id(&pushed);
    let lease = intake
        .store
        .claim("w", None, 1, Duration::from_secs(30))
        .await
        .unwrap()
        .into_iter()
        .find(|l| l.job().run_id == parked)
        .expect("the new review is claimed");
    let until = intake.store.now() + 3_600_000;
    lease.park_until(until, "{}").await.unwrap();
    assert_eq!(status(&intake, &parked).await, RunStatus::Waiting);
    let (code, closed) = intake
        .github("pull_request", "d-close-3", action("closed"))
        .await;
    assert_eq!(code, StatusCode::ACCEPTED, "{closed}");
    assert_eq!(closed["runs"][0]["run_id"], parked.as_str());
    assert_eq!(status(&intake, &parked).await, RunStatus::Cancelled);

    // Nothing left to cancel: still accepted, no runs.
    let (code, none) = intake
        .github("pull_request", "d-close-4", action("closed"))
        .await;
    assert_eq!(code, StatusCode::ACCEPTED, "{none}");
    assert_eq!(none["runs"], Value::Array(Vec::new()));

    // Comments: only one that mentions the bot steers the review; others are ignored.
    let (_, opened) = intake
        .github("pull_request", "d-open-5", action("opened"))
        .await;
    let review = run_id(&opened);
    let (code, plain) = intake
        .github("issue_comment", "d-comment-1", comment("LGTM, thanks"))
        .await;
    assert_eq!(code, StatusCode::OK, "{plain}");
    assert_eq!(plain["ignored"], true);
    assert_eq!(plain["runs"], Value::Array(Vec::new()));
    let (code, mention) = intake
        .github(
            "issue_comment",
            "d-comment-2",
            comment("@nightshift-bot please check the retries too"),
        )
        .await;
    assert_eq!(code, StatusCode::ACCEPTED, "{mention}");
    assert_eq!(mention["runs"][0]["kind"], "resume");
    assert_eq!(mention["runs"][0]["run_id"], review.as_str());

    // An action no route takes is ignored, not refused, and leaves no record.
    let (code, labeled) = intake
        .github("pull_request", "d-label", action("labeled"))
        .await;
    assert_eq!(code, StatusCode::OK, "{labeled}");
    assert_eq!(labeled["ignored"], true);
    assert!(intake.delivery("d-label").await.is_none());
    assert!(intake.delivery("d-comment-1").await.is_none());
    let counts = intake.counts().await;
    assert_eq!(counts["github"]["ignored"], 2, "{counts}");
}
