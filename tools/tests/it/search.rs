//! list_files and grep over a real directory tree.

use std::os::unix::fs::symlink;

use serde_json::json;

use crate::common::{Fixture, call_builtin};

fn tree() -> Fixture {
    let fx = Fixture::new();
    fx.write("src/main.rs", "fn main() {\n    println!(\"hello\");\n}\n");
    fx.write("src/lib/util.rs", "pub fn helper() -> u32 {\n    42\n}\n");
    fx.write("README.md", "# Project\nSay hello to the helper.\n");
    fx.write(".git/config", "hello from git internals\n");
    fx
}

#[tokio::test]
async fn list_files_is_sorted_relative_and_filterable() {
    let fx = tree();
    let ctx = fx.ctx();
    let all = call_builtin("list_files", &ctx, json!({})).await;
    assert!(!all.is_error, "{}", all.content);
    assert_eq!(
        all.content, "README.md\nsrc/\nsrc/lib/\nsrc/lib/util.rs\nsrc/main.rs\n",
        "sorted, relative to the workspace, .git skipped"
    );

    let rs = call_builtin("list_files", &ctx, json!({"pattern": "*.rs"})).await;
    assert_eq!(rs.content, "src/lib/util.rs\nsrc/main.rs\n");

    let sub = call_builtin("list_files", &ctx, json!({"path": "src/lib"})).await;
    assert_eq!(sub.content, "src/lib/util.rs\n");

    let none = call_builtin("list_files", &ctx, json!({"pattern": "*.py"})).await;
    assert!(
        !none.is_error && none.content.contains("no files"),
        "{}",
        none.content
    );

    let bad = call_builtin("list_files", &ctx, json!({"pattern": "[unclosed"})).await;
    assert!(
        bad.is_error && bad.content.contains("invalid glob"),
        "{}",
        bad.content
    );
}

#[tokio::test]
async fn grep_reports_path_line_and_text() {
    let fx = tree();
    let ctx = fx.ctx();
    let out = call_builtin("grep", &ctx, json!({"pattern": "hel+o"})).await;
    assert!(!out.is_error, "{}", out.content);
    assert_eq!(
        out.content,
        "README.md:2:Say hello to the helper.\nsrc/main.rs:2:    println!(\"hello\");\n"
    );

    let glob = call_builtin(
        "grep",
        &ctx,
        json!({"pattern": "(?i)HELPER", "glob": "*.rs"}),
    )
    .await;
    assert_eq!(glob.content, "src/lib/util.rs:1:pub fn helper() -> u32 {\n");

    let in_file = call_builtin(
        "grep",
        &ctx,
        json!({"pattern": "42", "path": "src/lib/util.rs"}),
    )
    .await;
    assert_eq!(in_file.content, "src/lib/util.rs:2:    42\n");

    let none = call_builtin("grep", &ctx, json!({"pattern": "zebra"})).await;
    assert!(
        !none.is_error && none.content.contains("no matches"),
        "{}",
        none.content
    );

    let bad = call_builtin("grep", &ctx, json!({"pattern": "(unclosed"})).await;
    assert!(
        bad.is_error && bad.content.contains("invalid regex"),
        "{}",
        bad.content
    );
}

#[tokio::test]
async fn grep_does_not_follow_symlinks_out_of_the_workspace() {
    let fx = tree();
    symlink(&fx.outside_file, fx.ws("escape.txt")).unwrap();
    fx.write("inside.txt", "OUTSIDE-SECRET-CONTENT but inside\n");
    let ctx = fx.ctx();
    let out = call_builtin("grep", &ctx, json!({"pattern": "OUTSIDE-SECRET"})).await;
    assert!(!out.is_error, "{}", out.content);
    assert_eq!(
        out.content,
        "inside.txt:1:OUTSIDE-SECRET-CONTENT but inside\n"
    );
}
