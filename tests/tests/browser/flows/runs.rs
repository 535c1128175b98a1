//! Reading runs: an operator signs in (a wrong token refused) and reads a run's timeline with
//! every tool call, watches the timeline update while the run works, and follows a background
//! task's streamed output (a cut output opening whole).

use nightshift_store::RunStatus;
use nightshift_tests::Backend;
use serde_json::json;

use super::{click, open_run, setup, sign_in, sign_in_with, teardown, waits_for_status};

async fn reads_a_run(backend: Backend, test: &str) {
    let Some((db, serve, b)) = setup(backend, test).await else {
        return;
    };
    // A wrong token is refused on the login page, and nothing is signed in.
    sign_in_with(&b, &serve, "not-the-token").await;
    b.until(
        "the wrong token to be refused",
        "return !!document.querySelector('form#login') && document.body.innerText.includes('not the API token')",
    )
    .await;
    b.goto(&serve.url("/ui/runs")).await;
    assert_eq!(
        b.path().await,
        "/ui/login",
        "a refused sign-in sets no session"
    );

    sign_in(&b, &serve).await;
    let id = serve
        .enqueue(
            "reviewer",
            "Review PR #7 <script>alert(1)</script>",
            json!({}),
        )
        .await;
    serve.wait_for(&id, RunStatus::Succeeded).await;
    b.goto(&serve.url("/ui/runs")).await;
    b.find(&format!(
        "tr[data-run-id='{id}'] td.status[data-status=succeeded]"
    ))
    .await;
    let text = b.text().await;
    assert!(
        text.contains("<script>alert(1)</script>"),
        "the prompt shown as text: {text}"
    );

    click(&b, &format!("tr[data-run-id='{id}'] td a")).await;
    waits_for_status(&b, "succeeded").await;
    assert_eq!(b.path().await, format!("/ui/runs/{id}"));
    for call in ["call_lint", "call_post"] {
        b.find(&format!(
            "ol#timeline > li[data-kind=tool_call][data-call-id={call}]"
        ))
        .await;
    }
    assert_eq!(b.all("ol#timeline > li[data-kind=prompt]").await.len(), 1);
    assert_eq!(
        b.all("ol#timeline > li[data-kind=model_turn]").await.len(),
        3
    );
    let text = b.text().await;
    for shown in [
        "lint: 2 warnings in src/main.rs",
        "review posted",
        "Reviewed: two warnings, posted.",
    ] {
        assert!(
            text.contains(shown),
            "the timeline shows {shown:?}:\n{text}"
        );
    }
    let result = b
        .find("ol#timeline > li[data-kind=result]")
        .await
        .text()
        .await
        .unwrap();
    assert!(result.contains("Reviewed: two warnings"), "{result}");
    teardown(db, serve, b).await;
}

#[tokio::test]
async fn an_operator_signs_in_and_reads_a_run_with_every_tool_call_sqlite() {
    reads_a_run(Backend::Sqlite, "browser_reads_a_run_sqlite").await;
}

#[tokio::test]
async fn an_operator_signs_in_and_reads_a_run_with_every_tool_call_postgres() {
    reads_a_run(Backend::Postgres, "browser_reads_a_run_postgres").await;
}

#[tokio::test]
async fn the_timeline_updates_live_while_a_run_works() {
    let Some((db, serve, b)) = setup(Backend::Sqlite, "browser_live").await else {
        return;
    };
    sign_in(&b, &serve).await;
    let id = serve
        .enqueue("slow", "Go through the gate.", json!({}))
        .await;
    open_run(&b, &serve, &id).await;
    b.find("ol#timeline > li[data-kind=tool_call][data-call-id=call_gate]")
        .await;
    waits_for_status(&b, "running").await;
    // A mark on this page: a reload would lose it.
    b.js("window.__same_page = 42; return true").await;
    std::fs::write(serve.gate("go"), "").unwrap();
    waits_for_status(&b, "succeeded").await;
    b.until(
        "the final answer to arrive",
        "var r = document.querySelector('ol#timeline > li[data-kind=result]'); return !!r && r.innerText.includes('Through the gate.')",
    )
    .await;
    assert!(
        b.text().await.contains("gate-open"),
        "the tool's result arrived live"
    );
    assert_eq!(
        b.js("return window.__same_page").await,
        json!(42),
        "no reload"
    );
    teardown(db, serve, b).await;
}

#[tokio::test]
async fn a_background_task_streams_its_output_and_a_cut_output_opens_whole() {
    let Some((db, serve, b)) = setup(Backend::Sqlite, "browser_task").await else {
        return;
    };
    sign_in(&b, &serve).await;
    let id = serve.enqueue("builder", "Build it.", json!({})).await;
    open_run(&b, &serve, &id).await;
    // The task's newest output, read from the daemon's disk while it runs.
    b.until(
        "the running task's output",
        "var t = document.querySelector('ol#timeline > li[data-kind=task]'); return !!t && t.innerText.includes('compiling-step-one')",
    )
    .await;
    b.js("window.__same_page = 7; return true").await;
    std::fs::write(serve.gate("task-go"), "").unwrap();
    b.until(
        "the task's ending on the page",
        "var t = document.querySelector('ol#timeline > li[data-kind=task]'); return !!t && t.innerText.includes('linked-step-two') && t.innerText.includes('succeeded')",
    )
    .await;
    waits_for_status(&b, "succeeded").await;
    assert_eq!(
        b.js("return window.__same_page").await,
        json!(7),
        "no reload"
    );
    // Its output (eleven short lines, collapsed by its lines) shows a head and a tail that
    // never repeat a line.
    let task = b
        .find("ol#timeline > li[data-kind=task]")
        .await
        .text()
        .await
        .unwrap();
    let output: Vec<&str> = task
        .lines()
        .skip_while(|l| !l.starts_with("echo compiling-step-one"))
        .skip(1)
        .collect();
    for line in ["compiling-step-one", "linked-step-two", "unit-9-ok"] {
        assert_eq!(
            output.iter().filter(|l| l.contains(line)).count(),
            1,
            "{line} shown once in the task's output:\n{task}"
        );
    }
    assert_eq!(
        b.all("ol#timeline > li[data-kind=task]").await.len(),
        1,
        "one item for the task"
    );
    // The cut output: head and tail on the page, the whole one click away.
    let call = b
        .find("ol#timeline > li[data-kind=tool_call][data-call-id=call_seq]")
        .await
        .text()
        .await
        .unwrap();
    assert!(call.contains("big-output-end"), "the tail is shown: {call}");
    let href = b
        .find("li[data-call-id=call_seq] p.artifact a")
        .await
        .attr("href")
        .await
        .unwrap()
        .expect("an href");
    b.goto(&serve.url(&href)).await;
    let whole = b.text().await;
    assert!(
        whole.contains("\n10000\n") && whole.contains("big-output-end"),
        "the artifact holds the whole output ({} chars)",
        whole.len()
    );
    b.goto(&serve.url(&format!("/ui/runs/{id}/artifacts/..%2F..%2Fapi-token")))
        .await;
    let refused = b.text().await;
    assert!(
        refused.contains("No such artifact") && !refused.contains(&serve.token),
        "no way out of the run's files (data/api-token is two levels up): {refused}"
    );
    teardown(db, serve, b).await;
}
