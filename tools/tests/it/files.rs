//! read_file / write_file / edit_file on real files, including every way out of the
//! workspace we refuse (`..`, absolute paths, symlinks to files and directories outside,
//! dangling symlinks) with a positive control so the refusals cannot pass vacuously.

use std::os::unix::fs::symlink;

use serde_json::json;

use crate::common::{Fixture, OUTSIDE_CONTENT, call_builtin};

#[tokio::test]
async fn read_file_numbers_lines_and_pages() {
    let fx = Fixture::new();
    fx.write("notes.txt", "alpha\nbeta\ngamma\ndelta\nepsilon\n");
    let ctx = fx.ctx();

    let all = call_builtin("read_file", &ctx, json!({"path": "notes.txt"})).await;
    assert!(!all.is_error, "{}", all.content);
    assert_eq!(
        all.content,
        "     1\talpha\n     2\tbeta\n     3\tgamma\n     4\tdelta\n     5\tepsilon\n"
    );

    let page = call_builtin(
        "read_file",
        &ctx,
        json!({"path": "notes.txt", "offset": 2, "limit": 2}),
    )
    .await;
    assert!(!page.is_error, "{}", page.content);
    assert!(
        page.content.starts_with("     2\tbeta\n     3\tgamma\n"),
        "{}",
        page.content
    );
    assert!(!page.content.contains("alpha") && !page.content.contains("delta"));
    assert!(page.content.contains("lines 2-3 of 5"), "{}", page.content);
    assert!(page.content.contains("offset=4"), "{}", page.content);

    let past = call_builtin("read_file", &ctx, json!({"path": "notes.txt", "offset": 9})).await;
    assert!(
        past.is_error && past.content.contains("5 lines"),
        "{}",
        past.content
    );
}

#[tokio::test]
async fn read_file_stops_at_the_output_limit_and_says_how_to_read_on() {
    let fx = Fixture::new();
    let text: String = (1..=5000)
        .map(|i| format!("line {i} {}\n", "z".repeat(90)))
        .collect();
    fx.write("long.txt", &text);
    let limits = nightshift_tools::Limits {
        output_cap_bytes: 4096,
        ..Default::default()
    };
    let ctx = fx.ctx().with_limits(limits);
    let out = call_builtin("read_file", &ctx, json!({"path": "long.txt"})).await;
    assert!(!out.is_error, "{}", out.content);
    assert!(out.content.len() <= 4096, "{} bytes", out.content.len());
    assert!(
        out.artifact.is_none(),
        "cut by lines, not by the output cap"
    );
    let shown = out
        .content
        .lines()
        .filter(|l| l.contains("\tline "))
        .count();
    assert!(shown > 10 && shown < 60, "{shown}");
    let footer = out.content.lines().last().unwrap();
    assert_eq!(
        footer,
        format!(
            "[lines 1-{shown} of 5000; the answer reached the output limit; call read_file \
             with offset={} to read more]",
            shown + 1
        )
    );
}

#[tokio::test]
async fn edit_file_refuses_a_file_over_its_cap_without_changing_it() {
    let fx = Fixture::new();
    fx.write("big.txt", "needle\n");
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(fx.ws("big.txt"))
        .unwrap();
    file.set_len(9 << 20).unwrap();
    let ctx = fx.ctx();
    let out = call_builtin(
        "edit_file",
        &ctx,
        json!({"path": "big.txt", "old_string": "needle", "new_string": "pin"}),
    )
    .await;
    assert!(
        out.is_error
            && out
                .content
                .contains("too large for edit_file (9437184 bytes; edit_file loads at most 8 MiB)"),
        "{}",
        out.content
    );
    let bytes = std::fs::read(fx.ws("big.txt")).unwrap();
    assert_eq!(bytes.len(), 9 << 20);
    assert!(bytes.starts_with(b"needle\n"));
}

#[tokio::test]
async fn read_file_errors_are_outputs() {
    let fx = Fixture::new();
    fx.write("bin.dat", "a\0b");
    std::fs::create_dir(fx.ws("dir")).unwrap();
    let ctx = fx.ctx();
    let cases = [
        (json!({"path": "missing.txt"}), "does not exist"),
        (json!({"path": "dir"}), "is a directory"),
        (json!({"path": "bin.dat"}), "binary"),
        (json!({}), "missing field `path`"),
        (json!({"path": "x", "bogus": 1}), "unknown field `bogus`"),
    ];
    for (input, expected) in cases {
        let out = call_builtin("read_file", &ctx, input.clone()).await;
        assert!(out.is_error, "{input}: {}", out.content);
        assert!(out.content.contains(expected), "{input}: {}", out.content);
    }
}

#[tokio::test]
async fn write_file_creates_parents_and_writes_exact_content() {
    let fx = Fixture::new();
    let ctx = fx.ctx();
    let content = "line one\nline two\n";
    let out = call_builtin(
        "write_file",
        &ctx,
        json!({"path": "a/b/c.txt", "content": content}),
    )
    .await;
    assert!(!out.is_error, "{}", out.content);
    assert_eq!(fx.read("a/b/c.txt"), content);
    // Idempotent: the same call again leaves the same file and says the same thing.
    let again = call_builtin(
        "write_file",
        &ctx,
        json!({"path": "a/b/c.txt", "content": content}),
    )
    .await;
    assert_eq!(again, out);
    assert_eq!(fx.read("a/b/c.txt"), content);
}

#[tokio::test]
async fn edit_file_requires_a_unique_match() {
    let fx = Fixture::new();
    let original = "fn a() {}\nlet x = 1;\nlet x = 1;\nfn b() {}\n";
    fx.write("src.rs", original);
    let ctx = fx.ctx();

    let twice = call_builtin(
        "edit_file",
        &ctx,
        json!({"path": "src.rs", "old_string": "let x = 1;", "new_string": "let x = 2;"}),
    )
    .await;
    assert!(twice.is_error);
    assert!(
        twice.content.contains("matches 2 times"),
        "{}",
        twice.content
    );
    assert_eq!(
        fx.read("src.rs"),
        original,
        "a refused edit must not change the file"
    );

    let missing = call_builtin(
        "edit_file",
        &ctx,
        json!({"path": "src.rs", "old_string": "fn c() {}", "new_string": "fn d() {}"}),
    )
    .await;
    assert!(
        missing.is_error && missing.content.contains("not found"),
        "{}",
        missing.content
    );
    assert_eq!(fx.read("src.rs"), original);

    let unique = json!({"path": "src.rs", "old_string": "fn a() {}\nlet x = 1;", "new_string": "fn a() {}\nlet y = 1;"});
    let ok = call_builtin("edit_file", &ctx, unique.clone()).await;
    assert!(!ok.is_error, "{}", ok.content);
    assert!(ok.content.contains("line 1"), "{}", ok.content);
    assert_eq!(
        fx.read("src.rs"),
        "fn a() {}\nlet y = 1;\nlet x = 1;\nfn b() {}\n"
    );

    // Re-running the same edit (recovery after a crash) is not an error and changes nothing.
    let rerun = call_builtin("edit_file", &ctx, unique).await;
    assert!(!rerun.is_error, "{}", rerun.content);
    assert!(
        rerun.content.contains("applied already"),
        "{}",
        rerun.content
    );
    assert_eq!(
        fx.read("src.rs"),
        "fn a() {}\nlet y = 1;\nlet x = 1;\nfn b() {}\n"
    );
}

#[tokio::test]
async fn paths_outside_the_workspace_are_refused() {
    let fx = Fixture::new();
    let outside_dir = fx.root.join("outside-dir");
    std::fs::create_dir(&outside_dir).unwrap();
    symlink(&fx.outside_file, fx.ws("link-out")).unwrap();
    symlink(&outside_dir, fx.ws("dir-out")).unwrap();
    symlink(fx.root.join("not-there-yet"), fx.ws("dangling")).unwrap();
    let ctx = fx.ctx();
    let absolute = fx.outside_file.to_string_lossy().into_owned();

    for path in [
        "../outside.txt",
        "sub/../../outside.txt",
        absolute.as_str(),
        "link-out",
    ] {
        let read = call_builtin("read_file", &ctx, json!({"path": path})).await;
        assert!(read.is_error, "read {path} accepted: {}", read.content);
        assert!(
            !read.content.contains("OUTSIDE-SECRET"),
            "read {path} leaked"
        );

        let edit = call_builtin(
            "edit_file",
            &ctx,
            json!({"path": path, "old_string": "OUTSIDE", "new_string": "PWNED"}),
        )
        .await;
        assert!(edit.is_error, "edit {path} accepted: {}", edit.content);

        let write = call_builtin(
            "write_file",
            &ctx,
            json!({"path": path, "content": "PWNED"}),
        )
        .await;
        assert!(write.is_error, "write {path} accepted: {}", write.content);

        let list = call_builtin("list_files", &ctx, json!({"path": path})).await;
        assert!(list.is_error, "list {path} accepted: {}", list.content);

        let grep = call_builtin("grep", &ctx, json!({"pattern": "OUTSIDE", "path": path})).await;
        assert!(grep.is_error, "grep {path} accepted: {}", grep.content);
    }
    assert_eq!(
        std::fs::read_to_string(&fx.outside_file).unwrap(),
        OUTSIDE_CONTENT
    );

    let messages = [
        ("../outside.txt", "escapes the workspace"),
        (absolute.as_str(), "absolute paths are not allowed"),
        ("link-out", "outside the workspace"),
    ];
    for (path, expected) in messages {
        let out = call_builtin("read_file", &ctx, json!({"path": path})).await;
        assert!(out.content.contains(expected), "{path}: {}", out.content);
    }

    // New files through a symlinked directory or a dangling symlink are refused too.
    let via_dir = call_builtin(
        "write_file",
        &ctx,
        json!({"path": "dir-out/new.txt", "content": "x"}),
    )
    .await;
    assert!(via_dir.is_error, "{}", via_dir.content);
    assert!(!outside_dir.join("new.txt").exists());
    let via_dangling = call_builtin(
        "write_file",
        &ctx,
        json!({"path": "dangling", "content": "x"}),
    )
    .await;
    assert!(via_dangling.is_error, "{}", via_dangling.content);
    assert!(!fx.root.join("not-there-yet").exists());

    // Positive control: `..` that stays inside and a symlink pointing inside both work.
    fx.write("inside/target.txt", "inside text\n");
    symlink(fx.ws("inside/target.txt"), fx.ws("link-in")).unwrap();
    for path in ["inside/../inside/target.txt", "link-in"] {
        let ok = call_builtin("read_file", &ctx, json!({"path": path})).await;
        assert!(!ok.is_error, "{path}: {}", ok.content);
        assert!(ok.content.contains("inside text"), "{path}: {}", ok.content);
    }
    let ok = call_builtin(
        "write_file",
        &ctx,
        json!({"path": "link-in", "content": "via link\n"}),
    )
    .await;
    assert!(!ok.is_error, "{}", ok.content);
    assert_eq!(fx.read("inside/target.txt"), "via link\n");
}
