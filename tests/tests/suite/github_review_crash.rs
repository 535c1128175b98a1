//! A review bot end to end through real processes, crashed at the worst moment: a signed
//! GitHub `pull_request` delivery starts a run of `nightshift serve` whose model posts its
//! review with `github_review`; the fake GitHub stores the review and SIGKILLs the daemon
//! before it can answer, so the run's log has the call started and no result. A second
//! daemon takes the run over when the lease runs out, runs the call again (it is
//! idempotent), finds the review by its marker and posts nothing: exactly one review, on the
//! delivery's head commit, and the run succeeds.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use nightshift_agent::RunEvent;
use nightshift_scheduler::hooks::config::HmacAlgorithm;
use nightshift_scheduler::hooks::signature::hmac;
use nightshift_store::RunStatus;
use nightshift_tests::{TestDb, on_both_backends};
use serde_json::{Value, json};

use crate::crash::{
    FAST_WORKER, agent, events, nightshift, q, sigterm, text_turn, tool_turn, wait_finished,
    write_config,
};
use crate::github_tools::{APP_ID, fake_github, fixtures, pull_request};
use crate::process::Proc;

on_both_backends! {
    a_daemon_killed_right_after_the_review_post_leaves_exactly_one_review => one_review_across_a_crash;
}

const HOOK_SECRET: &str = "review-crash-hook-secret";
const HOOK_SECRET_ENV: &str = "NIGHTSHIFT_REVIEW_CRASH_HOOK_SECRET";

fn config(db: &TestDb, dir: &Path, github: &str, port: u16) -> std::path::PathBuf {
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
            json!([
                tool_turn("r1", "github_review", json!({"body": "One nit: naming."})),
                text_turn("reviewed"),
            ]),
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

fn serve(cfg: &Path) -> Proc {
    Proc {
        child: nightshift(cfg)
            .arg("serve")
            .env(HOOK_SECRET_ENV, HOOK_SECRET)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn nightshift serve"),
    }
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
    let body = std::fs::read(format!(
        "{}/fixtures/github/pull_request.synchronize.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let signature = format!(
        "sha256={}",
        hmac(HmacAlgorithm::Sha256, HOOK_SECRET.as_bytes(), &[&body])
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    );
    let answer: Value = http
        .post(format!("{api}/hooks/github"))
        .header("X-GitHub-Event", "pull_request")
        .header("X-GitHub-Delivery", "d-review-crash-1")
        .header("X-Hub-Signature-256", signature)
        .header("Content-Type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let run_id = answer["runs"][0]["run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("a run: {answer}"))
        .to_string();

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
