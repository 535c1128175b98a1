//! Concurrency policies and sleeping runs over HTTP: a newer run of a key supersedes the older
//! one and unknown policies are refused; a sleeping run is listed with its wakeup and woken
//! early (others cannot be); bad approval decisions are explained.

use nightshift_store::{ResumeReason, RunStatus};
use nightshift_tests::TestDb;
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::Api;

pub(super) async fn concurrency_and_wakeups_over_http(db: &TestDb) {
    let api = Api::start(db).await;
    let run = |prompt: &str, policy: &str| {
        json!({"agent": "reviewer", "prompt": prompt, "concurrency_key": "pr:1",
               "concurrency_policy": policy})
    };
    let (status, first) = api.send("POST", "/v1/runs", Some(run("a", "skip"))).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (status, skipped) = api.send("POST", "/v1/runs", Some(run("b", "skip"))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(skipped["skipped"], json!(true));
    assert_eq!(skipped["run_id"], first["run_id"]);
    let (status, newer) = api
        .send("POST", "/v1/runs", Some(run("c", "supersede")))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(newer["superseded"], json!([first["run_id"]]));
    let first_id = first["run_id"].as_str().unwrap();
    assert_eq!(
        api.store.run(first_id).await.unwrap().unwrap().status,
        RunStatus::Superseded
    );
    // Bad policies are explained and make no run.
    let before = api.store.list_runs(None, 100).await.unwrap().len();
    for (body, expect) in [
        (
            run("d", "later"),
            "concurrency_policy: unknown variant `later`, expected one of",
        ),
        (run("d", "debounce"), "needs debounce_seconds"),
        (
            json!({"agent": "reviewer", "prompt": "d", "concurrency_policy": "skip"}),
            "needs a concurrency_key",
        ),
    ] {
        let (status, err) = api.send("POST", "/v1/runs", Some(body)).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
        assert!(err["error"].as_str().unwrap().contains(expect), "{err}");
    }
    assert_eq!(api.store.list_runs(None, 100).await.unwrap().len(), before);
    // A sleeping run is listed and can be woken early; others cannot be woken.
    let (_, listed) = api.send("GET", "/v1/wakeups", None).await;
    assert_eq!(listed["wakeups"], json!([]));
    let newer_id = newer["run_id"].as_str().unwrap();
    let lease = api
        .store
        .claim("w", None, 1, std::time::Duration::from_secs(30))
        .await
        .unwrap()
        .remove(0);
    assert_eq!(lease.job().run_id, newer_id);
    let (status, err) = api
        .send("POST", &format!("/v1/runs/{newer_id}/wake"), None)
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(
        err["error"].as_str().unwrap().contains("not waiting"),
        "{err}"
    );
    let now = api.store.now();
    let due = now + 3_600_000;
    let reason = ResumeReason::Wakeup {
        reason: "the deploy".into(),
        slept_at: now,
        due_at: due,
    };
    lease.park_until(due, &reason.to_payload()).await.unwrap();
    let (_, listed) = api.send("GET", "/v1/wakeups", None).await;
    let items = listed["wakeups"].as_array().unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["run_id"], json!(newer_id));
    assert_eq!(items[0]["reason"], json!("the deploy"));
    assert_eq!(items[0]["due_at"], json!(due));
    let (status, _) = api
        .send("POST", &format!("/v1/runs/{newer_id}/wake"), None)
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let woken = api
        .store
        .claim("w", None, 1, std::time::Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(woken.len(), 1, "the resume job is due now");
    let (status, _) = api.send("POST", "/v1/runs/nope/wake", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // Approvals: bad decisions are explained; an unknown call is 404.
    let decide = |body: Value| api.send("POST", "/v1/runs/nope/approvals/c1", Some(body));
    let (status, err) = decide(json!({"decision": "maybe"})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        err["error"],
        "decision: unknown variant `maybe`, expected `approve` or `deny`"
    );
    let (status, err) = decide(json!({"verdict": "approve"})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        err["error"]
            .as_str()
            .unwrap()
            .starts_with("verdict: unknown field"),
        "{err}"
    );
    let (status, _) = decide(json!({"decision": "approve"})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, listed) = api.send("GET", "/v1/approvals", None).await;
    assert_eq!(listed["approvals"], json!([]));
}
