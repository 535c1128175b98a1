//! The API against its own description, from outside: the served `/openapi.json` passes
//! `openapi-spec-validator` (the Python reference validator, which `.ci/run` installs; where
//! it is missing outside CI the case says SKIPPED), and requests the description allows — an
//! empty filter (`?status=`), `null` for a nullable body key — are accepted, not refused.

use std::process::Command;

use nightshift_tests::{TestDb, on_both_backends};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::openapi::serve;

on_both_backends! {
    the_served_openapi_document_passes_openapi_spec_validator => document_validates;
    requests_the_document_allows_are_accepted => allowed_requests_accepted;
}

const TOKEN: &str = "openapi-test-token";

/// The validator to run: `NIGHTSHIFT_OPENAPI_VALIDATOR`, else `openapi-spec-validator` on the
/// PATH; `None` when neither is there.
fn validator() -> Option<String> {
    if let Ok(path) = std::env::var("NIGHTSHIFT_OPENAPI_VALIDATOR") {
        return Some(path);
    }
    let found = Command::new("openapi-spec-validator")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    found.then(|| "openapi-spec-validator".to_string())
}

async fn document_validates(db: &TestDb) {
    let Some(program) = validator() else {
        assert!(
            std::env::var("CI").is_err(),
            "CI must have openapi-spec-validator (.ci/run installs it and sets \
             NIGHTSHIFT_OPENAPI_VALIDATOR)"
        );
        eprintln!(
            "SKIPPED: openapi-spec-validator is not installed (pip install \
             openapi-spec-validator, or set NIGHTSHIFT_OPENAPI_VALIDATOR)"
        );
        return;
    };
    let (base, http) = serve(db).await;
    let doc = http
        .get(format!("{base}/openapi.json"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("openapi.json");
    std::fs::write(&file, &doc).unwrap();
    let out = Command::new(&program).arg(&file).output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.contains(": OK"),
        "{program} refused the served document:\n{said}"
    );
}

async fn allowed_requests_accepted(db: &TestDb) {
    let (base, http) = serve(db).await;
    let get = |path: &str| {
        let req = http.get(format!("{base}{path}")).bearer_auth(TOKEN);
        async move {
            let resp = req.send().await.unwrap();
            (resp.status(), resp.text().await.unwrap())
        }
    };
    // An empty filter is no filter.
    for path in [
        "/v1/runs?status=&agent=&trigger=&key=&since=&until=&q=&cursor=",
        "/v1/notifications?run=&status=",
        "/v1/tasks?status=",
    ] {
        let (status, body) = get(path).await;
        assert_eq!(status, StatusCode::OK, "{path}: {body}");
    }
    // A filter that names nothing known is still refused, naming the parameter.
    let (status, body) = get("/v1/runs?status=sleeping").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains("status"), "{body}");

    // A schedule with every optional key null gets the defaults.
    let created = http
        .post(format!("{base}/v1/schedules"))
        .bearer_auth(TOKEN)
        .json(
            &json!({"name": "nulls", "cron": "0 7 * * *", "agent": "helper",
                      "prompt": "p", "timezone": null, "overlap": null, "missed": null,
                      "enabled": null}),
        )
        .send()
        .await
        .unwrap();
    let status = created.status();
    let body: Value = created.json().await.unwrap();
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let row = |b: &Value| {
        let s = if b.get("schedule").is_some() {
            &b["schedule"]
        } else {
            b
        };
        (
            s["timezone"].clone(),
            s["overlap"].clone(),
            s["missed"].clone(),
            s["enabled"].clone(),
        )
    };
    let defaults = (json!("UTC"), json!("skip"), json!("skip"), json!(true));
    assert_eq!(row(&body), defaults, "{body}");
    // A change whose keys are all null changes nothing.
    let patched = http
        .patch(format!("{base}/v1/schedules/nulls"))
        .bearer_auth(TOKEN)
        .json(
            &json!({"cron": null, "timezone": null, "agent": null, "prompt": null,
                      "overlap": null, "missed": null, "enabled": null}),
        )
        .send()
        .await
        .unwrap();
    let status = patched.status();
    let body: Value = patched.json().await.unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(row(&body), defaults, "{body}");
}
