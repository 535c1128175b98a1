//! Pieces of secrets through a real `nightshift serve`: a notify receiver that answers 500
//! with a body echoing the API token, the provider key and the notify secret (base64,
//! reversed, JSON-escaped); commands printing a prefix, a suffix and a middle run of a
//! `command_env` secret and `od`'s grouped dump with its ASCII column; a background task that
//! prints a secret in two writes with a pause between. Then [`Sweep`] finds no run of 8
//! characters of any secret in the database, the data directory (task logs), the logs, the
//! API's answers (`/v1/notifications`, `/v1/tasks`, events) or the requests to the model.

use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use nightshift_tests::http::try_get_json;
use nightshift_tests::{TestDb, eventually, on_both_backends};
use serde_json::{Value, json};

use super::sweep::Sweep;
use crate::hostile::script::{Wire, call, calls, text};
use crate::hostile::server::Hostile;
use crate::process::{Proc, free_port, nightshift_bin};

on_both_backends! {
    no_run_of_8_characters_of_a_secret_reaches_any_sink => no_run_of_8_passes;
}

/// A receiver on loopback answering every notice with 500 and `body`; counts the notices.
async fn echoing_receiver(body: String) -> (String, Arc<Mutex<usize>>) {
    let got = Arc::new(Mutex::new(0));
    let seen = got.clone();
    let app = Router::new().fallback(move || {
        let (seen, body) = (seen.clone(), body.clone());
        async move {
            *seen.lock().unwrap() += 1;
            (StatusCode::INTERNAL_SERVER_ERROR, body)
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/notices"), got)
}

/// Commands printing pieces of `$FAKE_PROVIDER_KEY` (53 characters).
const PRINT_PIECES: &str = r#"S="$FAKE_PROVIDER_KEY"
printf 'prefix %s\n' "${S%????????}"
printf 'first18 %s\n' "$(printf '%s' "$S" | head -c 18)"
printf 'suffix %s\n' "$(printf '%s' "$S" | tail -c 12)"
printf 'middle %s\n' "$(printf '%s' "$S" | cut -c 20-35)"
printf '%s' "$S" | od -A x -t x1z -v
printf '%s' "$S" | xxd
printf 'token %s\n' "$(printf '%s' "$NIGHTSHIFT_API_TOKEN" | cut -c 3-14)""#;

/// A background task printing the key's first 12 characters, pausing past the log's idle
/// flush, then the rest; then the API token in three writes (5, 7, the rest: each of the first
/// two shorter than a window, together a run of 12) with a pause after each.
const PAUSED_PRINT: &str = r#"K="$FAKE_PROVIDER_KEY"; T="$NIGHTSHIFT_API_TOKEN"
printf 'key: %s' "$(printf '%s' "$K" | head -c 12)"; sleep 1.2
printf '%s\n' "$(printf '%s' "$K" | tail -c +13)"
printf 'token: %s' "$(printf '%s' "$T" | head -c 5)"; sleep 1.2
printf '%s' "$(printf '%s' "$T" | cut -c 6-12)"; sleep 1.2
printf '%s end\n' "$(printf '%s' "$T" | tail -c +13)""#;

async fn no_run_of_8_passes(db: &TestDb) {
    let id = || uuid::Uuid::new_v4().simple().to_string();
    let provider_key = format!("sk-ant-api03-{}{}", id(), &id()[..8]);
    let api_token = format!("ns_tok_{}", id());
    let notify = format!("notify \"q\" \\b/s+{}&=", &id()[..20]);
    let secrets = [
        ("FAKE_PROVIDER_KEY", provider_key.as_str()),
        ("NIGHTSHIFT_API_TOKEN", api_token.as_str()),
        ("NOTIFY_SECRET", notify.as_str()),
    ];
    let forms = nightshift_tools::secret_encodings::forms(&notify);
    let form = |name: &str| forms.iter().find(|(f, _)| *f == name).unwrap().1.clone();
    let echo = format!(
        "denied token={api_token} key={provider_key} b64={} rev={} json=\"{}\"",
        form("base64"),
        form("reversed"),
        form("json")
    );
    let (notify_url, notices) = echoing_receiver(echo).await;
    let hostile = Hostile::start().await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let schema = db
        .config
        .schema
        .as_ref()
        .map(|s| format!("schema = {}\n", json!(s)))
        .unwrap_or_default();
    let config = format!(
        "[database]\nurl = {url}\n{schema}\n\
         [server]\naddress = \"127.0.0.1:{port}\"\n\n\
         [worker]\nslots = 2\nheartbeat_ms = 200\nlease_ms = 2000\npoll_interval_ms = 50\n\n\
         [runtime]\ndata_dir = \"data\"\ncommand_timeout_seconds = 20\n\
         command_env = [\"FAKE_PROVIDER_KEY\", \"NIGHTSHIFT_API_TOKEN\"]\n\n\
         [providers.fake]\nkind = \"anthropic\"\nbase_url = {base}\napi_key_env = \"FAKE_PROVIDER_KEY\"\n\n\
         [[agents]]\nname = \"pieces\"\nprovider = \"fake\"\nmodel = \"fake-model-1\"\n\
         system = \"You are tested.\"\ntools = [\"run_command\", \"task_output\"]\n\n\
         [[agents.notify]]\nurl = {notify}\nsecret_env = \"NOTIFY_SECRET\"\n\
         max_attempts = 2\nretry_base_ms = 50\nretry_cap_ms = 100\n",
        url = json!(db.config.url),
        base = json!(hostile.base_url(Wire::Anthropic)),
        notify = json!(notify_url),
    );
    let cfg = dir.path().join("nightshift.toml");
    std::fs::write(&cfg, &config).unwrap();
    let stderr = dir.path().join("serve.stderr");
    let mut command = Command::new(nightshift_bin());
    command
        .arg("--config")
        .arg(&cfg)
        .arg("serve")
        .env_remove("NIGHTSHIFT_DATABASE_URL")
        .env("RUST_LOG", "info,sqlx=warn,nightshift_tools=debug")
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(&stderr).unwrap()));
    for (name, value) in secrets {
        command.env(name, value);
    }
    let mut serve = Proc {
        child: command.spawn().expect("spawn nightshift serve"),
    };
    let http = nightshift_llm::http::build_client(nightshift_llm::HttpTimeouts::default()).unwrap();
    let api = format!("http://127.0.0.1:{port}");
    super::wait_until_serving(&mut serve, &http, &api, &stderr).await;

    hostile.script(
        "PIECES",
        vec![
            calls(vec![
                call(None, "run_command", json!({"command": PRINT_PIECES})),
                call(
                    None,
                    "run_command",
                    json!({"command": PAUSED_PRINT, "background": true, "timeout_seconds": 20}),
                ),
            ]),
            // The task ends (after its pause) while this command runs.
            calls(vec![call(
                None,
                "run_command",
                json!({"command": "sleep 6"}),
            )]),
            text("Done."),
        ],
    );
    let resp = http
        .post(format!("{api}/v1/runs"))
        .bearer_auth(&api_token)
        .json(&json!({"agent": "pieces", "prompt": "PIECES: print", "max_attempts": 1}))
        .send()
        .await
        .unwrap();
    let body: Value = resp.json().await.unwrap();
    let run_id = body["run_id"].as_str().expect("a run id").to_string();
    let run = eventually(Duration::from_secs(60), "the run to end", || async {
        let run = try_get_json(&http, &format!("{api}/v1/runs/{run_id}"), &api_token).await?;
        matches!(run["status"].as_str(), Some("succeeded" | "failed")).then_some(run)
    })
    .await;
    assert_eq!(run["status"], "succeeded", "{run}");
    let tasks = eventually(Duration::from_secs(30), "the task's ending", || async {
        let page = try_get_json(&http, &format!("{api}/v1/tasks"), &api_token).await?;
        let ended = page["tasks"][0]["output_tail"]
            .as_str()
            .is_some_and(|t| t.ends_with("end\n"));
        ended.then_some(page)
    })
    .await;
    let notes = eventually(Duration::from_secs(30), "the notice to die", || async {
        let page = try_get_json(&http, &format!("{api}/v1/notifications"), &api_token).await?;
        (page["notifications"][0]["status"] == "dead").then_some(page)
    })
    .await;
    assert!(
        *notices.lock().unwrap() >= 2,
        "the receiver was asked twice"
    );
    let last_error = notes["notifications"][0]["last_error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        last_error.starts_with(
            "HTTP 500: denied token=[REDACTED:NIGHTSHIFT_API_TOKEN] \
                                key=[REDACTED:FAKE_PROVIDER_KEY] b64=[REDACTED:NOTIFY_SECRET]"
        ),
        "{last_error}"
    );
    let tail = tasks["tasks"][0]["output_tail"].as_str().unwrap();
    assert!(
        tail.starts_with("key: ")
            && tail.contains("[REDACTED:FAKE_PROVIDER_KEY]")
            && tail.contains("token: ")
            && tail.contains("[REDACTED:NIGHTSHIFT_API_TOKEN] end"),
        "{tail}"
    );
    let mut answers = vec![
        ("GET /v1/tasks".to_string(), tasks.to_string()),
        ("GET /v1/notifications".to_string(), notes.to_string()),
    ];
    for path in [
        format!("/v1/runs/{run_id}"),
        format!("/v1/runs/{run_id}/events"),
    ] {
        let body = try_get_json(&http, &format!("{api}{path}"), &api_token)
            .await
            .unwrap();
        answers.push((format!("GET {path}"), body.to_string()));
    }
    serve.signal("TERM");
    serve.wait_exit(Duration::from_secs(20)).await;

    let mut sweep = Sweep::default();
    sweep.add_daemon_disk(db, &dir.path().join("data")).await;
    sweep.add("serve stderr", std::fs::read(&stderr).unwrap());
    for (what, body) in answers {
        sweep.add(format!("API answer to {what}"), body);
    }
    for (i, r) in hostile.requests().iter().enumerate() {
        sweep.add(format!("request {i} to the model"), r.body.to_string());
    }
    // The pieces really went through: the task log and the events hold their markers.
    let log_has_marker = sweep.blobs.iter().any(|(place, b)| {
        place.ends_with(".log")
            && String::from_utf8_lossy(b).contains("[REDACTED:FAKE_PROVIDER_KEY]")
    });
    assert!(
        log_has_marker,
        "the task log was swept and its secret replaced"
    );
    for marker in [
        "prefix [REDACTED:FAKE_PROVIDER_KEY]",
        "middle [REDACTED:FAKE_PROVIDER_KEY]",
    ] {
        assert!(
            sweep.contains(marker),
            "no {marker:?}: the test did not exercise it"
        );
    }
    sweep.assert_clean(&secrets);
}
