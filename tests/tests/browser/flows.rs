//! What an operator does in the dashboard, in a real browser against a real daemon: sign in
//! (and be refused with a wrong token), find a run and read its timeline, approve a call
//! (asked first, seeing the call, the prompt and the model's text, in the dialog or on the
//! confirm page), cancel through the confirm dialog, wake a sleeper, filter and page the
//! list, watch a run, the runs list, the queue and the approvals inbox change without
//! reloading, and have a cross-site form refused.

use std::time::Duration;

use fantoccini::key::Key;
use nightshift_store::RunStatus;
use nightshift_tests::{Backend, TestDb, eventually};
use serde_json::json;

use crate::daemon::Serve;
use crate::harness::Browser;

/// A fresh database, daemon and browser for `test`, or `None` when skipped.
pub(crate) async fn setup(backend: Backend, test: &str) -> Option<(TestDb, Serve, Browser)> {
    let db = TestDb::new(backend, test).await?;
    let browser = Browser::start(test).await?;
    let serve = Serve::start(&db).await;
    Some((db, serve, browser))
}

pub(crate) async fn teardown(db: TestDb, serve: Serve, browser: Browser) {
    browser.finish().await;
    serve.stop().await;
    db.cleanup().await;
}

/// Signs in through the login form with `token`.
async fn sign_in_with(b: &Browser, serve: &Serve, token: &str) {
    b.goto(&serve.url("/ui/login")).await;
    let field = b.find("form#login input[name=token]").await;
    field.send_keys(token).await.unwrap();
    b.find("form#login button[type=submit]")
        .await
        .click()
        .await
        .unwrap();
}

pub(crate) async fn sign_in(b: &Browser, serve: &Serve) {
    sign_in_with(b, serve, &serve.token).await;
    b.until(
        "the runs list after signing in",
        "return location.pathname === '/ui/runs' && !!document.querySelector('table#runs')",
    )
    .await;
}

/// The run ids in the runs table, top to bottom.
async fn ids(b: &Browser) -> Vec<String> {
    let v = b
        .js("return Array.from(document.querySelectorAll('table#runs tr[data-run-id]')).map(r => r.dataset.runId)")
        .await;
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

async fn click(b: &Browser, css: &str) {
    b.find(css)
        .await
        .click()
        .await
        .unwrap_or_else(|e| panic!("click `{css}`: {e}"));
}

/// Opens the run's page and waits for its timeline.
pub(crate) async fn open_run(b: &Browser, serve: &Serve, id: &str) {
    b.goto(&serve.url(&format!("/ui/runs/{id}"))).await;
    b.find("ol#timeline").await;
}

async fn opens_the_dialog(b: &Browser) {
    b.until(
        "the confirm dialog to open",
        "return document.getElementById('confirm').open === true",
    )
    .await;
}

pub(crate) async fn waits_for_status(b: &Browser, status: &str) {
    b.until(
        &format!("the run page to say {status}"),
        &format!(
            "var s = document.getElementById('run-status'); return !!s && s.dataset.status === '{status}'"
        ),
    )
    .await;
}

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
async fn a_call_waiting_for_approval_is_approved_from_the_page_and_the_run_finishes() {
    let Some((db, serve, b)) = setup(Backend::Sqlite, "browser_approve").await else {
        return;
    };
    sign_in(&b, &serve).await;
    let id = serve.enqueue("deployer", "Deploy v2.", json!({})).await;
    // Opened before the call asks: the approval arrives on the open page, live.
    open_run(&b, &serve, &id).await;
    b.find("li[data-kind=approval] form[data-action=approve] button")
        .await;
    assert_eq!(serve.status(&id).await, RunStatus::AwaitingApproval);
    let item = b.find("li[data-kind=approval]").await.text().await.unwrap();
    assert!(
        item.contains("\"version\": \"v2\""),
        "the call's input: {item}"
    );
    b.screenshot("approval").await;
    // Approve asks first, like deny, showing what is decided on; "keep it" changes nothing.
    let approve = "li[data-kind=approval] form[data-action=approve] button";
    click(&b, approve).await;
    opens_the_dialog(&b).await;
    let shown = b.find("#confirm").await.text().await.unwrap();
    for part in [
        "Approve this call?",
        "deploy",
        "\"version\": \"v2\"",
        "Deploy v2.",
        "Tests are green; deploying v2 to staging.",
    ] {
        assert!(shown.contains(part), "the dialog shows {part:?}:\n{shown}");
    }
    b.screenshot("confirm-approve").await;
    click(&b, "dialog#confirm button#confirm-no").await;
    b.until(
        "the dialog to close",
        "return document.getElementById('confirm').open === false",
    )
    .await;
    assert_eq!(
        serve.status(&id).await,
        RunStatus::AwaitingApproval,
        "keeping it changes nothing"
    );
    click(&b, approve).await;
    opens_the_dialog(&b).await;
    click(&b, "dialog#confirm button#confirm-yes").await;
    b.find(".flash").await;
    waits_for_status(&b, "succeeded").await;
    serve.wait_for(&id, RunStatus::Succeeded).await;
    b.until(
        "the deploy call's result on the page",
        "return document.getElementById('timeline').innerText.includes('deployed v2')",
    )
    .await;
    let approval = serve
        .store
        .approval(&id, "call_deploy")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(approval.status.as_str(), "approved", "{approval:?}");
    teardown(db, serve, b).await;
}

#[tokio::test]
async fn the_approvals_inbox_fills_live_and_approve_asks_first_with_or_without_script() {
    let Some((db, serve, b)) = setup(Backend::Sqlite, "browser_inbox").await else {
        return;
    };
    sign_in(&b, &serve).await;
    b.goto(&serve.url("/ui/approvals")).await;
    b.find("table#approvals tr.empty").await;
    b.js("window.__same_page = 5; return true").await;
    // A call that starts waiting arrives on the open inbox with what it decides on.
    let first = serve
        .enqueue("deployer", "Deploy v2 to staging <eu>.", json!({}))
        .await;
    let row = format!("table#approvals tr[data-run-id='{first}']");
    let text = b.find(&row).await.text().await.unwrap();
    for part in [
        "deploy",
        "\"version\": \"v2\"",
        "Deploy v2 to staging <eu>.",
        "Tests are green; deploying v2 to staging.",
    ] {
        assert!(text.contains(part), "the row shows {part:?}:\n{text}");
    }
    // A reason being typed survives the list's updates (the row is in use).
    b.find(&format!("{row} input[name=reason]"))
        .await
        .send_keys("half typed")
        .await
        .unwrap();
    let second = serve
        .enqueue("deployer", "Deploy v2 to production.", json!({}))
        .await;
    b.find(&format!("table#approvals tr[data-run-id='{second}']"))
        .await;
    assert_eq!(
        b.js(&format!(
            "return document.querySelector(\"{row} input[name=reason]\").value"
        ))
        .await,
        json!("half typed"),
        "the typed reason is kept"
    );
    assert_eq!(
        b.js("return window.__same_page").await,
        json!(5),
        "no reload"
    );

    // Without the dialog (as without script) approve answers with its confirm page, which
    // shows the call, the prompt and the model's text, and approves through its form.
    b.js(&format!(
        "document.querySelector(\"{row} form[data-action=approve]\").submit(); return true"
    ))
    .await;
    b.find("dl.decision").await;
    let page = b.text().await;
    for part in [
        "Approve call call_deploy",
        "deploy",
        "\"version\": \"v2\"",
        "Deploy v2 to staging <eu>.",
        "Tests are green; deploying v2 to staging.",
    ] {
        assert!(
            page.contains(part),
            "the confirm page shows {part:?}:\n{page}"
        );
    }
    b.screenshot("confirm-approve-page").await;
    assert_eq!(serve.status(&first).await, RunStatus::AwaitingApproval);
    click(&b, "form#confirm-form button[type=submit]").await;
    let flash = b.find(".flash").await.text().await.unwrap();
    assert!(flash.contains("Approved call call_deploy"), "{flash}");
    assert_eq!(b.path().await, "/ui/approvals");
    serve.wait_for(&first, RunStatus::Succeeded).await;

    // And through the dialog from the inbox; the decided row leaves the open page.
    let row = format!("table#approvals tr[data-run-id='{second}']");
    click(&b, &format!("{row} form[data-action=approve] button")).await;
    opens_the_dialog(&b).await;
    let shown = b.find("#confirm").await.text().await.unwrap();
    assert!(
        shown.contains("Deploy v2 to production.") && shown.contains("\"version\": \"v2\""),
        "{shown}"
    );
    click(&b, "dialog#confirm button#confirm-yes").await;
    b.find(".flash").await;
    serve.wait_for(&second, RunStatus::Succeeded).await;
    b.find("table#approvals tr.empty").await;
    teardown(db, serve, b).await;
}

#[tokio::test]
async fn the_queue_and_the_filtered_runs_list_update_live() {
    let Some((db, serve, b)) = setup(Backend::Sqlite, "browser_live_lists").await else {
        return;
    };
    sign_in(&b, &serve).await;
    // The queue: a running job's lease and state arrive without a reload.
    b.goto(&serve.url("/ui/queue")).await;
    b.find("table#leases tr.empty").await;
    b.js("window.__same_page = 1; return true").await;
    let held = serve.enqueue("slow", "Hold the gate.", json!({})).await;
    b.find("table#leases tr[data-job-id]").await;
    b.find("table#queue-states tr[data-state=running]").await;
    assert_eq!(
        b.js("return window.__same_page").await,
        json!(1),
        "no reload"
    );

    // The runs list, filtered to one agent: its new runs arrive and change status live;
    // another agent's never show, and the filter form keeps its choice.
    b.goto(&serve.url("/ui/runs?agent=slow")).await;
    b.find(&format!(
        "tr[data-run-id='{held}'] td.status[data-status=running]"
    ))
    .await;
    b.js("window.__same_page = 2; return true").await;
    let other = serve.enqueue("reviewer", "Review PR #9", json!({})).await;
    let second = serve.enqueue("slow", "Hold it again.", json!({})).await;
    b.find(&format!("table#runs tr[data-run-id='{second}']"))
        .await;
    assert_eq!(
        ids(&b).await.first(),
        Some(&second),
        "the new run on top, newest first"
    );
    std::fs::write(serve.gate("go"), "").unwrap();
    for id in [&held, &second] {
        b.find(&format!(
            "tr[data-run-id='{id}'] td.status[data-status=succeeded]"
        ))
        .await;
    }
    serve.wait_for(&other, RunStatus::Succeeded).await;
    serve.wait_for(&second, RunStatus::Succeeded).await;
    // A second after both ended the list has been sent again at least once: still
    // filtered.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert_eq!(ids(&b).await, vec![second.clone(), held.clone()]);
    assert_eq!(
        b.js("return document.querySelector('form#filters select[name=agent]').value")
            .await,
        json!("slow")
    );
    assert_eq!(
        b.js("return window.__same_page").await,
        json!(2),
        "no reload"
    );
    teardown(db, serve, b).await;
}

#[tokio::test]
async fn cancel_from_the_page_asks_first_and_then_cancels() {
    let Some((db, serve, b)) = setup(Backend::Sqlite, "browser_cancel").await else {
        return;
    };
    sign_in(&b, &serve).await;
    let id = serve.enqueue("slow", "Hold the gate.", json!({})).await;
    let started = serve.gate("started");
    eventually(Duration::from_secs(60), "the gate to start", || async {
        started.exists().then_some(())
    })
    .await;
    open_run(&b, &serve, &id).await;
    // The dialog asks; "keep it" changes nothing.
    click(&b, "form[data-action=cancel] button").await;
    b.until(
        "the confirm dialog to open",
        "return document.getElementById('confirm').open === true",
    )
    .await;
    let asked = b.find("#confirm-text").await.text().await.unwrap();
    assert!(asked.contains("cannot be undone"), "{asked}");
    b.screenshot("confirm-cancel").await;
    click(&b, "dialog#confirm button#confirm-no").await;
    b.until(
        "the dialog to close",
        "return document.getElementById('confirm').open === false",
    )
    .await;
    assert_eq!(
        serve.status(&id).await,
        RunStatus::Running,
        "keeping it changes nothing"
    );
    // Asked again and confirmed: cancelled, through the same store call as the API.
    click(&b, "form[data-action=cancel] button").await;
    b.until(
        "the confirm dialog to open",
        "return document.getElementById('confirm').open === true",
    )
    .await;
    click(&b, "dialog#confirm button#confirm-yes").await;
    let flash = b.find(".flash").await.text().await.unwrap();
    assert!(flash.to_lowercase().contains("cancel"), "{flash}");
    serve.wait_for(&id, RunStatus::Cancelled).await;
    waits_for_status(&b, "cancelled").await;
    teardown(db, serve, b).await;
}

#[tokio::test]
async fn a_sleeping_run_is_woken_from_the_page() {
    let Some((db, serve, b)) = setup(Backend::Sqlite, "browser_wake").await else {
        return;
    };
    sign_in(&b, &serve).await;
    let id = serve
        .enqueue("sleeper", "Sleep until CI is done.", json!({}))
        .await;
    serve.wait_for(&id, RunStatus::Waiting).await;
    open_run(&b, &serve, &id).await;
    let wakeup = b
        .find("ol#timeline > li[data-kind=wakeup]")
        .await
        .text()
        .await
        .unwrap();
    assert!(
        wakeup.contains("wait for CI"),
        "the wakeup says why: {wakeup}"
    );
    click(&b, "form[data-action=wake] button").await;
    b.find(".flash").await;
    serve.wait_for(&id, RunStatus::Succeeded).await;
    waits_for_status(&b, "succeeded").await;
    b.until(
        "the answer after waking",
        "return document.getElementById('timeline').innerText.includes('Woke up and finished.')",
    )
    .await;
    teardown(db, serve, b).await;
}

#[tokio::test]
async fn filters_and_pages_narrow_the_runs_list() {
    let Some((db, serve, b)) = setup(Backend::Sqlite, "browser_filters").await else {
        return;
    };
    sign_in(&b, &serve).await;
    let done = serve
        .enqueue("reviewer", "Review PR #1000", json!({}))
        .await;
    serve.wait_for(&done, RunStatus::Succeeded).await;
    // 53 more, held an hour in the queue so they stay as they are.
    let mut all = vec![done.clone()];
    for i in 0..53 {
        let key = if i % 2 == 0 { "repo-a" } else { "repo-b" };
        all.push(
            serve
                .enqueue(
                    "reviewer",
                    &format!("Review PR #{i}"),
                    json!({"delay_seconds": 3600, "concurrency_key": key, "idempotency_key": format!("pr-{i}")}),
                )
                .await,
        );
    }
    b.goto(&serve.url("/ui/runs")).await;
    b.find("table#runs tr[data-run-id]").await;
    let first = ids(&b).await;
    assert_eq!(first.len(), 50, "a page holds 50");
    assert_eq!(first[0], *all.last().unwrap(), "newest first");
    click(&b, "a#next-page").await;
    b.until(
        "the second page",
        "return location.search.includes('cursor=')",
    )
    .await;
    let second = ids(&b).await;
    assert_eq!(second.len(), 4, "{second:?}");
    assert!(
        b.all("a#next-page").await.is_empty(),
        "no page after the last"
    );
    let mut seen: Vec<String> = first.iter().chain(second.iter()).cloned().collect();
    seen.sort();
    let mut want = all.clone();
    want.sort();
    assert_eq!(seen, want, "every run once over the two pages");

    // Status through the form.
    b.goto(&serve.url("/ui/runs")).await;
    b.js("document.querySelector('form#filters select[name=status]').value = 'succeeded'; return true").await;
    click(&b, "form#filters button[type=submit]").await;
    b.until(
        "the status filter",
        "return location.search.includes('status=succeeded')",
    )
    .await;
    assert_eq!(ids(&b).await, vec![done.clone()]);
    // A key, then text of a prompt.
    b.goto(&serve.url("/ui/runs")).await;
    b.find("form#filters input[name=key]")
        .await
        .send_keys("repo-b")
        .await
        .unwrap();
    click(&b, "form#filters button[type=submit]").await;
    b.until(
        "the key filter",
        "return location.search.includes('key=repo-b')",
    )
    .await;
    assert_eq!(ids(&b).await.len(), 26);
    b.goto(&serve.url("/ui/runs")).await;
    b.find("form#filters input[name=q]")
        .await
        .send_keys("PR #17")
        .await
        .unwrap();
    click(&b, "form#filters button[type=submit]").await;
    b.until("the search", "return location.search.includes('q=')")
        .await;
    assert_eq!(ids(&b).await, vec![all[18].clone()], "only 'Review PR #17'");
    teardown(db, serve, b).await;
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
async fn the_keyboard_alone_reaches_cancel_and_escape_keeps_the_run() {
    let Some((db, serve, b)) = setup(Backend::Sqlite, "browser_keyboard").await else {
        return;
    };
    sign_in(&b, &serve).await;
    let id = serve.enqueue("slow", "Hold the gate.", json!({})).await;
    serve.wait_for(&id, RunStatus::Running).await;
    open_run(&b, &serve, &id).await;
    // Tab from the top of the page until the cancel button has the focus.
    let on_cancel =
        "var a = document.activeElement; return !!a && !!a.closest('form[data-action=cancel]')";
    let mut tabs = 0;
    while b.js(on_cancel).await != json!(true) {
        tabs += 1;
        assert!(tabs <= 20, "the cancel button is not reached with Tab");
        b.press(Key::Tab).await;
    }
    let ring = b
        .js("return getComputedStyle(document.activeElement).outlineStyle")
        .await;
    assert_eq!(
        ring,
        json!("solid"),
        "the focused button shows a focus ring"
    );
    b.press(Key::Enter).await;
    b.until(
        "the confirm dialog to open",
        "return document.getElementById('confirm').open === true",
    )
    .await;
    // The dialog takes the focus on its safe choice; Escape closes it and changes nothing.
    let focused = b.js("return document.activeElement.id").await;
    assert_eq!(
        focused,
        json!("confirm-no"),
        "the safe button has the focus"
    );
    b.press(Key::Escape).await;
    b.until(
        "the dialog to close",
        "return document.getElementById('confirm').open === false",
    )
    .await;
    assert_eq!(serve.status(&id).await, RunStatus::Running);
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

#[tokio::test]
async fn a_schedule_is_triggered_from_its_page_and_a_delivery_leads_to_its_run() {
    let Some((db, serve, b)) = setup(Backend::Sqlite, "browser_schedules_hooks").await else {
        return;
    };
    sign_in(&b, &serve).await;
    b.goto(&serve.url("/ui/schedules")).await;
    let row = "table#schedules tr[data-schedule=nightly-digest]";
    let local = b
        .find(&format!("{row} td.next-local"))
        .await
        .text()
        .await
        .unwrap();
    let utc = b
        .find(&format!("{row} td.next-utc"))
        .await
        .text()
        .await
        .unwrap();
    assert!(
        !local.trim().is_empty() && !utc.trim().is_empty(),
        "next fires: {local} / {utc}"
    );
    assert_ne!(local, utc, "07:00 in Berlin is not 07:00 UTC");
    click(&b, &format!("{row} form[data-action=trigger] button")).await;
    let flash = b.find(".flash").await.text().await.unwrap();
    assert!(flash.contains("enqueued"), "{flash}");
    let runs = serve
        .store
        .runs_page(
            &nightshift_store::RunFilter {
                trigger: Some(nightshift_store::Trigger::Schedule),
                ..Default::default()
            },
            None,
            10,
        )
        .await
        .unwrap()
        .runs;
    assert_eq!(runs.len(), 1, "one run from the schedule: {runs:?}");
    assert!(
        flash.contains(&runs[0].id),
        "the flash names the run: {flash}"
    );

    assert_eq!(serve.deliver("delivery-1", "main").await, 202);
    b.goto(&serve.url("/ui/hooks")).await;
    let delivery = "section.hook[data-hook=ci] table.deliveries tr[data-delivery-id]";
    b.find(delivery).await;
    click(&b, &format!("{delivery} a[href^='/ui/runs/']")).await;
    b.find("ol#timeline > li[data-kind=prompt]").await;
    let prompt = b
        .find("ol#timeline > li[data-kind=prompt]")
        .await
        .text()
        .await
        .unwrap();
    assert!(prompt.contains("CI finished on main"), "{prompt}");
    teardown(db, serve, b).await;
}

#[tokio::test]
async fn a_cross_site_form_is_refused_and_changes_nothing() {
    let Some((db, serve, b)) = setup(Backend::Sqlite, "browser_cross_site").await else {
        return;
    };
    sign_in(&b, &serve).await;
    let id = serve.enqueue("slow", "Hold the gate.", json!({})).await;
    serve.wait_for(&id, RunStatus::Running).await;
    // Another origin on the same host (so the browser still sends the session cookie) whose
    // page posts a cancel form to the dashboard as soon as it loads.
    let target = serve.url(&format!("/ui/runs/{id}/cancel"));
    let page = format!(
        "<!doctype html><form id=f method=post action=\"{target}\">\
         <input name=csrf value=guessed><input name=confirmed value=yes></form>\
         <script>document.getElementById('f').submit()</script>"
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let evil = format!("http://{}/", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        let app = axum::Router::new().route(
            "/",
            axum::routing::get(move || {
                let page = page.clone();
                async move { axum::response::Html(page) }
            }),
        );
        axum::serve(listener, app).await.unwrap();
    });
    b.goto(&evil).await;
    b.until(
        "the dashboard's refusal",
        "return location.pathname.endsWith('/cancel') && document.body.innerText.includes('Nothing was changed')",
    )
    .await;
    assert_eq!(
        serve.status(&id).await,
        RunStatus::Running,
        "the run was not cancelled"
    );
    server.abort();
    teardown(db, serve, b).await;
}
