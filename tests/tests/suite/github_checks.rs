//! Check runs (`[agents.github] check_run`) in a daemon, against the suite's fake GitHub:
//! - a run started for a pull request gets its check run created `in_progress` before the
//!   model is asked anything; the model fills it in with `github_check_run` (annotations
//!   included) after listing the day's merged pull requests with `github_pull_requests`; when
//!   the run succeeds the check run is completed `success` and keeps the model's words;
//! - a run cancelled while still queued (no job ever ran) gets its check run too, completed
//!   `cancelled`, from the run's outbox row;
//! - a run with no pull request makes no check run, and the tool says why;
//! - a check run renamed or removed from the config (a reload) while a run has it open is
//!   completed when the run ends, from the name the run recorded when it opened it.

use std::path::Path;
use std::time::Duration;

use nightshift_agent::RunEvent;
use nightshift_runner::config::Config;
use nightshift_store::RunStatus;
use nightshift_tests::config_text::agent_with;
use nightshift_tests::{TestDb, on_both_backends};
use serde_json::{Value, json};

use crate::crash::{events, text_turn, tool_turn, wait_finished};
use crate::fake_github::{REPO, Shared, fake_github, pull_request};
use crate::github_tools::{InProcess, daemon_config, in_process, started_for};

on_both_backends! {
    a_pull_request_run_keeps_a_check_run_from_start_to_end => check_run_from_start_to_end;
    a_check_run_renamed_or_removed_while_open_is_still_completed => renamed_while_open;
}

const CHECK: &str = "Nightshift review";

fn config(db: &TestDb, dir: &Path, github: &str) -> Config {
    config_keeping(db, dir, github, Some(CHECK))
}

/// The daemon's config with the checker agent keeping the check run `check_run`, or none.
fn config_keeping(db: &TestDb, dir: &Path, github: &str, check_run: Option<&str>) -> Config {
    let keeps = check_run
        .map(|name| format!("[agents.github]\ncheck_run = {}\n", json!(name)))
        .unwrap_or_default();
    let checker = agent_with(
        dir,
        "checker",
        &["github_check_run", "github_pull_requests"],
        json!([
            tool_turn(
                "l1",
                "github_pull_requests",
                json!({"repo": REPO, "state": "merged", "since": "2026-12-02"})
            ),
            tool_turn(
                "k1",
                "github_check_run",
                json!({"title": "2 findings", "summary": "Naming and a missing test.",
                       "annotations": [{"path": "src/lib.rs", "start_line": 1, "end_line": 1,
                                        "annotation_level": "warning",
                                        "message": "retry_uploads has no test"}]})
            ),
            text_turn("reviewed"),
        ]),
        &keeps,
    );
    daemon_config(db, dir, github, &checker)
}

/// The check run of `run_id`, once it is completed.
async fn completed_check(seen: &Shared, run_id: &str) -> Value {
    let wait = async {
        loop {
            let done = seen
                .lock()
                .unwrap()
                .check_runs
                .iter()
                .find(|c| c["external_id"] == json!(run_id) && c["status"] == "completed")
                .cloned();
            if let Some(done) = done {
                return done;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), wait)
        .await
        .expect("the check run is completed")
}

/// The results of the run's tool calls, in order.
pub(crate) async fn tool_results(
    store: &nightshift_store::Store,
    run_id: &str,
) -> Vec<(String, bool)> {
    events(store, run_id)
        .await
        .into_iter()
        .filter_map(|(_, e)| match e {
            RunEvent::ToolResult {
                content, is_error, ..
            } => Some((content, is_error)),
            _ => None,
        })
        .collect()
}

async fn check_run_from_start_to_end(db: &TestDb) {
    let (github, seen) = fake_github().await;
    let dir = tempfile::tempdir().unwrap();
    let config = config(db, dir.path(), &github);
    let InProcess {
        store,
        shutdown,
        stopped,
    } = in_process(&config).await;
    let intake = nightshift_scheduler::Intake::new(store.clone(), ["checker".to_string()]);
    let head = pull_request()["head"]["sha"].as_str().unwrap().to_string();
    let request = |context: Option<Value>, delay: Option<Duration>| {
        let mut req = nightshift_scheduler::RunRequest::new(
            "checker",
            "Review pull request 42.",
            nightshift_store::Trigger::Webhook,
        );
        req.context = context;
        req.start_at = delay.map_or(
            nightshift_scheduler::StartAt::Now,
            nightshift_scheduler::StartAt::After,
        );
        req
    };

    // A run for the pull request: in progress first, the model's words kept, success.
    let run_id = intake
        .submit(request(Some(started_for(&head)), None))
        .await
        .unwrap()
        .run_id;
    let run = tokio::time::timeout(Duration::from_secs(60), wait_finished(&store, &run_id))
        .await
        .expect("the run ends");
    assert_eq!(run.status, RunStatus::Succeeded, "{:?}", run.error);
    let check = completed_check(&seen, &run_id).await;
    assert_eq!(check["name"], CHECK);
    assert_eq!(check["head_sha"], json!(head));
    assert_eq!(check["conclusion"], "success");
    assert_eq!(check["output"]["title"], "2 findings", "{check}");
    assert_eq!(check["output"]["annotations_count"], 1);
    {
        let s = seen.lock().unwrap();
        assert_eq!(
            s.check_runs.len(),
            1,
            "one check run for the run: {:?}",
            s.check_runs
        );
        let first = &s.check_run_writes[0];
        assert_eq!(first["status"], "in_progress", "{first}");
        assert_eq!(first["external_id"], json!(run_id));
        let created = s.requests.iter().position(|r| r == "create check run");
        let searched = s.requests.iter().position(|r| r == "search");
        assert!(
            created.is_some() && created < searched,
            "the check run is started before the model's first call: {:?}",
            s.requests
        );
        assert_eq!(
            s.searches,
            [format!("repo:{REPO} is:pr is:merged merged:>=2026-12-02")]
        );
    }
    let results = tool_results(&store, &run_id).await;
    assert!(
        !results[0].1 && results[0].0.starts_with("2 pull request(s)"),
        "{results:?}"
    );
    assert!(results[0].0.contains("Retry uploads on 503"), "{results:?}");
    assert!(
        !results[1].1 && results[1].0.contains("updated (the daemon completes it"),
        "{results:?}"
    );

    // Cancelled while queued: no job ever runs, the outbox completes its check run.
    let queued = intake
        .submit(request(
            Some(started_for(&head)),
            Some(Duration::from_secs(3600)),
        ))
        .await
        .unwrap()
        .run_id;
    store.cancel_run(&queued).await.unwrap();
    let check = completed_check(&seen, &queued).await;
    assert_eq!(check["conclusion"], "cancelled");
    assert_eq!(check["output"]["title"], "The run was cancelled");
    assert!(
        !seen
            .lock()
            .unwrap()
            .check_run_writes
            .iter()
            .any(|w| w["external_id"] == json!(queued) && w["status"] == "in_progress"),
        "a run that never started was never in progress"
    );

    // No pull request: no check run, and the tool says why.
    let plain = intake.submit(request(None, None)).await.unwrap().run_id;
    let run = tokio::time::timeout(Duration::from_secs(60), wait_finished(&store, &plain))
        .await
        .expect("the run ends");
    assert_eq!(run.status, RunStatus::Succeeded, "{:?}", run.error);
    let results = tool_results(&store, &plain).await;
    assert!(
        results[1].1
            && results[1]
                .0
                .contains("not started by a GitHub pull_request delivery"),
        "{results:?}"
    );
    // The outbox row of the plain run is expanded and its completion finds no pull request.
    let delivered = async {
        loop {
            let list = store
                .notifications(Some(&plain), None, 10)
                .await
                .unwrap_or_default();
            if list
                .iter()
                .any(|n| n.status == nightshift_store::DeliveryStatus::Delivered)
            {
                return list;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let list = tokio::time::timeout(Duration::from_secs(30), delivered)
        .await
        .expect("the plain run's check-run delivery is settled");
    assert_eq!(list[0].url, format!("github-check-run:{CHECK}"));
    assert_eq!(
        seen.lock().unwrap().check_runs.len(),
        2,
        "none for the plain run"
    );
    shutdown.cancel();
    stopped.await.unwrap().unwrap();
}

/// The check runs named `name` of `run_id`, as the fake GitHub holds them.
fn checks_named(seen: &Shared, run_id: &str, name: &str) -> Vec<Value> {
    seen.lock()
        .unwrap()
        .check_runs
        .iter()
        .filter(|c| c["external_id"] == json!(run_id) && c["name"] == json!(name))
        .cloned()
        .collect()
}

/// A run opens the check run CHECK, then the config is changed (renamed, then removed) before
/// the run ends: the notifier of the new config still completes CHECK, from the name the run
/// recorded when it opened it.
async fn renamed_while_open(db: &TestDb) {
    let (github, seen) = fake_github().await;
    let dir = tempfile::tempdir().unwrap();
    let before = config_keeping(db, dir.path(), &github, Some(CHECK));
    // The store as the daemon opens it (migrated; the checker's runs notify).
    let store = db.store().await;
    store.set_notifying_agents(nightshift_runner::notifying_agents(&before.agents));
    let gh = nightshift_runner::github::access(&before)
        .unwrap()
        .expect("[github] is configured");
    let intake = nightshift_scheduler::Intake::new(store.clone(), ["checker".to_string()]);
    let head = pull_request()["head"]["sha"].as_str().unwrap().to_string();
    for now_keeps in [Some("Nightshift review v2"), None] {
        let mut req = nightshift_scheduler::RunRequest::new(
            "checker",
            "Review pull request 42.",
            nightshift_store::Trigger::Webhook,
        );
        req.context = Some(started_for(&head));
        req.start_at = nightshift_scheduler::StartAt::After(Duration::from_secs(3600));
        let run_id = intake.submit(req).await.unwrap().run_id;
        // What a job of the run does before it works.
        let context = started_for(&head);
        nightshift_notify::checks::start(&gh, &store, CHECK, &run_id, Some(&context))
            .await
            .unwrap();
        assert_eq!(
            checks_named(&seen, &run_id, CHECK)[0]["status"],
            "in_progress"
        );
        // The config changes; the run ends.
        let after = config_keeping(db, dir.path(), &github, now_keeps);
        store.cancel_run(&run_id).await.unwrap();
        let notifier =
            nightshift_runner::build_notifier(store.clone(), &after, Default::default()).unwrap();
        let completed = async {
            loop {
                notifier.tick().await.unwrap();
                let found = checks_named(&seen, &run_id, CHECK);
                if found.iter().any(|c| c["status"] == "completed") {
                    return found;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        let found = tokio::time::timeout(Duration::from_secs(30), completed)
            .await
            .expect("the check run the run opened is completed");
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0]["conclusion"], "cancelled", "{now_keeps:?}");
        let urls: Vec<String> = store
            .notifications(Some(&run_id), None, 10)
            .await
            .unwrap()
            .into_iter()
            .map(|n| n.url)
            .collect();
        let mut want = vec![format!("github-check-run:{CHECK}")];
        want.extend(now_keeps.map(|name| format!("github-check-run:{name}")));
        let mut urls_sorted = urls.clone();
        urls_sorted.sort();
        want.sort();
        assert_eq!(
            urls_sorted, want,
            "the configured name and the opened one, once each"
        );
    }
}
