//! A secret placed across every cut point a tool makes — run_command's head and tail (plain
//! and base64-encoded), read_file's 2,000-character line cut, grep's 500-character cut,
//! http_request's output cut and its body-read limit — leaves no 8-character piece of
//! itself (or of its base64 core) in what the model sees or in the artifact, at every offset
//! around the cut.

use axum::Router;
use axum::body::Body;
use axum::extract::Path as UrlPath;
use base64::Engine as _;
use nightshift_tools::{HttpAllowlist, HttpRequest, Limits, RunCommand, SecretResolver};
use serde_json::json;

use crate::common::{Fixture, call, call_builtin, small_cap};

const SECRET: &str = "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUv";

fn secrets() -> SecretResolver {
    // Redact-only, like the daemon's provider key.
    SecretResolver::default().with_redact_only([("ANTHROPIC_API_KEY", SECRET)])
}

/// Panics if `text` holds any 8-byte piece of `secret_form`.
fn assert_no_piece(text: &str, secret_form: &str, what: &str) {
    let b = secret_form.as_bytes();
    for i in 0..=b.len().saturating_sub(8) {
        let piece = std::str::from_utf8(&b[i..i + 8]).unwrap();
        assert!(
            !text.contains(piece),
            "{what}: {piece:?} of the secret survives in:\n{text}"
        );
    }
}

fn artifact_text(out: &nightshift_tools::ToolOutput) -> String {
    out.artifact
        .as_ref()
        .map(|a| std::fs::read_to_string(&a.path).unwrap())
        .unwrap_or_default()
}

#[tokio::test]
async fn run_command_head_and_tail_cuts_never_show_part_of_a_secret() {
    let fx = Fixture::new();
    let ctx = fx.ctx().with_limits(small_cap(200)).with_secrets(secrets());
    let filler = 1000;
    let total = filler + SECRET.len();
    let l = SECRET.len();
    // Around the head cut (100) and the tail cut (total - 100).
    let offsets: Vec<usize> = (100 - l - 1..=101)
        .chain(total - 100 - l - 1..=total - 99)
        .collect();
    for offset in offsets {
        let offset = offset.min(filler);
        let text = format!(
            "{}{SECRET}{}",
            "a".repeat(offset),
            "a".repeat(filler - offset)
        );
        fx.write("out.txt", &text);
        let out = call(&RunCommand, &ctx, json!({"command": "cat out.txt"})).await;
        assert!(
            out.content.contains("cut"),
            "offset {offset}: {}",
            out.content
        );
        assert_no_piece(&out.content, SECRET, &format!("plain, offset {offset}"));
        assert_no_piece(
            &artifact_text(&out),
            SECRET,
            &format!("artifact, offset {offset}"),
        );

        // The same bytes base64-encoded on one line: the secret's aligned core is cut too.
        let out = call(&RunCommand, &ctx, json!({"command": "base64 -w0 out.txt"})).await;
        let skip = (3 - offset % 3) % 3;
        let core = &SECRET.as_bytes()[skip..skip + (l - skip) / 3 * 3];
        let core = base64::engine::general_purpose::STANDARD_NO_PAD.encode(core);
        assert_no_piece(&out.content, &core, &format!("base64, offset {offset}"));
        assert_no_piece(
            &artifact_text(&out),
            &core,
            &format!("base64 artifact, {offset}"),
        );
    }
}

#[tokio::test]
async fn read_file_line_cut_never_shows_part_of_a_secret() {
    let fx = Fixture::new();
    let ctx = fx.ctx().with_secrets(secrets());
    for offset in 2000 - SECRET.len() - 1..=2001 {
        fx.write(
            "long.txt",
            &format!(
                "first\n{}{SECRET}{}\nlast\n",
                "b".repeat(offset),
                "b".repeat(50)
            ),
        );
        let out = call_builtin("read_file", &ctx, json!({"path": "long.txt"})).await;
        assert!(!out.is_error, "{}", out.content);
        assert!(out.content.contains("last"), "{}", out.content);
        assert_no_piece(&out.content, SECRET, &format!("read_file, offset {offset}"));
    }
}

#[tokio::test]
async fn grep_line_cut_never_shows_part_of_a_secret() {
    let fx = Fixture::new();
    let ctx = fx.ctx().with_secrets(secrets());
    for offset in 500 - SECRET.len() - 1..=501 {
        fx.write(
            "g.txt",
            &format!("{}{SECRET}{}\n", "c".repeat(offset), "c".repeat(20)),
        );
        let out = call_builtin("grep", &ctx, json!({"pattern": "ccc"})).await;
        assert!(out.content.contains("g.txt:1:"), "{}", out.content);
        assert_no_piece(&out.content, SECRET, &format!("grep, offset {offset}"));
        // Nor can the pattern find the secret's bytes: grep searches redacted text.
        let out = call_builtin("grep", &ctx, json!({"pattern": "sk-ant-api03"})).await;
        assert!(out.content.starts_with("no matches"), "{}", out.content);
    }
}

/// `/split/{k}/{j}` sends `k` × "d" and the first `j` bytes of the secret, then never sends
/// the rest (the stream stays pending until the client hangs up); `/whole/{k}` sends the
/// secret at offset `k` of 1,000 × "d".
async fn server() -> std::net::SocketAddr {
    let app = Router::new()
        .route(
            "/split/{k}/{j}",
            axum::routing::get(|UrlPath((k, j)): UrlPath<(usize, usize)>| async move {
                let first = format!("{}{}", "d".repeat(k), &SECRET[..j]);
                let stream = futures::stream::once(async move {
                    Ok::<_, std::io::Error>(axum::body::Bytes::from(first))
                })
                .chain(futures::stream::pending());
                Body::from_stream(stream)
            }),
        )
        .route(
            "/whole/{k}",
            axum::routing::get(|UrlPath(k): UrlPath<usize>| async move {
                format!("{}{SECRET}{}", "d".repeat(k), "d".repeat(1000 - k))
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

use futures::StreamExt as _;

#[tokio::test]
async fn http_body_cuts_never_show_part_of_a_secret() {
    let addr = server().await;
    let fx = Fixture::new();
    // The body-read limit falls exactly after the first chunk: mid-secret.
    for j in 8..SECRET.len() {
        let k = 120;
        let limits = Limits {
            max_artifact_bytes: (k + j) as u64,
            ..Limits::default()
        };
        let ctx = fx
            .ctx()
            .with_limits(limits)
            .with_secrets(secrets())
            .with_http_allowlist(HttpAllowlist::new([addr.to_string()]));
        let input = json!({"method": "GET", "url": format!("http://{addr}/split/{k}/{j}")});
        let out = call(&HttpRequest::new(), &ctx, input).await;
        assert!(
            out.content.contains("[body not read past"),
            "{}",
            out.content
        );
        assert_no_piece(&out.content, SECRET, &format!("read limit, split at {j}"));
    }
    // The output cap's head and tail cuts.
    let ctx = fx
        .ctx()
        .with_limits(small_cap(200))
        .with_secrets(secrets())
        .with_http_allowlist(HttpAllowlist::new([addr.to_string()]));
    let l = SECRET.len();
    for k in (100 - l - 1..=101).chain(1000 - 100 - 1..=1000) {
        let input = json!({"method": "GET", "url": format!("http://{addr}/whole/{k}")});
        let out = call(&HttpRequest::new(), &ctx, input).await;
        assert!(out.content.contains("cut"), "{}", out.content);
        assert_no_piece(&out.content, SECRET, &format!("output cut, offset {k}"));
        assert_no_piece(
            &artifact_text(&out),
            SECRET,
            &format!("artifact, offset {k}"),
        );
    }
}
