//! File tools under a real symlink race: a thread swaps a directory (and a file) inside the
//! workspace with a symlink to outside, atomically and as fast as it can, while read_file,
//! write_file, edit_file, list_files and grep are called thousands of times. No call may ever
//! show the outside content, and nothing outside may ever be written. Plus the ordinary cases:
//! symlinks that stay inside work, ones that lead out are refused with a clear message.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;

use nix::fcntl::{RenameFlags, renameat2};
use serde_json::json;

use crate::common::{Fixture, OUTSIDE_CONTENT, call_builtin};

const INSIDE: &str = "INSIDE-CONTENT\n";
/// A file name that exists only in the outside directory.
const OUTSIDE_ONLY: &str = "outside-only.txt";
/// Tool calls made while the swapper runs (bounded by count, not time).
const RACE_CALLS: usize = 2000;

/// Every file below `dir` (recursively, symlinks not followed) with its content.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                stack.push(entry.path());
            } else if kind.is_symlink() {
                let target = std::fs::read_link(entry.path()).unwrap();
                out.insert(entry.path(), target.into_os_string().into_encoded_bytes());
            } else {
                out.insert(entry.path(), std::fs::read(entry.path()).unwrap());
            }
        }
    }
    out
}

/// Swaps `ws/d` ⇄ `ws/d-other` and `ws/f` ⇄ `ws/f-other` with `RENAME_EXCHANGE` until
/// stopped; one of each pair is a real directory / file inside, the other a symlink to the
/// outside directory / file. Returns the number of swaps.
struct Swapper {
    stop: Arc<AtomicBool>,
    swaps: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl Swapper {
    fn start(workspace: &Path) -> Swapper {
        let stop = Arc::new(AtomicBool::new(false));
        let swaps = Arc::new(AtomicU64::new(0));
        let dir = File::open(workspace).unwrap();
        let thread = std::thread::spawn({
            let stop = stop.clone();
            let swaps = swaps.clone();
            move || {
                while !stop.load(Ordering::Relaxed) {
                    for (a, b) in [("d", "d-other"), ("f", "f-other")] {
                        renameat2(&dir, a, &dir, b, RenameFlags::RENAME_EXCHANGE)
                            .expect("exchange");
                    }
                    swaps.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        Swapper {
            stop,
            swaps,
            thread: Some(thread),
        }
    }

    fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap();
        self.swaps.load(Ordering::Relaxed)
    }
}

impl Drop for Swapper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symlink_swapped_in_during_calls_never_leads_outside() {
    let fx = Fixture::new();
    let outside_dir = fx.root.join("outside-dir");
    std::fs::create_dir(&outside_dir).unwrap();
    std::fs::write(outside_dir.join("f"), OUTSIDE_CONTENT).unwrap();
    std::fs::write(outside_dir.join(OUTSIDE_ONLY), OUTSIDE_CONTENT).unwrap();
    fx.write("d/f", INSIDE);
    fx.write("f", INSIDE);
    symlink(&outside_dir, fx.ws("d-other")).unwrap();
    symlink(&fx.outside_file, fx.ws("f-other")).unwrap();
    let outside_before = snapshot(&fx.root);
    let outside_before: BTreeMap<_, _> = outside_before
        .into_iter()
        .filter(|(p, _)| !p.starts_with(&fx.workspace))
        .collect();
    let ctx = fx.ctx();

    let swapper = Swapper::start(&fx.workspace);
    let mut succeeded = 0usize;
    let mut refused = 0usize;
    for i in 0..RACE_CALLS {
        let (tool, input) = match i % 7 {
            0 => ("read_file", json!({"path": "d/f"})),
            1 => ("read_file", json!({"path": "f"})),
            2 => (
                "write_file",
                json!({"path": "d/new/written.txt", "content": "WRITTEN\n"}),
            ),
            3 => ("write_file", json!({"path": "f", "content": INSIDE})),
            4 => (
                "edit_file",
                json!({"path": "d/f", "old_string": "CONTENT", "new_string": "CONTENT+"}),
            ),
            5 => ("list_files", json!({"path": "d"})),
            _ => ("grep", json!({"pattern": "CONTENT|written", "path": "d"})),
        };
        let out = call_builtin(tool, &ctx, input.clone()).await;
        assert!(
            !out.content.contains("OUTSIDE-SECRET") && !out.content.contains(OUTSIDE_ONLY),
            "call {i} ({tool} {input}) reached outside the workspace: {}",
            out.content
        );
        if out.is_error {
            refused += 1;
        } else {
            succeeded += 1;
        }
    }
    let swaps = swapper.stop();

    let outside_after: BTreeMap<_, _> = snapshot(&fx.root)
        .into_iter()
        .filter(|(p, _)| !p.starts_with(&fx.workspace))
        .collect();
    assert_eq!(
        outside_after, outside_before,
        "something outside the workspace was written"
    );
    assert!(!outside_dir.join("new").exists());
    // The race really happened: the swapper ran throughout, and calls met both states.
    assert!(swaps > 100, "only {swaps} swaps");
    assert!(
        succeeded > 0 && refused > 0,
        "{succeeded} calls succeeded and {refused} were refused: the race was not exercised"
    );
}

#[tokio::test]
async fn symlinks_inside_work_and_ones_leading_out_are_refused_clearly() {
    let fx = Fixture::new();
    let outside_dir = fx.root.join("outside-dir");
    std::fs::create_dir(&outside_dir).unwrap();
    std::fs::write(outside_dir.join(OUTSIDE_ONLY), OUTSIDE_CONTENT).unwrap();
    fx.write("real/inner.txt", INSIDE);
    symlink("real", fx.ws("dir-in")).unwrap();
    symlink("../real/inner.txt", fx.ws("real/up-and-back")).unwrap();
    symlink("../outside.txt", fx.ws("rel-out")).unwrap();
    symlink("real/../../outside-dir", fx.ws("rel-dir-out")).unwrap();
    symlink(&outside_dir, fx.ws("abs-dir-out")).unwrap();
    symlink("/proc/self/root/etc/hostname", fx.ws("proc-out")).unwrap();
    let ctx = fx.ctx();

    // Inside: through a relative symlink to a directory, and one that climbs and comes back.
    for path in ["dir-in/inner.txt", "real/up-and-back"] {
        let out = call_builtin("read_file", &ctx, json!({"path": path})).await;
        assert!(!out.is_error, "{path}: {}", out.content);
        assert!(
            out.content.contains("INSIDE-CONTENT"),
            "{path}: {}",
            out.content
        );
    }
    let out = call_builtin(
        "write_file",
        &ctx,
        json!({"path": "dir-in/made/here.txt", "content": "new\n"}),
    )
    .await;
    assert!(!out.is_error, "{}", out.content);
    assert_eq!(fx.read("real/made/here.txt"), "new\n");
    let out = call_builtin("list_files", &ctx, json!({"path": "dir-in"})).await;
    assert_eq!(
        out.content, "dir-in/inner.txt\ndir-in/made/\ndir-in/made/here.txt\ndir-in/up-and-back\n",
        "listed through the inside symlink"
    );
    let out = call_builtin("grep", &ctx, json!({"pattern": "INSIDE", "path": "dir-in"})).await;
    assert_eq!(
        out.content,
        "dir-in/inner.txt:1:INSIDE-CONTENT\ndir-in/up-and-back:1:INSIDE-CONTENT\n"
    );

    // Out: relative and absolute symlinks, to a file or a directory, and a /proc magic link.
    for path in [
        "rel-out",
        "rel-dir-out/outside-only.txt",
        "abs-dir-out/outside-only.txt",
        "proc-out",
    ] {
        let read = call_builtin("read_file", &ctx, json!({"path": path})).await;
        assert!(read.is_error, "read {path}: {}", read.content);
        assert!(
            read.content.contains("resolves outside the workspace"),
            "read {path}: {}",
            read.content
        );
        let write = call_builtin(
            "write_file",
            &ctx,
            json!({"path": path, "content": "PWNED"}),
        )
        .await;
        assert!(
            write.is_error && write.content.contains("outside the workspace"),
            "write {path}: {}",
            write.content
        );
        let edit = call_builtin(
            "edit_file",
            &ctx,
            json!({"path": path, "old_string": "OUTSIDE", "new_string": "PWNED"}),
        )
        .await;
        assert!(
            edit.is_error && edit.content.contains("outside the workspace"),
            "edit {path}: {}",
            edit.content
        );
    }
    for path in ["rel-dir-out", "abs-dir-out"] {
        let list = call_builtin("list_files", &ctx, json!({"path": path})).await;
        assert!(
            list.is_error && list.content.contains("outside the workspace"),
            "list {path}: {}",
            list.content
        );
        let write = call_builtin(
            "write_file",
            &ctx,
            json!({"path": format!("{path}/sub/new.txt"), "content": "PWNED"}),
        )
        .await;
        assert!(write.is_error, "write under {path}: {}", write.content);
    }
    // A walk of the whole workspace lists the symlinks but neither enters nor reads outside.
    let all = call_builtin("grep", &ctx, json!({"pattern": "OUTSIDE"})).await;
    assert!(
        !all.is_error && all.content.contains("no matches"),
        "{}",
        all.content
    );
    let listed = call_builtin("list_files", &ctx, json!({})).await;
    assert!(!listed.content.contains(OUTSIDE_ONLY), "{}", listed.content);
    assert!(
        listed.content.contains("abs-dir-out\n"),
        "{}",
        listed.content
    );

    assert_eq!(
        std::fs::read_to_string(&fx.outside_file).unwrap(),
        OUTSIDE_CONTENT
    );
    let outside_entries: Vec<_> = std::fs::read_dir(&outside_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(outside_entries, [OUTSIDE_ONLY], "written outside");
}

#[tokio::test]
async fn write_file_refuses_a_file_where_a_directory_is_needed_and_a_fifo() {
    let fx = Fixture::new();
    fx.write("plain.txt", "x\n");
    nix::unistd::mkfifo(
        fx.ws("pipe").as_path(),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    let ctx = fx.ctx();
    let out = call_builtin(
        "write_file",
        &ctx,
        json!({"path": "plain.txt/child.txt", "content": "x"}),
    )
    .await;
    assert!(
        out.is_error && out.content.contains("`plain.txt` is not a directory"),
        "{}",
        out.content
    );
    // Neither call may block on the FIFO (no reader, no writer).
    let write = call_builtin("write_file", &ctx, json!({"path": "pipe", "content": "x"})).await;
    assert!(
        write.is_error && write.content.contains("not a regular file"),
        "{}",
        write.content
    );
    let read = call_builtin("read_file", &ctx, json!({"path": "pipe"})).await;
    assert!(
        read.is_error && read.content.contains("not a regular file"),
        "{}",
        read.content
    );
    let out = call_builtin("write_file", &ctx, json!({"path": ".", "content": "x"})).await;
    assert!(out.is_error, "{}", out.content);
}
