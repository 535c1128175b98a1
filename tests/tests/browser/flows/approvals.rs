//! Approving from the browser: a call waiting for approval is approved from the run's page and
//! the run finishes; the approvals inbox fills live, and approve asks first (in the dialog, or
//! on the confirm page without script), showing the call, the prompt and the model's text.

use nightshift_store::RunStatus;
use nightshift_tests::Backend;
use serde_json::json;

use super::{click, open_run, opens_the_dialog, setup, sign_in, teardown, waits_for_status};

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
