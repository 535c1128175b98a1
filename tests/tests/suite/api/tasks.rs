//! Background tasks over HTTP: a run's tasks and every task listed, filtered by status, and
//! an unknown run's tasks a 404.

use nightshift_store::{NewRun, NewTask, TaskEnd, TaskStatus};
use nightshift_tests::TestDb;
use reqwest::StatusCode;
use serde_json::json;

use super::Api;

pub(super) async fn tasks_over_http(db: &TestDb) {
    let api = Api::start(db).await;
    let run = api
        .store
        .enqueue(&NewRun::new("helper", "x"))
        .await
        .unwrap();
    for id in ["task_aaaaaaaaaaaa", "task_bbbbbbbbbbbb"] {
        api.store
            .start_task(&NewTask {
                id,
                run_id: &run.run_id,
                call_id: id,
                command: "make [REDACTED:TOKEN]",
                owner: "host:1:x",
                deadline_at: api.store.now() + 60_000,
            })
            .await
            .unwrap();
    }
    api.store
        .end_task(
            "task_aaaaaaaaaaaa",
            &TaskEnd {
                status: TaskStatus::Failed,
                exit_code: Some(2),
                detail: "exit code 2",
                output_tail: "error: boom\n",
                output_bytes: 12,
            },
        )
        .await
        .unwrap();

    let (status, body) = api
        .send("GET", &format!("/v1/runs/{}/tasks", run.run_id), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let tasks = body["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 2);
    assert_eq!(tasks[0]["id"], "task_aaaaaaaaaaaa");
    assert_eq!(
        (
            &tasks[0]["status"],
            &tasks[0]["exit_code"],
            &tasks[0]["output_tail"]
        ),
        (&json!("failed"), &json!(2), &json!("error: boom\n"))
    );
    assert_eq!(tasks[1]["status"], "running");
    assert_eq!(tasks[1]["command"], "make [REDACTED:TOKEN]");

    let (status, body) = api.send("GET", "/v1/tasks?status=running", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let ids: Vec<&str> = body["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec!["task_bbbbbbbbbbbb"]);

    let (status, body) = api.send("GET", "/v1/tasks?status=done", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("running, succeeded"),
        "{body}"
    );
    let (status, _) = api.send("GET", "/v1/runs/nope/tasks", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let anonymous = api
        .http
        .get(format!("{}/v1/tasks", api.base))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
}
