//! The daemon's HTTP servers cap a request's head (issue 40): a whole daemon in process on
//! port 0, spoken to over raw TCP on loopback. A request with a 100 KB header is answered
//! `431 Request Header Fields Too Large` and closed, on the API and on the metrics listener;
//! an ordinary request on a new connection is still answered; the daemon then stops cleanly.
//! (The header read timeout is tested with a short limit on the same server in
//! `nightshift_runner::http_server`'s own tests.)

use std::net::SocketAddr;
use std::time::Duration;

use nightshift_runner::config::Config;
use nightshift_runner::daemon;
use nightshift_tests::{Backend, TestDb};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use crate::crash::{agent, text_turn};

/// Sends `request` on a new connection; everything answered until the server closes it.
async fn exchange(address: SocketAddr, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(address).await.unwrap();
    // The server may close before reading all of an oversized head.
    let _ = stream.write_all(request).await;
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut answer))
        .await
        .expect("the server answers and closes")
        .ok();
    String::from_utf8_lossy(&answer).into_owned()
}

fn get(path: &str, extra_header: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{extra_header}\r\n")
        .into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_100_kb_header_is_refused_and_ordinary_requests_still_work() {
    let db = TestDb::new(Backend::Sqlite, "http_limits").await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let body = agent(dir.path(), "echo", &[], json!([text_turn("hi")]));
    let text = format!(
        "[server]\naddress = \"127.0.0.1:0\"\n\n[telemetry]\nmetrics_address = \"127.0.0.1:0\"\n\n\
         [runtime]\ndata_dir = \"data\"\n\n[sandbox]\nmode = \"off\"\n\n{body}"
    );
    let mut config = Config::parse(&text, "http limits config").unwrap();
    config.base_dir = dir.path().to_path_buf();
    config.database = db.config.clone();
    config.validate().unwrap();
    let store = nightshift_runner::open_store(&config).await.unwrap();
    let shutdown = CancellationToken::new();
    let running = daemon::start(&config, store, shutdown.clone())
        .await
        .expect("the daemon starts");
    let api = running.address();
    let metrics = running.metrics_address().expect("a metrics listener");
    let stopped = tokio::spawn(running.wait());

    let big = format!("X-Big: {}\r\n", "a".repeat(100 * 1024));
    for (address, path) in [(api, "/healthz"), (metrics, "/metrics")] {
        let refused = exchange(address, &get(path, &big)).await;
        assert!(
            refused.starts_with("HTTP/1.1 431 Request Header Fields Too Large"),
            "{path}: {refused}"
        );
        let answered = exchange(address, &get(path, "")).await;
        assert!(
            answered.starts_with("HTTP/1.1 200 OK"),
            "{path}: {answered}"
        );
    }

    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(30), stopped)
        .await
        .expect("the daemon stops")
        .unwrap()
        .expect("cleanly");
}
