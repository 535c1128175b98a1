//! The dashboard's queue, schedules, webhooks, notifications and approvals pages over a real
//! listener on loopback and a real store on both backends, spoken to as a browser would
//! (the helpers of `dashboard`): each page needs a session, shows what the store holds
//! escaped and as ages, and each action acts through the API's code path — and is refused
//! with a 403 that changes nothing without its CSRF token or from another site.
//!
//! Each page's test is in its module ([`queue`], [`schedules`], [`hooks`], [`notifications`],
//! [`approvals`], and [`live`] for the streamed lists); the sign-in check of every page and the
//! helpers they share (a CSRF-refused post, a row of a page) are here.

mod approvals;
mod hooks;
mod live;
mod notifications;
mod queue;
mod schedules;

use nightshift_store::NewRun;
use nightshift_tests::{TestDb, on_both_backends};
use reqwest::StatusCode;
use reqwest::header::LOCATION;

use super::dashboard::{Dash, TOKEN, csrf_of};
use approvals::{approvals_page, approve_confirms};
use hooks::hooks_page;
use live::live_lists;
use notifications::notifications_page;
use queue::queue_page;
use schedules::schedules_page;

on_both_backends! {
    every_page_needs_a_session_and_marks_itself_in_the_nav => pages_render;
    the_queue_page_counts_seeded_jobs_and_shows_ages => queue_page;
    schedules_are_triggered_disabled_and_enabled_and_config_ones_refused => schedules_page;
    the_hooks_page_shows_routes_counts_and_the_runs_deliveries_made => hooks_page;
    a_dead_notification_is_redelivered_from_the_page => notifications_page;
    an_approval_is_decided_from_the_inbox_and_comes_back_to_it => approvals_page;
    approve_asks_first_showing_the_call_the_prompt_and_the_models_text => approve_confirms;
    the_lists_stream_their_rows_as_they_change => live_lists;
}

const PAGES: [(&str, &str); 5] = [
    ("/ui/queue", "id=\"queue-states\""),
    ("/ui/schedules", "id=\"schedules\""),
    ("/ui/hooks", "<h1>Webhooks</h1>"),
    ("/ui/notifications", "id=\"notifications\""),
    ("/ui/approvals", "id=\"approvals\""),
];

/// The `<tr …>…</tr>` (or `<section …>…</section>`) that opens with `marker`.
fn element<'p>(page: &'p str, marker: &str, end: &str) -> &'p str {
    let at = page
        .find(marker)
        .unwrap_or_else(|| panic!("{marker} not on the page:\n{page}"));
    let rest = &page[at..];
    &rest[..rest.find(end).map_or(rest.len(), |e| e + end.len())]
}

fn row<'p>(page: &'p str, marker: &str) -> &'p str {
    element(page, marker, "</tr>")
}

/// Posts `body` as the signed-in browser would (same origin), and a cross-site and a
/// CSRF-less copy first, each of which must be a 403; `unchanged` checks the store after
/// each refusal.
async fn refused_then<F, Fut>(
    d: &Dash,
    cookie: &str,
    path: &str,
    body: &str,
    unchanged: F,
) -> reqwest::Response
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let page = get(d, "/ui/queue", Some(cookie)).await.2;
    let csrf = csrf_of(&page);
    let no_csrf = d.post_form(path, body, Some(cookie), None).await;
    assert_eq!(
        no_csrf.status(),
        StatusCode::FORBIDDEN,
        "{path} without CSRF"
    );
    unchanged().await;
    let wrong = d
        .post_form(path, &format!("csrf=00&{body}"), Some(cookie), None)
        .await;
    assert_eq!(
        wrong.status(),
        StatusCode::FORBIDDEN,
        "{path} with a wrong CSRF"
    );
    unchanged().await;
    let foreign = d
        .post_form(
            path,
            &format!("csrf={csrf}&{body}"),
            Some(cookie),
            Some("http://evil.example"),
        )
        .await;
    assert_eq!(foreign.status(), StatusCode::FORBIDDEN, "{path} cross-site");
    assert!(
        foreign
            .text()
            .await
            .unwrap()
            .contains("Nothing was changed")
    );
    unchanged().await;
    d.post_form(
        path,
        &format!("csrf={csrf}&{body}"),
        Some(cookie),
        Some(&d.base),
    )
    .await
}

/// `Dash::get` with the body's `&#x2f;` read back as `/` (minijinja escapes slashes; a
/// browser reads both the same), so paths and links can be compared as written.
async fn get(d: &Dash, path: &str, cookie: Option<&str>) -> (StatusCode, String, String) {
    let (status, location, body) = d.get(path, cookie).await;
    (status, location, body.replace("&#x2f;", "/"))
}

/// The `Location` of a 303, checked to lead back to `page`.
fn back_to(resp: &reqwest::Response, page: &str) -> String {
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    let to = resp.headers()[LOCATION].to_str().unwrap().to_string();
    assert!(to.starts_with(&format!("{page}?flash=")), "{to}");
    to
}

async fn pages_render(db: &TestDb) {
    let d = Dash::start(db).await;
    for (path, _) in PAGES {
        let (status, location, _) = get(&d, path, None).await;
        assert_eq!(
            (status, location.as_str()),
            (StatusCode::SEE_OTHER, "/ui/login"),
            "{path} needs a session"
        );
    }
    let cookie = d.sign_in().await;
    for (path, marker) in PAGES {
        let (status, _, page) = get(&d, path, Some(&cookie)).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert!(page.contains(marker), "{path}: {page}");
        assert!(
            page.contains(&format!("href=\"{path}\" aria-current=\"page\"")),
            "{path} is the current page in the nav"
        );
        assert_eq!(page.matches("aria-current").count(), 1, "{path}");
        for link in [
            "Runs",
            "Queue",
            "Schedules",
            "Webhooks",
            "Notifications",
            "Approvals",
        ] {
            assert!(
                page.contains(&format!(">{link}</a>")),
                "{path} links {link}"
            );
        }
        assert!(!page.contains(TOKEN), "{path} never shows the token");
    }
    // Empty states say what to do.
    let empty = [
        ("/ui/queue", "none queued"),
        ("/ui/queue", "No workers registered"),
        (
            "/ui/schedules",
            "add <code>[[schedules]]</code> to nightshift.toml or <code>POST /v1/schedules</code>",
        ),
        ("/ui/hooks", "add <code>[[hooks]]</code>"),
        ("/ui/notifications", "No notifications yet"),
        ("/ui/approvals", "No tool call is waiting for a decision"),
    ];
    for (path, text) in empty {
        assert!(
            get(&d, path, Some(&cookie)).await.2.contains(text),
            "{path}: {text}"
        );
    }
    let (status, _, bad) = get(&d, "/ui/notifications?status=lost", Some(&cookie)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        bad.contains("lost") && bad.contains("pending, delivered or dead"),
        "{bad}"
    );
    // The runs page is marked too, and the confirm page's way back is a real link.
    let (_, _, runs) = get(&d, "/ui/runs", Some(&cookie)).await;
    assert!(runs.contains("href=\"/ui/runs\" aria-current=\"page\""));
    let run = d
        .store
        .enqueue(&NewRun::new("helper", "p"))
        .await
        .unwrap()
        .run_id;
    let csrf = csrf_of(&runs);
    let confirm = d
        .post_form(
            &format!("/ui/runs/{run}/cancel"),
            &format!("csrf={csrf}"),
            Some(&cookie),
            None,
        )
        .await
        .text()
        .await
        .unwrap()
        .replace("&#x2f;", "/");
    assert!(
        confirm.contains(&format!("href=\"/ui/runs/{run}\">No, go back")),
        "{confirm}"
    );
    assert!(
        !confirm.contains("javascript:"),
        "the CSP blocks javascript: links"
    );
}
