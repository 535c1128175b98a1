//! File tools are bounded by what they return, not by what a file claims (issue 40, item 6):
//! a real `nightshift serve` whose scripted model points `read_file`, `edit_file` and `grep`
//! at a sparse 2 GiB one-line file (8 KiB of text, the rest a hole, made with
//! `File::set_len`). Each gives a clear answer (the line cut with a note, a refusal naming
//! the cap, a skipped-file note), and the daemon's peak RSS (`VmHWM`) grows by less than
//! 64 MiB across the three calls — before the bound, `read_file` alone took it from 56 MiB
//! to 4.1 GiB.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use nightshift_agent::RunEvent;
use nightshift_store::RunStatus;
use nightshift_tests::{TestDb, eventually, on_both_backends};
use serde_json::json;

use crate::crash::{
    FAST_WORKER, agent, enqueue, events, out, serve, sigterm, text_turn, tool_turn, wait_finished,
    write_config,
};

on_both_backends! {
    a_sparse_two_gib_file_is_read_edited_and_searched_in_bounded_memory => sparse_file;
}

/// Claimed size of the sparse file.
const CLAIMED: u64 = 2 << 30;
/// How much the daemon's peak RSS may grow across the calls.
const GROWTH_LIMIT_KIB: u64 = 64 * 1024;

/// `VmHWM` (peak resident set) of process `pid`, in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/<pid>/status")
}

async fn sparse_file(db: &TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(out(d)).unwrap();
    let note = out(d).join("workspace");
    let gate = out(d).join("go");
    let wait = format!(
        "pwd > '{}'; while [ ! -e '{}' ]; do sleep 0.05; done",
        note.display(),
        gate.display()
    );
    let turns = json!([
        tool_turn("ready", "run_command", json!({"command": wait})),
        tool_turn("read", "read_file", json!({"path": "big.txt"})),
        tool_turn(
            "read_on",
            "read_file",
            json!({"path": "big.txt", "offset": 2})
        ),
        tool_turn(
            "edit",
            "edit_file",
            json!({"path": "big.txt", "old_string": "hello", "new_string": "bye"})
        ),
        tool_turn("grep", "grep", json!({"pattern": "hello"})),
        text_turn("done"),
    ]);
    let body = agent(
        d,
        "reader",
        &["run_command", "read_file", "edit_file", "grep"],
        turns,
    );
    let cfg = write_config(db, d, FAST_WORKER, &body);
    let store = db.store().await;
    let daemon = serve(&cfg);
    let run_id = enqueue(&cfg, "reader");
    let workspace = eventually(Duration::from_secs(60), "the workspace's path", || async {
        std::fs::read_to_string(&note)
            .ok()
            .map(|p| PathBuf::from(p.trim()))
            .filter(|p| p.is_dir())
    })
    .await;
    let mut big = std::fs::File::create(workspace.join("big.txt")).unwrap();
    let text = format!("hello {}", "x".repeat(8186));
    big.write_all(text.as_bytes()).unwrap();
    big.set_len(CLAIMED).unwrap();
    drop(big);
    let before = peak_rss_kib(daemon.pid());
    std::fs::write(&gate, "").unwrap();

    let run = wait_finished(&store, &run_id).await;
    let after = peak_rss_kib(daemon.pid());
    eprintln!(
        "daemon VmHWM before the calls {before} KiB, after {after} KiB (+{} KiB)",
        after.saturating_sub(before)
    );
    assert_eq!(run.status, RunStatus::Succeeded, "{:?}", run.error);
    let results: Vec<(String, String, bool)> = events(&store, &run_id)
        .await
        .into_iter()
        .filter_map(|(_, e)| match e {
            RunEvent::ToolResult {
                call_id,
                content,
                is_error,
                ..
            } => Some((call_id, content, is_error)),
            _ => None,
        })
        .collect();
    let result = |id: &str| {
        results
            .iter()
            .find(|(call, _, _)| call == id)
            .map(|(_, content, is_error)| (content.clone(), *is_error))
            .unwrap_or_else(|| panic!("no result for {id}: {results:?}"))
    };

    let (read, is_error) = result("read");
    assert!(!is_error, "{read}");
    assert!(read.starts_with("     1\thello xxx"), "{read}");
    assert!(
        read.contains(
            "… [line cut: it runs on past the first 64 MiB, where read_file stops reading"
        ) && read
            .contains("read_file stopped reading this 2147483648-byte file after its first 64 MiB"),
        "says what was cut and how to read on: {read}"
    );
    assert!(read.len() < 8 * 1024, "{} bytes", read.len());
    let (read_on, is_error) = result("read_on");
    assert!(
        is_error && read_on.contains("offset 2 is past the 1 lines in the first 64 MiB"),
        "{read_on}"
    );
    let (edit, is_error) = result("edit");
    assert!(
        is_error
            && edit.contains(
                "too large for edit_file (2147483648 bytes; edit_file loads at most 8 MiB)"
            )
            && edit.contains("run_command"),
        "{edit}"
    );
    let (grep, is_error) = result("grep");
    assert!(
        !is_error && grep.contains("[1 files over 20 MiB were not searched"),
        "{grep}"
    );
    assert_eq!(
        std::fs::metadata(workspace.join("big.txt")).unwrap().len(),
        CLAIMED,
        "the refused edit left the file alone"
    );
    assert!(
        after.saturating_sub(before) < GROWTH_LIMIT_KIB,
        "the daemon's peak RSS grew from {before} KiB to {after} KiB"
    );
    sigterm(daemon).await;
}
