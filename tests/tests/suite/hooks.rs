//! Webhook intake over real HTTP on loopback, on both backends: GitHub payloads (as GitHub
//! sends them, from `tests/fixtures/github/`) signed with a test secret are routed, templated
//! and deduped on redelivery; every refusal has its status and enqueues nothing; concurrent
//! copies of one delivery make one run; a crash between claiming a delivery and recording its
//! runs is finished by the redelivery; timestamped signatures follow the store's clock; and a
//! real `nightshift serve` runs the agent a delivery started, and a newer push supersedes the
//! review of the older head, whose post is refused.

mod cancel;
mod comment_states;
mod daemon;
pub(crate) mod harness;
mod supersede;

use std::sync::Arc;
use std::time::Duration;

use nightshift_scheduler::hooks::config::HmacAlgorithm;
use nightshift_scheduler::hooks::signature::hmac;
use nightshift_store::{ManualClock, Trigger};
use nightshift_tests::{TestDb, on_both_backends};
use reqwest::StatusCode;
use serde_json::Value;

use cancel::cancel_routes_mentions_and_ignored;
use comment_states::a_comment_in_each_run_state;
use daemon::serve_end_to_end;
use harness::{
    HOOKS, Intake, SECRET, base64_encode, fixture, github_signature, hex_encode, run_id,
};
use supersede::two_pushes_supersede_the_first_review;

on_both_backends! {
    github_deliveries_are_routed_templated_and_deduped => routed_templated_deduped;
    a_closed_pull_request_cancels_its_review_and_only_mentions_steer_it =>
        cancel_routes_mentions_and_ignored;
    every_refusal_has_its_status_and_enqueues_nothing => refusals_enqueue_nothing;
    concurrent_copies_of_one_delivery_make_one_run => concurrent_copies_make_one_run;
    copies_taken_by_two_daemons_make_one_run_and_one_202 => copies_across_two_daemons;
    a_crash_between_claim_and_record_is_finished_by_the_redelivery => crash_between_steps;
    timestamped_signatures_follow_the_store_clock => timestamped_signatures;
    nightshift_serve_runs_the_agent_a_delivery_started => serve_end_to_end;
    nightshift_serve_takes_a_comment_to_a_queued_or_running_run_and_refuses_one_to_an_ended_run =>
        a_comment_in_each_run_state;
    a_newer_push_supersedes_the_review_of_the_older_head => two_pushes_supersede_the_first_review;
    a_redelivered_resume_whose_run_ended_is_answered_from_its_record => resume_redelivered_after_its_run_ended;
    a_redelivery_the_reloaded_config_would_refuse_is_answered_from_its_record => redelivered_after_a_reload;
}

async fn routed_templated_deduped(db: &TestDb) {
    let intake = Intake::start(db).await;
    let opened = fixture("pull_request.opened");
    let (status, first) = intake
        .github("pull_request", "d-opened-1", opened.clone())
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{first}");
    assert_eq!(
        (&first["delivery"], &first["event"], &first["redelivery"]),
        (&"d-opened-1".into(), &"pull_request".into(), &false.into())
    );
    assert_eq!(first["runs"][0]["route"], "review");
    assert_eq!(first["runs"][0]["duplicate"], false);
    let pr_run = run_id(&first);
    let run = intake.store.run(&pr_run).await.unwrap().unwrap();
    assert_eq!(run.trigger_kind, Trigger::Webhook);
    assert_eq!(run.agent, "reviewer");
    assert_eq!(
        run.input,
        "Review pull request #42 in octo-org/hello-world: Retry uploads when the storage \
         backend answers 503\nHead: 7fd1a60b01f91b314f59955a4e4d4e80d8edf11d (opened)\n\n\
         [webhook github delivery=d-opened-1 event=pull_request]"
    );
    assert_eq!(
        run.concurrency_key.as_deref(),
        Some("pr-octo-org/hello-world-42")
    );
    let jobs = intake.store.jobs_of_run(&pr_run).await.unwrap();
    assert_eq!((jobs[0].lane.as_str(), jobs[0].priority), ("reviews", 5));

    // GitHub's "Redeliver" sends the same body with the same delivery id.
    intake
        .github_redelivered("pull_request", "d-opened-1", opened, &pr_run)
        .await;
    assert_eq!(
        intake.runs().await.len(),
        1,
        "a redelivery enqueues nothing"
    );
    let row = intake.delivery("d-opened-1").await.unwrap();
    assert_eq!(row.received, 2);

    // A comment on the PR continues its run.
    let (status, comment) = intake
        .github(
            "issue_comment",
            "d-comment-1",
            fixture("issue_comment.created"),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{comment}");
    assert_eq!(
        (&comment["runs"][0]["kind"], run_id(&comment)),
        (&Value::from("resume"), pr_run.clone())
    );
    let jobs = intake.store.jobs_of_run(&pr_run).await.unwrap();
    assert_eq!(jobs.len(), 2);
    // Redelivered while the run it resumed is still unfinished: the same answer, no new job.
    let again = intake
        .github_redelivered(
            "issue_comment",
            "d-comment-1",
            fixture("issue_comment.created"),
            &pr_run,
        )
        .await;
    assert_eq!(again["runs"][0]["kind"], "resume");
    assert_eq!(again["runs"][0]["job_id"], comment["runs"][0]["job_id"]);
    assert_eq!(intake.store.jobs_of_run(&pr_run).await.unwrap().len(), 2);
    let reason: Value = serde_json::from_str(&jobs[1].payload).unwrap();
    assert_eq!(
        reason["text"],
        "hubot commented: Please also check that the retry gives up after the third \
         attempt.\n\n[webhook github delivery=d-comment-1 event=issue_comment]"
    );

    // New commits on the PR: a new delivery, a new run for the same key.
    let (status, sync) = intake
        .github(
            "pull_request",
            "d-sync-1",
            fixture("pull_request.synchronize"),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{sync}");
    let sync_run = intake.store.run(&run_id(&sync)).await.unwrap().unwrap();
    assert_ne!(sync_run.id, pr_run);
    assert!(
        sync_run
            .input
            .contains("c48f1b3e7c5d2a9f0e6b8d4a1c3e5f7a9b0d2c4e (synchronize)")
    );

    // The merge lands on main: the push route, with a key from the payload.
    let (status, push) = intake.github("push", "d-push-1", fixture("push")).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{push}");
    let push_run = intake.store.run(&run_id(&push)).await.unwrap().unwrap();
    assert_eq!(
        push_run.idempotency_key.as_deref(),
        Some("push-octo-org/hello-world-c48f1b3e7c5d2a9f0e6b8d4a1c3e5f7a9b0d2c4e")
    );
    assert_eq!(
        push_run.input,
        "Summarise what landed on main: 7fd1a60 Retry uploads on 503; c48f1b3 Merge pull \
         request #42 from monalisa/retry-uploads;\n\n[webhook github delivery=d-push-1 event=push]"
    );
    // The same push under another delivery id finds the run by the route's key.
    let (status, push2) = intake.github("push", "d-push-2", fixture("push")).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(
        (run_id(&push2), &push2["runs"][0]["duplicate"]),
        (push_run.id.clone(), &Value::from(true))
    );

    assert_eq!(intake.runs().await.len(), 3);
    let counts = intake.counts().await;
    assert_eq!(counts["github"]["accepted"], 5, "{counts}");
    assert_eq!(counts["github"]["duplicate"], 2, "{counts}");
}

/// A delivery that would be refused now (here a resume whose run has ended since) is still
/// answered as the redelivery it is: 200 with the runs it made, counted, nothing enqueued.
async fn resume_redelivered_after_its_run_ended(db: &TestDb) {
    let intake = Intake::start(db).await;
    let (status, first) = intake
        .github("pull_request", "d-opened", fixture("pull_request.opened"))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{first}");
    let comment = fixture("issue_comment.created");
    let (status, resumed) = intake
        .github("issue_comment", "d-comment", comment.clone())
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{resumed}");
    assert_eq!(resumed["runs"][0]["kind"], "resume");
    let run = run_id(&first);
    let jobs_before = intake.store.jobs_of_run(&run).await.unwrap().len();
    intake.store.cancel_run(&run).await.unwrap();

    let again = intake
        .github_redelivered("issue_comment", "d-comment", comment, &run)
        .await;
    assert_eq!(again["runs"][0]["kind"], "resume");
    assert_eq!(
        intake.store.jobs_of_run(&run).await.unwrap().len(),
        jobs_before,
        "a redelivery enqueues nothing"
    );
    let row = intake.delivery("d-comment").await.unwrap();
    assert_eq!(row.received, 2);

    // A new comment on the ended run is refused: no unfinished run to continue.
    let (status, refused) = intake
        .github(
            "issue_comment",
            "d-comment-2",
            fixture("issue_comment.created"),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{refused}");
    assert!(intake.delivery("d-comment-2").await.is_none());
}

/// A delivery whose route the config changed since (its template now fails on the payload,
/// then no route takes it at all) is still answered as the redelivery it is; a new delivery
/// of the same event is refused and leaves no record.
async fn redelivered_after_a_reload(db: &TestDb) {
    let intake = Intake::start(db).await;
    let (status, first) = intake.github("push", "d-push", fixture("push")).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{first}");
    let run = run_id(&first);
    let failing_template = HOOKS.replace(
        "prompt = 'Summarise what landed on main: {% for c",
        "prompt = '{{ release.tag_name }} {% for c",
    );
    let no_route = HOOKS.replace(
        r#"match = { ref = "refs/heads/main" }"#,
        r#"match = { ref = "refs/heads/release" }"#,
    );
    for config in [&failing_template, &no_route] {
        assert_ne!(config, HOOKS, "the reloaded config differs");
        intake.reload(config);
        let again = intake
            .github_redelivered("push", "d-push", fixture("push"), &run)
            .await;
        assert_eq!(again["runs"][0]["route"], "push");
        let (status, new) = intake.github("push", "d-push-new", fixture("push")).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{new}");
        assert!(intake.delivery("d-push-new").await.is_none());
    }
    assert_eq!(intake.delivery("d-push").await.unwrap().received, 3);
    assert_eq!(intake.runs().await.len(), 1, "redeliveries enqueue nothing");
}

async fn refusals_enqueue_nothing(db: &TestDb) {
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

async fn concurrent_copies_make_one_run(db: &TestDb) {
    let intake = Arc::new(Intake::start(db).await);
    let body = fixture("pull_request.opened");
    let mut tasks = Vec::new();
    for _ in 0..12 {
        let intake = intake.clone();
        let body = body.clone();
        tasks.push(tokio::spawn(async move {
            intake.github("pull_request", "d-storm", body).await
        }));
    }
    let mut ids = std::collections::BTreeSet::new();
    let mut accepted = 0;
    for t in tasks {
        let (status, answer) = t.await.unwrap();
        match status {
            StatusCode::ACCEPTED => {
                accepted += 1;
                assert_eq!(answer["redelivery"], false, "{answer}");
            }
            // The README: a redelivery answers with the original run ids, also when copies
            // arrive at once.
            StatusCode::OK => assert_eq!(answer["redelivery"], true, "{answer}"),
            other => panic!("a copy was answered {other}: {answer}"),
        }
        ids.insert(run_id(&answer));
    }
    assert_eq!(accepted, 1, "exactly one copy is answered 202");
    assert_eq!(
        ids.len(),
        1,
        "every copy answers with the same run: {ids:?}"
    );
    let runs = intake.runs().await;
    assert_eq!(runs.len(), 1, "one run");
    assert_eq!(
        intake.store.jobs_of_run(&runs[0].id).await.unwrap().len(),
        1
    );
    let row = intake.delivery("d-storm").await.unwrap();
    assert_eq!(row.received, 12);
    assert_eq!(row.status, nightshift_store::WebhookDeliveryStatus::Done);
}

/// Two daemons (two APIs, each with its own hooks and in-process state) on one database take
/// copies of one delivery at once: one run, one 202, every other copy a 200 redelivery.
async fn copies_across_two_daemons(db: &TestDb) {
    let daemons = [
        Arc::new(Intake::start(db).await),
        Arc::new(Intake::start(db).await),
    ];
    let body = fixture("pull_request.opened");
    let mut tasks = Vec::new();
    for i in 0..12 {
        let intake = daemons[i % 2].clone();
        let body = body.clone();
        tasks.push(tokio::spawn(async move {
            intake.github("pull_request", "d-split", body).await
        }));
    }
    let mut ids = std::collections::BTreeSet::new();
    let mut accepted = 0;
    for t in tasks {
        let (status, answer) = t.await.unwrap();
        match status {
            StatusCode::ACCEPTED => accepted += 1,
            StatusCode::OK => assert_eq!(answer["redelivery"], true, "{answer}"),
            other => panic!("a copy was answered {other}: {answer}"),
        }
        ids.insert(run_id(&answer));
    }
    assert_eq!(accepted, 1, "exactly one copy is answered 202");
    assert_eq!(ids.len(), 1, "every copy names the same run: {ids:?}");
    let runs = daemons[0].runs().await;
    assert_eq!(runs.len(), 1, "one run");
    let row = daemons[1]
        .store
        .webhook_delivery("github", "d-split")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.received, 12);
}

async fn crash_between_steps(db: &TestDb) {
    let intake = Intake::start(db).await;
    // The daemon died right after claiming d-a: the row is claimed, nothing enqueued.
    intake
        .store
        .claim_webhook_delivery("github", "d-a", "pull_request")
        .await
        .unwrap();
    let (status, a) = intake
        .github("pull_request", "d-a", fixture("pull_request.opened"))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "the retry finishes it: {a}");
    assert_eq!(a["runs"][0]["duplicate"], false);
    assert_eq!(intake.runs().await.len(), 1);

    // The daemon died after enqueuing d-b's run but before recording it.
    intake
        .store
        .claim_webhook_delivery("github", "d-b", "pull_request")
        .await
        .unwrap();
    let early = nightshift_scheduler::Intake::new(intake.store.clone(), ["reviewer"])
        .submit(nightshift_scheduler::RunRequest {
            idempotency_key: Some("webhook:github:review:d-b".into()),
            ..nightshift_scheduler::RunRequest::new(
                "reviewer",
                "enqueued before the crash",
                Trigger::Webhook,
            )
        })
        .await
        .unwrap();
    let (status, b) = intake
        .github("pull_request", "d-b", fixture("pull_request.synchronize"))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{b}");
    assert_eq!(
        (run_id(&b), &b["runs"][0]["duplicate"]),
        (early.run_id.clone(), &Value::from(true)),
        "the retry finds the run the first attempt made"
    );
    assert_eq!(intake.runs().await.len(), 2, "nothing enqueued twice");
    let row = intake
        .store
        .webhook_delivery("github", "d-b")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.status, nightshift_store::WebhookDeliveryStatus::Done);
    assert!(row.runs.unwrap().contains(&early.run_id));
    // From now on it is a plain redelivery.
    let (status, again) = intake
        .github("pull_request", "d-b", fixture("pull_request.synchronize"))
        .await;
    assert_eq!((status, run_id(&again)), (StatusCode::OK, early.run_id));
}

async fn timestamped_signatures(db: &TestDb) {
    let intake = Intake::start(db).await;
    let now_s = || intake.clock.now_secs();
    let stripe_body = br#"{"id":"evt_1QXb2d","object":"event","api_version":"2024-06-20","created":1764426000,"data":{"object":{"id":"in_1QXb2c","object":"invoice","status":"paid"}},"livemode":false,"type":"invoice.paid"}"#.to_vec();
    let stripe_sig = |t: i64, body: &[u8]| {
        let mac = hmac(
            HmacAlgorithm::Sha256,
            b"whsec_test_stripe",
            &[t.to_string().as_bytes(), b".", body],
        );
        format!("t={t},v1={}", hex_encode(&mac))
    };
    let signed_at = now_s();
    let header = stripe_sig(signed_at, &stripe_body);
    let (status, body) = intake
        .post(
            "stripe",
            &[("Stripe-Signature", header.clone())],
            stripe_body.clone(),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(
        (&body["delivery"], &body["event"]),
        (&"evt_1QXb2d".into(), &"invoice.paid".into())
    );
    let run = intake.store.run(&run_id(&body)).await.unwrap().unwrap();
    assert!(run.input.starts_with(
        "Invoice in_1QXb2c was paid\n\n[webhook stripe delivery=evt_1QXb2d event=invoice.paid]"
    ));
    // The same signed request replayed six minutes later is refused before dedupe.
    intake.clock.advance(Duration::from_secs(360));
    let (status, body) = intake
        .post(
            "stripe",
            &[("Stripe-Signature", header)],
            stripe_body.clone(),
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("360 s away"),
        "{body}"
    );

    let slack_body = br#"{"token":"XXYYZZ","team_id":"T0001","api_app_id":"A0001","event":{"type":"app_mention","user":"U061F7AUR","text":"<@U0LAN0Z89> is the deploy done?","ts":"1764426000.000200","channel":"C0LAN2Q65","event_ts":"1764426000.000200"},"type":"event_callback","event_id":"Ev0LAN670R","event_time":1764426000}"#.to_vec();
    let slack_headers = |ts: i64, body: &[u8]| {
        let mac = hmac(
            HmacAlgorithm::Sha256,
            b"slack-signing-secret",
            &[b"v0:", ts.to_string().as_bytes(), b":", body],
        );
        vec![
            ("X-Slack-Request-Timestamp", ts.to_string()),
            ("X-Slack-Signature", format!("v0={}", hex_encode(&mac))),
        ]
    };
    let (status, body) = intake
        .post(
            "slack",
            &slack_headers(now_s() - 61, &slack_body),
            slack_body.clone(),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "outside the 60 s tolerance: {body}"
    );
    let (status, body) = intake
        .post(
            "slack",
            &slack_headers(now_s() - 30, &slack_body),
            slack_body.clone(),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let run = intake.store.run(&run_id(&body)).await.unwrap().unwrap();
    assert!(
        run.input
            .starts_with("U061F7AUR said: <@U0LAN0Z89> is the deploy done?")
    );
    assert_eq!(intake.runs().await.len(), 2);
    // Slack's url_verification handshake: the signed challenge is echoed, nothing enqueued.
    let before = intake.runs().await.len();
    let handshake = br#"{"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}"#.to_vec();
    let (status, body) = intake
        .post(
            "slack",
            &slack_headers(now_s(), &handshake),
            handshake.clone(),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body,
        serde_json::json!({"challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"})
    );
    let (status, _) = intake
        .post("slack", &slack_headers(now_s(), b"{}"), handshake)
        .await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "an unsigned challenge gets nothing"
    );
    assert_eq!(intake.runs().await.len(), before);
}

trait NowSecs {
    fn now_secs(&self) -> i64;
}

impl NowSecs for ManualClock {
    fn now_secs(&self) -> i64 {
        nightshift_store::Clock::now(self) / 1000
    }
}
