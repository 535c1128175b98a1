//! The HTTP API over a real listener on loopback and a real store on both backends: the
//! token, enqueue with dedupe, validation errors that change nothing, listing, events,
//! cancellation, concurrency policies and sleeping runs.

use nightshift_runner::api::{ApiState, router};
use nightshift_store::{NewRun, NewTask, ResumeReason, RunStatus, Store, TaskEnd, TaskStatus};
use nightshift_tests::{TestDb, on_both_backends};
use reqwest::StatusCode;
use serde_json::{Value, json};

on_both_backends! {
    the_api_needs_the_token => the_api_needs_the_token;
    runs_are_enqueued_deduped_listed_and_cancelled => runs_lifecycle_over_http;
    bad_requests_are_explained_and_change_nothing => bad_requests_change_nothing;
    concurrency_policies_and_wakeups_over_http => concurrency_and_wakeups_over_http;
    background_tasks_are_listed_over_http => tasks_over_http;
    a_batch_over_http_answers_per_run => batch_over_http;
}

const TOKEN: &str = "test-token-123";

struct Api {
    base: String,
    http: reqwest::Client,
    store: Store,
    _server: tokio::task::JoinHandle<()>,
}

impl Api {
    async fn start(db: &TestDb) -> Api {
        let store = db.store().await;
        let state = ApiState {
            store: store.clone(),
            intake: nightshift_scheduler::Intake::new(
                store.clone(),
                vec!["helper".to_string(), "reviewer".to_string()],
            ),
            tokens: nightshift_runner::api_tokens::ApiTokens::single(TOKEN.to_string()),
            hooks: nightshift_runner::hooks::none(),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            axum::serve(listener, router(state)).await.unwrap();
        });
        Api {
            base,
            // The workspace builds reqwest with rustls and no default crypto provider; the
            // product's own client builder installs one.
            http: nightshift_llm::http::build_client(nightshift_llm::HttpTimeouts::default())
                .unwrap(),
            store,
            _server: server,
        }
    }

    async fn send(&self, method: &str, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let url = format!("{}{path}", self.base);
        let mut req = self
            .http
            .request(method.parse().unwrap(), url)
            .bearer_auth(TOKEN);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status();
        (status, resp.json().await.unwrap_or(Value::Null))
    }
}

async fn the_api_needs_the_token(db: &TestDb) {
    let api = Api::start(db).await;
    let url = format!("{}/v1/runs", api.base);
    let none = api.http.get(&url).send().await.unwrap();
    assert_eq!(none.status(), StatusCode::UNAUTHORIZED);
    let body: Value = none.json().await.unwrap();
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("Authorization: Bearer")
    );
    let wrong = api
        .http
        .get(&url)
        .bearer_auth("test-token-124")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    let post = api
        .http
        .post(&url)
        .bearer_auth("nope")
        .json(&json!({"agent": "helper", "prompt": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(post.status(), StatusCode::UNAUTHORIZED);
    assert!(
        api.store.list_runs(None, 10).await.unwrap().is_empty(),
        "nothing enqueued"
    );
    let health = api
        .http
        .get(format!("{}/healthz", api.base))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), StatusCode::OK, "health needs no token");
    let (status, _) = api.send("GET", "/v1/runs", None).await;
    assert_eq!(status, StatusCode::OK);
}

async fn runs_lifecycle_over_http(db: &TestDb) {
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

async fn batch_over_http(db: &TestDb) {
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

async fn bad_requests_change_nothing(db: &TestDb) {
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

async fn concurrency_and_wakeups_over_http(db: &TestDb) {
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

async fn tasks_over_http(db: &TestDb) {
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
