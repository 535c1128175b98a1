//! The approvals inbox: approvals decided from it and coming back to it, and approve asking
//! first, showing the call, the prompt and the model's text (escaped).

use std::time::Duration;

use nightshift_store::{ApprovalStatus, NewApproval, NewRun};
use nightshift_tests::TestDb;
use reqwest::StatusCode;
use reqwest::header::LOCATION;

use super::{back_to, element, get, refused_then, row};
use crate::dashboard::{Dash, csrf_of};

pub(super) async fn approvals_page(db: &TestDb) {
    let store = db.store().await;
    let mut calls = Vec::new();
    for (call, input) in [
        ("call-1", "{\"cmd\":\"<script>rm -rf</script>\"}"),
        ("call-2", "{}"),
    ] {
        let run_id = store
            .enqueue(&NewRun::new("helper", "p"))
            .await
            .unwrap()
            .run_id;
        store
            .request_approval(&NewApproval {
                run_id: &run_id,
                call_id: call,
                tool: "shell",
                input,
                input_hash: "h",
                expires_at: store.now() + 3_600_000,
            })
            .await
            .unwrap();
        calls.push((run_id, call));
    }
    let d = Dash::start_with(store.clone(), nightshift_runner::hooks::none()).await;
    let cookie = d.sign_in().await;
    let (code, _, page) = get(&d, "/ui/approvals", Some(&cookie)).await;
    assert_eq!(code, StatusCode::OK);
    let (run1, call1) = calls[0].clone();
    let (run2, call2) = calls[1].clone();
    let first = page.find(&format!("data-call-id=\"{call1}\"")).unwrap();
    let second = page.find(&format!("data-call-id=\"{call2}\"")).unwrap();
    assert!(first < second, "oldest first");
    let r = row(
        &page,
        &format!("data-run-id=\"{run1}\" data-call-id=\"{call1}\""),
    );
    assert!(
        r.contains("&lt;script&gt;rm -rf&lt;/script&gt;") && !r.contains("<script>rm"),
        "{r}"
    );
    assert!(r.contains(">helper<") && r.contains(">shell<"), "{r}");
    assert!(r.contains("ago</time>") && r.contains(&format!("href=\"/ui/runs/{run1}\"")));
    assert!(r.contains("data-action=\"approve\"") && r.contains("data-action=\"deny\""));
    assert!(r.contains("name=\"reason\"") && r.contains("name=\"return\" value=\"approvals\""));

    let status = |run: String, call: &'static str| {
        let store = store.clone();
        async move { store.approval(&run, call).await.unwrap().unwrap().status }
    };
    let path = format!("/ui/runs/{run1}/approvals/{call1}");
    let pending = || async {
        assert_eq!(
            status(run1.clone(), call1).await,
            ApprovalStatus::Pending,
            "undecided"
        );
    };
    let done = refused_then(
        &d,
        &cookie,
        &path,
        "decision=approve&return=approvals&confirmed=yes",
        pending,
    )
    .await;
    let to = back_to(&done, "/ui/approvals");
    assert_eq!(status(run1.clone(), call1).await, ApprovalStatus::Approved);
    let (_, _, after) = get(&d, &to, Some(&cookie)).await;
    assert!(
        after.contains(&format!("Approved call {call1} of run {run1}")),
        "{after}"
    );
    assert!(
        !after.contains(&format!("data-call-id=\"{call1}\"")),
        "decided calls leave the inbox"
    );

    // Only known pages to go back to; anything else is refused and changes nothing.
    let csrf = csrf_of(&after);
    let path2 = format!("/ui/runs/{run2}/approvals/{call2}");
    let evil = d
        .post_form(
            &path2,
            &format!("csrf={csrf}&decision=approve&return=https%3A%2F%2Fevil.example%2F"),
            Some(&cookie),
            None,
        )
        .await;
    assert_eq!(evil.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert!(evil.headers().get(LOCATION).is_none());
    assert_eq!(status(run2.clone(), call2).await, ApprovalStatus::Pending);
    // Deny asks first; its way back is the inbox, and the confirmed deny comes back to it.
    let ask = d
        .post_form(
            &path2,
            &format!("csrf={csrf}&decision=deny&reason=no&return=approvals"),
            Some(&cookie),
            None,
        )
        .await
        .text()
        .await
        .unwrap()
        .replace("&#x2f;", "/");
    assert!(ask.contains("href=\"/ui/approvals\">No, go back"), "{ask}");
    assert!(ask.contains("name=\"return\" value=\"approvals\""), "{ask}");
    assert_eq!(status(run2.clone(), call2).await, ApprovalStatus::Pending);
    let denied = d
        .post_form(
            &path2,
            &format!("csrf={csrf}&decision=deny&reason=no&return=approvals&confirmed=yes"),
            Some(&cookie),
            None,
        )
        .await;
    back_to(&denied, "/ui/approvals");
    assert_eq!(status(run2.clone(), call2).await, ApprovalStatus::Denied);
    // Both decisions are in the audit trail, by the dashboard, and kept on the approvals.
    let trail: Vec<(String, String, String, Option<String>)> = d
        .store
        .audit_log(None, None, 10)
        .await
        .unwrap()
        .into_iter()
        .rev()
        .map(|a| (a.actor, a.action, a.target, a.detail))
        .collect();
    assert_eq!(
        trail,
        [
            (
                "dashboard:admin".to_string(),
                "approve".to_string(),
                format!("{run1}/{call1}"),
                None
            ),
            (
                "dashboard:admin".to_string(),
                "deny".to_string(),
                format!("{run2}/{call2}"),
                Some("no".to_string())
            ),
        ]
    );
    let decided = d.store.approval(&run2, call2).await.unwrap().unwrap();
    assert_eq!(decided.decided_by.as_deref(), Some("dashboard:admin"));
    // The run's page lists what operators did to it.
    let (_, _, page) = get(&d, &format!("/ui/runs/{run2}"), Some(&cookie)).await;
    assert!(page.contains("Operator actions"), "{page}");
    assert!(
        page.contains("<tr data-action=\"deny\">") && page.contains("dashboard:admin"),
        "{page}"
    );
    assert!(
        !page.contains("data-action=\"approve\"><td>"),
        "only this run's: {page}"
    );
}

/// A run of `helper` with `prompt` whose model wrote `said` and called `deploy` with `input`,
/// waiting for approval as the agent loop leaves it (the assistant message and the
/// `approval_requested` event logged under the run's lease, the approval row stored).
pub(super) async fn waiting_deploy(
    store: &nightshift_store::Store,
    prompt: &str,
    said: &str,
    call: &str,
    input: serde_json::Value,
) -> String {
    use nightshift_agent::events::RunEvent;
    use nightshift_llm::{ContentBlock, Message, Role, StopReason, Usage};
    let run_id = store
        .enqueue(&NewRun::new("helper", prompt))
        .await
        .unwrap()
        .run_id;
    let lease = store
        .claim("w-dash", None, 10, Duration::from_secs(600))
        .await
        .unwrap()
        .into_iter()
        .find(|l| l.job().run_id == run_id)
        .expect("the run's job is claimed");
    let events = [
        RunEvent::AssistantMessage {
            message: Message {
                role: Role::Assistant,
                content: vec![
                    ContentBlock::Text { text: said.into() },
                    ContentBlock::ToolUse {
                        id: call.into(),
                        name: "deploy".into(),
                        input: input.clone(),
                        unparsed: None,
                    },
                ],
            },
            stop_reason: StopReason::ToolUse,
            usage: Usage::default(),
            model: "scripted-1".into(),
            cost_usd: 0.0,
            latency_ms: None,
            retries: 0,
        },
        RunEvent::ApprovalRequested {
            call_id: call.into(),
            name: "deploy".into(),
            input_hash: "h".into(),
            expires_at: store.now() + 3_600_000,
        },
    ];
    for e in &events {
        lease.append_event(e.kind(), &e.payload()).await.unwrap();
    }
    store
        .request_approval(&NewApproval {
            run_id: &run_id,
            call_id: call,
            tool: "deploy",
            input: &input.to_string(),
            input_hash: "h",
            expires_at: store.now() + 3_600_000,
        })
        .await
        .unwrap();
    run_id
}

/// The hidden fields of the form `id` on `page`, as a form body.
fn form_body(page: &str, id: &str) -> String {
    let form = element(page, &format!("<form id=\"{id}\""), "</form>");
    let mut fields = Vec::new();
    for input in form.split("<input").skip(1) {
        let attr = |name: &str| {
            let key = format!("{name}=\"");
            input.find(&key).map(|at| {
                let rest = &input[at + key.len()..];
                rest[..rest.find('"').unwrap()].to_string()
            })
        };
        if let (Some(name), Some(value)) = (attr("name"), attr("value")) {
            let value = value.replace("&#x2f;", "/");
            fields.push(format!("{name}={}", form_value(&value)));
        }
    }
    fields.join("&")
}

/// `text` percent-encoded for a form body.
fn form_value(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub(super) async fn approve_confirms(db: &TestDb) {
    let store = db.store().await;
    let input = serde_json::json!({"version": "v2", "target": "staging <eu>"});
    let run_id = waiting_deploy(
        &store,
        "Ship <v2> to staging",
        "Tests pass; deploying v2 & watching the health checks.",
        "call-ship",
        input,
    )
    .await;
    let d = Dash::start_with(store.clone(), nightshift_runner::hooks::none()).await;
    let cookie = d.sign_in().await;
    let status = || async {
        store
            .approval(&run_id, "call-ship")
            .await
            .unwrap()
            .unwrap()
            .status
    };
    // What is decided on, escaped: the tool, the input as pretty JSON, the prompt, the
    // model's text.
    let pretty_input = "{\n  &quot;target&quot;: &quot;staging &lt;eu&gt;&quot;,\n  &quot;version&quot;: &quot;v2&quot;\n}";
    let prompt = "Ship &lt;v2&gt; to staging";
    let said = "Tests pass; deploying v2 &amp; watching the health checks.";
    let (_, _, inbox) = get(&d, "/ui/approvals", Some(&cookie)).await;
    let r = row(&inbox, "data-call-id=\"call-ship\"");
    for shown in [">deploy<", pretty_input, prompt, said] {
        assert!(r.contains(shown), "the row shows {shown:?}: {r}");
    }
    assert!(
        element(r, "data-action=\"approve\"", ">").contains("data-confirm="),
        "approve asks first in the browser: {r}"
    );

    // Unconfirmed, approve answers with the confirm page and changes nothing.
    let csrf = csrf_of(&inbox);
    let path = format!("/ui/runs/{run_id}/approvals/call-ship");
    let ask = d
        .post_form(
            &path,
            &format!("csrf={csrf}&decision=approve&return=approvals"),
            Some(&cookie),
            None,
        )
        .await;
    assert_eq!(ask.status(), StatusCode::OK);
    let ask = ask.text().await.unwrap().replace("&#x2f;", "/");
    assert_eq!(
        status().await,
        ApprovalStatus::Pending,
        "asking decides nothing"
    );
    assert!(ask.contains("Approve call call-ship"), "{ask}");
    let shown = element(&ask, "<dl class=\"decision\">", "</dl>");
    for part in [
        "data-part=\"tool\"><strong>deploy</strong>",
        pretty_input,
        prompt,
        said,
    ] {
        assert!(
            shown.contains(part),
            "the confirm page shows {part:?}: {shown}"
        );
    }
    assert!(ask.contains("href=\"/ui/approvals\">No, go back"), "{ask}");
    let body = form_body(&ask, "confirm-form");
    for field in ["decision=approve", "confirmed=yes", "return=approvals"] {
        assert!(body.contains(field), "{field} in {body}");
    }
    assert!(
        body.contains(&format!("csrf={csrf}")),
        "the session's CSRF token: {body}"
    );
    // The confirm form is still a CSRF-checked POST.
    let forged = body.replace(&format!("csrf={csrf}"), "csrf=00");
    let refused = d.post_form(&path, &forged, Some(&cookie), None).await;
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    assert_eq!(status().await, ApprovalStatus::Pending);

    // Confirmed through the page: approved, back to the inbox with the flash.
    let done = d
        .post_form(&path, &body, Some(&cookie), Some(&d.base))
        .await;
    let to = back_to(&done, "/ui/approvals");
    assert_eq!(status().await, ApprovalStatus::Approved);
    let (_, _, after) = get(&d, &to, Some(&cookie)).await;
    assert!(after.contains("Approved call call-ship"), "{after}");

    // Asking again about a call no longer waiting says so and changes nothing.
    let again = d
        .post_form(
            &path,
            &format!("csrf={csrf}&decision=deny&return=approvals"),
            Some(&cookie),
            None,
        )
        .await;
    let (_, _, shown) = get(&d, &back_to(&again, "/ui/approvals"), Some(&cookie)).await;
    assert!(
        shown.contains("is not waiting for a decision (it is approved)"),
        "{shown}"
    );
    assert_eq!(status().await, ApprovalStatus::Approved);
}
