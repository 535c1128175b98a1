//! The dashboard's queue, schedules, webhooks, notifications and approvals pages over a real
//! listener on loopback and a real store on both backends, spoken to as a browser would
//! (the helpers of `dashboard`): each page needs a session, shows what the store holds
//! escaped and as ages, and each action acts through the API's code path — and is refused
//! with a 403 that changes nothing without its CSRF token or from another site.

use std::sync::Arc;
use std::time::Duration;

use nightshift_runner::config::Config;
use nightshift_scheduler::cron::{self, Schedule, ScheduleSpec};
use nightshift_scheduler::hooks::HookSet;
use nightshift_scheduler::hooks::config::HmacAlgorithm;
use nightshift_scheduler::hooks::signature::hmac;
use nightshift_store::{
    ApprovalStatus, AttemptOutcome, DeliveryStatus, Missed, NewApproval, NewDelivery, NewRun,
    Overlap,
};
use nightshift_tests::{TestDb, on_both_backends};
use reqwest::StatusCode;
use reqwest::header::LOCATION;

use super::dashboard::{Dash, TOKEN, csrf_of};

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

async fn queue_page(db: &TestDb) {
    let store = db.store().await;
    let mut runs = Vec::new();
    for lane in ["default", "default", "batch"] {
        let e = store
            .enqueue(&NewRun::new("helper", "p").lane(lane))
            .await
            .unwrap();
        runs.push(e.run_id);
    }
    store.register_worker("w-dash", "host-1", 7).await.unwrap();
    let leased = store
        .claim(
            "w-dash",
            Some(&["batch".to_string()]),
            1,
            Duration::from_secs(600),
        )
        .await
        .unwrap();
    let job = leased[0].job().clone();
    assert_eq!(job.run_id, runs[2]);
    let d = Dash::start_with(store, nightshift_runner::hooks::none()).await;
    let cookie = d.sign_in().await;
    let (status, _, page) = get(&d, "/ui/queue", Some(&cookie)).await;
    assert_eq!(status, StatusCode::OK);
    let count = |state: &str, lane: &str| -> Option<String> {
        let marker = format!("data-state=\"{state}\" data-lane=\"{lane}\"");
        page.contains(&marker).then(|| {
            let r = row(&page, &marker);
            let c = element(r, "class=\"count\"", "</td>");
            c[c.find('>').unwrap() + 1..c.len() - "</td>".len()].to_string()
        })
    };
    assert_eq!(count("queued", "default").as_deref(), Some("2"));
    assert_eq!(count("running", "batch").as_deref(), Some("1"));
    assert_eq!(
        count("queued", "batch"),
        None,
        "pairs without jobs are left out"
    );
    let oldest = element(&page, "id=\"oldest-queued\"", "</span>");
    assert!(
        oldest.contains("<time datetime=\"") && oldest.contains("ago"),
        "{oldest}"
    );
    let worker = row(&page, "data-worker=\"w-dash\"");
    assert!(
        worker.contains("1 busy") && worker.contains("host-1"),
        "{worker}"
    );
    assert!(
        worker.contains("ago</time>"),
        "the heartbeat is an age: {worker}"
    );
    let lease = row(&page, &format!("data-job-id=\"{}\"", job.id));
    assert!(
        lease.contains(&format!("href=\"/ui/runs/{}\"", job.run_id)),
        "{lease}"
    );
    assert!(
        lease.contains("w-dash") && lease.contains(">in "),
        "{lease}"
    );
    let expires = job.lease_expires_at.expect("a running job's lease expires");
    assert!(
        !page.contains(&expires.to_string()),
        "ages, not epoch numbers"
    );
    assert!(
        page.contains("Last renewed or claimed"),
        "the column says what it is"
    );
}

fn spec(name: &str, prompt: &str) -> ScheduleSpec {
    ScheduleSpec {
        name: name.into(),
        cron: "0 3 * * *".into(),
        timezone: "Europe/Paris".into(),
        agent: "helper".into(),
        prompt: prompt.into(),
        overlap: Overlap::Allow,
        missed: Missed::Skip,
        enabled: true,
    }
}

async fn schedules_page(db: &TestDb) {
    let store = db.store().await;
    let agents = ["helper".to_string()];
    cron::create(
        store.as_operator("cli:test"),
        spec("api-one", "<script>alert(1)</script> nightly"),
        &agents,
    )
    .await
    .unwrap();
    let compiled = Schedule::compile(spec("from-file", "Report"), Some(&agents)).unwrap();
    cron::apply_config(&store, &[compiled]).await.unwrap();
    let d = Dash::start_with(store.clone(), nightshift_runner::hooks::none()).await;
    let cookie = d.sign_in().await;

    let (status, _, page) = get(&d, "/ui/schedules", Some(&cookie)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        page.contains("&lt;script&gt;alert(1)&lt;/script&gt; nightly"),
        "escaped"
    );
    assert!(!page.contains("<script>alert(1)"), "never raw");
    let api = row(&page, "data-schedule=\"api-one\"");
    assert!(
        element(api, "class=\"cron\"", "</td>").contains("<code>0 3 * * *</code>"),
        "{api}"
    );
    assert!(
        api.contains("class=\"zone\" data-label=\"Zone\">Europe/Paris"),
        "{api}"
    );
    let local = element(api, "class=\"next-local\"", "</td>");
    let utc = element(api, "class=\"next-utc\"", "</td>");
    assert!(local.contains("T03:00:00+0"), "next fire in Paris: {local}");
    assert!(utc.contains(":00:00Z"), "and in UTC: {utc}");
    assert!(api.contains("data-enabled=\"true\""), "{api}");
    assert!(api.contains("data-action=\"trigger\"") && api.contains("data-action=\"disable\""));
    assert!(!api.contains("data-action=\"enable\""));
    assert!(
        api.contains("data-status=\"\"") && api.contains("never fired"),
        "{api}"
    );
    let file = row(&page, "data-schedule=\"from-file\"");
    assert!(file.contains("from the config file") && file.contains("data-action=\"trigger\""));
    assert!(!file.contains("data-action=\"disable\"") && !file.contains("data-action=\"enable\""));

    // Trigger: refused without CSRF or cross-site (no run), then enqueues a run.
    let no_fire = || async {
        let r = store.schedule("api-one").await.unwrap().unwrap();
        assert_eq!((r.last_run_id, r.fired_count), (None, 0), "nothing fired");
    };
    let done = refused_then(&d, &cookie, "/ui/schedules/api-one/trigger", "x=1", no_fire).await;
    let to = back_to(&done, "/ui/schedules");
    let fired = store.schedule("api-one").await.unwrap().unwrap();
    let run_id = fired.last_run_id.expect("the trigger enqueued a run");
    let run = store
        .run(&run_id)
        .await
        .unwrap()
        .expect("the run is in the store");
    assert_eq!(run.agent, "helper");
    let (_, _, after) = get(&d, &to, Some(&cookie)).await;
    assert!(
        after.contains(&format!(
            "<p class=\"flash\" role=\"status\">Triggered api-one: enqueued run {run_id}.</p>"
        )),
        "{after}"
    );
    let api = row(&after, "data-schedule=\"api-one\"");
    assert!(
        api.contains(&format!("href=\"/ui/runs/{run_id}\"")),
        "the last run links: {api}"
    );
    assert!(api.contains("data-status=\"queued\""), "{api}");

    // Disable, then enable, each refused first.
    let enabled = |want: bool| {
        let store = store.clone();
        move || {
            let store = store.clone();
            async move {
                let r = store.schedule("api-one").await.unwrap().unwrap();
                assert_eq!(r.enabled, want, "enabled unchanged");
            }
        }
    };
    let done = refused_then(
        &d,
        &cookie,
        "/ui/schedules/api-one/disable",
        "x=1",
        enabled(true),
    )
    .await;
    let to = back_to(&done, "/ui/schedules");
    assert!(!store.schedule("api-one").await.unwrap().unwrap().enabled);
    let (_, _, after) = get(&d, &to, Some(&cookie)).await;
    assert!(after.contains("Disabled api-one"), "{after}");
    let api = row(&after, "data-schedule=\"api-one\"");
    assert!(api.contains("data-enabled=\"false\"") && api.contains("data-action=\"enable\""));
    let done = refused_then(
        &d,
        &cookie,
        "/ui/schedules/api-one/enable",
        "x=1",
        enabled(false),
    )
    .await;
    back_to(&done, "/ui/schedules");
    let r = store.schedule("api-one").await.unwrap().unwrap();
    assert!(
        r.enabled && r.next_fire_at.is_some(),
        "enabled and armed again"
    );

    // A config-file schedule: the API's refusal, as the flash; the row is unchanged.
    let csrf = csrf_of(&after);
    let refused = d
        .post_form(
            "/ui/schedules/from-file/disable",
            &format!("csrf={csrf}"),
            Some(&cookie),
            None,
        )
        .await;
    let to = back_to(&refused, "/ui/schedules");
    let (_, _, shown) = get(&d, &to, Some(&cookie)).await;
    assert!(
        shown.contains("is defined in the config file; change it there"),
        "{shown}"
    );
    assert!(store.schedule("from-file").await.unwrap().unwrap().enabled);
    // An unknown schedule is named.
    let unknown = d
        .post_form(
            "/ui/schedules/nope/trigger",
            &format!("csrf={csrf}"),
            Some(&cookie),
            None,
        )
        .await;
    let (_, _, shown) = d
        .get(&back_to(&unknown, "/ui/schedules"), Some(&cookie))
        .await;
    assert!(
        shown.contains("schedule &#x27;nope&#x27; not found")
            || shown.contains("schedule 'nope' not found"),
        "{shown}"
    );
}

const HOOK_SECRET: &str = "dash-hook-secret-5f2e";
const HOOKS: &str = r#"
[providers.p]
kind = "scripted"
script = "script.json"

[[agents]]
name = "helper"
provider = "p"
model = "scripted-1"

[[hooks]]
name = "gh"
signature = "github"
secret_env = "NS_DASH_HOOK_SECRET"

[[hooks.routes]]
name = "pushes"
event = "push"
agent = "helper"
prompt = "Look at {{ ref }}"
"#;

async fn hooks_page(db: &TestDb) {
    let config = Config::parse(HOOKS, "dashboard hooks config").unwrap();
    let hooks = HookSet::build(&config.hooks, &["helper"], |var| {
        (var == "NS_DASH_HOOK_SECRET").then(|| HOOK_SECRET.to_string())
    })
    .unwrap();
    let d = Dash::start_with(db.store().await, Arc::new(hooks)).await;
    let body = br#"{"ref":"refs/heads/main"}"#.to_vec();
    let signature = format!(
        "sha256={}",
        hex::encode(hmac(
            HmacAlgorithm::Sha256,
            HOOK_SECRET.as_bytes(),
            &[&body]
        ))
    );
    let send = |sig: String| {
        let d = &d;
        let body = body.clone();
        async move {
            d.http
                .post(format!("{}/hooks/gh", d.base))
                .header("content-type", "application/json")
                .header("X-GitHub-Event", "push")
                .header("X-GitHub-Delivery", "delivery-1")
                .header("X-Hub-Signature-256", sig)
                .body(body)
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    assert_eq!(send(signature).await, StatusCode::ACCEPTED);
    assert_eq!(send("sha256=00".into()).await, StatusCode::UNAUTHORIZED);
    let recorded = d.store.webhook_deliveries("gh", 10).await.unwrap();
    let runs: serde_json::Value =
        serde_json::from_str(recorded[0].runs.as_deref().unwrap()).unwrap();
    let run_id = runs[0]["run_id"].as_str().unwrap().to_string();

    let cookie = d.sign_in().await;
    let (status, _, page) = get(&d, "/ui/hooks", Some(&cookie)).await;
    assert_eq!(status, StatusCode::OK);
    let hook = element(
        &page,
        "<section class=\"hook\" data-hook=\"gh\"",
        "</section>",
    );
    let routes = element(hook, "<table class=\"routes", "</table>");
    assert!(
        routes.contains("data-route=\"pushes\"") && routes.contains(">push<"),
        "{routes}"
    );
    let counts = element(hook, "<dl class=\"counts\"", "</dl>");
    assert!(counts.contains("data-outcome=\"accepted\">1<"), "{counts}");
    assert!(
        counts.contains("data-outcome=\"unauthorized\">1<"),
        "{counts}"
    );
    let delivery = row(hook, "data-delivery-id=\"delivery-1\"");
    assert!(
        delivery.contains(&format!("href=\"/ui/runs/{run_id}\"")),
        "{delivery}"
    );
    assert!(delivery.contains("data-status=\"done\""), "{delivery}");
    assert!(
        !page.contains(HOOK_SECRET),
        "a hook's secret is never shown"
    );
}

async fn notifications_page(db: &TestDb) {
    let store = db.store().await;
    store.set_notifying_agents(["helper"]);
    let run_id = store
        .enqueue(&NewRun::new("helper", "p"))
        .await
        .unwrap()
        .run_id;
    store.cancel_run(&run_id).await.unwrap();
    let outbox = store.run_outbox(&run_id).await.unwrap().remove(0);
    let url = "https://receiver.example/hooks/T0/SECRETPATH?token=abc";
    store
        .expand_outbox(
            outbox.id,
            &[NewDelivery {
                url: url.into(),
                secret_env: "NS_NOTIFY_SECRET_VAR".into(),
                max_attempts: 1,
            }],
        )
        .await
        .unwrap();
    let claimed = store
        .claim_notifications(10, Duration::from_secs(30))
        .await
        .unwrap()
        .remove(0);
    let outcome = AttemptOutcome::Failed {
        error: format!("HTTP 500: <script>boom</script>\n{}", "trace ".repeat(100)),
        status_code: Some(500),
        retry_at: store.now() + 1_000,
    };
    assert!(store.record_attempt(&claimed, &outcome).await.unwrap());
    let id = claimed.delivery_id.clone();
    let status = || async { store.notification(&id).await.unwrap().unwrap().status };
    assert_eq!(status().await, DeliveryStatus::Dead);

    let d = Dash::start_with(store.clone(), nightshift_runner::hooks::none()).await;
    let cookie = d.sign_in().await;
    let (code, _, page) = get(&d, "/ui/notifications?status=dead", Some(&cookie)).await;
    assert_eq!(code, StatusCode::OK);
    assert!(
        page.contains("id=\"notification-filters\"")
            && page.contains("<option value=\"dead\" selected>")
    );
    let r = row(&page, &format!("data-delivery-id=\"{id}\""));
    assert!(r.contains("class=\"status\" data-status=\"dead\""), "{r}");
    assert!(r.contains("data-action=\"redeliver\""), "{r}");
    assert!(r.contains(">1/1<"), "attempts: {r}");
    assert!(r.contains(&format!("href=\"/ui/runs/{run_id}\"")), "{r}");
    let err = element(r, "class=\"last-error\"", "</td>");
    assert!(
        err.contains("<details><summary>HTTP 500: &lt;script&gt;boom"),
        "collapsed and escaped: {err}"
    );
    assert!(!page.contains("<script>boom"));
    assert!(r.contains("https://receiver.example/…"), "{r}");
    assert!(
        !page.contains("SECRETPATH") && !page.contains("token=abc"),
        "the URL's path is hidden"
    );
    assert!(!page.contains("NS_NOTIFY_SECRET_VAR"));
    let (_, _, pending) = d
        .get("/ui/notifications?status=pending", Some(&cookie))
        .await;
    assert!(!pending.contains(&format!("data-delivery-id=\"{id}\"")));
    assert!(pending.contains("No pending notifications"));

    let path = format!("/ui/notifications/{id}/redeliver");
    let still_dead = || async { assert_eq!(status().await, DeliveryStatus::Dead, "still dead") };
    let done = refused_then(&d, &cookie, &path, "x=1", still_dead).await;
    let to = back_to(&done, "/ui/notifications");
    assert_eq!(status().await, DeliveryStatus::Pending, "sent again");
    let (_, _, after) = get(&d, &to, Some(&cookie)).await;
    assert!(
        after.contains(&format!("Delivery {id} is pending again")),
        "{after}"
    );
    let r = row(&after, &format!("data-delivery-id=\"{id}\""));
    assert!(r.contains("data-status=\"pending\"") && !r.contains("data-action=\"redeliver\""));
    // Again: refused by the store (only a dead one is sent again), shown as the flash.
    let csrf = csrf_of(&after);
    let again = d
        .post_form(&path, &format!("csrf={csrf}"), Some(&cookie), None)
        .await;
    let (_, _, shown) = d
        .get(&back_to(&again, "/ui/notifications"), Some(&cookie))
        .await;
    assert!(
        shown.contains("only a dead delivery can be sent again"),
        "{shown}"
    );
    assert_eq!(status().await, DeliveryStatus::Pending);
}

async fn approvals_page(db: &TestDb) {
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
async fn waiting_deploy(
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

async fn approve_confirms(db: &TestDb) {
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

/// Reads `resp`'s server-sent events until one `list` event's data satisfies `want`;
/// returns that data.
async fn list_event_until(
    resp: &mut reqwest::Response,
    what: &str,
    want: impl Fn(&str) -> bool,
) -> String {
    let mut buf = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        while let Some(end) = buf.find("\n\n") {
            let event: String = buf[..end].to_string();
            buf.drain(..end + 2);
            if !event.lines().any(|l| l == "event: list") {
                continue;
            }
            let data: Vec<&str> = event
                .lines()
                .filter_map(|l| l.strip_prefix("data: ").or(l.strip_prefix("data:")))
                .collect();
            let data = data.join("\n");
            if want(&data) {
                return data;
            }
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match tokio::time::timeout(left, resp.chunk()).await {
            Ok(Ok(Some(bytes))) => buf.push_str(&String::from_utf8_lossy(&bytes)),
            Ok(other) => panic!("{what}: the stream ended: {other:?}"),
            Err(_) => panic!("{what}: not within 30 s"),
        }
    }
}

async fn live_lists(db: &TestDb) {
    let store = db.store().await;
    let d = Dash::start_with(store.clone(), nightshift_runner::hooks::none()).await;
    let cookie = d.sign_in().await;
    let open = |path: &'static str| {
        let (d, cookie) = (&d, cookie.clone());
        async move {
            let resp = d
                .http
                .get(format!("{}{path}", d.base))
                .header(reqwest::header::COOKIE, cookie)
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), StatusCode::OK, "{path}");
            assert_eq!(
                resp.headers()[reqwest::header::CONTENT_TYPE],
                "text/event-stream",
                "{path}"
            );
            resp
        }
    };
    // Signed in only; a filter the page would refuse is refused.
    let (status, location, _) = get(&d, "/ui/live/runs", None).await;
    assert_eq!(
        (status, location.as_str()),
        (StatusCode::SEE_OTHER, "/ui/login")
    );
    let (status, _, _) = get(&d, "/ui/live/runs?status=sleeping", Some(&cookie)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // The runs list, filtered: a new queued run arrives, one of another agent's filter does
    // not, and the multi-line prompt keeps its lines.
    let mut runs = open("/ui/live/runs?status=queued").await;
    let first = store
        .enqueue(&NewRun::new("helper", "First <run>"))
        .await
        .unwrap()
        .run_id;
    let data = list_event_until(&mut runs, "the first run", |h| {
        h.contains(&format!("data-key=\"{first}\""))
    })
    .await;
    assert!(data.contains("First &lt;run&gt;"), "escaped: {data}");
    assert!(
        data.contains("<table id=\"runs\">"),
        "the list's whole table: {data}"
    );
    store.cancel_run(&first).await.unwrap();
    let second = store
        .enqueue(&NewRun::new("helper", "Second run"))
        .await
        .unwrap()
        .run_id;
    let data = list_event_until(&mut runs, "the second run, and the first gone", |h| {
        h.contains(&format!("data-key=\"{second}\""))
            && !h.contains(&format!("data-key=\"{first}\""))
    })
    .await;
    assert!(
        !data.contains("First &lt;run&gt;"),
        "the filter holds: {data}"
    );

    // The queue: the state counts follow the jobs.
    let mut queue = open("/ui/live/queue").await;
    let data = list_event_until(&mut queue, "the queued job", |h| {
        h.contains("data-key=\"queued/default\"")
    })
    .await;
    assert!(
        data.contains("id=\"queue-states\"") && data.contains("id=\"leases\""),
        "{data}"
    );

    // The approvals inbox: a call that starts waiting arrives with what it decides on.
    let mut inbox = open("/ui/live/approvals").await;
    let run_id = waiting_deploy(
        &store,
        "Roll out v3",
        "Rolling out v3.\nThen I watch the dashboards.",
        "call-live",
        serde_json::json!({"version": "v3"}),
    )
    .await;
    let data = list_event_until(&mut inbox, "the waiting call", |h| {
        h.contains(&format!("data-key=\"{run_id}/call-live\""))
    })
    .await;
    assert!(
        data.contains("Rolling out v3.\nThen I watch the dashboards."),
        "the model's text with its lines: {data}"
    );
    assert!(
        data.contains("Roll out v3") && data.contains("name=\"csrf\""),
        "{data}"
    );
    store
        .decide_approval(&run_id, "call-live", false, None)
        .await
        .unwrap();
    list_event_until(&mut inbox, "the decided call to leave", |h| {
        !h.contains("call-live") && h.contains("No tool call is waiting")
    })
    .await;
}
