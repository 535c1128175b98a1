//! The pages' live lists: each list streams its rows as server-sent `list` events as the
//! store changes.

use std::time::Duration;

use nightshift_store::NewRun;
use nightshift_tests::TestDb;
use reqwest::StatusCode;

use super::approvals::waiting_deploy;
use super::get;
use crate::dashboard::Dash;

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

pub(super) async fn live_lists(db: &TestDb) {
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
