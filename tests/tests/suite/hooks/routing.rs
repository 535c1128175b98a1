//! Deliveries routed, templated and deduped: GitHub payloads signed with the test secret start
//! the runs their routes name with the prompts their templates make, and a redelivery is
//! answered from its record (also when its run has ended or the reloaded config would refuse
//! it now), never enqueued again.

use nightshift_store::Trigger;
use nightshift_tests::TestDb;
use reqwest::StatusCode;
use serde_json::Value;

use super::harness::{HOOKS, Intake, fixture, run_id};

pub(super) async fn routed_templated_deduped(db: &TestDb) {
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
pub(super) async fn resume_redelivered_after_its_run_ended(db: &TestDb) {
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
pub(super) async fn redelivered_after_a_reload(db: &TestDb) {
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
