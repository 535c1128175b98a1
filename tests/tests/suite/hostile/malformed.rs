//! A 200 with a malformed body is retried like a broken stream (issue 13, item 6): a
//! truncated JSON body (JSON mode) and a garbage SSE `data:` line (SSE mode), each followed by
//! a good reply, end the run `succeeded` within the client's retry budget of two attempts.

use nightshift_tests::{TestDb, on_both_backends};

use super::daemon::{Daemon, Setup};
use super::script::{Malformed, Step, Wire, text};
use super::server::Hostile;
use super::{assert_all_valid, assert_succeeded, settle};

on_both_backends! {
    a_truncated_json_200_is_retried_and_the_run_succeeds => truncated_json;
    a_garbage_sse_data_line_is_retried_and_the_run_succeeds => garbage_sse;
    a_429_then_a_stream_cut_before_its_end_are_retried_and_the_run_succeeds => cut_stream;
}

async fn malformed_then_good(db: &TestDb, wire: Wire, stream: bool, bad: Malformed) {
    let key = "[malformed] Answer despite the proxy.";
    let hostile = Hostile::start().await;
    hostile.script(key, vec![Step::Malformed(bad), text("Answered at last.")]);
    let d = Daemon::start(db, &hostile, Setup::new(wire, stream)).await;
    let run_id = d.enqueue(key, 1).await;
    let (run, events) = settle(&d, &run_id, |ev| ev.len() >= 40).await;
    assert_all_valid(&hostile);
    assert_succeeded(&run, &events, "Answered at last.");
    assert_eq!(hostile.request_count(), 2, "one bad reply, one good");
}

async fn truncated_json(db: &TestDb) {
    malformed_then_good(db, Wire::Anthropic, false, Malformed::TruncatedJson).await;
}

async fn garbage_sse(db: &TestDb) {
    malformed_then_good(db, Wire::OpenAi, true, Malformed::GarbageSse).await;
}

/// A 429 with `retry-after: 0` and then a stream cut before `message_stop`: both transient,
/// three attempts in all.
async fn cut_stream(db: &TestDb) {
    let key = "[cut-stream] Answer despite the proxy.";
    let hostile = Hostile::start().await;
    hostile.script(
        key,
        vec![
            Step::HttpError {
                status: 429,
                kind: "rate_limit_error".into(),
                message: "Number of requests has exceeded your rate limit".into(),
                retry_after: Some(0),
            },
            Step::Malformed(Malformed::CutStream),
            text("Answered at last."),
        ],
    );
    let mut setup = Setup::new(Wire::Anthropic, true);
    setup.retry = "{ max_attempts = 3, base_delay_ms = 10, max_delay_ms = 20 }".into();
    let d = Daemon::start(db, &hostile, setup).await;
    let run_id = d.enqueue(key, 1).await;
    let (run, events) = settle(&d, &run_id, |ev| ev.len() >= 40).await;
    assert_all_valid(&hostile);
    assert_succeeded(&run, &events, "Answered at last.");
    let requests = hostile.requests();
    assert_eq!(requests.len(), 3, "a 429, a cut stream, a good reply");
    assert!(
        requests
            .iter()
            .all(|r| r.headers["x-api-key"] == "sk-hostile-test"
                && r.conversation.as_deref() == Some(key)),
        "every attempt carried the key and belonged to the run's conversation"
    );
}
