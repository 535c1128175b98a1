//! A review bot end to end through real processes: signed GitHub `pull_request` deliveries
//! start runs of `nightshift serve` whose model posts its review with `github_review`.
//!
//! - Crashed at the worst moment: the fake GitHub stores the review and SIGKILLs the daemon
//!   before it can answer, so the run's log has the call started and no result. A second
//!   daemon takes the run over when the lease runs out, runs the call again (it is
//!   idempotent), finds the review by its marker and posts nothing: exactly one review, on
//!   the delivery's head commit, and the run succeeds.
//! - A push while the review is being thought out: its delivery supersedes the old run
//!   (`concurrency_policy = "supersede"`), the old review is never posted, and the new run
//!   reviews the new head.

use std::path::Path;
use std::time::Duration;

use nightshift_agent::RunEvent;
use nightshift_store::RunStatus;
use nightshift_tests::process::Serve;
use nightshift_tests::{TestDb, on_both_backends};
use serde_json::{Value, json};

use crate::crash::{
    FAST_WORKER, agent, events, q, sigterm, text_turn, tool_turn, wait_finished, write_config,
};
use crate::fake_github::{APP_ID, fake_github, fixtures, pull_request};
use crate::hooks::harness::{fixture, github_signature};
use crate::process::Proc;

on_both_backends! {
    a_daemon_killed_right_after_the_review_post_leaves_exactly_one_review => one_review_across_a_crash;
    a_push_mid_review_supersedes_it_and_only_the_new_head_is_reviewed => push_supersedes_review;
}

const HOOK_SECRET: &str = "review-crash-hook-secret";
const HOOK_SECRET_ENV: &str = "NIGHTSHIFT_REVIEW_CRASH_HOOK_SECRET";

fn config(db: &TestDb, dir: &Path, github: &str, port: u16) -> std::path::PathBuf {
    config_thinking(db, dir, github, port, 0)
}

/// [`config`] with the reviewer's model taking `think_ms` before it posts.
fn config_thinking(
    db: &TestDb,
    dir: &Path,
    github: &str,
    port: u16,
    think_ms: u64,
) -> std::path::PathBuf {
    let mut post = tool_turn("r1", "github_review", json!({"body": "One nit: naming."}));
    post["delay_ms"] = json!(think_ms);
    let body = format!(
        "[github]\nbase_url = {}\n\n\
         [[github.apps]]\nname = \"review-bot\"\napp_id = {APP_ID}\nprivate_key_file = {}\n\n\
         [[hooks]]\nname = \"github\"\nsignature = \"github\"\nsecret_env = {}\n\n\
         [[hooks.routes]]\nname = \"review\"\nevent = \"pull_request\"\nagent = \"reviewer\"\n\
         prompt = \"Review pull request {{{{ pull_request.number }}}}.\"\n\
         concurrency_key = \"pr-{{{{ pull_request.number }}}}\"\n\
         concurrency_policy = \"supersede\"\n\n{}",
        q(github),
        q(&fixtures().join("test-app-key.pem").display().to_string()),
        q(HOOK_SECRET_ENV),
        agent(
            dir,
            "reviewer",
            &["github_review"],
            json!([post, text_turn("reviewed")]),
        ),
    );
    let cfg = write_config(db, dir, FAST_WORKER, &body);
    // The daemons' API on a port of this test's choosing (write_config asks for any port).
    let text = std::fs::read_to_string(&cfg).unwrap().replace(
        "address = \"127.0.0.1:0\"",
        &format!("address = \"127.0.0.1:{port}\""),
    );
    std::fs::write(&cfg, text).unwrap();
    cfg
}

/// `nightshift serve` with the hook's secret in its environment.
fn serve(cfg: &Path) -> Proc {
    Serve::new(cfg).env(HOOK_SECRET_ENV, HOOK_SECRET).spawn()
}

/// Delivers the `pull_request.synchronize` fixture with head `sha` as delivery `id`; the run
/// it started.
async fn deliver(http: &reqwest::Client, api: &str, id: &str, sha: &str) -> String {
    let mut payload: Value = serde_json::from_slice(&fixture("pull_request.synchronize")).unwrap();
    payload["pull_request"]["head"]["sha"] = json!(sha);
    let body = serde_json::to_vec(&payload).unwrap();
    let signature = github_signature(&body, HOOK_SECRET);
    let answer: Value = http
        .post(format!("{api}/hooks/github"))
        .header("X-GitHub-Event", "pull_request")
        .header("X-GitHub-Delivery", id)
        .header("X-Hub-Signature-256", signature)
        .header("Content-Type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    answer["runs"][0]["run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("a run: {answer}"))
        .to_string()
}

async fn one_review_across_a_crash(db: &TestDb) {
    let (github, seen) = fake_github().await;
    let dir = tempfile::tempdir().unwrap();
    let port = crate::process::free_port();
    let cfg = config(db, dir.path(), &github, port);
    let api = format!("http://127.0.0.1:{port}");
    let http = nightshift_llm::http::build_client(nightshift_llm::HttpTimeouts::default()).unwrap();

    let mut first = serve(&cfg);
    seen.lock().unwrap().kill_on_review = Some(first.pid());
    crate::process::wait_for_api(&http, &api).await;
    let head = pull_request()["head"]["sha"].as_str().unwrap().to_string();
    let run_id = deliver(&http, &api, "d-review-crash-1", &head).await;

    // The fake stores the review and kills the daemon before it answers.
    let status = first.wait_exit(Duration::from_secs(60)).await;
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9),
        "the first daemon died of SIGKILL during the review POST"
    );
    let store = db.store().await;
    let log = events(&store, &run_id).await;
    assert!(
        log.iter()
            .any(|(_, e)| matches!(e, RunEvent::ToolStarted { call_id, .. } if call_id == "r1")),
        "the call was started"
    );
    assert!(
        !log.iter()
            .any(|(_, e)| matches!(e, RunEvent::ToolResult { call_id, .. } if call_id == "r1")),
        "and its result never written"
    );

    let second = serve(&cfg);
    let run = wait_finished(&store, &run_id).await;
    assert_eq!(run.status, RunStatus::Succeeded, "{:?}", run.error);
    let reviews = seen.lock().unwrap().reviews.clone();
    assert_eq!(reviews.len(), 1, "exactly one review: {reviews:#?}");
    let head = pull_request()["head"]["sha"].clone();
    assert_eq!(
        reviews[0]["commit_id"], head,
        "on the delivery's head commit"
    );
    let result = events(&store, &run_id)
        .await
        .into_iter()
        .find_map(|(_, e)| match e {
            RunEvent::ToolResult {
                call_id, content, ..
            } if call_id == "r1" => Some(content),
            _ => None,
        })
        .expect("the replayed call's result");
    assert!(
        result.starts_with("review 80 was already posted"),
        "the replay found the review: {result}"
    );
    sigterm(second).await;
}

async fn push_supersedes_review(db: &TestDb) {
    let (github, seen) = fake_github().await;
    let dir = tempfile::tempdir().unwrap();
    let port = crate::process::free_port();
    // The model thinks 2.5 s before it posts: time for a newer push to land.
    let cfg = config_thinking(db, dir.path(), &github, port, 2500);
    let api = format!("http://127.0.0.1:{port}");
    let http = nightshift_llm::http::build_client(nightshift_llm::HttpTimeouts::default()).unwrap();
    let daemon = serve(&cfg);
    crate::process::wait_for_api(&http, &api).await;
    let store = db.store().await;
    let old_head = "1".repeat(40);
    let new_head = pull_request()["head"]["sha"].as_str().unwrap().to_string();
    seen.lock().unwrap().head = Some(old_head.clone());
    let old = deliver(&http, &api, "d-sync-old", &old_head).await;
    nightshift_tests::eventually(
        Duration::from_secs(30),
        "the old review to start",
        || async {
            let run = store.run(&old).await.unwrap()?;
            (run.status == RunStatus::Running).then_some(())
        },
    )
    .await;
    // A push: GitHub's head moves, and its delivery supersedes the old review.
    seen.lock().unwrap().head = Some(new_head.clone());
    let new = deliver(&http, &api, "d-sync-new", &new_head).await;
    let old_run = wait_finished(&store, &old).await;
    assert_eq!(old_run.status, RunStatus::Superseded);
    let new_run = wait_finished(&store, &new).await;
    assert_eq!(new_run.status, RunStatus::Succeeded, "{:?}", new_run.error);
    let reviews = seen.lock().unwrap().reviews.clone();
    assert_eq!(reviews.len(), 1, "only the new head's review: {reviews:#?}");
    assert_eq!(reviews[0]["commit_id"], json!(new_head));
    assert!(
        reviews[0]["body"]
            .as_str()
            .unwrap()
            .contains(&format!("run={new}")),
        "posted by the new run: {}",
        reviews[0]["body"]
    );
    sigterm(daemon).await;
}
