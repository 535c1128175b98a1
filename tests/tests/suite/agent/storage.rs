//! How the runtime's log and checkpoints are stored (`store/src/content/`), seen through real
//! runs: a run keeps one checkpoint, a skeleton that refers to the text its events stored, and
//! a run whose rows were written before v22 (payloads in the event rows, a whole gzipped
//! checkpoint) resumes after the upgrade and sends the model the same bytes.

use std::io::Write as _;
use std::sync::Arc;

use nightshift_llm::StopReason;
use nightshift_store::RunStatus;
use nightshift_tests::{Arg, TestDb};

use super::super::fakes::*;

/// ~`n` bytes of text of its own for `tag`.
fn prose(tag: usize, n: usize) -> String {
    let mut out = String::new();
    let mut i = 0;
    while out.len() < n {
        out.push_str(&format!(
            "step {tag}.{i}: the parser reads token {} ",
            tag * 31 + i
        ));
        i += 1;
    }
    out
}

/// A run of 12 turns, each with ~1 KB of the model's own text: one checkpoint is kept, it
/// holds only a skeleton, and no text is kept twice.
pub(super) async fn one_checkpoint_refers_to_the_logged_text(db: &TestDb) {
    let turns = 12;
    let mut replies: Vec<_> = (0..turns)
        .map(|t| {
            let id = format!("c{t}");
            reply(
                vec![text(&prose(t, 1000)), call(&id, "read")],
                StopReason::ToolUse,
            )
        })
        .collect();
    replies.push(reply(vec![text("done")], StopReason::EndTurn));
    let model = ScriptModel::new(replies);
    let h = Harness::new(
        db,
        agent(serde_json::json!({})),
        model,
        Arc::new(FakeTools::default()),
    )
    .await;
    let run_id = h.enqueue("helper", &prose(99, 2000)).await;
    h.run_once().await;
    assert_eq!(h.status(&run_id).await.0, RunStatus::Succeeded);
    let storage = h.store.run_storage(&run_id).await.unwrap();
    let logged: usize = h
        .store
        .events(&run_id, 0)
        .await
        .unwrap()
        .iter()
        .map(|e| e.payload.len())
        .sum();
    assert_eq!(storage.checkpoints, 1, "{storage:?}");
    assert_eq!(
        storage.event_bytes, 0,
        "payloads live in blobs: {storage:?}"
    );
    assert!(
        storage.checkpoint_bytes < 2_000,
        "the checkpoint refers to the turns' text instead of copying it: {storage:?}"
    );
    // The blobs hold the logged payloads (as skeletons and their strings, a reference of a
    // few bytes for each string) and nothing more: the checkpoint's copies of the turns'
    // text, ~14 KB, were not stored again.
    assert!(
        (storage.blob_raw_bytes as usize) < logged + 16 * storage.blobs as usize,
        "each text is stored once ({logged} bytes of payloads logged): {storage:?}"
    );
    let cp = h.store.latest_checkpoint(&run_id).await.unwrap().unwrap();
    let state = nightshift_agent::checkpoint::decode(&cp.document).unwrap();
    assert_eq!(
        state.messages[1].text(),
        prose(0, 1000),
        "the text came back whole"
    );
}

/// A run crashed while waiting for its third model call; its rows are then rewritten as a
/// version before v22 stored them. Resumed by this version, it sends the model the bytes it
/// sent before the crash and finishes.
pub(super) async fn a_run_stored_before_v22_resumes_with_the_same_request(db: &TestDb) {
    let model = ScriptModel::new(vec![
        reply(
            vec![text(&prose(1, 800)), call("c1", "read")],
            StopReason::ToolUse,
        ),
        reply(
            vec![text(&prose(2, 800)), call("c2", "put")],
            StopReason::ToolUse,
        ),
        reply(vec![text("All done.")], StopReason::EndTurn),
    ]);
    *model.stall_at.lock().unwrap() = Some(2);
    let h = Harness::new(
        db,
        agent(serde_json::json!({})),
        model.clone(),
        Arc::new(FakeTools::default()),
    )
    .await;
    let run_id = h.enqueue("helper", &prose(0, 1500)).await;
    h.crash_when(&model.stalled).await;
    let before = model.requests()[2].clone();
    as_before_v22(db, &h, &run_id).await;
    *model.stall_at.lock().unwrap() = None;
    h.run_once().await;
    assert_eq!(
        h.status(&run_id).await,
        (RunStatus::Succeeded, Some("All done.".into()), None)
    );
    assert_eq!(
        model.requests()[3],
        before,
        "the resumed request is byte-identical"
    );
}

/// Rewrites run `run_id`'s rows as v21 stored them: each event's payload in its row, the
/// checkpoint one gzipped document, no blobs.
async fn as_before_v22(db: &TestDb, h: &Harness, run_id: &str) {
    let events = h.store.events(run_id, 0).await.unwrap();
    assert!(
        events.len() >= 6,
        "the run logged its turns: {}",
        events.len()
    );
    for e in &events {
        let changed = db
            .execute(
                "UPDATE run_events SET payload = ?1, blob_id = NULL WHERE run_id = ?2 AND seq = ?3",
                &[
                    Arg::Text(e.payload.clone()),
                    Arg::Text(run_id.into()),
                    Arg::Int(e.seq),
                ],
            )
            .await;
        assert_eq!(changed, 1);
    }
    let cp = h.store.latest_checkpoint(run_id).await.unwrap().unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(cp.document.as_bytes()).unwrap();
    let body = gz.finish().unwrap();
    let changed = db
        .execute(
            "UPDATE checkpoints SET body = ?1, size_bytes = ?2, encoding = 0 WHERE run_id = ?3",
            &[
                Arg::Bytes(body.clone()),
                Arg::Int(body.len() as i64),
                Arg::Text(run_id.into()),
            ],
        )
        .await;
    assert_eq!(changed, 1);
    db.execute(
        "DELETE FROM run_blobs WHERE run_id = ?1",
        &[Arg::Text(run_id.into())],
    )
    .await;
    let storage = h.store.run_storage(run_id).await.unwrap();
    assert_eq!((storage.blobs, storage.checkpoints), (0, 1), "{storage:?}");
}
