//! A real `nightshift serve` with webhooks: it refuses to start without a hook's secret
//! variable (naming it, never showing a secret), and runs the agent a signed delivery started.

use std::time::Duration;

use nightshift_tests::http::{get_json, try_get_json};
use nightshift_tests::{TestDb, eventually};
use reqwest::StatusCode;
use serde_json::Value;

use super::harness::{HOOKS, SECRET, fixture, github_signature, run_id};

pub(super) async fn serve_end_to_end(db: &TestDb) {
    use crate::process::{API_TOKEN, free_port, nightshift_bin};
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().unwrap();
    let script = r#"[{"content": [{"type": "text", "text": "LGTM: the retry gives up after 3 attempts"}], "stop_reason": "end_turn"}]"#;
    std::fs::write(dir.path().join("script.json"), script).unwrap();
    let port = free_port();
    let text = format!(
        "[database]\nurl = \"{}\"\n{}\n[server]\naddress = \"127.0.0.1:{port}\"\n\
         [worker]\nslots = 1\nheartbeat_ms = 200\nlease_ms = 2000\npoll_interval_ms = 100\n\
         [runtime]\ndata_dir = \"data\"\n{HOOKS}",
        db.config.url,
        db.config
            .schema
            .as_ref()
            .map(|s| format!("schema = \"{s}\""))
            .unwrap_or_default()
    );
    let cfg = dir.path().join("nightshift.toml");
    std::fs::write(&cfg, text).unwrap();
    let bin = nightshift_bin();

    // Without the secret in the environment the daemon refuses to start, naming the variable.
    let refused = Command::new(&bin)
        .arg("--config")
        .arg(&cfg)
        .arg("serve")
        .env("NIGHTSHIFT_API_TOKEN", API_TOKEN)
        .env_remove("NS_TEST_GITHUB_SECRET")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(
        stderr.contains("hooks.github.secret_env")
            && stderr.contains("NS_TEST_GITHUB_SECRET is not set")
            && !stderr.contains(SECRET),
        "{stderr}"
    );

    let child = Command::new(&bin)
        .arg("--config")
        .arg(&cfg)
        .arg("serve")
        .env("NIGHTSHIFT_API_TOKEN", API_TOKEN)
        .env("NS_TEST_GITHUB_SECRET", SECRET)
        .env("NS_TEST_STRIPE_SECRET", "s")
        .env("NS_TEST_SLACK_SECRET", "s")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn nightshift serve");
    let _serve = crate::process::Proc { child };
    let api = format!("http://127.0.0.1:{port}");
    let http = nightshift_llm::http::build_client(nightshift_llm::HttpTimeouts::default()).unwrap();
    crate::process::wait_for_api(&http, &api).await;
    let body = fixture("pull_request.opened");
    let resp = http
        .post(format!("{api}/hooks/github"))
        .header("X-GitHub-Event", "pull_request")
        .header("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
        .header("X-Hub-Signature-256", github_signature(&body, SECRET))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::ACCEPTED);
    let answer: Value = resp.json().await.unwrap();
    let id = run_id(&answer);
    let run = eventually(Duration::from_secs(30), "the run to succeed", || async {
        let run = try_get_json(&http, &format!("{api}/v1/runs/{id}"), API_TOKEN).await?;
        (run["status"] == "succeeded").then_some(run)
    })
    .await;
    assert_eq!(run["result"], "LGTM: the retry gives up after 3 attempts");
    assert_eq!(run["trigger_kind"], "webhook");
    assert!(run["input"].as_str().unwrap().ends_with(
        "[webhook github delivery=72d3162e-cc78-11e3-81ab-4c9367dc0958 event=pull_request]"
    ));
    let (_, listing) = get_json(
        &http,
        &format!("{api}/v1/hooks/github/deliveries"),
        API_TOKEN,
    )
    .await;
    let d = &listing["deliveries"][0];
    assert_eq!(
        (&d["delivery_id"], &d["status"], &d["runs"][0]["run_id"]),
        (
            &Value::from("72d3162e-cc78-11e3-81ab-4c9367dc0958"),
            &Value::from("done"),
            &Value::from(id)
        )
    );
}
