//! Supersession end to end: a real `nightshift serve`, a GitHub review bot whose route has the
//! `supersede` policy, and two `synchronize` deliveries for one pull request. The first
//! review is still thinking when the second push arrives: it ends `superseded` and its
//! side-effect tool (posting the review) is refused, so only the review of the newer head is
//! posted.

use std::time::Duration;

use nightshift_agent::RunEvent;
use nightshift_agent::runtime::REFUSED_NOTICE;
use nightshift_store::RunStatus;
use nightshift_tests::{TestDb, eventually};
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::harness::{SECRET, fixture, github_signature, run_id};

pub(super) async fn two_pushes_supersede_the_first_review(db: &TestDb) {
    use crate::crash::{agent, command_tool, events, out, q, sigterm, text_turn, wait_finished};
    use crate::process::{API_TOKEN, Proc, free_port, nightshift_bin};
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(out(d)).unwrap();
    let posted = out(d).join("posted.log");
    // The review takes 2.5 s to think, then posts with a side-effect tool. Heartbeats are 10 s
    // apart, so the stop request reaches the old review only through the fence in front of
    // its post, not by cancelling its model call.
    let mut think = json!({"content": [{"type": "tool_use", "id": "post1", "name": "post_review",
                                        "input": {}}],
                           "stop_reason": "tool_use"});
    think["delay_ms"] = json!(2500);
    let body = command_tool(
        "post_review",
        "side_effect",
        &format!("echo posted >> '{}'; echo ok", posted.display()),
    ) + &agent(
        d,
        "reviewer",
        &["post_review"],
        json!([think, text_turn("review posted")]),
    ) + r#"
[[hooks]]
name = "github"
signature = "github"
secret_env = "NS_TEST_GITHUB_SECRET"

[[hooks.routes]]
name = "review"
event = "pull_request"
match = { action = ["opened", "synchronize"] }
agent = "reviewer"
prompt = "Review {{ repository.full_name }}#{{ pull_request.number }} at {{ pull_request.head.sha }}"
concurrency_key = "pr-{{ repository.full_name }}-{{ pull_request.number }}"
concurrency_policy = "supersede"
"#;
    let port = free_port();
    let schema = db
        .config
        .schema
        .as_deref()
        .map(|s| format!("schema = {}\n", q(s)))
        .unwrap_or_default();
    let text = format!(
        "[database]\nurl = {}\n{schema}\n[server]\naddress = \"127.0.0.1:{port}\"\n\n\
         [worker]\nslots = 2\nheartbeat_ms = 10000\nlease_ms = 30000\npoll_interval_ms = 100\n\n\
         [runtime]\ndata_dir = \"data\"\n\n[sandbox]\nwrite = [{}]\n\n{body}",
        q(&db.config.url),
        q(out(d).to_str().unwrap())
    );
    let cfg = d.join("nightshift.toml");
    std::fs::write(&cfg, text).unwrap();
    let daemon = Proc {
        child: Command::new(nightshift_bin())
            .arg("--config")
            .arg(&cfg)
            .arg("serve")
            .env_remove("NIGHTSHIFT_DATABASE_URL")
            .env("NIGHTSHIFT_API_TOKEN", API_TOKEN)
            .env("NS_TEST_GITHUB_SECRET", SECRET)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn nightshift serve"),
    };
    let api = format!("http://127.0.0.1:{port}");
    let http = nightshift_llm::http::build_client(nightshift_llm::HttpTimeouts::default()).unwrap();
    crate::process::wait_for_api(&http, &api).await;
    let deliver = |id: &'static str, sha: &'static str| {
        let http = http.clone();
        let api = api.clone();
        async move {
            let mut payload: Value =
                serde_json::from_slice(&fixture("pull_request.synchronize")).unwrap();
            payload["pull_request"]["head"]["sha"] = json!(sha);
            let body = serde_json::to_vec(&payload).unwrap();
            let resp = http
                .post(format!("{api}/hooks/github"))
                .header("X-GitHub-Event", "pull_request")
                .header("X-GitHub-Delivery", id)
                .header("X-Hub-Signature-256", github_signature(&body, SECRET))
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), StatusCode::ACCEPTED);
            let answer: Value = resp.json().await.unwrap();
            (run_id(&answer), answer)
        }
    };
    let store = db.store().await;
    let (first, _) = deliver("d-sync-1", "1111111111111111111111111111111111111111").await;
    eventually(
        Duration::from_secs(30),
        "the first review to start",
        || async {
            let run = store.run(&first).await.unwrap()?;
            (run.status == RunStatus::Running).then_some(())
        },
    )
    .await;
    let (second, answer) = deliver("d-sync-2", "2222222222222222222222222222222222222222").await;
    assert_eq!(
        answer["runs"][0]["superseded"],
        json!([first]),
        "the answer names the superseded run: {answer}"
    );
    let old = wait_finished(&store, &first).await;
    assert_eq!(old.status, RunStatus::Superseded);
    assert!(old.error.unwrap().contains(&second));
    let new = wait_finished(&store, &second).await;
    assert_eq!(new.status, RunStatus::Succeeded, "{:?}", new.error);
    assert!(new.input.contains("2222222"), "{}", new.input);
    assert_eq!(
        std::fs::read_to_string(&posted).unwrap(),
        "posted\n",
        "only the newer head's review was posted"
    );
    let log = events(&store, &first).await;
    assert!(
        !log.iter()
            .any(|(_, e)| matches!(e, RunEvent::ToolStarted { .. })),
        "the superseded review never started its post"
    );
    assert!(log.iter().any(|(_, e)| matches!(
        e,
        RunEvent::ToolResult { content, .. } if content == REFUSED_NOTICE
    )));
    // The metrics count the old review as superseded, not cancelled (its job ended it as a
    // cancellation; the store says why).
    let scrape = http
        .get(format!("{api}/metrics"))
        .bearer_auth(API_TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let ended = |status: &str| {
        nightshift_telemetry::exposition::parse(&scrape)
            .into_iter()
            .find(|s| {
                s.name == "nightshift_runs_ended_total"
                    && s.labels.contains(&("agent".into(), "reviewer".into()))
                    && s.labels.contains(&("status".into(), status.into()))
            })
            .map(|s| s.value)
    };
    assert_eq!(ended("superseded"), Some(1.0), "{scrape}");
    assert_eq!(ended("cancelled"), None, "{scrape}");
    sigterm(daemon).await;
}
