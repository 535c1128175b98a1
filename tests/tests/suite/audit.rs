//! The audit trail and named tokens (issue 42, item 8), through the real HTTP API on both
//! backends: each operator action — a cancel, a wake, an approval, a schedule made, changed,
//! triggered and deleted, a redelivery — is stored with the token that took it and read back
//! from `GET /v1/audit`; an approval records who decided it; a read-only token reads but is
//! refused every write with 403, changing nothing; an unknown token is 401.

use nightshift_runner::api::{ApiState, router};
use nightshift_runner::api_tokens::{ApiTokens, TokenRole};
use nightshift_store::{NewApproval, NewRun, RunStatus};
use nightshift_tests::{TestDb, on_both_backends};

use crate::dashboard::csrf_of;
use reqwest::StatusCode;
use serde_json::{Value, json};

on_both_backends! {
    every_operator_action_is_stored_with_the_token_that_took_it => actions_are_audited;
    a_read_only_token_reads_and_is_refused_every_write => read_only_refused;
    dashboard_sessions_carry_their_tokens_name_and_role => dashboard_sessions;
}

const ADMIN: &str = "admin-token-0123456789";
const CI: &str = "ci-token-0123456789";
const GRAFANA: &str = "grafana-token-0123456789";

struct Api {
    base: String,
    http: reqwest::Client,
    store: nightshift_store::Store,
}

impl Api {
    async fn start(db: &TestDb) -> Api {
        let store = db.store().await;
        let state = ApiState {
            store: store.clone(),
            intake: nightshift_scheduler::Intake::new(store.clone(), vec!["helper".to_string()]),
            tokens: ApiTokens::new(
                ADMIN.into(),
                vec![
                    ("ci".into(), CI.into(), TokenRole::Operator),
                    ("grafana".into(), GRAFANA.into(), TokenRole::ReadOnly),
                ],
            ),
            hooks: nightshift_runner::hooks::none(),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            axum::serve(listener, router(state)).await.unwrap();
        });
        let http =
            nightshift_llm::http::build_client(nightshift_llm::HttpTimeouts::default()).unwrap();
        Api { base, http, store }
    }

    async fn send(
        &self,
        token: &str,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let url = format!("{}{path}", self.base);
        let req = match method {
            "GET" => self.http.get(url),
            "POST" => self.http.post(url),
            "PATCH" => self.http.patch(url),
            "DELETE" => self.http.delete(url),
            other => panic!("{other}"),
        }
        .bearer_auth(token);
        let req = match body {
            Some(b) => req.json(&b),
            None => req,
        };
        let resp = req.send().await.unwrap();
        let status = resp.status();
        let text = resp.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// `(actor, action, target, detail)` of the audit trail, oldest first.
    async fn trail(&self, query: &str) -> Vec<(String, String, String, Option<String>)> {
        let (status, page) = self
            .send(GRAFANA, "GET", &format!("/v1/audit{query}"), None)
            .await;
        assert_eq!(status, StatusCode::OK, "{page}");
        let mut rows: Vec<_> = page["actions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| {
                (
                    a["actor"].as_str().unwrap().to_string(),
                    a["action"].as_str().unwrap().to_string(),
                    a["target"].as_str().unwrap().to_string(),
                    a["detail"].as_str().map(str::to_string),
                )
            })
            .collect();
        rows.reverse();
        rows
    }
}

fn row(
    actor: &str,
    action: &str,
    target: &str,
    detail: Option<&str>,
) -> (String, String, String, Option<String>) {
    (
        actor.into(),
        action.into(),
        target.into(),
        detail.map(str::to_string),
    )
}

async fn actions_are_audited(db: &TestDb) {
    let api = Api::start(db).await;
    let store = &api.store;
    // A queued run, cancelled by ci.
    let cancelled = store
        .enqueue(&NewRun::new("helper", "a"))
        .await
        .unwrap()
        .run_id;
    let (status, body) = api
        .send(
            CI,
            "POST",
            &format!("/v1/runs/{cancelled}/cancel"),
            Some(json!({})),
        )
        .await;
    assert!(status.is_success(), "{body}");
    // A call waiting for a decision, approved by the admin token with a reason.
    let waiting = store
        .enqueue(&NewRun::new("helper", "b"))
        .await
        .unwrap()
        .run_id;
    store
        .request_approval(&NewApproval {
            run_id: &waiting,
            call_id: "call_1",
            tool: "deploy",
            input: "{}",
            input_hash: "h",
            expires_at: store.now() + 3_600_000,
        })
        .await
        .unwrap();
    let (status, body) = api
        .send(
            ADMIN,
            "POST",
            &format!("/v1/runs/{waiting}/approvals/call_1"),
            Some(json!({"decision": "approve", "reason": "looks right"})),
        )
        .await;
    assert!(status.is_success(), "{body}");
    let approval = store.approval(&waiting, "call_1").await.unwrap().unwrap();
    assert_eq!(approval.decided_by.as_deref(), Some("token:admin"));
    // A schedule made, changed, triggered and deleted by ci.
    let (status, body) = api
        .send(
            CI,
            "POST",
            "/v1/schedules",
            Some(json!({"name": "nightly", "cron": "0 7 * * *", "agent": "helper", "prompt": "p"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = api
        .send(
            CI,
            "PATCH",
            "/v1/schedules/nightly",
            Some(json!({"enabled": false, "prompt": "q"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, fired) = api
        .send(CI, "POST", "/v1/schedules/nightly/trigger", Some(json!({})))
        .await;
    assert!(status.is_success(), "{fired}");
    let fired_run = fired["run_id"].as_str().unwrap().to_string();
    let (status, body) = api.send(CI, "DELETE", "/v1/schedules/nightly", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // A refused action is not an action: cancelling an unknown run records nothing.
    let (status, _) = api
        .send(CI, "POST", "/v1/runs/nope/cancel", Some(json!({})))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    assert_eq!(
        api.trail("").await,
        [
            row("token:ci", "cancel", &cancelled, None),
            row(
                "token:admin",
                "approve",
                &format!("{waiting}/call_1"),
                Some("looks right")
            ),
            row("token:ci", "schedule_create", "nightly", None),
            row(
                "token:ci",
                "schedule_update",
                "nightly",
                Some("prompt, enabled")
            ),
            row("token:ci", "schedule_trigger", "nightly", Some("enqueued")),
            row("token:ci", "schedule_delete", "nightly", None),
        ]
    );
    // One run's actions, as its timeline shows them.
    assert_eq!(
        api.trail(&format!("?run={waiting}")).await,
        [row(
            "token:admin",
            "approve",
            &format!("{waiting}/call_1"),
            Some("looks right")
        )]
    );
    assert_eq!(api.trail(&format!("?run={fired_run}")).await.len(), 1);
    // Pages: newest first, then older than the last id seen.
    let (_, page) = api.send(GRAFANA, "GET", "/v1/audit?limit=2", None).await;
    let ids: Vec<i64> = page["actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids.len(), 2);
    assert!(ids[0] > ids[1], "{ids:?}");
    let (_, older) = api
        .send(
            GRAFANA,
            "GET",
            &format!("/v1/audit?before={}", ids[1]),
            None,
        )
        .await;
    assert_eq!(older["actions"].as_array().unwrap().len(), 4, "{older}");
}

async fn read_only_refused(db: &TestDb) {
    let api = Api::start(db).await;
    let run = api
        .store
        .enqueue(&NewRun::new("helper", "a"))
        .await
        .unwrap()
        .run_id;
    for path in [
        "/v1/runs",
        &format!("/v1/runs/{run}"),
        "/v1/audit",
        "/metrics",
    ] {
        let (status, body) = api.send(GRAFANA, "GET", path, None).await;
        assert_eq!(status, StatusCode::OK, "GET {path}: {body}");
    }
    for (method, path, body) in [
        ("POST", format!("/v1/runs/{run}/cancel"), Some(json!({}))),
        (
            "POST",
            "/v1/runs".to_string(),
            Some(json!({"agent": "helper", "prompt": "x"})),
        ),
        (
            "POST",
            "/v1/schedules".to_string(),
            Some(json!({"name": "n", "cron": "0 7 * * *", "agent": "helper", "prompt": "p"})),
        ),
        ("DELETE", "/v1/schedules/n".to_string(), None),
    ] {
        let (status, said) = api.send(GRAFANA, method, &path, body).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path}: {said}");
        let message = said["error"].as_str().unwrap_or_default();
        assert!(
            message.contains("'grafana' is read-only"),
            "{method} {path}: {said}"
        );
    }
    assert_eq!(
        api.store.run(&run).await.unwrap().unwrap().status,
        RunStatus::Queued,
        "nothing changed"
    );
    assert_eq!(api.store.list_runs(None, 10).await.unwrap().len(), 1);
    assert!(api.trail("").await.is_empty());
    let (status, _) = api.send("wrong-token", "GET", "/v1/runs", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, said) = api.send(GRAFANA, "GET", "/v1/audit?limit=many", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{said}");
    assert!(
        said["error"].as_str().unwrap_or_default().contains("limit"),
        "{said}"
    );
}

/// The dashboard's sign-in takes every token the API does: a session carries the token's name
/// into the audit trail, and a read-only token's session may look but is refused every action.
async fn dashboard_sessions(db: &TestDb) {
    let api = Api::start(db).await;
    let run = api
        .store
        .enqueue(&NewRun::new("helper", "a"))
        .await
        .unwrap()
        .run_id;
    // Redirects are what is checked here, so this client does not follow them (`Api::start`
    // installed the crypto provider).
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let sign_in = |token: &'static str| {
        let (http, base) = (http.clone(), api.base.clone());
        async move {
            let resp = http
                .post(format!("{base}/ui/login"))
                .header("content-type", "application/x-www-form-urlencoded")
                .body(format!("token={token}"))
                .send()
                .await
                .unwrap();
            assert_eq!(
                resp.status(),
                StatusCode::SEE_OTHER,
                "signed in with {token}"
            );
            let set = resp.headers()["set-cookie"].to_str().unwrap().to_string();
            set.split(';').next().unwrap().to_string()
        }
    };
    let page = |cookie: String| {
        let (http, base, run) = (http.clone(), api.base.clone(), run.clone());
        async move {
            let resp = http
                .get(format!("{base}/ui/runs/{run}"))
                .header("cookie", cookie)
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), StatusCode::OK);
            resp.text().await.unwrap()
        }
    };
    let cancel = |cookie: String, csrf: String| {
        let (http, base, run) = (http.clone(), api.base.clone(), run.clone());
        async move {
            let resp = http
                .post(format!("{base}/ui/runs/{run}/cancel"))
                .header("cookie", cookie)
                .header("content-type", "application/x-www-form-urlencoded")
                .body(format!("csrf={csrf}&confirmed=yes"))
                .send()
                .await
                .unwrap();
            (resp.status(), resp.text().await.unwrap())
        }
    };

    let viewer = sign_in(GRAFANA).await;
    let shown = page(viewer.clone()).await;
    let (status, said) = cancel(viewer, csrf_of(&shown)).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{said}");
    assert!(said.contains("read-only token"), "{said}");
    assert_eq!(
        api.store.run(&run).await.unwrap().unwrap().status,
        RunStatus::Queued,
        "nothing changed"
    );
    assert!(api.trail("").await.is_empty());

    let operator = sign_in(CI).await;
    let shown = page(operator.clone()).await;
    let (status, said) = cancel(operator, csrf_of(&shown)).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{said}");
    assert_eq!(
        api.store.run(&run).await.unwrap().unwrap().status,
        RunStatus::Cancelled
    );
    assert_eq!(
        api.trail("").await,
        [row("dashboard:ci", "cancel", &run, None)]
    );
}
