//! Runs over HTTP: enqueued (one at a time and in a batch answered per run), deduped by their
//! idempotency key, listed, read with their events, and cancelled.

use nightshift_store::{NewRun, RunStatus};
use nightshift_tests::TestDb;
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::Api;

pub(super) async fn runs_lifecycle_over_http(db: &TestDb) {
    let api = Api::start(db).await;
    let body = json!({"agent": "helper", "prompt": "review PR 7", "idempotency_key": "pr-7",
                      "priority": 5, "lane": "interactive"});
    let (status, created) = api.send("POST", "/v1/runs", Some(body.clone())).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{created}");
    assert_eq!(created["duplicate"], false);
    let run_id = created["run_id"].as_str().unwrap().to_string();
    let (status, again) = api.send("POST", "/v1/runs", Some(body)).await;
    assert_eq!(
        (status, &again["run_id"], &again["duplicate"]),
        (StatusCode::OK, &json!(run_id), &json!(true))
    );

    let (status, run) = api.send("GET", &format!("/v1/runs/{run_id}"), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (run["status"].as_str(), run["agent"].as_str()),
        (Some("queued"), Some("helper"))
    );
    assert_eq!(run["input"], "review PR 7");
    let jobs = api.store.jobs_of_run(&run_id).await.unwrap();
    assert_eq!(
        (jobs[0].priority, jobs[0].lane.as_str()),
        (5, "interactive")
    );

    let other = api
        .store
        .enqueue(&NewRun::new("reviewer", "later"))
        .await
        .unwrap();
    let (_, list) = api
        .send("GET", "/v1/runs?status=queued&limit=10", None)
        .await;
    let ids: Vec<&str> = list["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec![other.run_id.as_str(), run_id.as_str()]);

    let lease = api
        .store
        .claim("w", None, 1, std::time::Duration::from_secs(30))
        .await
        .unwrap()
        .remove(0);
    lease
        .append_event(
            "user_message",
            r#"{"type":"user_message","message":{"role":"user","content":[]}}"#,
        )
        .await
        .unwrap();
    let (_, events) = api
        .send(
            "GET",
            &format!("/v1/runs/{}/events", lease.job().run_id),
            None,
        )
        .await;
    assert_eq!(events["events"][0]["seq"], 1);
    assert_eq!(
        events["events"][0]["payload"]["type"], "user_message",
        "payload as JSON"
    );
    let (_, none_after) = api
        .send(
            "GET",
            &format!("/v1/runs/{}/events?after=1", lease.job().run_id),
            None,
        )
        .await;
    assert_eq!(none_after["events"], json!([]));

    let running = lease.job().run_id.clone();
    let queued = if running == run_id {
        other.run_id.clone()
    } else {
        run_id.clone()
    };
    let (status, c) = api
        .send("POST", &format!("/v1/runs/{queued}/cancel"), None)
        .await;
    assert_eq!(
        (status, c["status"].as_str()),
        (StatusCode::OK, Some("cancelled"))
    );
    let (status, c) = api
        .send("POST", &format!("/v1/runs/{running}/cancel"), None)
        .await;
    assert_eq!(
        (status, c["status"].as_str()),
        (StatusCode::ACCEPTED, Some("cancel_requested"))
    );
    let (status, c) = api
        .send("POST", &format!("/v1/runs/{queued}/cancel"), None)
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(
        c["error"]
            .as_str()
            .unwrap()
            .contains("already finished as cancelled")
    );
    assert_eq!(
        api.store.run(&queued).await.unwrap().unwrap().status,
        RunStatus::Cancelled
    );
}

pub(super) async fn batch_over_http(db: &TestDb) {
    let api = Api::start(db).await;
    let (status, first) = api
        .send(
            "POST",
            "/v1/runs",
            Some(json!({"agent": "helper", "prompt": "earlier", "idempotency_key": "k1"})),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let body = json!({"runs": [
        {"agent": "helper", "prompt": "one", "priority": 5, "lane": "bulk"},
        {"agent": "helper", "prompt": "again", "idempotency_key": "k1"},
        {"agent": "nobody", "prompt": "unknown agent"},
        {"agent": "helper", "prompt": "bad", "priority": "high"},
        {"agent": "reviewer", "prompt": "keyed", "concurrency_key": "pr-1"},
        {"agent": "reviewer", "prompt": "skipped", "concurrency_key": "pr-1", "concurrency_policy": "skip"},
        {"agent": "helper", "prompt": ""},
        {"agent": "helper", "prompt": "later", "delay_seconds": 3600}
    ]});
    let (status, answer) = api.send("POST", "/v1/runs:batch", Some(body)).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let runs = answer["runs"].as_array().unwrap();
    let statuses: Vec<&str> = runs.iter().map(|r| r["status"].as_str().unwrap()).collect();
    assert_eq!(
        statuses,
        [
            "created",
            "duplicate",
            "refused",
            "refused",
            "created",
            "skipped",
            "refused",
            "created"
        ]
    );
    for (i, r) in runs.iter().enumerate() {
        assert_eq!(r["index"], i);
    }
    assert_eq!(runs[1]["run_id"], first["run_id"]);
    assert_eq!(runs[5]["run_id"], runs[4]["run_id"], "the key's holder");
    let reason = |i: usize| runs[i]["error"].as_str().unwrap().to_string();
    assert!(
        reason(2).contains("runs[2]") && reason(2).contains("nobody"),
        "{}",
        reason(2)
    );
    assert!(reason(3).contains("priority"), "{}", reason(3));
    assert!(reason(6).contains("prompt"), "{}", reason(6));
    assert!(reason(6).contains("not enqueued"));
    assert_eq!(
        (answer["created"].clone(), answer["refused"].clone()),
        (json!(3), json!(3))
    );
    let one = api
        .store
        .run(runs[0]["run_id"].as_str().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(one.input, "one");
    let job = api
        .store
        .job(runs[0]["job_id"].as_i64().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((job.lane.as_str(), job.priority), ("bulk", 5));
    let later = api
        .store
        .job(runs[7]["job_id"].as_i64().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert!(
        later.run_at >= api.store.now() + 3_500_000,
        "delay_seconds applies per item"
    );
    let total = api.store.list_runs(None, 100).await.unwrap().len();
    assert_eq!(
        total, 4,
        "the earlier run and three new ones; refused items left nothing"
    );
    // Malformed as a whole, or over the limit: refused, nothing enqueued.
    let (status, e) = api
        .send("POST", "/v1/runs:batch", Some(json!([{"agent": "helper"}])))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{e}");
    let many: Vec<Value> = (0..1001)
        .map(|i| json!({"agent": "helper", "prompt": format!("p{i}")}))
        .collect();
    let (status, e) = api
        .send("POST", "/v1/runs:batch", Some(json!({"runs": many})))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        e["error"].as_str().unwrap().contains("max_batch_runs"),
        "{e}"
    );
    assert_eq!(api.store.list_runs(None, 2000).await.unwrap().len(), 4);
}
