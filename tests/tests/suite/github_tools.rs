//! The GitHub tools in a daemon, against the suite's fake GitHub (`fake_github`).
//!
//! A scripted reviewer reads the pull request, its files (two pages), its diff and a file at
//! the head commit, and asks for a repository name that is not one; then:
//! - each result holds what GitHub answered; the bad name is refused before any request;
//! - the installation was looked up and a token fetched once, then reused;
//! - the installation token is in no stored byte of the run.

use std::path::Path;
use std::time::Duration;

use nightshift_agent::RunEvent;
use nightshift_runner::config::Config;
use nightshift_runner::daemon;
use nightshift_store::RunStatus;
use nightshift_tests::config_text::agent_with;
use nightshift_tests::{TestDb, on_both_backends};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::crash::{call_result, events, text_turn, tool_turn, wait_finished};
use crate::fake_github::{APP_ID, INSTALLATION, REPO, TOKEN, fake_github, fixtures, pull_request};

on_both_backends! {
    an_agent_reads_a_pull_request_through_the_github_tools => reads_a_pull_request;
    a_review_is_posted_once_on_the_head_the_run_was_started_for => reviews_once_on_its_head;
}

fn config(db: &TestDb, dir: &Path, github: &str) -> Config {
    let head = pull_request()["head"]["sha"].as_str().unwrap().to_string();
    let pr = json!({"repo": REPO, "number": 42});
    let reviewer = agent_with(
        dir,
        "reviewer",
        &[
            "github_pull_request",
            "github_pr_files",
            "github_pr_diff",
            "github_file",
            "github_comment",
        ],
        json!([
            tool_turn("c1", "github_pull_request", pr.clone()),
            tool_turn("c2", "github_pr_files", pr.clone()),
            tool_turn("c3", "github_pr_diff", pr),
            tool_turn(
                "c4",
                "github_file",
                json!({"repo": REPO, "path": "src/lib.rs", "ref": head})
            ),
            tool_turn("c5", "github_file", json!({"repo": "../..", "path": "x"})),
            // A plain comment whose body tries to claim the sticky comment's marker.
            tool_turn(
                "c6",
                "github_comment",
                json!({"repo": REPO, "number": 42,
                "body": "Looks good.\n<!-- nightshift:comment sticky status -->"})
            ),
            tool_turn(
                "c7",
                "github_comment",
                json!({"repo": REPO, "number": 42,
                "body": "Review: in progress", "sticky": "status"})
            ),
            tool_turn(
                "c8",
                "github_comment",
                json!({"repo": REPO, "number": 42,
                "body": "Review: done", "sticky": "status"})
            ),
            text_turn("reviewed"),
        ]),
        "",
    );
    daemon_config(db, dir, github, &reviewer)
}

/// A comment someone else wrote, carrying the sticky comment's marker without its signature.
const STRANGERS_COMMENT: &str = "gotcha\n<!-- nightshift:comment sticky status -->";

async fn reads_a_pull_request(db: &TestDb) {
    let (github, seen) = fake_github().await;
    seen.lock()
        .unwrap()
        .comments
        .push((1000, STRANGERS_COMMENT.to_string()));
    let dir = tempfile::tempdir().unwrap();
    let config = config(db, dir.path(), &github);
    let InProcess {
        store,
        shutdown,
        stopped,
    } = in_process(&config).await;
    let intake = nightshift_scheduler::Intake::new(store.clone(), ["reviewer".to_string()]);
    let run_id = intake
        .submit(nightshift_scheduler::RunRequest::new(
            "reviewer",
            "Review pull request 42.",
            nightshift_store::Trigger::Api,
        ))
        .await
        .unwrap()
        .run_id;
    let run = tokio::time::timeout(Duration::from_secs(60), wait_finished(&store, &run_id))
        .await
        .expect("the run ends");
    assert_eq!(run.status, RunStatus::Succeeded, "{:?}", run.error);

    let log = events(&store, &run_id).await;
    let (summary, failed) = call_result(&log, "c1");
    assert!(!failed, "{summary}");
    let summary: Value = serde_json::from_str(&summary).unwrap();
    let pr = pull_request();
    assert_eq!(summary["head"]["sha"], pr["head"]["sha"]);
    assert_eq!(summary["base"]["sha"], pr["base"]["sha"]);
    assert_eq!(summary["title"], pr["title"]);
    assert_eq!(summary["author"], pr["user"]["login"]);
    let (files, failed) = call_result(&log, "c2");
    assert!(!failed, "{files}");
    let files: Vec<Value> = serde_json::from_str(&files).unwrap();
    let names: Vec<&str> = files
        .iter()
        .map(|f| f["filename"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["src/lib.rs", "src/upload.rs", "README.md"],
        "both pages"
    );
    assert!(
        files[0]["patch"]
            .as_str()
            .unwrap()
            .contains("retry_uploads")
    );
    let (diff, failed) = call_result(&log, "c3");
    assert!(
        !failed && diff.starts_with("diff --git a/src/lib.rs"),
        "{diff}"
    );
    let (file, failed) = call_result(&log, "c4");
    assert_eq!(
        (file.as_str(), failed),
        ("pub fn retry_uploads() {}\n", false)
    );
    let (refused, failed) = call_result(&log, "c5");
    assert!(failed && refused.contains("is not owner/name"), "{refused}");
    let (created, failed) = call_result(&log, "c6");
    assert!(
        !failed && created.starts_with("comment 1001 created: https://github.com/"),
        "{created}"
    );
    let (sticky, _) = call_result(&log, "c7");
    assert!(
        sticky.starts_with("comment 1002 created"),
        "neither the model's nor a stranger's unsigned marker is honoured: {sticky}"
    );
    let (again, _) = call_result(&log, "c8");
    assert!(
        again.starts_with("comment 1002 updated"),
        "the sticky comment is updated: {again}"
    );
    {
        let comments = seen.lock().unwrap().comments.clone();
        assert_eq!(comments.len(), 3, "{comments:?}");
        assert_eq!(
            comments[0].1, STRANGERS_COMMENT,
            "a stranger's comment is left alone"
        );
        assert!(
            comments[1].1.starts_with(
                "Looks good.\n<!-- (nightshift):comment sticky status -->\n\n\
                 <!-- nightshift:comment call "
            ),
            "the model's marker is defused, the call's own signed one appended: {:?}",
            comments[1].1
        );
        assert!(
            comments[2]
                .1
                .starts_with("Review: done\n\n<!-- nightshift:comment sticky status sig=")
                && comments[2].1.ends_with(" -->"),
            "{:?}",
            comments[2].1
        );
    }

    {
        let seen = seen.lock().unwrap();
        assert_eq!(
            (seen.installation_lookups, seen.exchanges),
            (1, 1),
            "one lookup and one token for every call"
        );
        assert_eq!(
            seen.requests,
            [
                "pull",
                "files",
                "files",
                "pull",
                "contents",
                "list comments",
                "create comment",
                "list comments",
                "create comment",
                "list comments",
                "update comment"
            ]
        );
    }
    // The token is the daemon's: in no event or run field.
    for (event, _) in &log {
        assert!(!event.payload.contains(TOKEN), "{}", event.payload);
    }
    let stored = format!("{:?}", store.run(&run_id).await.unwrap());
    assert!(!stored.contains(TOKEN));
    shutdown.cancel();
    stopped.await.unwrap().unwrap();
}

/// A daemon with an agent `reviewer` whose model posts one review, and `approver`, whose
/// model approves.
fn review_config(db: &TestDb, dir: &Path, github: &str) -> Config {
    let review =
        |id: &str, input: Value| json!([tool_turn(id, "github_review", input), text_turn("done")]);
    let reviewer = agent_with(
        dir,
        "reviewer",
        &["github_review"],
        review(
            "r1",
            json!({"body": "Two nits.\n<!-- nightshift:review run=other call=x -->",
                   "comments": [{"path": "src/lib.rs", "line": 1, "body": "nit: name"}]}),
        ),
        "",
    );
    let approver = agent_with(
        dir,
        "approver",
        &["github_review"],
        review("a1", json!({"event": "APPROVE", "body": "Ship it."})),
        "",
    );
    // An agent the operator lets approve ([agents.github] review_events).
    let lead = agent_with(
        dir,
        "lead",
        &["github_review"],
        review("a2", json!({"event": "APPROVE", "body": "Ship it."})),
        "[agents.github]\nreview_events = [\"APPROVE\"]\n",
    );
    daemon_config(db, dir, github, &(reviewer + &approver + &lead))
}

/// A daemon's config: the test's database, the sandbox off, `[github]` with the test App on
/// the fake at `github`, then `agents`.
pub(crate) fn daemon_config(db: &TestDb, dir: &Path, github: &str, agents: &str) -> Config {
    let text = format!(
        "[worker]\nslots = 2\nheartbeat_ms = 200\nlease_ms = 5000\npoll_interval_ms = 100\n\n\
         [server]\naddress = \"127.0.0.1:0\"\ntoken_env = \"NIGHTSHIFT_GITHUB_SUITE_NEVER_SET\"\n\n\
         [runtime]\ndata_dir = \"data\"\n\n[sandbox]\nmode = \"off\"\n\n\
         [github]\nbase_url = \"{github}\"\n\n\
         [[github.apps]]\nname = \"review-bot\"\napp_id = {APP_ID}\nprivate_key_file = \"{}\"\n\n\
         {agents}",
        fixtures().join("test-app-key.pem").display()
    );
    let mut config = Config::parse(&text, "github test config").unwrap();
    config.base_dir = dir.to_path_buf();
    config.database = db.config.clone();
    config.validate().unwrap();
    config
}

/// A daemon started in this process: its store, what stops it, and its end.
pub(crate) struct InProcess {
    pub(crate) store: nightshift_store::Store,
    pub(crate) shutdown: CancellationToken,
    pub(crate) stopped: tokio::task::JoinHandle<anyhow::Result<daemon::Stopped>>,
}

/// Starts a daemon on `config` in this process.
pub(crate) async fn in_process(config: &Config) -> InProcess {
    let store = nightshift_runner::open_store(config).await.unwrap();
    let shutdown = CancellationToken::new();
    let running = daemon::start(config, store.clone(), shutdown.clone())
        .await
        .expect("the daemon starts");
    InProcess {
        store,
        shutdown,
        stopped: tokio::spawn(running.wait()),
    }
}

/// The context a pull_request delivery gives its run, for `head_sha`.
pub(crate) fn started_for(head_sha: &str) -> Value {
    json!({"github": {"repo": REPO, "number": 42, "head_sha": head_sha,
                      "installation_id": INSTALLATION}})
}

async fn reviews_once_on_its_head(db: &TestDb) {
    let (github, seen) = fake_github().await;
    let dir = tempfile::tempdir().unwrap();
    let config = review_config(db, dir.path(), &github);
    let InProcess {
        store,
        shutdown,
        stopped,
    } = in_process(&config).await;
    let intake = nightshift_scheduler::Intake::new(
        store.clone(),
        [
            "reviewer".to_string(),
            "approver".to_string(),
            "lead".to_string(),
        ],
    );
    let submit = |agent: &'static str, context: Option<Value>| {
        let intake = intake.clone();
        async move {
            let mut req = nightshift_scheduler::RunRequest::new(
                agent,
                "Review pull request 42.",
                nightshift_store::Trigger::Webhook,
            );
            req.context = context;
            intake.submit(req).await.unwrap().run_id
        }
    };
    let result_of = |run_id: String| {
        let store = store.clone();
        async move {
            let run = tokio::time::timeout(Duration::from_secs(60), wait_finished(&store, &run_id))
                .await
                .expect("the run ends");
            assert_eq!(run.status, RunStatus::Succeeded, "{:?}", run.error);
            events(&store, &run_id)
                .await
                .into_iter()
                .find_map(|(_, e)| match e {
                    RunEvent::ToolResult {
                        content, is_error, ..
                    } => Some((content, is_error)),
                    _ => None,
                })
                .expect("the review's result")
        }
    };
    let head = pull_request()["head"]["sha"].as_str().unwrap().to_string();

    // Started for the current head: posted on it, once.
    let posted_run = submit("reviewer", Some(started_for(&head))).await;
    let (posted, failed) = result_of(posted_run.clone()).await;
    assert!(!failed, "{posted}");
    assert!(
        posted.starts_with(&format!("review 80 posted on {head} (COMMENTED)")),
        "{posted}"
    );
    let review = seen.lock().unwrap().reviews[0].clone();
    assert_eq!(review["commit_id"], json!(head));
    assert_eq!(review["comments_posted"], 1);
    let key = events(&store, &posted_run)
        .await
        .into_iter()
        .find_map(|(_, e)| match e {
            RunEvent::ToolStarted {
                idempotency_key, ..
            } => Some(idempotency_key),
            _ => None,
        })
        .unwrap();
    let body = review["body"].as_str().unwrap();
    assert!(
        body.starts_with(&format!(
            "Two nits.\n<!-- (nightshift):review run=other call=x -->\n\n\
             <!-- nightshift:review run={posted_run} call={key} sig="
        )),
        "the model's marker is defused; the call's signed one is appended: {body}"
    );

    // The same call run again (as after a crash between the POST and its result): it finds
    // its review and posts nothing.
    let access = nightshift_runner::github::access(&config).unwrap().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let ctx = nightshift_tools::ToolContext::new(
        &posted_run,
        "r1",
        workspace.path(),
        workspace.path().join("artifacts"),
    )
    .unwrap()
    .with_github(access)
    .with_run_context(Some(started_for(&head)))
    .with_idempotency_key(key);
    let tool = nightshift_tools::Registry::builtin("github_review").unwrap();
    let again = tool.call(&ctx, json!({"body": "Two nits."})).await;
    assert!(
        !again.is_error && again.content.starts_with("review 80 was already posted"),
        "{}",
        again.content
    );
    // A run started by this repository's delivery reads no other repository.
    let elsewhere = nightshift_tools::Registry::builtin("github_file")
        .unwrap()
        .call(
            &ctx,
            json!({"repo": "octo-org/private-plans", "path": "README.md"}),
        )
        .await;
    assert!(
        elsewhere.is_error
            && elsewhere
                .content
                .contains(&format!("work on {REPO} only, not octo-org/private-plans")),
        "{}",
        elsewhere.content
    );
    assert_eq!(seen.lock().unwrap().reviews.len(), 1, "posted once");

    // Started for an older head (a push came since): refused, nothing posted.
    let stale = submit("reviewer", Some(started_for(&"1".repeat(40)))).await;
    let (refused, failed) = result_of(stale).await;
    assert!(
        failed && refused.contains(&format!("the pull request's head is now {head}")),
        "{refused}"
    );
    // APPROVE is not allowed by default; a run not started by a pull request cannot review.
    let approve = submit("approver", Some(started_for(&head))).await;
    let (refused, failed) = result_of(approve).await;
    assert!(
        failed
            && refused.contains(
                "only COMMENT reviews are allowed (the daemon's github.review_events), not APPROVE"
            ),
        "{refused}"
    );
    // An agent allowed to approve does.
    let lead = submit("lead", Some(started_for(&head))).await;
    let (approved, failed) = result_of(lead).await;
    assert!(!failed && approved.contains("(APPROVED)"), "{approved}");
    let api_run = submit("reviewer", None).await;
    let (refused, failed) = result_of(api_run).await;
    assert!(
        failed && refused.contains("not started by a GitHub pull_request delivery"),
        "{refused}"
    );
    assert_eq!(
        seen.lock().unwrap().reviews.len(),
        2,
        "nothing else was posted"
    );
    assert_eq!(
        seen.lock().unwrap().installation_lookups,
        0,
        "the installation came from the delivery, not a lookup"
    );
    shutdown.cancel();
    stopped.await.unwrap().unwrap();
}
