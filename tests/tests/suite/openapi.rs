//! `GET /openapi.json` against the API actually served on loopback: it is OpenAPI 3.1; every
//! (method, path) it lists is served, and every other method on those paths is not (so it
//! lists every method served there); every endpoint the tables of the HTTP API reference
//! (`docs/reference/http-api.md`) name is in it; the token routes carry the bearer scheme; and
//! the schemas say what the handlers check (`POST /v1/runs` requires `agent` and `prompt`, the
//! concurrency policies, the error shape, 503 with `Retry-After`).

use std::collections::BTreeSet;

use nightshift_runner::api::{ApiState, router};
use nightshift_tests::{TestDb, on_both_backends};
use reqwest::StatusCode;
use serde_json::Value;

on_both_backends! {
    the_openapi_document_lists_every_route_served_and_only_those => document_matches_routes;
}

const TOKEN: &str = "openapi-test-token";
const METHODS: [&str; 5] = ["get", "post", "put", "patch", "delete"];

pub(crate) async fn serve(db: &TestDb) -> (String, reqwest::Client) {
    let store = db.store().await;
    let state = ApiState {
        store: store.clone(),
        intake: nightshift_scheduler::Intake::new(store, vec!["helper".to_string()]),
        tokens: nightshift_runner::api_tokens::ApiTokens::single(TOKEN.to_string()),
        hooks: nightshift_runner::hooks::none(),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        axum::serve(listener, router(state)).await.unwrap();
    });
    let http = nightshift_llm::http::build_client(nightshift_llm::HttpTimeouts::default()).unwrap();
    (base, http)
}

/// Follows a `$ref` to `#/components/schemas/…`.
fn resolve<'a>(doc: &'a Value, schema: &'a Value) -> &'a Value {
    match schema["$ref"].as_str() {
        Some(r) => {
            let name = r.strip_prefix("#/components/schemas/").unwrap();
            &doc["components"]["schemas"][name]
        }
        None => schema,
    }
}

/// The `METHOD /path` pairs the tables of `docs/reference/http-api.md` name
/// (`GET/POST /v1/schedules` is two).
fn reference_endpoints() -> BTreeSet<(String, String)> {
    let reference = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/reference/http-api.md"
    ))
    .unwrap();
    let mut found = BTreeSet::new();
    for line in reference.lines().filter(|l| l.starts_with('|')) {
        for code in line.split('`').skip(1).step_by(2) {
            let Some((methods, path)) = code.split_once(' ') else {
                continue;
            };
            let path = path.split(['?', ' ']).next().unwrap();
            let methods: Vec<&str> = methods.split('/').collect();
            let http_methods = methods.iter().all(|m| {
                METHODS.contains(&m.to_ascii_lowercase().as_str()) && *m == m.to_uppercase()
            });
            if !http_methods || !path.starts_with('/') || path.starts_with("/ui") {
                continue;
            }
            for m in methods {
                found.insert((m.to_ascii_lowercase(), path.to_string()));
            }
        }
    }
    found
}

/// `path` with each `{param}` filled in.
fn concrete(path: &str) -> String {
    path.split('/')
        .map(|seg| if seg.starts_with('{') { "nope" } else { seg })
        .collect::<Vec<_>>()
        .join("/")
}

async fn document_matches_routes(db: &TestDb) {
    let (base, http) = serve(db).await;
    let served = http
        .get(format!("{base}/openapi.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(served.status(), StatusCode::OK, "no token needed");
    let doc: Value = served.json().await.unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(
        doc,
        serde_json::to_value(nightshift_runner::openapi::document()).unwrap()
    );

    // Every operation has an operationId of its own (a spec validator refuses duplicates,
    // and client generators name methods after them).
    let mut ids = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in METHODS {
            if let Some(id) = item.get(method).and_then(|op| op["operationId"].as_str()) {
                assert!(
                    ids.insert(id.to_string()),
                    "operationId {id} again at {method} {path}"
                );
            }
        }
    }

    let mut documented = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in METHODS {
            let url = format!("{base}{}", concrete(path));
            let mut req = http
                .request(method.to_uppercase().parse().unwrap(), &url)
                .bearer_auth(TOKEN);
            if method != "get" && method != "delete" {
                req = req.header("content-type", "application/json").body("{}");
            }
            let answer = req.send().await.unwrap();
            let status = answer.status();
            let body: Value = answer.json().await.unwrap_or(Value::Null);
            if item.get(method).is_some() {
                documented.insert((method.to_string(), path.clone()));
                assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
                assert_ne!(
                    body["error"], "no such endpoint",
                    "{method} {path} is served"
                );
            } else {
                assert_eq!(
                    status,
                    StatusCode::METHOD_NOT_ALLOWED,
                    "{method} {path} is served but not documented: {body}"
                );
            }
        }
    }
    let reference = reference_endpoints();
    assert!(reference.len() > 20, "found only {reference:?}");
    let missing: Vec<_> = reference.difference(&documented).collect();
    assert!(
        missing.is_empty(),
        "in docs/reference/http-api.md but not the document: {missing:?}"
    );
    for expected in [
        ("get", "/healthz"),
        ("get", "/readyz"),
        ("get", "/openapi.json"),
        ("post", "/hooks/{name}"),
        ("patch", "/v1/schedules/{name}"),
        ("post", "/v1/runs/{id}/approvals/{call}"),
    ] {
        assert!(
            documented.contains(&(expected.0.to_string(), expected.1.to_string())),
            "{expected:?}"
        );
    }

    // The token routes carry the bearer scheme and a 401; the others do not.
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    for (method, path) in &documented {
        let op = &doc["paths"][path][method];
        let guarded = path.starts_with("/v1/") || path == "/metrics";
        assert_eq!(
            op["security"][0].get("bearer").is_some(),
            guarded,
            "{method} {path}"
        );
        if guarded {
            assert!(op["responses"].get("401").is_some(), "{method} {path}");
        }
        if !["/healthz", "/openapi.json"].contains(&path.as_str()) {
            let down = &op["responses"]["503"];
            assert!(
                down["headers"].get("Retry-After").is_some(),
                "{method} {path}"
            );
        }
    }

    // POST /v1/runs: its body's schema is what the handler checks.
    let create = &doc["paths"]["/v1/runs"]["post"];
    let body = resolve(
        &doc,
        &create["requestBody"]["content"]["application/json"]["schema"],
    );
    let required: BTreeSet<&str> = body["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(required, BTreeSet::from(["agent", "prompt"]));
    assert_eq!(
        body["additionalProperties"], false,
        "unknown fields are refused"
    );
    let policy = &body["properties"]["concurrency_policy"];
    let policy_schema = policy["oneOf"]
        .as_array()
        .map(|alts| alts.iter().find(|s| s.get("$ref").is_some()).unwrap())
        .unwrap_or(policy);
    assert_eq!(
        resolve(&doc, policy_schema)["enum"],
        serde_json::json!(["queue", "skip", "supersede", "debounce"])
    );
    for status in ["202", "200", "422", "400", "415", "503"] {
        assert!(
            create["responses"].get(status).is_some(),
            "POST /v1/runs {status}"
        );
    }
    let accepted = resolve(
        &doc,
        &create["responses"]["202"]["content"]["application/json"]["schema"],
    );
    for field in ["run_id", "job_id", "duplicate", "skipped", "superseded"] {
        assert!(
            accepted["properties"].get(field).is_some(),
            "Created.{field}"
        );
    }
    let refused = resolve(
        &doc,
        &create["responses"]["422"]["content"]["application/json"]["schema"],
    );
    assert_eq!(refused["required"], serde_json::json!(["error"]));

    // Query parameters are documented.
    let list = &doc["paths"]["/v1/runs"]["get"];
    let params: BTreeSet<&str> = list["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    for name in ["status", "agent", "since", "until", "q", "cursor", "limit"] {
        assert!(params.contains(name), "GET /v1/runs ?{name}");
    }
}
