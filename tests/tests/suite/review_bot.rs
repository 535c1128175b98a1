//! `ops/examples/review-bot` end to end: the example's own config file, changed only where a
//! test must (the database, ports and paths, a scripted model, the fake GitHub's URL and the
//! test App), run by a real `nightshift serve` against the suite's fake GitHub, which also
//! serves the repository over git's smart HTTP and mints installation tokens that expire
//! after three seconds.
//!
//! A signed `pull_request` delivery starts the review: the check run is created in progress
//! before the model is asked anything, the head commit is checked out into the run's
//! workspace with an installation token (and the setup command runs in the sandbox), the
//! model reads the checked-out code and the diff, posts one review pinned to the head commit,
//! completes the check run and waits a day for replies; a signed `issue_comment` delivery
//! wakes it and it answers. Checked: the review is on the head commit and posted once, the
//! check run went from in progress to success, the workspace event names the head commit,
//! a token minted after the first expired was used (the refresh), and no token minted is in
//! any stored byte or any file under the data directory.

use std::path::{Path, PathBuf};
use std::time::Duration;

use nightshift_agent::RunEvent;
use nightshift_store::RunStatus;
use nightshift_tests::git_http::{GitHttp, make_repo};
use nightshift_tests::process::Serve;
use nightshift_tests::{TestDb, on_both_backends};
use serde_json::{Value, json};

use crate::crash::{call_result, events, sigterm, text_turn, tool_turn, wait_finished};
use crate::fake_github::{APP_ID, REPO, Seen, fake_github_with, fixtures};
use crate::hooks::harness::{fixture, github_signature};

on_both_backends! {
    the_review_bot_example_reviews_checks_and_answers_a_pull_request => reviews_a_pull_request;
}

const HOOK_SECRET: &str = "review-bot-example-hook-secret";

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../ops/examples/review-bot")
}

/// The example's config with what a test must change, written into `dir`.
fn config(db: &TestDb, dir: &Path, github: &str, port: u16, script: &Value) -> PathBuf {
    let text = std::fs::read_to_string(example().join("nightshift.toml")).unwrap();
    let mut c: toml::Table = toml::from_str(&text).unwrap();
    let mut database = toml::Table::new();
    database.insert("url".into(), db.config.url.clone().into());
    if let Some(schema) = &db.config.schema {
        database.insert("schema".into(), schema.clone().into());
    }
    c.insert("database".into(), database.into());
    c.insert(
        "worker".into(),
        toml::from_str::<toml::Table>("poll_interval_ms = 100")
            .unwrap()
            .into(),
    );
    c["server"]
        .as_table_mut()
        .unwrap()
        .insert("address".into(), format!("127.0.0.1:{port}").into());
    c["runtime"].as_table_mut().unwrap().insert(
        "data_dir".into(),
        dir.join("data").display().to_string().into(),
    );
    std::fs::write(dir.join("script.json"), script.to_string()).unwrap();
    c["providers"] = toml::from_str::<toml::Table>(&format!(
        "[scripted]\nkind = \"scripted\"\nscript = \"{}\"\n",
        dir.join("script.json").display()
    ))
    .unwrap()
    .into();
    let agent = c["agents"][0].as_table_mut().unwrap();
    agent.insert("provider".into(), "scripted".into());
    agent.insert("model".into(), "scripted-1".into());
    let prompt = example().join("reviewer.md").display().to_string();
    agent.insert("system_file".into(), prompt.into());
    // The scripted model has no price, so no cost budget.
    agent["budgets"]
        .as_table_mut()
        .unwrap()
        .remove("max_cost_usd");
    c["github"]
        .as_table_mut()
        .unwrap()
        .insert("base_url".into(), github.into());
    let app = c["github"]["apps"][0].as_table_mut().unwrap();
    app.insert("app_id".into(), APP_ID.parse::<i64>().unwrap().into());
    let key = fixtures().join("test-app-key.pem").display().to_string();
    app.insert("private_key_file".into(), key.into());
    let path = dir.join("nightshift.toml");
    std::fs::write(&path, toml::to_string(&c).unwrap()).unwrap();
    path
}

/// What the scripted reviewer does: read the checked-out code and the diff, think (past the
/// first token's life), review, give the verdict, wait for replies, answer one.
fn script() -> Value {
    let pr = json!({"repo": REPO, "number": 42});
    let mut review = tool_turn(
        "r1",
        "github_review",
        json!({"body": "One thing to fix.",
               "comments": [{"path": "src/lib.rs", "line": 1, "body": "retry_uploads needs a test"}]}),
    );
    review["delay_ms"] = json!(3500);
    json!([
        tool_turn("f1", "read_file", json!({"path": "src/lib.rs"})),
        tool_turn("d1", "github_pr_diff", pr),
        review,
        tool_turn(
            "k1",
            "github_check_run",
            json!({"title": "1 finding", "summary": "retry_uploads needs a test.",
                   "conclusion": "success"})
        ),
        tool_turn(
            "w1",
            "schedule_wakeup",
            json!({"delay_seconds": 86400, "reason": "wait a day for replies"})
        ),
        tool_turn(
            "c1",
            "github_comment",
            json!({"repo": REPO, "number": 42, "body": "Thanks, a test would still help."})
        ),
        text_turn("reviewed and answered"),
    ])
}

/// Posts `payload` as a signed GitHub delivery of `event`; GitHub's answer.
async fn deliver(
    http: &reqwest::Client,
    api: &str,
    event: &str,
    id: &str,
    payload: &Value,
) -> Value {
    let body = serde_json::to_vec(payload).unwrap();
    http.post(format!("{api}/hooks/github"))
        .header("X-GitHub-Event", event)
        .header("X-GitHub-Delivery", id)
        .header("X-Hub-Signature-256", github_signature(&body, HOOK_SECRET))
        .header("Content-Type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Every file under `dir`, as text (bytes that are not UTF-8 replaced; tokens are ASCII).
fn files_under(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() && !path.is_symlink() {
            files_under(&path, out);
        } else if let Ok(bytes) = std::fs::read(&path) {
            out.push((path, String::from_utf8_lossy(&bytes).into_owned()));
        }
    }
}

async fn reviews_a_pull_request(db: &TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let git = GitHttp::new(dir.path().join("git"));
    let shas = make_repo(
        git.root(),
        REPO,
        &[
            &[("src/lib.rs", "pub fn old() {}\n")],
            &[("src/lib.rs", "pub fn retry_uploads() {}\n")],
        ],
    );
    let head = shas[1].clone();
    let seen = Seen {
        head: Some(head.clone()),
        token_lifetime: Some(Duration::from_secs(3)),
        ..Seen::default()
    };
    let (github, seen) = fake_github_with(seen, Some(git.clone())).await;
    let port = crate::process::free_port();
    let cfg = config(db, dir.path(), &github, port, &script());
    let api = format!("http://127.0.0.1:{port}");
    let http = nightshift_llm::http::build_client(nightshift_llm::HttpTimeouts::default()).unwrap();
    let daemon = Serve::new(&cfg)
        .env("GITHUB_WEBHOOK_SECRET", HOOK_SECRET)
        .env("NIGHTSHIFT_API_TOKEN", "review-bot-example-api-token")
        .spawn();
    crate::process::wait_for_api(&http, &api).await;
    let store = db.store().await;

    let mut opened: Value = serde_json::from_slice(&fixture("pull_request.synchronize")).unwrap();
    opened["pull_request"]["head"]["sha"] = json!(head);
    let answer = deliver(&http, &api, "pull_request", "d-review-bot-1", &opened).await;
    let run_id = answer["runs"][0]["run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("a run: {answer}"))
        .to_string();

    // The review is posted, the check run completed, and the run waits for replies.
    nightshift_tests::eventually(Duration::from_secs(60), "the run to wait", || async {
        let run = store.run(&run_id).await.unwrap()?;
        assert!(
            !run.status.is_terminal(),
            "{:?}: {:?}",
            run.status,
            run.error
        );
        (run.status == RunStatus::Waiting).then_some(())
    })
    .await;
    // The resume finds no workspace, as on another daemon with a data directory of its own:
    // the same commit is checked out again (and set up again).
    let workspace = dir.path().join("data/workspaces").join(&run_id);
    std::fs::remove_dir_all(&workspace).unwrap();
    let fetches_before = git.requests().len();
    let mut comment: Value = serde_json::from_slice(&fixture("issue_comment.created")).unwrap();
    comment["comment"]["body"] = json!("@nightshift-bot Do we really need a test?");
    let answer = deliver(&http, &api, "issue_comment", "d-review-bot-2", &comment).await;
    assert_eq!(answer["runs"][0]["run_id"], json!(run_id), "{answer}");
    let run = wait_finished(&store, &run_id).await;
    assert_eq!(run.status, RunStatus::Succeeded, "{:?}", run.error);

    let log = events(&store, &run_id).await;
    let prepared = log.iter().find_map(|(_, e)| match e {
        RunEvent::WorkspacePrepared {
            repo,
            git_ref,
            commit,
            setup,
        } => Some((repo.clone(), git_ref.clone(), commit.clone(), setup.len())),
        _ => None,
    });
    assert_eq!(
        prepared,
        Some((REPO.to_string(), head.clone(), head.clone(), 1)),
        "the workspace is the head commit, set up"
    );
    let (code, failed) = call_result(&log, "f1");
    assert!(
        !failed && code.contains("pub fn retry_uploads"),
        "read from the checkout: {code}"
    );
    let (posted, failed) = call_result(&log, "r1");
    assert!(
        !failed && posted.contains(&format!("posted on {head}")),
        "{posted}"
    );
    let (answered, failed) = call_result(&log, "c1");
    assert!(!failed && answered.contains("created"), "{answered}");
    assert!(
        git.requests().len() > fetches_before,
        "the resume fetched the commit again"
    );
    assert_eq!(
        nightshift_tests::git_http::git(&workspace, &["rev-parse", "HEAD"]).trim(),
        head.as_str(),
        "the resumed run works on the same commit"
    );
    assert_eq!(
        std::fs::read_to_string(workspace.join(".git/REVIEWED_COMMIT"))
            .unwrap()
            .split(' ')
            .next(),
        Some(head.as_str()),
        "the setup command ran in the checkout"
    );

    let minted: Vec<String> = {
        let s = seen.lock().unwrap();
        assert_eq!(s.reviews.len(), 1, "one review: {:?}", s.reviews);
        assert_eq!(s.reviews[0]["commit_id"], json!(head));
        assert_eq!(s.check_runs.len(), 1, "{:?}", s.check_runs);
        assert_eq!(s.check_runs[0]["conclusion"], "success");
        assert_eq!(s.check_runs[0]["output"]["title"], "1 finding");
        assert_eq!(s.check_run_writes[0]["status"], "in_progress");
        assert_eq!(s.comments.len(), 1, "the answer to the comment");
        // The token expired while the model thought: the review went out under a fresh one.
        let first = s.minted[0].0.clone();
        let review_token = s
            .tokens_used
            .iter()
            .find(|(what, _)| what == "create review")
            .map(|(_, t)| t.clone())
            .unwrap();
        assert!(s.minted.len() >= 2, "refreshed: {:?}", s.minted);
        assert_ne!(review_token, first, "the review used a fresh token");
        // The clone sent a minted token, and only ever to the fake host.
        let fetches = git.requests();
        assert!(
            fetches
                .iter()
                .any(|r| r.status == 200 && r.token.as_deref() == Some(first.as_str())),
            "{fetches:?}"
        );
        s.minted.iter().map(|(t, _)| t.clone()).collect()
    };

    // No token in any stored byte, nor in any file the daemon wrote.
    let mut stored = format!("{:?}", store.run(&run_id).await.unwrap());
    for e in store.events(&run_id, 0).await.unwrap() {
        stored.push_str(&e.payload);
    }
    let mut files = Vec::new();
    files_under(&dir.path().join("data"), &mut files);
    if let Some(path) = db.config.url.strip_prefix("sqlite://") {
        files_under(Path::new(path).parent().unwrap(), &mut files);
    }
    for token in &minted {
        assert!(!stored.contains(token.as_str()), "token {token} stored");
        for (path, text) in &files {
            assert!(
                !text.contains(token.as_str()),
                "token in {}",
                path.display()
            );
        }
    }
    sigterm(daemon).await;
}
