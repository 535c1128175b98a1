//! The examples in `ops/examples/`, each run as a user runs it: its real `nightshift.toml`
//! (with its system prompt) copied as it is, with only what a test must change — the test's
//! database and a free API port appended, the hosts of outside services pointed at fakes on
//! loopback — loaded with `Config::load` (and compared with the real file's config, so
//! nothing else differs), then run by a real `nightshift serve` whose environment holds the
//! keys the example names. The model is a fake of the Anthropic Messages API (the example's
//! `[providers.anthropic]` is left as it is; `ANTHROPIC_BASE_URL` points it at the fake) that
//! decides each reply from the conversation it is sent, as a model does.
//!
//! - `nightly-digest`: the schedule fired with `nightshift schedules trigger`; its prompt
//!   carries the date, the agent lists that day's merged pull requests from the suite's fake
//!   GitHub and posts a digest naming both to a fake Slack incoming webhook, whose URL (the
//!   credential) the daemon fills in from `{{secret:SLACK_WEBHOOK_URL}}` — a URL that is in no
//!   stored event, run field or model request.
//! - `long-task`: a background command started with a wakeup in the same reply; the run is
//!   seen `waiting`, wakes in the same conversation, reads the command's output with
//!   `task_output`, stops it with `task_stop` and succeeds with the last line it read.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use nightshift_agent::RunEvent;
use nightshift_runner::config::{Config, Overrides};
use nightshift_store::{JobKind, RunStatus, TaskStatus, Trigger};
use nightshift_tests::config_text::q;
use nightshift_tests::process::Serve;
use nightshift_tests::{TestDb, eventually, on_both_backends};
use serde_json::{Value, json};

use crate::crash::{call_result, events, nightshift, sigterm, wait_finished};
use crate::fake_github::{REPO, TOKEN, fake_github};
use crate::hostile::script::{Block, Step, Wire, call, error, render, reply, text};
use crate::hostile::server::Recorded;

on_both_backends! {
    the_nightly_digest_example_posts_the_days_merged_pull_requests_to_slack => nightly_digest;
    the_long_task_example_sleeps_checks_and_stops_its_background_command => long_task;
}

/// The key the fake model expects (`x-api-key`), given to `serve` as `ANTHROPIC_API_KEY`.
const MODEL_KEY: &str = "sk-ant-examples-suite-0123456789";
/// The path of the fake Slack incoming webhook: with its host, the URL given to `serve` as
/// `SLACK_WEBHOOK_URL` (an incoming webhook's URL is its credential).
const HOOK_PATH: &str = "/services/T0EXAMPLE/B0DIGEST/x7Qp2Lm9Zr4Kd8Wv1Ys6Tn3B";
/// The part of [`HOOK_PATH`] that is the secret.
const HOOK_SECRET_PART: &str = "x7Qp2Lm9Zr4Kd8Wv1Ys6Tn3B";

/// `ops/examples/<name>`.
fn example_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../ops/examples")
        .join(name)
}

/// `text` with the one occurrence of `from` replaced by `to` (a test's change must hit exactly
/// the line it means).
fn change(text: &str, from: &str, to: &str) -> String {
    assert_eq!(
        text.matches(from).count(),
        1,
        "the example should contain {from:?} exactly once"
    );
    text.replacen(from, to, 1)
}

/// Copies the example's files (its config and prompts, not a database or data directory a
/// local run left) into `dest`, writes its `nightshift.toml` changed by `edit` with the test's
/// database and a free API port appended, and returns (the real file's config, the copy's,
/// the copy's path). Both are loaded with `Config::load` as `serve` loads them.
fn example_config(
    name: &str,
    db: &TestDb,
    dest: &Path,
    edit: impl FnOnce(String) -> String,
) -> (Config, Config, PathBuf) {
    let src = example_dir(name);
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let file = path.file_name().unwrap().to_str().unwrap().to_string();
        if path.is_file() && (file.ends_with(".toml") || file.ends_with(".md")) {
            std::fs::copy(&path, dest.join(&file)).unwrap();
        }
    }
    let real = src.join("nightshift.toml");
    let original = Config::load(Some(&real), &Overrides::default())
        .unwrap_or_else(|e| panic!("{} loads: {e:#}", real.display()));
    let schema = db
        .config
        .schema
        .as_deref()
        .map(|s| format!("schema = {}\n", q(s)))
        .unwrap_or_default();
    let text = edit(std::fs::read_to_string(&real).unwrap())
        + &format!(
            "\n# Added by the test: its database, and the API on a free port.\n\
             [database]\nurl = {}\n{schema}\n[server]\naddress = \"127.0.0.1:0\"\n",
            q(&db.config.url)
        );
    let cfg = dest.join("nightshift.toml");
    std::fs::write(&cfg, text).unwrap();
    let copy = Config::load(Some(&cfg), &Overrides::default())
        .unwrap_or_else(|e| panic!("the test's copy loads: {e:#}"));
    assert_eq!(copy.database.schema, db.config.schema);
    (original, copy, cfg)
}

/// `original` with what [`example_config`] always changes set as in `copy`: where the file
/// is (so the data directory is next to the copy), the database and the API address.
fn moved(original: &Config, copy: &Config) -> Config {
    let mut expected = original.clone();
    expected.base_dir = copy.base_dir.clone();
    expected.runtime.data_dir = copy.base_dir.join("nightshift-data");
    assert_eq!(
        original.runtime.data_dir,
        original.base_dir.join("nightshift-data")
    );
    expected.database = copy.database.clone();
    expected.server.address = "127.0.0.1:0".into();
    expected
}

/// `nightshift --config cfg …` with the example's variables (and the fake model's address).
fn with_env(mut cmd: Command, env: &[(&str, String)]) -> Command {
    for (name, value) in env {
        cmd.env(name, value);
    }
    cmd
}

fn cli(cfg: &Path, env: &[(&str, String)], args: &[&str]) -> String {
    let out = with_env(nightshift(cfg), env)
        .args(args)
        .output()
        .expect("run nightshift");
    assert!(
        out.status.success(),
        "nightshift {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

// ---- a fake Anthropic Messages API that answers from the conversation ----------------------

type Brain = dyn Fn(&Recorded) -> Step + Send + Sync;

#[derive(Clone)]
struct ModelState {
    brain: Arc<Brain>,
    requests: Arc<Mutex<Vec<Recorded>>>,
}

/// A model on loopback: `POST /v1/messages` (JSON or SSE, as asked) answered with what
/// `brain` makes of the request; a request without [`MODEL_KEY`] gets the API's 401.
struct FakeModel {
    base_url: String,
    requests: Arc<Mutex<Vec<Recorded>>>,
    task: tokio::task::AbortHandle,
}

impl Drop for FakeModel {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeModel {
    async fn start(brain: impl Fn(&Recorded) -> Step + Send + Sync + 'static) -> FakeModel {
        let state = ModelState {
            brain: Arc::new(brain),
            requests: Arc::default(),
        };
        let requests = state.requests.clone();
        let app = Router::new()
            .route("/v1/messages", post(messages))
            .with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        FakeModel {
            base_url,
            requests,
            task: task.abort_handle(),
        }
    }

    fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

async fn messages(State(state): State<ModelState>, headers: HeaderMap, body: String) -> Response {
    let body: Value = serde_json::from_str(&body).expect("the request is JSON");
    let key = headers.get("x-api-key").and_then(|v| v.to_str().ok());
    if key != Some(MODEL_KEY) {
        return error(
            Wire::Anthropic,
            401,
            "authentication_error",
            "invalid x-api-key",
            None,
        );
    }
    let request = Recorded {
        wire: Wire::Anthropic,
        headers,
        body,
        conversation: None,
        invalid: None,
    };
    let step = (state.brain)(&request);
    let stream = request.body["stream"] == true;
    let model = request.body["model"]
        .as_str()
        .unwrap_or("model")
        .to_string();
    let n = {
        let mut requests = state.requests.lock().unwrap();
        requests.push(request);
        requests.len()
    };
    render(Wire::Anthropic, &step, &model, stream, n)
}

/// How many replies the model has given in this conversation (its turn number).
fn turn(req: &Recorded) -> usize {
    req.body["messages"]
        .as_array()
        .map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count())
}

/// The text of the conversation's first user message (the run's prompt).
fn prompt(req: &Recorded) -> String {
    let first = &req.body["messages"][0]["content"];
    match first {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks.iter().filter_map(|b| b["text"].as_str()).collect(),
        _ => String::new(),
    }
}

/// The result of the tool call `id` in the conversation.
fn result_of(req: &Recorded, id: &str) -> (String, bool) {
    req.tool_results()
        .into_iter()
        .find(|(call, _, _)| call == id)
        .map(|(_, content, is_error)| (content, is_error))
        .unwrap_or_else(|| panic!("no result for {id} in the conversation"))
}

/// The first `YYYY-MM-DD` in `text`.
fn first_date(text: &str) -> Option<&str> {
    let b = text.as_bytes();
    (0..b.len().saturating_sub(9)).find_map(|i| {
        let s = &b[i..i + 10];
        let digits = |r: std::ops::Range<usize>| s[r].iter().all(u8::is_ascii_digit);
        (digits(0..4) && s[4] == b'-' && digits(5..7) && s[7] == b'-' && digits(8..10))
            .then(|| &text[i..i + 10])
    })
}

/// The tool names the request offers, sorted.
fn offered_tools(req: &Recorded) -> Vec<String> {
    let mut names: Vec<String> = req.body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str().map(str::to_string))
        .collect();
    names.sort();
    names
}

fn sorted(names: &[String]) -> Vec<String> {
    let mut names = names.to_vec();
    names.sort();
    names
}

// ---- nightly-digest ------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct SlackPost {
    content_type: String,
    idempotency_key: Option<String>,
    body: String,
}

/// A Slack incoming webhook on loopback at [`HOOK_PATH`]: `200 ok` (text) for a JSON body
/// with `text`, `400 invalid_payload` otherwise, as Slack answers.
async fn fake_slack() -> (String, Arc<Mutex<Vec<SlackPost>>>) {
    let posts: Arc<Mutex<Vec<SlackPost>>> = Arc::default();
    async fn incoming(
        State(posts): State<Arc<Mutex<Vec<SlackPost>>>>,
        headers: HeaderMap,
        body: String,
    ) -> Response {
        let header = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        posts.lock().unwrap().push(SlackPost {
            content_type: header("content-type").unwrap_or_default(),
            idempotency_key: header("idempotency-key"),
            body: body.clone(),
        });
        let message: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        if !message["text"].is_string() {
            return (axum::http::StatusCode::BAD_REQUEST, "invalid_payload").into_response();
        }
        "ok".into_response()
    }
    let app = Router::new()
        .route(HOOK_PATH, post(incoming))
        .with_state(posts.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let host = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (host, posts)
}

/// A digest model: lists the pull requests merged on the prompt's date, posts one bullet per
/// pull request it was given to the webhook whose URL is the secret's placeholder, then says
/// whether Slack took it.
fn digest_brain() -> impl Fn(&Recorded) -> Step + Send + Sync {
    move |req| match turn(req) {
        0 => {
            let prompt = prompt(req);
            let date = first_date(&prompt).expect("the prompt gives the date");
            reply(
                vec![call(
                    Some("toolu_list"),
                    "github_pull_requests",
                    json!({"repo": REPO, "state": "merged", "since": date}),
                )],
                "tool_use",
            )
        }
        1 => {
            let (listing, failed) = result_of(req, "toolu_list");
            assert!(!failed, "{listing}");
            let (_, list) = listing.split_once('\n').expect("a heading, then the list");
            let prs: Vec<Value> = serde_json::from_str(list).expect("the list is JSON");
            let prompt = prompt(req);
            let date = first_date(&prompt).unwrap();
            let mut digest = format!("*Merged in {REPO} on {date}* ({} pull requests)", prs.len());
            for pr in &prs {
                digest.push_str(&format!(
                    "\n• {} (#{}, @{}) {}",
                    pr["title"].as_str().unwrap(),
                    pr["number"],
                    pr["author"].as_str().unwrap(),
                    pr["url"].as_str().unwrap()
                ));
            }
            let body = json!({"text": digest}).to_string();
            reply(
                vec![
                    Block::Text("Posting the digest.".into()),
                    call(
                        Some("toolu_post"),
                        "http_request",
                        json!({
                            "method": "POST",
                            "url": "{{secret:SLACK_WEBHOOK_URL}}",
                            "headers": {"Content-Type": "application/json; charset=utf-8"},
                            "body": body
                        }),
                    ),
                ],
                "tool_use",
            )
        }
        _ => {
            let (answer, failed) = result_of(req, "toolu_post");
            if !failed && answer.trim_end().ends_with("ok") {
                text("Posted the digest: 2 pull requests.")
            } else {
                text(&format!("The digest was not posted: {answer}"))
            }
        }
    }
}

async fn nightly_digest(db: &TestDb) {
    let (github, seen) = fake_github().await;
    let (slack, posts) = fake_slack().await;
    let model = FakeModel::start(digest_brain()).await;
    let dir = tempfile::tempdir().unwrap();
    let (original, copy, cfg) = example_config("nightly-digest", db, dir.path(), |text| {
        // Slack's host is the fake's, for the allowlist and the webhook URL's binding alike;
        // the GitHub API is the suite's fake.
        let text = change(
            &text,
            "http_allowlist = [\"hooks.slack.com\"]",
            &format!("http_allowlist = [{}]", q(&slack)),
        );
        let text = change(
            &text,
            "secrets = [{ name = \"SLACK_WEBHOOK_URL\", hosts = [\"hooks.slack.com\"] }]",
            &format!(
                "secrets = [{{ name = \"SLACK_WEBHOOK_URL\", hosts = [{}] }}]",
                q(&slack)
            ),
        );
        change(
            &text,
            "\n[github]\n",
            &format!("\n[github]\nbase_url = {}\n", q(&github)),
        )
    });

    // What the example is, and that the test changed nothing else.
    let agent = &original.agents[0];
    assert_eq!((original.agents.len(), agent.name.as_str()), (1, "digest"));
    assert_eq!(
        agent.tools,
        [
            "github_pull_requests",
            "github_pull_request",
            "http_request"
        ]
    );
    let provider = &original.providers[&agent.provider];
    assert_eq!(provider.kind.as_str(), "anthropic");
    assert_eq!(provider.api_key_env.as_deref(), Some("ANTHROPIC_API_KEY"));
    assert_eq!(
        provider.base_url, None,
        "the real API, or ANTHROPIC_BASE_URL"
    );
    let schedule = &original.schedules[0];
    assert_eq!(
        (schedule.name.as_str(), schedule.agent.as_str()),
        ("nightly-digest", "digest")
    );
    assert!(
        schedule.prompt.contains("{{ date }}"),
        "{}",
        schedule.prompt
    );
    assert_eq!(original.runtime.http_allowlist, ["hooks.slack.com"]);
    assert_eq!(
        original.runtime.secrets,
        [nightshift_tools::SecretSpec::bound(
            "SLACK_WEBHOOK_URL",
            ["hooks.slack.com"]
        )]
    );
    assert_eq!(original.github.token_env.as_deref(), Some("GITHUB_TOKEN"));
    let mut expected = moved(&original, &copy);
    expected.runtime.http_allowlist = vec![slack.clone()];
    expected.runtime.secrets = vec![nightshift_tools::SecretSpec::bound(
        "SLACK_WEBHOOK_URL",
        [slack.as_str()],
    )];
    expected.github.base_url = github.clone();
    assert_eq!(
        copy, expected,
        "only the database, address and hosts differ"
    );

    let env = [
        ("ANTHROPIC_API_KEY", MODEL_KEY.to_string()),
        ("ANTHROPIC_BASE_URL", model.base_url.clone()),
        ("GITHUB_TOKEN", TOKEN.to_string()),
        ("SLACK_WEBHOOK_URL", format!("http://{slack}{HOOK_PATH}")),
    ];
    let store = db.store().await;
    let daemon = Serve::new(&cfg).envs(env.clone()).spawn();
    // The daemon writes the file's schedules at start; then fire it as a user would.
    eventually(
        Duration::from_secs(30),
        "the config's schedule in the store",
        || async { store.schedule("nightly-digest").await.unwrap() },
    )
    .await;
    let fired = cli(&cfg, &env, &["schedules", "trigger", "nightly-digest"]);
    let (run_id, outcome) = fired.trim().split_once('\t').expect("run id, then outcome");
    assert_eq!(outcome, "(enqueued)", "{fired}");
    let run = wait_finished(&store, run_id).await;
    assert_eq!(run.status, RunStatus::Succeeded, "{:?}", run.error);
    assert_eq!(run.trigger_kind, Trigger::Schedule);
    assert_eq!(
        run.result.as_deref(),
        Some("Posted the digest: 2 pull requests.")
    );

    // The prompt carried the fire's date (today in Berlin: within a day of UTC's).
    let date = first_date(&run.input)
        .unwrap_or_else(|| panic!("a date in the prompt: {}", run.input))
        .to_string();
    let [y, m, d] = [0..4, 5..7, 8..10].map(|r| date[r].parse::<u32>().unwrap());
    let fired_on = chrono::NaiveDate::from_ymd_opt(y as i32, m, d).unwrap();
    let today = chrono::Utc::now().date_naive();
    assert!(
        (fired_on - today).num_days().abs() <= 1,
        "{date} is not today"
    );
    assert!(run.input.contains("octo-org/hello-world"), "{}", run.input);
    // GitHub was searched for exactly that day's merged pull requests of the repository.
    assert_eq!(
        seen.lock().unwrap().searches,
        [format!("repo:{REPO} is:pr is:merged merged:>={date}")]
    );

    // Slack's webhook (its URL filled in by the daemon) got one digest naming both.
    let posts = posts.lock().unwrap().clone();
    assert_eq!(posts.len(), 1, "{posts:?}");
    let post = &posts[0];
    assert_eq!(post.content_type, "application/json; charset=utf-8");
    assert!(
        post.idempotency_key
            .as_deref()
            .is_some_and(|k| k.starts_with(run_id)),
        "{post:?}"
    );
    let message: Value = serde_json::from_str(&post.body).unwrap();
    let digest = message["text"].as_str().unwrap();
    for title in ["Retry uploads on 503", "Document the upload limits"] {
        assert!(digest.contains(title), "{digest}");
    }
    assert!(
        digest.starts_with(&format!("*Merged in {REPO} on {date}*")),
        "{digest}"
    );

    // The model got the example's system prompt and tools, with the example's key; it saw the
    // placeholder, never the token.
    let requests = model.requests();
    assert_eq!(requests.len(), 3, "three model turns");
    let system = std::fs::read_to_string(example_dir("nightly-digest").join("system.md")).unwrap();
    let first_line = system.lines().next().unwrap();
    for req in &requests {
        assert!(
            req.body["system"].to_string().contains(first_line),
            "the system prompt is the example's system.md: {}",
            req.body["system"]
        );
        assert_eq!(offered_tools(req), sorted(&agent.tools));
        assert!(!req.body.to_string().contains(HOOK_SECRET_PART));
        assert!(!req.body.to_string().contains(TOKEN));
    }
    let log = events(&store, run_id).await;
    assert!(
        log.iter().any(|(_, e)| matches!(e,
            RunEvent::ToolStarted { name, input, .. }
                if name == "http_request"
                    && input.to_string().contains("{{secret:SLACK_WEBHOOK_URL}}"))),
        "the stored call holds the placeholder"
    );
    // Neither the webhook URL nor GitHub's token is in any stored byte of the run.
    for (event, _) in &log {
        assert!(
            !event.payload.contains(HOOK_SECRET_PART),
            "{}",
            event.payload
        );
        assert!(!event.payload.contains(TOKEN), "{}", event.payload);
    }
    let stored = format!("{:?}", store.run(run_id).await.unwrap());
    assert!(!stored.contains(HOOK_SECRET_PART) && !stored.contains(TOKEN));
    sigterm(daemon).await;
}

// ---- long-task -----------------------------------------------------------------------------

/// The long command: a status line every 0.05 s, until it is stopped. (Fast enough that the
/// newest output `task_output` cannot show yet — what the secret redactor holds back in case
/// a secret straddles the next write, a few hundred bytes — leaves ticks to read after 2 s.)
const TICKER: &str =
    "i=0; while :; do i=$((i+1)); echo \"tick $i: the service answered 200 OK\"; sleep 0.05; done";

/// The background task id in `run_command`'s answer.
fn task_id(answer: &str) -> String {
    answer
        .strip_prefix("started background task ")
        .and_then(|rest| rest.split(';').next())
        .unwrap_or_else(|| panic!("no task id in {answer:?}"))
        .to_string()
}

/// A model that starts [`TICKER`] in the background and sleeps 2 s in the same reply; woken,
/// reads the task's output; then stops it; then reports the last whole tick line it read.
fn long_task_brain(req: &Recorded) -> Step {
    match turn(req) {
        0 => reply(
            vec![
                Block::Text("Starting the ticker; I will check on it shortly.".into()),
                call(
                    Some("toolu_start"),
                    "run_command",
                    json!({"command": TICKER, "background": true, "timeout_seconds": 300}),
                ),
                call(
                    Some("toolu_sleep"),
                    "schedule_wakeup",
                    json!({"delay_seconds": 2, "reason": "check on the ticker"}),
                ),
            ],
            "tool_use",
        ),
        1 => {
            let (started, failed) = result_of(req, "toolu_start");
            assert!(!failed, "{started}");
            reply(
                vec![call(
                    Some("toolu_check"),
                    "task_output",
                    json!({"task_id": task_id(&started)}),
                )],
                "tool_use",
            )
        }
        2 => {
            let (started, _) = result_of(req, "toolu_start");
            reply(
                vec![call(
                    Some("toolu_stop"),
                    "task_stop",
                    json!({"task_id": task_id(&started)}),
                )],
                "tool_use",
            )
        }
        _ => {
            let (output, _) = result_of(req, "toolu_check");
            let last = output
                .lines()
                .rfind(|l| l.starts_with("tick ") && l.ends_with(" 200 OK"))
                .unwrap_or("no tick");
            text(&format!("Stopped the ticker; the last line I read: {last}"))
        }
    }
}

async fn long_task(db: &TestDb) {
    let model = FakeModel::start(long_task_brain).await;
    let dir = tempfile::tempdir().unwrap();
    // The example sleeps at least 30 s; the test's model sleeps 2 s.
    let (original, copy, cfg) = example_config("long-task", db, dir.path(), |text| {
        change(&text, "min_delay_seconds = 30 ", "min_delay_seconds = 1 ")
    });
    let agent = &original.agents[0];
    assert_eq!(
        (original.agents.len(), agent.name.as_str()),
        (1, "long-task")
    );
    for tool in ["run_command", "task_output", "task_stop", "schedule_wakeup"] {
        assert!(agent.tools.iter().any(|t| t == tool), "{tool}");
    }
    let provider = &original.providers[&agent.provider];
    assert_eq!(provider.kind.as_str(), "anthropic");
    assert_eq!(provider.base_url, None);
    assert_eq!(agent.wakeups.min_delay_seconds, 30);
    let mut expected = moved(&original, &copy);
    expected.agents[0].wakeups.min_delay_seconds = 1;
    assert_eq!(
        copy, expected,
        "only the database, address and wakeup floor differ"
    );

    let env = [
        ("ANTHROPIC_API_KEY", MODEL_KEY.to_string()),
        ("ANTHROPIC_BASE_URL", model.base_url.clone()),
    ];
    let store = db.store().await;
    let daemon = Serve::new(&cfg).envs(env.clone()).spawn();
    let out = cli(
        &cfg,
        &env,
        &[
            "run",
            "long-task",
            "Run the ticker for a moment, check on it, then stop it and tell me the last tick.",
        ],
    );
    let run_id = out.split('\t').next().unwrap().trim().to_string();

    // It sleeps, holding no worker, while the command runs.
    eventually(Duration::from_secs(30), "the run to wait", || async {
        let run = store.run(&run_id).await.unwrap()?;
        assert!(!run.status.is_terminal(), "{:?}", run.error);
        (run.status == RunStatus::Waiting).then_some(())
    })
    .await;
    let running = store.tasks_of_run(&run_id).await.unwrap();
    assert_eq!(running.len(), 1);
    assert_eq!(running[0].command, TICKER);

    let run = wait_finished(&store, &run_id).await;
    assert_eq!(run.status, RunStatus::Succeeded, "{:?}", run.error);
    let result = run.result.clone().unwrap_or_default();
    let log = events(&store, &run_id).await;
    assert!(
        result.starts_with("Stopped the ticker; the last line I read: tick "),
        "{result}; the run's events: {:#?}; the model's last request: {:#}",
        log.iter().map(|(_, e)| e).collect::<Vec<_>>(),
        model
            .requests()
            .last()
            .map_or(Value::Null, |r| r.body["messages"].clone())
    );

    // The wakeup: scheduled, then a resume job woke the run in the same conversation.
    assert!(
        log.iter()
            .any(|(_, e)| matches!(e, RunEvent::WakeupScheduled { .. })),
        "{:?}",
        crate::crash::kinds(&log)
    );
    let jobs = store.jobs_of_run(&run_id).await.unwrap();
    assert!(jobs.iter().any(|j| j.kind == JobKind::Resume), "{jobs:?}");
    let requests = model.requests();
    assert_eq!(requests.len(), 4, "four model turns");
    assert!(
        requests[1].last_user_text().contains("[Wakeup]"),
        "woken with a reminder: {}",
        requests[1].last_user_text()
    );
    // The output was read while the task ran, then the task was stopped.
    let (output, failed) = call_result(&log, "toolu_check");
    assert!(
        !failed
            && output.contains("running;")
            && output.contains("\ntick 1: the service answered 200 OK\n"),
        "{output}"
    );
    let (stopped, failed) = call_result(&log, "toolu_stop");
    assert!(!failed, "{stopped}");
    let task = store.tasks_of_run(&run_id).await.unwrap().remove(0);
    assert_eq!(task.status, TaskStatus::Stopped, "{task:?}");
    let (_, last) = result.split_once("the last line I read: ").unwrap();
    assert!(
        output.contains(&format!("\n{last}\n")),
        "the last tick came from task_output"
    );
    let logged = std::fs::read_to_string(
        copy.runtime
            .data_dir
            .join("tasks")
            .join(format!("{}.log", task.id)),
    )
    .unwrap();
    assert!(
        logged.starts_with("tick 1: the service answered 200 OK\ntick 2: "),
        "{logged}"
    );
    sigterm(daemon).await;
}
