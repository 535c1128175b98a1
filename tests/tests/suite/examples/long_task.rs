//! `long-task`: a background command started with a wakeup in the same reply; the run waits,
//! wakes in the same conversation, reads the command's output with `task_output`, stops it
//! with `task_stop` and succeeds with the last line it read.

use std::time::Duration;

use nightshift_agent::RunEvent;
use nightshift_store::{JobKind, RunStatus, TaskStatus};
use nightshift_tests::process::Serve;
use nightshift_tests::{TestDb, eventually};
use serde_json::{Value, json};

use super::model::{FakeModel, result_of, turn};
use super::{MODEL_KEY, change, cli, example_config, moved};
use crate::crash::{call_result, events, sigterm, wait_finished};
use crate::hostile::script::{Block, Step, call, reply, text};
use crate::hostile::server::Recorded;

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

pub(super) async fn long_task(db: &TestDb) {
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
