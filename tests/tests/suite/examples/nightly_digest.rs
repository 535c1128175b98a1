//! `nightly-digest`: the schedule fired with `nightshift schedules trigger` lists the day's
//! merged pull requests from the fake GitHub and posts a digest naming both to a fake Slack
//! incoming webhook, whose URL (the credential) is in no stored event, run field or model
//! request.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::IntoResponse;
use axum::response::Response;
use axum::routing::post;
use nightshift_agent::RunEvent;
use nightshift_store::{RunStatus, Trigger};
use nightshift_tests::config_text::q;
use nightshift_tests::process::Serve;
use nightshift_tests::{TestDb, eventually};
use serde_json::{Value, json};

use super::model::{FakeModel, offered_tools, prompt, result_of, sorted, turn};
use super::{MODEL_KEY, change, cli, example_config, example_dir, moved};
use crate::crash::{events, sigterm, wait_finished};
use crate::fake_github::{REPO, TOKEN, fake_github};
use crate::hostile::script::{Block, Step, call, reply, text};
use crate::hostile::server::Recorded;

/// The path of the fake Slack incoming webhook: with its host, the URL given to `serve` as
/// `SLACK_WEBHOOK_URL` (an incoming webhook's URL is its credential).
const HOOK_PATH: &str = "/services/T0EXAMPLE/B0DIGEST/x7Qp2Lm9Zr4Kd8Wv1Ys6Tn3B";
/// The part of [`HOOK_PATH`] that is the secret.
const HOOK_SECRET_PART: &str = "x7Qp2Lm9Zr4Kd8Wv1Ys6Tn3B";

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

pub(super) async fn nightly_digest(db: &TestDb) {
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
