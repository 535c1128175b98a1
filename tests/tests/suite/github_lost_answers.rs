//! GitHub answers that are lost on the way, in a daemon against the suite's fake GitHub: the
//! fake stores a create (a comment, a review, a check run) and answers only after the
//! daemon's `github.timeout_seconds`, and answers some list reads 503. What must hold:
//! - a create whose answer was lost is looked up by its marker (comments, reviews) or its
//!   `external_id` (check runs) before anything is sent again: exactly one comment, one
//!   review and one check run exist, and the model is told the write was made;
//! - reads that GitHub answers 503 are asked again by the client itself, and the model never
//!   sees those failures;
//! - while a check run's create is still on its way (GitHub has not stored it), a second
//!   daemon starting the same run, the model's `github_check_run` and the run's completion
//!   after a push make no check run of their own: the store's claim says it is being made,
//!   the tool asks the model to call again, the completion waits, and the run ends with one
//!   check run, completed.

use std::path::Path;
use std::time::Duration;

use nightshift_runner::config::Config;
use nightshift_store::RunStatus;
use nightshift_tests::config_text::agent_with;
use nightshift_tests::{TestDb, on_both_backends};
use serde_json::{Value, json};

use crate::crash::{text_turn, tool_turn, wait_finished};
use crate::fake_github::{REPO, Seen, fake_github_with, pull_request};
use crate::github_checks::tool_results;
use crate::github_tools::{InProcess, daemon_config, in_process, started_for};

on_both_backends! {
    a_lost_answer_to_a_comment_or_review_is_looked_up_not_sent_again => comment_and_review_once;
    a_lost_answer_to_a_check_run_create_makes_no_second_check_run => one_check_run;
    a_second_start_and_a_completion_racing_a_slow_create_make_no_second_check_run => racing_create;
}

const CHECK: &str = "Nightshift review";

/// The daemon's config with `agents`, and GitHub answers awaited 1 s.
fn config(db: &TestDb, dir: &Path, github: &str, agents: &str) -> Config {
    let mut config = daemon_config(db, dir, github, agents);
    config.github.timeout_seconds = 1;
    config
}

/// A fake GitHub that answers the next `late` creates 3 s after storing them (past the
/// client's 1 s), and the next `unavailable` list reads 503.
async fn slow_github(late: usize, unavailable: usize) -> (String, crate::fake_github::Shared) {
    let seen = Seen {
        late_answers: late,
        late_by: Duration::from_secs(3),
        unavailable_reads: unavailable,
        ..Seen::default()
    };
    fake_github_with(seen, None).await
}

/// Runs `agent` for the pull request's head; returns its id, once it succeeded.
async fn run_for_head(store: &nightshift_store::Store, agent: &str) -> String {
    let intake = nightshift_scheduler::Intake::new(store.clone(), [agent.to_string()]);
    let head = pull_request()["head"]["sha"].as_str().unwrap().to_string();
    let mut req = nightshift_scheduler::RunRequest::new(
        agent,
        "Review pull request 42.",
        nightshift_store::Trigger::Webhook,
    );
    req.context = Some(started_for(&head));
    let run_id = intake.submit(req).await.unwrap().run_id;
    let run = tokio::time::timeout(Duration::from_secs(90), wait_finished(store, &run_id))
        .await
        .expect("the run ends");
    assert_eq!(run.status, RunStatus::Succeeded, "{:?}", run.error);
    run_id
}

async fn comment_and_review_once(db: &TestDb) {
    // Both creates are answered late; the first two list reads fail with 503.
    let (github, seen) = slow_github(2, 2).await;
    let dir = tempfile::tempdir().unwrap();
    let reviewer = agent_with(
        dir.path(),
        "reviewer",
        &["github_comment", "github_review"],
        json!([
            tool_turn(
                "c1",
                "github_comment",
                json!({"repo": REPO, "number": 42, "body": "Looking at it."})
            ),
            tool_turn("r1", "github_review", json!({"body": "One nit."})),
            text_turn("done"),
        ]),
        "",
    );
    let config = config(db, dir.path(), &github, &reviewer);
    let InProcess {
        store,
        shutdown,
        stopped,
    } = in_process(&config).await;
    let run_id = run_for_head(&store, "reviewer").await;

    let results = tool_results(&store, &run_id).await;
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(
        !results[0].1 && results[0].0.starts_with("comment 1000 created"),
        "the comment's lost answer was found by its marker: {results:?}"
    );
    assert!(
        !results[1].1
            && results[1]
                .0
                .contains("GitHub's answer was lost, the review was found"),
        "{results:?}"
    );
    {
        let s = seen.lock().unwrap();
        assert_eq!(s.comments.len(), 1, "one comment: {:?}", s.comments);
        assert_eq!(s.reviews.len(), 1, "one review: {:?}", s.reviews);
        assert_eq!(
            s.requests.iter().filter(|r| *r == "create review").count(),
            1,
            "the review was sent once: {:?}",
            s.requests
        );
        assert_eq!(
            s.requests.iter().filter(|r| *r == "create comment").count(),
            1,
            "the comment was sent once: {:?}",
            s.requests
        );
        assert_eq!(
            s.unavailable_reads, 0,
            "both 503s were answered and asked again"
        );
        assert_eq!(s.late_answers, 0);
    }
    shutdown.cancel();
    stopped.await.unwrap().unwrap();
}

async fn one_check_run(db: &TestDb) {
    // The check run's create at the run's start is answered late.
    let (github, seen) = slow_github(1, 0).await;
    let dir = tempfile::tempdir().unwrap();
    let checker = agent_with(
        dir.path(),
        "checker",
        &["github_check_run"],
        json!([
            tool_turn(
                "k1",
                "github_check_run",
                json!({"title": "Looks fine", "summary": "Nothing found.",
                       "conclusion": "success"})
            ),
            text_turn("reviewed"),
        ]),
        &format!("[agents.github]\ncheck_run = {}\n", json!(CHECK)),
    );
    let config = config(db, dir.path(), &github, &checker);
    let InProcess {
        store,
        shutdown,
        stopped,
    } = in_process(&config).await;
    let run_id = run_for_head(&store, "checker").await;

    let results = tool_results(&store, &run_id).await;
    assert!(
        !results[0].1 && results[0].0.contains("completed as success"),
        "{results:?}"
    );
    // The outbox's completion comes after the run's end: wait until it was made.
    let settled = async {
        loop {
            let list = store
                .notifications(Some(&run_id), None, 10)
                .await
                .unwrap_or_default();
            if list
                .iter()
                .any(|n| n.status == nightshift_store::DeliveryStatus::Delivered)
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), settled)
        .await
        .expect("the check run's completion is delivered");
    {
        let s = seen.lock().unwrap();
        let mine: Vec<&Value> = s
            .check_runs
            .iter()
            .filter(|c| c["external_id"] == json!(run_id))
            .collect();
        assert_eq!(mine.len(), 1, "one check run for the run: {mine:?}");
        assert_eq!(mine[0]["status"], "completed");
        assert_eq!(
            mine[0]["conclusion"], "success",
            "the model's verdict is kept"
        );
        assert_eq!(
            s.requests
                .iter()
                .filter(|r| *r == "create check run")
                .count(),
            1,
            "created once: {:?}",
            s.requests
        );
    }
    shutdown.cancel();
    stopped.await.unwrap().unwrap();
}

async fn racing_create(db: &TestDb) {
    let seen = Seen {
        slow_check_run_creates: 1,
        late_by: Duration::from_secs(2),
        ..Seen::default()
    };
    let (github, seen) = fake_github_with(seen, None).await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = daemon_config(db, dir.path(), &github, "");
    config.github.timeout_seconds = 10;
    let store = db.store().await;
    let gh = nightshift_runner::github::access(&config).unwrap().unwrap();
    // A run for the pull request, queued (no daemon runs here: the test plays its jobs).
    let head = pull_request()["head"]["sha"].as_str().unwrap().to_string();
    let context = started_for(&head);
    let mut new_run = nightshift_store::NewRun::new("checker", "Review pull request 42.");
    new_run.context = Some(context.to_string());
    let run_id = store.enqueue(&new_run).await.unwrap().run_id;

    // A job starts the run's check run; GitHub is slow to store it.
    let first = {
        let (gh, store, run_id, context) =
            (gh.clone(), store.clone(), run_id.clone(), context.clone());
        tokio::spawn(async move {
            nightshift_notify::checks::start(&gh, &store, CHECK, &run_id, Some(&context)).await
        })
    };
    let in_flight = async {
        while !seen
            .lock()
            .unwrap()
            .requests
            .iter()
            .any(|r| r == "create check run")
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), in_flight)
        .await
        .expect("the create is sent");
    // A second daemon's job starts the same run meanwhile: it leaves the check run be.
    nightshift_notify::checks::start(&gh, &store, CHECK, &run_id, Some(&context))
        .await
        .unwrap();
    // The model fills the check run in meanwhile: GitHub lists none yet, and the tool
    // creates none of its own — it tells the model to call again.
    let workspace = tempfile::tempdir().unwrap();
    let tool_ctx = nightshift_tools::ToolContext::new(
        &run_id,
        "k1",
        workspace.path(),
        workspace.path().join("artifacts"),
    )
    .unwrap()
    .with_github(gh.clone())
    .with_github_agent(nightshift_tools::GithubAgent {
        check_run: Some(CHECK.into()),
        review_events: None,
    })
    .with_run_context(Some(context.clone()))
    .with_check_run_claims(std::sync::Arc::new(nightshift_notify::checks::StoreClaims(
        store.clone(),
    )));
    let check_tool = nightshift_tools::Registry::builtin("github_check_run").unwrap();
    let fill = json!({"title": "Halfway", "summary": "Still reading."});
    let early = check_tool.call(&tool_ctx, fill.clone()).await;
    assert!(
        early.is_error && early.content.contains("still being created"),
        "{}",
        early.content
    );
    // A push ends the run meanwhile; its completion finds the check run being made.
    store.cancel_run(&run_id).await.unwrap();
    let ended = store.run(&run_id).await.unwrap().unwrap();
    assert_eq!(ended.status, RunStatus::Cancelled);
    let waiting = nightshift_notify::checks::complete(&gh, &store, CHECK, &ended).await;
    assert!(
        matches!(
            waiting,
            Err(nightshift_notify::checks::CompleteError::BeingMade { .. })
        ),
        "{waiting:?}"
    );

    // The first job's create is answered; the tool, called again, fills in that one.
    first.await.unwrap().unwrap();
    let filled = check_tool.call(&tool_ctx, fill).await;
    assert!(
        !filled.is_error && filled.content.contains("updated"),
        "{}",
        filled.content
    );
    // The first job sees the run ended and completes it.
    nightshift_notify::checks::complete_if_ended(&gh, CHECK, &store, &run_id).await;
    // The notifier's next try finds it completed.
    let again = nightshift_notify::checks::complete(&gh, &store, CHECK, &ended)
        .await
        .unwrap();
    assert!(
        matches!(
            again,
            Some(nightshift_github::checks::Completion::AlreadyCompleted(_))
        ),
        "{again:?}"
    );
    let s = seen.lock().unwrap();
    let mine: Vec<&Value> = s
        .check_runs
        .iter()
        .filter(|c| c["external_id"] == json!(run_id))
        .collect();
    assert_eq!(mine.len(), 1, "one check run: {mine:?}");
    assert_eq!(mine[0]["status"], "completed");
    assert_eq!(mine[0]["conclusion"], "cancelled");
    assert_eq!(
        s.requests
            .iter()
            .filter(|r| *r == "create check run")
            .count(),
        1,
        "{:?}",
        s.requests
    );
}
