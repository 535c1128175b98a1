//! Every refusal has its status and enqueues nothing: an unknown hook, a wrong secret, a
//! changed body, no signature, a body that is not JSON, no delivery id, and events no route
//! takes.

use nightshift_scheduler::hooks::config::HmacAlgorithm;
use nightshift_scheduler::hooks::signature::hmac;
use nightshift_tests::TestDb;
use reqwest::StatusCode;
use serde_json::Value;

use super::harness::{Intake, SECRET, base64_encode, fixture, github_signature, run_id};

pub(super) async fn refusals_enqueue_nothing(db: &TestDb) {
    let intake = Intake::start(db).await;
    let opened = fixture("pull_request.opened");
    let sig = github_signature(&opened, SECRET);
    let gh = |event: &str, delivery: &str, sig: &str| {
        vec![
            ("X-GitHub-Event", event.to_string()),
            ("X-GitHub-Delivery", delivery.to_string()),
            ("X-Hub-Signature-256", sig.to_string()),
        ]
    };
    let error = |v: &Value| v["error"].as_str().unwrap_or_default().to_string();

    let (status, body) = intake
        .post("gitlab", &gh("pull_request", "d1", &sig), opened.clone())
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "unknown hook");
    assert!(error(&body).contains("no webhook named 'gitlab'"), "{body}");
    assert!(
        !body.to_string().contains("github"),
        "an unauthenticated caller is not told which hooks exist: {body}"
    );

    let wrong = github_signature(&opened, "not-the-secret");
    let (status, body) = intake
        .post("github", &gh("pull_request", "d1", &wrong), opened.clone())
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "wrong secret");
    assert!(error(&body).contains("does not match"), "{body}");
    let mut tampered = opened.clone();
    tampered.extend_from_slice(b" ");
    let (status, _) = intake
        .post("github", &gh("pull_request", "d1", &sig), tampered)
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "a changed body");
    let (status, body) = intake
        .post(
            "github",
            &[
                ("X-GitHub-Event", "pull_request".into()),
                ("X-GitHub-Delivery", "d1".into()),
            ],
            opened.clone(),
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "no signature");
    assert!(
        error(&body).contains("X-Hub-Signature-256 header is missing"),
        "{body}"
    );

    let not_json = b"payload=%7B%22action%22%3A%22opened%22%7D".to_vec();
    let (status, body) = intake.github("pull_request", "d2", not_json).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "form-encoded, not JSON");
    assert!(error(&body).contains("not valid JSON"), "{body}");
    let (status, body) = intake
        .post(
            "github",
            &[
                ("X-GitHub-Event", "pull_request".into()),
                ("X-Hub-Signature-256", sig.clone()),
            ],
            opened.clone(),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "no delivery id");
    assert!(error(&body).contains("X-GitHub-Delivery"), "{body}");

    let big = serde_json::to_vec(&serde_json::json!({"blob": "x".repeat(2048)})).unwrap();
    let mac = hmac(HmacAlgorithm::Sha512, SECRET.as_bytes(), &[&big]);
    let b64 = base64_encode(&mac);
    let (status, body) = intake
        .post(
            "small",
            &[("X-Request-Id", "r1".into()), ("X-Signature", b64)],
            big,
        )
        .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert!(
        error(&body).contains("max_body_bytes (1024 bytes)"),
        "{body}"
    );
    // A chunked body declares no length: the limit stops it while it is read.
    let chunked = intake
        .post_chunked("small", &[("X-Request-Id", "r3".into())], &[b'{'; 3000])
        .await;
    assert!(chunked.starts_with("HTTP/1.1 413"), "{chunked}");
    assert!(chunked.contains("max_body_bytes"), "{chunked}");
    // Under the limit the same hook takes it (its hmac settings work end to end).
    let fits = br#"{"ok":true}"#.to_vec();
    let mac = hmac(HmacAlgorithm::Sha512, SECRET.as_bytes(), &[&fits]);
    let (status, body) = intake
        .post(
            "small",
            &[
                ("X-Request-Id", "r2".into()),
                ("X-Signature", base64_encode(&mac)),
            ],
            fits,
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let small_run = run_id(&body);

    // Authentic deliveries no route takes.
    let mut closed: Value = serde_json::from_slice(&opened).unwrap();
    closed["action"] = "closed".into();
    let closed = serde_json::to_vec(&closed).unwrap();
    let (status, body) = intake.github("pull_request", "d3", closed).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "closed: {body}");
    assert!(error(&body).contains("no route of hook 'github' matches event 'pull_request'"));
    let mut draft: Value = serde_json::from_slice(&opened).unwrap();
    draft["pull_request"]["draft"] = true.into();
    let (status, _) = intake
        .github("pull_request", "d4", serde_json::to_vec(&draft).unwrap())
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "draft");
    let (status, _) = intake.github("star", "d5", opened.clone()).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "unrouted event");
    // A template that names a field the payload lacks.
    let label = br#"{"action":"created","label":{"name":"bug"},"repository":{"name":"x"}}"#;
    let (status, body) = intake.github("label", "d6", label.to_vec()).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(
        error(&body).contains(
            "route 'labels': the prompt template failed on this delivery: repository.nmae is \
             not in the payload"
        ),
        "{body}"
    );
    // A comment on a PR with no unfinished run.
    let (status, body) = intake
        .github("issue_comment", "d7", fixture("issue_comment.created"))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert!(error(&body).contains("no unfinished run has the key 'pr-octo-org/hello-world-42'"));

    // GitHub's ping when the webhook is added: authentic, answered 200, nothing enqueued.
    let ping = br#"{"zen":"Design for failure.","hook_id":498172631,"hook":{"type":"Repository","id":498172631,"name":"web","active":true,"events":["issue_comment","pull_request","push"],"config":{"content_type":"json","insecure_ssl":"0","url":"https://nightshift.example.com/hooks/github"},"updated_at":"2026-11-29T14:00:00Z","created_at":"2026-11-29T14:00:00Z","url":"https://api.github.com/repos/octo-org/hello-world/hooks/498172631","test_url":"https://api.github.com/repos/octo-org/hello-world/hooks/498172631/test","ping_url":"https://api.github.com/repos/octo-org/hello-world/hooks/498172631/pings","deliveries_url":"https://api.github.com/repos/octo-org/hello-world/hooks/498172631/deliveries","last_response":{"code":null,"status":"unused","message":null}},"repository":{"id":1296269,"full_name":"octo-org/hello-world"},"sender":{"login":"monalisa","id":583231}}"#;
    let (status, body) = intake.github("ping", "d-ping", ping.to_vec()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        (&body["ping"], &body["runs"]),
        (&Value::from(true), &serde_json::json!([]))
    );

    let runs = intake.runs().await;
    assert_eq!(
        runs.len(),
        1,
        "only the small hook's accepted delivery made a run"
    );
    assert_eq!(runs[0].id, small_run);
    for d in ["d1", "d2", "d3", "d4", "d5", "d6", "d7", "d-ping"] {
        assert!(
            intake.delivery(d).await.is_none(),
            "refused delivery {d} left no record"
        );
    }
    // Refused deliveries can be sent again once fixed: the comment now finds the PR's run.
    let (status, first) = intake
        .github("pull_request", "d8", fixture("pull_request.opened"))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (status, body) = intake
        .github("issue_comment", "d7", fixture("issue_comment.created"))
        .await;
    assert_eq!(
        (status, run_id(&body)),
        (StatusCode::ACCEPTED, run_id(&first))
    );

    let counts = intake.counts().await;
    let github = &counts["github"];
    assert_eq!(
        (
            &github["unauthorized"],
            &github["bad_request"],
            &github["unmatched"],
            &github["error"],
            &github["no_run"],
            &github["accepted"],
        ),
        (
            &3.into(),
            &2.into(),
            &3.into(),
            &1.into(),
            &1.into(),
            &2.into()
        ),
        "{counts}"
    );
    assert_eq!(github["ping"], 1, "{counts}");
    assert_eq!(counts["small"]["too_large"], 2, "{counts}");
    assert_eq!(counts["unknown"], 1, "{counts}");
    let anonymous = intake
        .http
        .get(format!("{}/v1/hooks", intake.base))
        .send()
        .await
        .unwrap();
    assert_eq!(
        anonymous.status(),
        StatusCode::UNAUTHORIZED,
        "the listing needs the token"
    );
}
