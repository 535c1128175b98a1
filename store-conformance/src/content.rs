//! A run's content is stored once (`store/src/content/`): events and checkpoints read back
//! byte for byte, a long run's storage grows with what it holds (not with its length
//! squared), rows written before v22 read as they were written, damage is an error naming
//! the run, and a checkpoint write that fails at any step leaves the run as it was.

use std::io::Write as _;
use std::time::Duration;

use nightshift_store::{Error, LeasedJob, NewRun, Store};
use serde_json::json;

use crate::{Arg, Backend, TestDb};

const LEASE: Duration = Duration::from_secs(600);

async fn claim_one(store: &Store) -> LeasedJob {
    let mut claimed = store.claim("w", None, 1, LEASE).await.unwrap();
    assert_eq!(claimed.len(), 1, "one job is due");
    claimed.remove(0)
}

/// About `bytes` of distinct text for turn `turn`: words of a fixed vocabulary in an order
/// of their own, as real tool output repeats a language's words but not its sentences (also
/// what `runtime-bench`'s long runs print).
pub fn words(turn: u64, bytes: usize) -> String {
    const VOCABULARY: &[&str] = &[
        "token", "parser", "lexer", "error", "module", "function", "return", "value", "index",
        "buffer", "stream", "config", "result", "option", "string", "vector", "match", "struct",
        "trait", "impl", "async", "await", "future", "thread", "mutex", "channel", "socket",
        "request", "response", "header", "status", "client", "server", "handler", "router",
    ];
    let mut state = turn.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = String::with_capacity(bytes + 16);
    while out.len() < bytes {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out.push_str(VOCABULARY[(state % VOCABULARY.len() as u64) as usize]);
        out.push(if state.is_multiple_of(11) { '\n' } else { ' ' });
    }
    out
}

fn gzip_len(text: &str) -> usize {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(text.as_bytes()).unwrap();
    gz.finish().unwrap().len()
}

/// One turn's events as the agent logs them, and the messages it adds to the conversation.
fn turn(n: u64) -> ([(&'static str, String); 3], [serde_json::Value; 2]) {
    let id = format!("toolu_{n:04}");
    let prose = format!("Turn {n}. {}", words(n + 100_000, 300));
    let input = json!({"command": format!("cat src/part_{n}.rs")});
    let output = words(n, 4096);
    let assistant = json!({"role": "assistant", "content": [
        {"type": "text", "text": prose},
        {"type": "tool_use", "id": id, "name": "run", "input": input},
    ]});
    let results = json!({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": id, "content": output, "is_error": false},
    ]});
    let events = [
        (
            "assistant_message",
            json!({"type": "assistant_message", "message": assistant, "stop_reason": "tool_use",
                   "usage": {"input_tokens": 1000 + n, "output_tokens": 90}, "model": "m",
                   "cost_usd": 0.001})
            .to_string(),
        ),
        (
            "tool_started",
            json!({"type": "tool_started", "call_id": id, "name": "run", "input": input,
                   "durability": "read_only", "idempotency_key": format!("run:{id}")})
            .to_string(),
        ),
        (
            "tool_result",
            json!({"type": "tool_result", "call_id": id, "content": output, "is_error": false})
                .to_string(),
        ),
    ];
    (events, [assistant, results])
}

fn document(messages: &[serde_json::Value], through_seq: i64) -> String {
    json!({"format": "nightshift-checkpoint", "version": 1,
           "state": {"messages": messages, "through_seq": through_seq}})
    .to_string()
}

/// Events of every shape read back exactly — long strings, strings that look like the
/// store's own references, escapes, NULs — through both reads, and so does a checkpoint.
pub async fn events_and_checkpoints_read_back_exactly(db: &TestDb) {
    let store = db.store().await;
    let run = store.enqueue(&NewRun::new("a", "p")).await.unwrap().run_id;
    let lease = claim_one(&store).await;
    let long = words(7, 2000);
    let payloads = [
        "{}".to_string(),
        json!({"text": long, "again": long, "n": 1.50, "key order": "kept", "a": 0}).to_string(),
        r#"{"z":"\u0001#1","\u0001k":"\u0001\u0001x","nul":"a\u0000b"}"#.to_string(),
        format!(
            "{{ \"spaced\" : \"{}\" , \"n\" : 2 }}",
            "\\\"q\\\" ".repeat(100)
        ),
        json!({"esc": format!("\u{E000}0 {long}\u{0}")}).to_string(),
    ];
    for (i, p) in payloads.iter().enumerate() {
        assert_eq!(lease.append_event("e", p).await.unwrap(), i as i64 + 1);
    }
    let read: Vec<String> = store
        .events(&run, 0)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.payload)
        .collect();
    assert_eq!(read, payloads);
    let newest = store.newest_events_of_type(&run, "e", 5, 2).await.unwrap();
    assert_eq!(newest[0].payload, payloads[3]);
    assert_eq!(newest[1].payload, payloads[2]);
    let cp = document(&[json!(long), json!(payloads[2])], 5);
    lease.write_checkpoint(5, 1, &cp).await.unwrap();
    let stored = store.latest_checkpoint(&run).await.unwrap().unwrap();
    assert_eq!(stored.document, cp);
    assert_eq!(stored.through_seq, 5);
    let storage = store.run_storage(&run).await.unwrap();
    assert!(
        storage.checkpoint_bytes < 500,
        "the checkpoint refers to the long string the events stored: {storage:?}"
    );
}

/// A 300-turn run (distinct ~4 KB tool outputs, a checkpoint every 10 turns holding the
/// whole conversation) stores about what its content gzips to, one checkpoint, and as much
/// for its last 150 turns as for its first 150.
pub async fn a_long_run_stores_its_content_once(db: &TestDb) {
    let store = db.store().await;
    let run = store.enqueue(&NewRun::new("a", "p")).await.unwrap().run_id;
    let lease = claim_one(&store).await;
    let mut messages = Vec::new();
    let mut seq = 0;
    let mut half = None;
    for n in 0..300 {
        let (events, added) = turn(n);
        for (kind, payload) in &events {
            seq = lease.append_event(kind, payload).await.unwrap();
        }
        messages.extend(added);
        if n % 10 == 9 {
            lease
                .write_checkpoint(seq, 1, &document(&messages, seq))
                .await
                .unwrap();
        }
        if n == 149 {
            half = Some(store.run_storage(&run).await.unwrap());
        }
    }
    let full = store.run_storage(&run).await.unwrap();
    let half = half.unwrap();
    let content = gzip_len(&document(&messages, seq));
    let ratio = full.stored_bytes() as f64 / content as f64;
    eprintln!(
        "300 turns: stored {} bytes, content gzips to {content}: {ratio:.3}x ({full:?})",
        full.stored_bytes()
    );
    assert_eq!((full.events, full.checkpoints), (900, 1), "{full:?}");
    assert!(
        ratio <= 1.3,
        "stored {} bytes for content that gzips to {content}: {ratio:.2}x ({full:?})",
        full.stored_bytes()
    );
    let first = half.stored_bytes() as f64;
    let second = (full.stored_bytes() - half.stored_bytes()) as f64;
    assert!(
        (0.85..1.15).contains(&(second / first)),
        "linear: the first 150 turns took {first} bytes, the next 150 {second}"
    );
    assert_eq!(
        store
            .latest_checkpoint(&run)
            .await
            .unwrap()
            .unwrap()
            .document,
        document(&messages, seq)
    );
    let read = store.events(&run, 0).await.unwrap();
    assert_eq!(read.len(), 900);
    assert_eq!(read[899].payload, turn(299).0[2].1);
}

/// Rows written before v22 — a payload kept in its event row, a checkpoint stored as one
/// gzipped document — read back as they were written, beside new ones.
pub async fn rows_written_before_v22_read_as_written(db: &TestDb) {
    let store = db.store().await;
    let run = store.enqueue(&NewRun::new("a", "p")).await.unwrap().run_id;
    let lease = claim_one(&store).await;
    let old_payload = json!({"type": "user_message", "text": words(1, 1000)}).to_string();
    let old_document = document(&[json!(words(2, 800))], 1);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(old_document.as_bytes()).unwrap();
    let body = gz.finish().unwrap();
    db.execute(
        "INSERT INTO run_events (run_id, seq, job_id, lease_token, type, payload, created_at) \
         VALUES (?1, 1, ?2, ?3, 'user_message', ?4, 0)",
        &[
            Arg::Text(run.clone()),
            Arg::Int(lease.id()),
            Arg::Int(lease.token()),
            Arg::Text(old_payload.clone()),
        ],
    )
    .await;
    db.execute(
        "INSERT INTO checkpoints (run_id, through_seq, format_version, body, size_bytes, \
         job_id, lease_token, created_at) VALUES (?1, 1, 1, ?2, ?3, ?4, ?5, 0)",
        &[
            Arg::Text(run.clone()),
            Arg::Bytes(body.clone()),
            Arg::Int(body.len() as i64),
            Arg::Int(lease.id()),
            Arg::Int(lease.token()),
        ],
    )
    .await;
    let cp = store.latest_checkpoint(&run).await.unwrap().unwrap();
    assert_eq!(
        (cp.document.as_str(), cp.through_seq),
        (old_document.as_str(), 1)
    );
    let new_payload = json!({"type": "user_message", "text": words(3, 1000)}).to_string();
    assert_eq!(
        lease
            .append_event("user_message", &new_payload)
            .await
            .unwrap(),
        2
    );
    let read: Vec<String> = store
        .events(&run, 0)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.payload)
        .collect();
    assert_eq!(read, [old_payload, new_payload]);
    let newer = document(&[json!(words(2, 800)), json!(words(3, 1000))], 2);
    lease.write_checkpoint(2, 1, &newer).await.unwrap();
    let cp = store.latest_checkpoint(&run).await.unwrap().unwrap();
    assert_eq!(cp.document, newer);
    assert_eq!(
        store.run_storage(&run).await.unwrap().checkpoints,
        1,
        "the old one went"
    );
}

/// A blob that no longer inflates, or that is gone, is an error naming the run — never a
/// wrong text.
pub async fn damaged_content_is_an_error_naming_the_run(db: &TestDb) {
    let store = db.store().await;
    let run = store.enqueue(&NewRun::new("a", "p")).await.unwrap().run_id;
    let lease = claim_one(&store).await;
    let payload = json!({"text": words(9, 3000)}).to_string();
    lease.append_event("e", &payload).await.unwrap();
    lease
        .write_checkpoint(1, 1, &document(&[json!(words(9, 3000))], 1))
        .await
        .unwrap();
    let damaged = db
        .execute(
            "UPDATE run_blobs SET body = ?1 WHERE run_id = ?2 AND raw_size > 2000",
            &[
                Arg::Bytes(b"\x00\x01\x02 not deflate".to_vec()),
                Arg::Text(run.clone()),
            ],
        )
        .await;
    assert_eq!(damaged, 1, "the long string is one blob, shared");
    for result in [
        store.events(&run, 0).await.map(|_| ()),
        store.latest_checkpoint(&run).await.map(|_| ()),
    ] {
        match result {
            Err(Error::Corrupt(m)) => assert!(m.contains(&run), "{m}"),
            other => panic!("expected a corrupt-content error, got {other:?}"),
        }
    }
    db.execute(
        "DELETE FROM run_blobs WHERE run_id = ?1 AND raw_size > 2000",
        &[Arg::Text(run.clone())],
    )
    .await;
    match store.events(&run, 0).await {
        Err(Error::Corrupt(m)) => assert!(m.contains("missing") && m.contains(&run), "{m}"),
        other => panic!("expected a missing-blob error, got {other:?}"),
    }
}

/// The statements that make a checkpoint write — each blob, the row, dropping the older
/// checkpoint — failing one after another (as a crash mid-transaction would end them):
/// each time nothing of the write is left, the previous checkpoint still reads, and the
/// same lease writes and reads correctly afterwards.
pub async fn a_checkpoint_write_failing_at_any_step_leaves_the_run_as_it_was(db: &TestDb) {
    let store = db.store().await;
    let run = store.enqueue(&NewRun::new("a", "p")).await.unwrap().run_id;
    let lease = claim_one(&store).await;
    let first = document(&[json!(words(20, 900))], 0);
    lease.write_checkpoint(0, 1, &first).await.unwrap();
    // A document with three new long strings: three blob inserts, the row, the prune.
    let second = document(
        &[
            json!(words(21, 900)),
            json!(words(22, 900)),
            json!(words(23, 900)),
        ],
        3,
    );
    let blobs_before = store.run_storage(&run).await.unwrap().blobs;
    let steps = ["blob 1", "blob 2", "blob 3", "row", "prune"];
    for (i, step) in steps.iter().enumerate() {
        refuse_from(db, i, blobs_before).await;
        let err = lease.write_checkpoint(3, 1, &second).await;
        assert!(err.is_err(), "the write failed at {step}");
        let storage = store.run_storage(&run).await.unwrap();
        assert_eq!(
            (storage.blobs, storage.checkpoints),
            (blobs_before, 1),
            "nothing of a write that failed at {step} is left"
        );
        let cp = store.latest_checkpoint(&run).await.unwrap().unwrap();
        assert_eq!(
            cp.document, first,
            "the previous checkpoint after a failure at {step}"
        );
        stop_refusing(db).await;
    }
    lease.write_checkpoint(3, 1, &second).await.unwrap();
    assert_eq!(
        store
            .latest_checkpoint(&run)
            .await
            .unwrap()
            .unwrap()
            .document,
        second
    );
    let payload = json!({"text": words(24, 900), "again": words(21, 900)}).to_string();
    lease.append_event("e", &payload).await.unwrap();
    assert_eq!(store.events(&run, 0).await.unwrap()[0].payload, payload);
}

/// Makes the write's statement number `step` (0–2: the blob inserts after `blobs` blobs,
/// 3: the checkpoint row, 4: dropping the older checkpoint) fail.
async fn refuse_from(db: &TestDb, step: usize, blobs: i64) {
    let (table, when, event) = match step {
        0..=2 => (
            "run_blobs",
            format!(
                "(SELECT COUNT(*) FROM run_blobs) >= {}",
                blobs + step as i64
            ),
            "INSERT",
        ),
        3 => ("checkpoints", "1 = 1".to_string(), "INSERT"),
        _ => ("checkpoints", "1 = 1".to_string(), "DELETE"),
    };
    match db.backend {
        Backend::Sqlite => {
            db.execute(
                &format!(
                    "CREATE TRIGGER refuse BEFORE {event} ON {table} WHEN {when} \
                     BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
                ),
                &[],
            )
            .await;
        }
        Backend::Postgres => {
            db.execute(
                &format!(
                    "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS \
                     $$ BEGIN IF {when} THEN RAISE EXCEPTION 'refused by the test'; END IF; \
                     IF TG_OP = 'DELETE' THEN RETURN OLD; END IF; RETURN NEW; END $$"
                ),
                &[],
            )
            .await;
            db.execute(
                &format!(
                    "CREATE TRIGGER refuse BEFORE {event} ON {table} \
                     FOR EACH ROW EXECUTE FUNCTION refuse()"
                ),
                &[],
            )
            .await;
        }
    }
}

async fn stop_refusing(db: &TestDb) {
    match db.backend {
        Backend::Sqlite => {
            db.execute("DROP TRIGGER refuse", &[]).await;
        }
        Backend::Postgres => {
            db.execute("DROP FUNCTION refuse() CASCADE", &[]).await;
        }
    }
}
