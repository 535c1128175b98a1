//! The daemon's log as an operator reads it: `[log] format = "json"` gives one JSON object per
//! line, and the lines written while a job runs carry the run, job, attempt and agent, with
//! one line when the run starts and one when it ends (status, duration, turns, tokens, cost);
//! a run the store ends (a cancel while it waits) gets its one `run ended` line too, and the
//! cancel its `operator action` line.

use std::process::{Command, Stdio};
use std::time::Duration;

use nightshift_store::RunStatus;
use nightshift_tests::http::post_json;
use nightshift_tests::{TestDb, eventually, on_both_backends};
use serde_json::Value;

use crate::process::{API_TOKEN, Proc, config_file, nightshift_bin, wait_for_api};

on_both_backends! {
    json_log_lines_carry_the_run_and_say_when_it_starts_and_ends => json_log_lines_carry_the_run;
    sighup_reloads_a_valid_config_and_keeps_the_old_one_on_error => sighup_checks_the_config;
}

/// `nightshift serve` on `cfg` with its stderr (the log) written to `log_path`.
fn serve_logging_to(cfg: &std::path::Path, log_path: &std::path::Path) -> Proc {
    Proc {
        child: Command::new(nightshift_bin())
            .arg("--config")
            .arg(cfg)
            .arg("serve")
            .env("NIGHTSHIFT_API_TOKEN", API_TOKEN)
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log_path).unwrap())
            .spawn()
            .expect("spawn nightshift serve"),
    }
}

/// A config for `db` with JSON logs; its path, the API's URL and where the log goes.
fn json_logging_config(
    db: &TestDb,
    dir: &std::path::Path,
) -> (std::path::PathBuf, String, std::path::PathBuf) {
    let (cfg, api) = config_file(db, dir);
    let mut text = std::fs::read_to_string(&cfg).unwrap();
    text.push_str("[log]\nformat = \"json\"\n");
    std::fs::write(&cfg, text).unwrap();
    (cfg, api, dir.join("serve.log"))
}

/// Enqueues a run of `echo` over the API and waits for it to succeed; its id.
async fn run_echo(http: &reqwest::Client, api: &str, store: &nightshift_store::Store) -> String {
    let (_, created) = post_json(
        http,
        &format!("{api}/v1/runs"),
        API_TOKEN,
        &serde_json::json!({"agent": "echo", "prompt": "hello, logs"}),
    )
    .await;
    let run_id = created["run_id"].as_str().expect("a run id").to_string();
    eventually(Duration::from_secs(30), "the run to succeed", || async {
        let run = store.run(&run_id).await.ok()??;
        (run.status == RunStatus::Succeeded).then_some(())
    })
    .await;
    run_id
}

/// Every line of the log at `path`, each parsed as JSON (a line that is not fails the test).
fn json_lines(path: &std::path::Path) -> (String, Vec<Value>) {
    let written = std::fs::read_to_string(path).unwrap();
    let lines = written
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}")))
        .collect();
    (written, lines)
}

async fn json_log_lines_carry_the_run(db: &TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, api, log_path) = json_logging_config(db, dir.path());
    let mut serve = serve_logging_to(&cfg, &log_path);
    let store = db.store().await;
    let http = nightshift_llm::http::build_client(nightshift_llm::HttpTimeouts::default()).unwrap();
    wait_for_api(&http, &api).await;
    let run_id = run_echo(&http, &api, &store).await;
    // A run cancelled while it waits to start: no job ends it, the store does, and it gets
    // its one `run ended` line all the same; the cancel is an operator action, logged.
    let (_, later) = post_json(
        &http,
        &format!("{api}/v1/runs"),
        API_TOKEN,
        &serde_json::json!({"agent": "echo", "prompt": "later", "delay_seconds": 3600}),
    )
    .await;
    let later = later["run_id"].as_str().expect("a run id").to_string();
    let (status, said) = post_json(
        &http,
        &format!("{api}/v1/runs/{later}/cancel"),
        API_TOKEN,
        &serde_json::json!({}),
    )
    .await;
    assert!(status.is_success(), "{said}");
    serve.signal("TERM");
    assert!(serve.wait_exit(Duration::from_secs(20)).await.success());

    let (written, lines) = json_lines(&log_path);
    for line in &lines {
        for key in ["timestamp", "level", "target", "message"] {
            assert!(line.get(key).is_some(), "{key} in {line}");
        }
    }
    assert!(
        lines.iter().any(|l| l["message"] == "HTTP API listening"),
        "the daemon's own lines are JSON too: {written}"
    );
    let of_run: Vec<&Value> = lines
        .iter()
        .filter(|l| l["span"]["run_id"] == run_id.as_str())
        .collect();
    let job = store.jobs_of_run(&run_id).await.unwrap()[0].clone();
    for line in &of_run {
        let span = &line["span"];
        assert_eq!(span["name"], "job", "{line}");
        assert_eq!(span["job_id"], job.id, "{line}");
        assert_eq!(span["attempt"], 1, "{line}");
        assert_eq!(span["kind"], "start", "{line}");
        assert_eq!(span["lane"], "default", "{line}");
    }
    let started = of_run
        .iter()
        .find(|l| l["message"] == "run started")
        .unwrap_or_else(|| panic!("a 'run started' line for {run_id}: {written}"));
    assert_eq!(started["span"]["agent"], "echo", "{started}");
    let ended = of_run
        .iter()
        .find(|l| l["message"] == "run ended")
        .unwrap_or_else(|| panic!("a 'run ended' line for {run_id}: {written}"));
    assert_eq!(ended["span"]["agent"], "echo", "{ended}");
    assert_eq!(ended["status"], "succeeded", "{ended}");
    assert_eq!(ended["turns"], 1, "{ended}");
    assert!(
        ended["duration_ms"].as_i64().is_some_and(|d| d >= 0),
        "{ended}"
    );
    let run = store.run(&run_id).await.unwrap().unwrap();
    assert_eq!(ended["input_tokens"], run.input_tokens, "{ended}");
    assert_eq!(ended["output_tokens"], run.output_tokens, "{ended}");
    assert!(ended["cost_usd"].is_number(), "{ended}");

    let later_ended: Vec<&Value> = lines
        .iter()
        .filter(|l| l["message"] == "run ended" && l["run_id"] == later.as_str())
        .collect();
    assert_eq!(
        later_ended.len(),
        1,
        "one 'run ended' line for {later}: {written}"
    );
    assert_eq!(later_ended[0]["status"], "cancelled", "{}", later_ended[0]);
    assert_eq!(later_ended[0]["agent"], "echo", "{}", later_ended[0]);
    let action = lines
        .iter()
        .find(|l| l["message"] == "operator action")
        .unwrap_or_else(|| panic!("an 'operator action' line: {written}"));
    assert_eq!(
        (&action["actor"], &action["action"], &action["object"]),
        (
            &Value::from("token:admin"),
            &Value::from("cancel"),
            &Value::from(later.as_str())
        ),
        "{action}"
    );
}

/// SIGHUP checks the config file again and logs the verdict, and the daemon keeps working on
/// the config it started with: after a valid file, after an invalid one (the error names the
/// key), and a run still succeeds after both.
/// The scripted agent `second` and a webhook `ci` starting its runs: what the reload adds.
const RELOAD_ADDS: &str = "\n[[agents]]\nname = \"second\"\nprovider = \"scripted\"\n\
    model = \"scripted-1\"\n\
    [[hooks]]\nname = \"ci\"\nsignature = \"none\"\ndelivery_id = { header = \"X-Id\" }\n\
    [[hooks.routes]]\nname = \"go\"\nagent = \"second\"\nprompt = \"from the hook\"\n";

async fn post_run(http: &reqwest::Client, api: &str, agent: &str) -> reqwest::StatusCode {
    http.post(format!("{api}/v1/runs"))
        .bearer_auth(API_TOKEN)
        .json(&serde_json::json!({"agent": agent, "prompt": "hello"}))
        .send()
        .await
        .unwrap()
        .status()
}

async fn sighup_checks_the_config(db: &TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, api, log_path) = json_logging_config(db, dir.path());
    let mut serve = serve_logging_to(&cfg, &log_path);
    let store = db.store().await;
    let http = nightshift_llm::http::build_client(nightshift_llm::HttpTimeouts::default()).unwrap();
    wait_for_api(&http, &api).await;
    let said = |message: &'static str, nth: usize| {
        let log_path = log_path.clone();
        move || {
            let log_path = log_path.clone();
            async move {
                let (_, lines) = json_lines(&log_path);
                lines
                    .into_iter()
                    .filter(|l| l["message"] == message)
                    .nth(nth)
            }
        }
    };
    let original = std::fs::read_to_string(&cfg).unwrap();
    assert_eq!(
        post_run(&http, &api, "second").await,
        422,
        "not an agent yet"
    );

    // A valid file that adds an agent and a webhook: applied without a restart.
    std::fs::write(&cfg, format!("{original}{RELOAD_ADDS}")).unwrap();
    serve.signal("HUP");
    let reloaded = eventually(
        Duration::from_secs(20),
        "the reload to be logged",
        said(nightshift_runner::reload::RELOADED, 0),
    )
    .await;
    assert_eq!(reloaded["agents"], "[\"echo\", \"second\"]", "{reloaded}");
    assert_eq!(post_run(&http, &api, "second").await, 202);
    let delivered = http
        .post(format!("{api}/hooks/ci"))
        .header("X-Id", "d-1")
        .json(&serde_json::json!({"any": "thing"}))
        .send()
        .await
        .unwrap();
    assert_eq!(delivered.status(), 202, "the new hook takes deliveries");
    let body: Value = delivered.json().await.unwrap();
    let hook_run = body["runs"][0]["run_id"].as_str().unwrap().to_string();
    eventually(
        Duration::from_secs(30),
        "the hook's run to succeed",
        || async {
            let run = store.run(&hook_run).await.ok()??;
            (run.status == RunStatus::Succeeded && run.agent == "second").then_some(())
        },
    )
    .await;

    // A setting the daemon is built on: the rest applies, the key is named as needing a restart.
    let reloaded_text = std::fs::read_to_string(&cfg).unwrap();
    assert!(reloaded_text.contains("slots = 2"), "{reloaded_text}");
    std::fs::write(&cfg, reloaded_text.replace("slots = 2", "slots = 3")).unwrap();
    serve.signal("HUP");
    let restart = eventually(
        Duration::from_secs(20),
        "the restart-only change to be named",
        said(
            "SIGHUP: these settings changed but apply only at a restart: worker",
            0,
        ),
    )
    .await;
    assert_eq!(restart["level"], "WARN", "{restart}");

    // An invalid file changes nothing: the error names the key, the daemon runs on.
    std::fs::write(&cfg, original.replace("slots = 2", "slots = \"many\"")).unwrap();
    serve.signal("HUP");
    let refused = eventually(
        Duration::from_secs(20),
        "the invalid config to be reported",
        said(nightshift_runner::reload::REFUSED, 0),
    )
    .await;
    assert_eq!(refused["level"], "ERROR", "{refused}");
    let error = refused["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("worker.slots"),
        "the error names the key: {refused}"
    );
    // A secret the file lists but the environment lacks is refused like at start.
    std::fs::write(
        &cfg,
        original.replace(
            "[runtime]\n",
            "[runtime]\nsecrets = [\"NIGHTSHIFT_TEST_UNSET_SECRET\"]\n",
        ),
    )
    .unwrap();
    serve.signal("HUP");
    let refused = eventually(
        Duration::from_secs(20),
        "the unset secret to be reported",
        said(nightshift_runner::reload::REFUSED, 1),
    )
    .await;
    let error = refused["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("runtime.secrets names $NIGHTSHIFT_TEST_UNSET_SECRET, which is not set"),
        "{refused}"
    );
    assert!(serve.child.try_wait().unwrap().is_none(), "still running");
    assert_eq!(
        post_run(&http, &api, "second").await,
        202,
        "still running on the reloaded config"
    );
    run_echo(&http, &api, &store).await;
    serve.signal("TERM");
    assert!(serve.wait_exit(Duration::from_secs(20)).await.success());
}
