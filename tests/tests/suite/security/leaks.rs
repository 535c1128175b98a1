//! The cases of [`super`]: one daemon per backend, two runs, then the sweep.

use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::http::HeaderMap;
use nightshift_tests::http::try_get_json;
use nightshift_tests::{TestDb, eventually, on_both_backends};
use serde_json::{Value, json};

use super::sweep::Sweep;
use crate::hostile::script::{Step, Wire, call, calls, text};
use crate::hostile::server::Hostile;
use crate::process::{Proc, free_port, nightshift_bin};

on_both_backends! {
    no_secret_the_daemon_holds_is_stored_logged_or_sent => no_secret_leaks;
}

/// The secrets, by the variable the daemon reads each from. Fresh per test.
struct Secrets {
    provider_key: String,
    api_token: String,
    hook: String,
    notify: String,
    github: String,
}

impl Secrets {
    fn new() -> Self {
        let id = || uuid::Uuid::new_v4().simple().to_string();
        Secrets {
            provider_key: format!("sk-ant-api03-{}{}", id(), &id()[..8]),
            api_token: format!("ns_tok_{}", id()),
            hook: format!("whsec_{}", id()),
            // Characters JSON and URLs escape.
            notify: format!("notify \"q\" \\b/s+{}&=", &id()[..20]),
            github: format!("ghp_{}", id()),
        }
    }

    fn all(&self) -> Vec<(&'static str, &str)> {
        vec![
            ("FAKE_PROVIDER_KEY", &self.provider_key),
            ("NIGHTSHIFT_API_TOKEN", &self.api_token),
            ("HOOK_SECRET", &self.hook),
            ("NOTIFY_SECRET", &self.notify),
            ("GITHUB_TOKEN", &self.github),
        ]
    }
}

/// A notification receiver on loopback that records every body and header it gets.
async fn receiver() -> (String, Arc<Mutex<Vec<String>>>) {
    let got = Arc::new(Mutex::new(Vec::new()));
    let seen = got.clone();
    let app = Router::new().fallback(move |headers: HeaderMap, body: String| {
        let seen = seen.clone();
        async move {
            seen.lock().unwrap().push(format!("{headers:?}\n{body}"));
            "ok"
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/notices"), got)
}

/// A shell script printing every secret in each covered form, one per line.
const PRINT_EVERY_FORM: &str = r#"for v in "$FAKE_PROVIDER_KEY" "$NIGHTSHIFT_API_TOKEN" "$HOOK_SECRET" "$NOTIFY_SECRET" "$GITHUB_TOKEN"; do
  printf '%s\n' "$v"
  printf '%s' "$v" | base64 -w0; echo
  printf 'x%s' "$v" | base64 -w0; echo
  printf 'xy%s' "$v" | base64 -w0; echo
  printf 'long text before it %s and after' "$v" | base64; echo
  printf '%s' "$v" | base64 -w0 | tr '+/' '-_' | tr -d '='; echo
  printf '%s' "$v" | od -An -tx1 -v | tr -d ' \n'; echo
  printf '%s' "$v" | od -An -tx1 -v | tr -d ' \n' | tr a-f A-F; echo
  printf '%s' "$v" | od -An -tx1 -v | tr -d ' \n' | sed 's/../%&/g'; echo
  printf '%s' "$v" | sed 's/\\/\\\\/g; s/"/\\"/g'; echo
  printf '%s' "$v" | rev; echo
done
printf '%s' "$NOTIFY_SECRET" > notify.txt"#;

/// `n` filler bytes, the provider key, then 1,000 more: across the head cut (output cap 400,
/// so 200 + 200) for n near 200, across the tail cut for n near 1,000 + key − 200.
fn at_offset(n: usize) -> String {
    format!(
        "head -c {n} /dev/zero | tr '\\0' a; printf '%s' \"$FAKE_PROVIDER_KEY\"; \
         head -c 1000 /dev/zero | tr '\\0' b"
    )
}

async fn no_secret_leaks(db: &TestDb) {
    let s = Secrets::new();
    let hostile = Hostile::start().await;
    let (notify_url, notices) = receiver().await;
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
         [worker]\nslots = 2\nheartbeat_ms = 200\nlease_ms = 2000\npoll_interval_ms = 50\n\
         retry_base_ms = 50\nretry_cap_ms = 200\n\n\
         [runtime]\ndata_dir = \"data\"\ncommand_timeout_seconds = 20\noutput_cap_bytes = 400\n\
         secrets = [\"GITHUB_TOKEN\"]\n\
         command_env = [\"FAKE_PROVIDER_KEY\", \"NIGHTSHIFT_API_TOKEN\", \"HOOK_SECRET\", \
         \"NOTIFY_SECRET\", \"GITHUB_TOKEN\"]\n\n\
         [providers.fake]\nkind = \"anthropic\"\nbase_url = {base}\napi_key_env = \"FAKE_PROVIDER_KEY\"\n\
         retry = {{ max_attempts = 1, base_delay_ms = 10, max_delay_ms = 20 }}\n\n\
         [[agents]]\nname = \"leaky\"\nprovider = \"fake\"\nmodel = \"fake-model-1\"\n\
         system = \"You are tested.\"\ntools = [\"run_command\", \"read_file\", \"grep\"]\n\n\
         [[agents.notify]]\nurl = {notify}\nsecret_env = \"NOTIFY_SECRET\"\n\
         retry_base_ms = 50\n\n\
         [[hooks]]\nname = \"gh\"\nsignature = \"github\"\nsecret_env = \"HOOK_SECRET\"\n\
         [[hooks.routes]]\nname = \"push\"\nevent = \"push\"\nagent = \"leaky\"\nprompt = \"a push\"\n",
        url = json!(db.config.url),
        base = json!(hostile.base_url(Wire::Anthropic)),
        notify = json!(notify_url),
    );
    let cfg = dir.path().join("nightshift.toml");
    std::fs::write(&cfg, &config).unwrap();
    let stdout = dir.path().join("serve.stdout");
    let stderr = dir.path().join("serve.stderr");
    let mut command = Command::new(nightshift_bin());
    command
        .arg("--config")
        .arg(&cfg)
        .arg("serve")
        .env_remove("NIGHTSHIFT_DATABASE_URL")
        .env(
            "RUST_LOG",
            "info,sqlx=warn,nightshift_tools=debug,nightshift_agent=debug",
        )
        .stdout(Stdio::from(std::fs::File::create(&stdout).unwrap()))
        .stderr(Stdio::from(std::fs::File::create(&stderr).unwrap()));
    for (name, value) in s.all() {
        command.env(name, value);
    }
    let mut serve = Proc {
        child: command.spawn().expect("spawn nightshift serve"),
    };
    let http = nightshift_llm::http::build_client(nightshift_llm::HttpTimeouts::default()).unwrap();
    let api = format!("http://127.0.0.1:{port}");
    super::wait_until_serving(&mut serve, &http, &api, &stderr).await;

    // Run 1: commands print every form and cross every cut; the model's own inputs and text
    // carry secrets it was told (as a prompt injection would make it do).
    let mut first = vec![
        call(None, "run_command", json!({"command": PRINT_EVERY_FORM})),
        call(
            None,
            "run_command",
            json!({"command": format!("echo the hook secret is {}", s.hook)}),
        ),
        call(
            None,
            "run_command",
            json!({"command": "printf '%s%s\\n' \"$(head -c 1990 /dev/zero | tr '\\0' c)\" \"$GITHUB_TOKEN\" > long.txt; \
                   printf '%s%s\\n' \"$(head -c 490 /dev/zero | tr '\\0' c)\" \"$GITHUB_TOKEN\" > grep.txt"}),
        ),
    ];
    let key_len = s.provider_key.len();
    for n in [
        170,
        185,
        195,
        199,
        1000 + key_len - 215,
        1000 + key_len - 205,
    ] {
        first.push(call(None, "run_command", json!({"command": at_offset(n)})));
    }
    hostile.script(
        "SWEEP-LEAK",
        vec![
            calls(first),
            calls(vec![
                call(None, "read_file", json!({"path": "long.txt"})),
                call(None, "grep", json!({"pattern": "cccc"})),
            ]),
            text(&format!(
                "Done. The API token is {} and the key, encoded, is {}.",
                s.api_token,
                base64_of(&s.provider_key)
            )),
        ],
    );
    // Run 2: the provider refuses the key and echoes it.
    hostile.script(
        "SWEEP-AUTH",
        vec![Step::HttpError {
            status: 401,
            kind: "authentication_error".into(),
            message: format!("invalid x-api-key: {}", s.provider_key),
            retry_after: None,
        }],
    );
    let mut answers: Vec<(String, String)> = Vec::new();
    let mut runs = Vec::new();
    for prompt in ["SWEEP-LEAK: do the task", "SWEEP-AUTH: do the task"] {
        let resp = http
            .post(format!("{api}/v1/runs"))
            .bearer_auth(&s.api_token)
            .json(&json!({"agent": "leaky", "prompt": prompt, "max_attempts": 1}))
            .send()
            .await
            .unwrap();
        let body = resp.text().await.unwrap();
        let v: Value = serde_json::from_str(&body).unwrap_or_else(|_| panic!("{body}"));
        runs.push(v["run_id"].as_str().expect("a run id").to_string());
        answers.push(("POST /v1/runs".into(), body));
    }
    let started = std::time::Instant::now();
    let mut ended = Vec::new();
    for id in &runs {
        let run = eventually(Duration::from_secs(60), "the run to end", || async {
            let run = try_get_json(&http, &format!("{api}/v1/runs/{id}"), &s.api_token).await?;
            matches!(run["status"].as_str(), Some("succeeded" | "failed")).then_some(run)
        })
        .await;
        ended.push(run);
    }
    eprintln!("both runs ended after {:?}", started.elapsed());
    assert_eq!(ended[0]["status"], "succeeded", "{}", ended[0]);
    assert_eq!(ended[1]["status"], "failed", "{}", ended[1]);
    let error = ended[1]["error"].as_str().unwrap_or_default();
    // The provider client masks its own key (`<redacted>`); the daemon's set would too.
    assert!(
        error.contains("HTTP 401 authentication_error: invalid x-api-key: "),
        "the 401's message is kept: {error}"
    );
    let result = ended[0]["result"].as_str().unwrap_or_default();
    assert!(
        result.contains("The API token is [REDACTED:NIGHTSHIFT_API_TOKEN]")
            && result.contains("encoded, is [REDACTED:FAKE_PROVIDER_KEY]"),
        "{result}"
    );
    eventually(Duration::from_secs(30), "both notices", || async {
        (notices.lock().unwrap().len() >= 2).then_some(())
    })
    .await;
    for path in [
        format!("/v1/runs/{}", runs[0]),
        format!("/v1/runs/{}", runs[1]),
        format!("/v1/runs/{}/events", runs[0]),
        format!("/v1/runs/{}/events", runs[1]),
        "/v1/runs".to_string(),
        "/v1/notifications".to_string(),
    ] {
        let body = http
            .get(format!("{api}{path}"))
            .bearer_auth(&s.api_token)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        answers.push((format!("GET {path}"), body));
    }
    eprintln!("notified and fetched after {:?}", started.elapsed());
    serve.signal("TERM");
    serve.wait_exit(Duration::from_secs(20)).await;

    let mut sweep = Sweep::default();
    sweep.add_daemon_disk(db, &dir.path().join("data")).await;
    sweep.add("serve stdout", std::fs::read(&stdout).unwrap());
    sweep.add("serve stderr", std::fs::read(&stderr).unwrap());
    for (what, body) in answers {
        sweep.add(format!("API answer to {what}"), body);
    }
    for (i, notice) in notices.lock().unwrap().iter().enumerate() {
        sweep.add(format!("notification {i}"), notice.clone());
    }
    for (i, r) in hostile.requests().iter().enumerate() {
        // The key belongs in the provider's auth header, and nowhere else.
        let headers: Vec<String> = r
            .headers
            .iter()
            .filter(|(k, _)| *k != "x-api-key" && *k != "authorization")
            .map(|(k, v)| format!("{k}: {}", String::from_utf8_lossy(v.as_bytes())))
            .collect();
        sweep.add(
            format!("request {i} to the provider"),
            format!("{}\n{}", headers.join("\n"), r.body),
        );
    }
    // The secrets really went through: each was printed and replaced by its marker.
    for (name, _) in s.all() {
        assert!(
            sweep.contains(&format!("[REDACTED:{name}]")),
            "no [REDACTED:{name}] anywhere: the test did not exercise it"
        );
    }
    assert!(sweep.contains("line cut"), "read_file cut the long line");
    assert!(
        sweep.contains("bytes (0 lines) cut"),
        "run_command cut its output"
    );
    sweep.assert_clean(&s.all());
}

fn base64_of(text: &str) -> String {
    nightshift_tools::secret_encodings::forms(text)
        .into_iter()
        .find(|(form, _)| *form == "base64")
        .expect("a long value has a base64 form")
        .1
}
