//! `[agents.workspace]` in a daemon, against the suite's fake GitHub and its git host:
//! - a checkout at a branch gets the branch's newest commit, logged as `workspace_prepared`,
//!   and the model reads the checked-out file;
//! - a ref that does not exist, and checkout templates the run cannot render, fail the run
//!   before any model call, saying which;
//! - a run whose command planted a `.git/config` that would run its own program through any
//!   git the daemon runs in the workspace (askpass behind a promisor remote's lazy fetch, its
//!   objects deleted) sleeps and resumes: the daemon keeps the workspace from its own record,
//!   nothing planted runs, and the run finishes.

use std::time::Duration;

use nightshift_agent::RunEvent;
use nightshift_store::RunStatus;
use nightshift_tests::config_text::agent_with;
use nightshift_tests::git_http::{GitHttp, make_repo};
use nightshift_tests::{TestDb, on_both_backends};
use serde_json::json;

use crate::crash::{events, text_turn, tool_turn, wait_finished};
use crate::fake_github::{REPO, Seen, fake_github_with};
use crate::github_tools::{InProcess, daemon_config, in_process};

on_both_backends! {
    a_checkout_is_ready_before_the_model_and_a_bad_one_fails_the_run_first => checkout_or_fail_first;
    a_planted_git_config_runs_nothing_when_the_run_resumes => planted_config_on_resume;
}

/// An agent named `name` reading `src/lib.rs` after a checkout of `checkout` (TOML).
fn reader(dir: &std::path::Path, name: &str, checkout: &str) -> String {
    agent_with(
        dir,
        name,
        &["read_file"],
        json!([
            tool_turn("f1", "read_file", json!({"path": "src/lib.rs"})),
            text_turn("read")
        ]),
        &format!("[agents.workspace]\ncheckout = {checkout}\n"),
    )
}

async fn checkout_or_fail_first(db: &TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let git = GitHttp::new(dir.path().join("git"));
    let shas = make_repo(
        git.root(),
        REPO,
        &[
            &[("src/lib.rs", "pub fn first() {}\n")],
            &[("src/lib.rs", "pub fn second() {}\n")],
        ],
    );
    let (github, _seen) = fake_github_with(Seen::default(), Some(git.clone())).await;
    let agents = [
        reader(
            dir.path(),
            "on-main",
            &format!("{{ repo = \"{REPO}\", ref = \"main\" }}"),
        ),
        reader(
            dir.path(),
            "no-branch",
            &format!("{{ repo = \"{REPO}\", ref = \"no-such-branch\" }}"),
        ),
        reader(
            dir.path(),
            "no-context",
            "{ repo = \"{{ github.repo }}\", ref = \"main\" }",
        ),
    ]
    .concat();
    let config = daemon_config(db, dir.path(), &github, &agents);
    let InProcess {
        store,
        shutdown,
        stopped,
    } = in_process(&config).await;
    let names = ["on-main", "no-branch", "no-context"].map(String::from);
    let intake = nightshift_scheduler::Intake::new(store.clone(), names);
    let run_of = |agent: &'static str| {
        let intake = intake.clone();
        let store = store.clone();
        async move {
            let req = nightshift_scheduler::RunRequest::new(
                agent,
                "Read src/lib.rs.",
                nightshift_store::Trigger::Api,
            );
            let run_id = intake.submit(req).await.unwrap().run_id;
            let run = tokio::time::timeout(Duration::from_secs(60), wait_finished(&store, &run_id))
                .await
                .expect("the run ends");
            (run, events(&store, &run_id).await)
        }
    };

    let (run, log) = run_of("on-main").await;
    assert_eq!(run.status, RunStatus::Succeeded, "{:?}", run.error);
    let prepared = log.iter().find_map(|(_, e)| match e {
        RunEvent::WorkspacePrepared {
            git_ref, commit, ..
        } => Some((git_ref.clone(), commit.clone())),
        _ => None,
    });
    assert_eq!(prepared, Some(("main".to_string(), shas[1].clone())));
    let read = log.iter().find_map(|(_, e)| match e {
        RunEvent::ToolResult { content, .. } => Some(content.clone()),
        _ => None,
    });
    assert!(
        read.as_deref().is_some_and(|c| c.contains("pub fn second")),
        "{read:?}"
    );

    let (run, log) = run_of("no-branch").await;
    assert_eq!(run.status, RunStatus::Failed);
    let error = run.error.unwrap_or_default();
    assert!(
        error.starts_with("preparing the run failed: ") && error.contains("no-such-branch"),
        "{error}"
    );
    assert_eq!(run.turns, 0, "no model call");
    assert!(
        !log.iter()
            .any(|(_, e)| matches!(e, RunEvent::AssistantMessage { .. })),
        "the model was never asked"
    );

    let (run, _) = run_of("no-context").await;
    assert_eq!(run.status, RunStatus::Failed);
    let error = run.error.unwrap_or_default();
    assert!(
        error.contains("agents.no-context.workspace.checkout") && error.contains("checkout.repo"),
        "{error}"
    );
    assert_eq!(run.turns, 0);
    shutdown.cancel();
    stopped.await.unwrap().unwrap();
}

/// The command of issue 40's first attack: in the workspace's `.git`, an askpass program that
/// touches `pwned`, a promisor remote with lazy fetch, and the objects deleted — so any
/// `git cat-file` the daemon ran there would fetch, be refused (no token) and run it.
fn plant(pwned: &std::path::Path) -> String {
    format!(
        "cd .git && rm -rf objects && mkdir -p objects/pack && \
         printf '#!/bin/sh\\ntouch {pwned}\\necho x\\n' > ap.sh && chmod +x ap.sh && \
         git config core.repositoryformatversion 1 && \
         git config extensions.partialClone origin && \
         git config remote.origin.promisor true && \
         git config core.askPass \"$PWD/ap.sh\" && \
         git config credential.helper \"!$PWD/ap.sh\" && echo planted",
        pwned = pwned.display()
    )
}

async fn planted_config_on_resume(db: &TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let pwned = dir.path().join("pwned");
    let git = GitHttp::new(dir.path().join("git"));
    make_repo(
        git.root(),
        REPO,
        &[&[("src/lib.rs", "pub fn first() {}\n")]],
    );
    let (github, _seen) = fake_github_with(Seen::default(), Some(git.clone())).await;
    let agent = agent_with(
        dir.path(),
        "planter",
        &[
            "run_command",
            nightshift_agent::SCHEDULE_WAKEUP,
            "read_file",
        ],
        json!([
            tool_turn("p1", "run_command", json!({"command": plant(&pwned)})),
            tool_turn(
                "w1",
                nightshift_agent::SCHEDULE_WAKEUP,
                json!({"delay_seconds": 1, "reason": "come back"})
            ),
            tool_turn("f1", "read_file", json!({"path": "src/lib.rs"})),
            text_turn("done")
        ]),
        &format!(
            "[agents.wakeups]\nmin_delay_seconds = 1\n\n\
             [agents.workspace]\ncheckout = {{ repo = \"{REPO}\", ref = \"main\" }}\n"
        ),
    );
    let config = daemon_config(db, dir.path(), &github, &agent);
    let InProcess {
        store,
        shutdown,
        stopped,
    } = in_process(&config).await;
    let intake = nightshift_scheduler::Intake::new(store.clone(), ["planter".to_string()]);
    let req = nightshift_scheduler::RunRequest::new(
        "planter",
        "Plant, sleep, read.",
        nightshift_store::Trigger::Api,
    );
    let run_id = intake.submit(req).await.unwrap().run_id;
    let run = tokio::time::timeout(Duration::from_secs(60), wait_finished(&store, &run_id))
        .await
        .expect("the run ends");
    let log = events(&store, &run_id).await;
    let results: Vec<String> = log
        .iter()
        .filter_map(|(_, e)| match e {
            RunEvent::ToolResult { content, .. } => Some(content.clone()),
            _ => None,
        })
        .collect();
    assert!(
        results.first().is_some_and(|r| r.contains("planted")),
        "{results:?}"
    );
    assert_eq!(
        run.status,
        RunStatus::Succeeded,
        "{:?} {results:?}",
        run.error
    );
    assert!(
        log.iter()
            .any(|(_, e)| matches!(e, RunEvent::Resumed { .. })),
        "the run slept and resumed"
    );
    assert!(
        results.last().is_some_and(|r| r.contains("pub fn first")),
        "the kept workspace is read after the resume: {results:?}"
    );
    assert!(!pwned.exists(), "the planted askpass ran as the daemon");
    shutdown.cancel();
    stopped.await.unwrap().unwrap();
}
