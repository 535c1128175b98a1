//! The schedules page: API schedules triggered, disabled and enabled from it (each action
//! refused without CSRF first), config schedules refused, prompts escaped.

use nightshift_scheduler::cron::{self, Schedule, ScheduleSpec};
use nightshift_store::{Missed, Overlap};
use nightshift_tests::TestDb;
use reqwest::StatusCode;

use super::{back_to, element, get, refused_then, row};
use crate::dashboard::{Dash, csrf_of};

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

pub(super) async fn schedules_page(db: &TestDb) {
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
