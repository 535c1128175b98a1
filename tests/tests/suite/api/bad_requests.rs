//! Bad requests are explained (status, error and what to write) and change nothing in the
//! store.

use nightshift_tests::TestDb;
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::{Api, TOKEN};

pub(super) async fn bad_requests_change_nothing(db: &TestDb) {
    let api = Api::start(db).await;
    let cases = [
        (
            json!({"agent": "nobody", "prompt": "x"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "agent 'nobody' is not configured (configured: helper, reviewer)",
        ),
        (
            json!({"agent": "helper", "prompt": "x", "promt": 1}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "promt: unknown field `promt`",
        ),
        (
            json!({"agent": "helper"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "missing field `prompt`",
        ),
        (
            json!({"agent": "helper", "prompt": "x", "concurrency_key": "k",
                   "concurrency_policy": "sometimes"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "concurrency_policy: unknown variant `sometimes`, expected one of `queue`, `skip`, \
             `supersede`, `debounce`",
        ),
        (
            json!({"agent": "helper", "prompt": "x", "priority": "high"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "priority: invalid type: string \"high\", expected i64",
        ),
        (
            json!({"agent": "helper", "prompt": " "}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "the prompt is empty",
        ),
        (
            json!({"agent": "helper", "prompt": "x", "priority": 99999}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "priority 99999 is out of range",
        ),
        (
            json!({"agent": "helper", "prompt": "x", "run_at": "tomorrow"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "run_at 'tomorrow' is not an RFC 3339 time",
        ),
        (
            json!({"agent": "helper", "prompt": "x", "run_at": "2030-01-01T00:00:00Z", "delay_seconds": 5}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "not both",
        ),
    ];
    for (body, want, message) in cases {
        let (status, err) = api.send("POST", "/v1/runs", Some(body.clone())).await;
        assert_eq!(status, want, "{body}: {err}");
        assert!(
            err["error"].as_str().unwrap().contains(message),
            "{body}: {err}"
        );
    }
    let raw = api
        .http
        .post(format!("{}/v1/runs", api.base))
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status(), StatusCode::BAD_REQUEST);
    let err: Value = raw.json().await.unwrap();
    assert!(
        err["error"]
            .as_str()
            .unwrap()
            .starts_with("the body is not valid JSON"),
        "{err}"
    );
    let form = api
        .http
        .post(format!("{}/v1/runs", api.base))
        .bearer_auth(TOKEN)
        .header("content-type", "application/x-www-form-urlencoded")
        .body("agent=helper&prompt=x")
        .send()
        .await
        .unwrap();
    assert_eq!(form.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let err: Value = form.json().await.unwrap();
    assert!(
        err["error"]
            .as_str()
            .unwrap()
            .contains("Content-Type: application/json"),
        "{err}"
    );
    assert!(
        api.store.list_runs(None, 10).await.unwrap().is_empty(),
        "nothing was enqueued"
    );
    let schedule = json!({"name": "s", "cron": "@daily", "agent": "helper", "prompt": "p",
                          "overlap": "sometimes"});
    let (status, err) = api.send("POST", "/v1/schedules", Some(schedule)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{err}");
    assert_eq!(
        err["error"],
        "overlap: unknown variant `sometimes`, expected one of `skip`, `queue`, `allow`"
    );
    let (status, err) = api
        .send("PATCH", "/v1/schedules/s", Some(json!({"enabled": "yes"})))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{err}");
    assert!(
        err["error"]
            .as_str()
            .unwrap()
            .starts_with("enabled: invalid type"),
        "{err}"
    );
    assert!(api.store.schedules().await.unwrap().is_empty());
    let (status, _) = api.send("GET", "/v1/runs/nope", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, err) = api.send("GET", "/v1/runs?status=sleeping", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        err["error"]
            .as_str()
            .unwrap()
            .contains("unknown run status 'sleeping'"),
        "{err}"
    );
    let (status, _) = api.send("GET", "/v2/nothing", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}
