//! The daemon's HTTP/1.1 servers (the API and `/metrics`): an axum router served on a TCP
//! listener, with limits on what a client can make a connection hold.
//!
//! Guarantees: a client that has not sent a request's whole head (request line and headers)
//! within [`HttpLimits::header_read_timeout`] of starting it — or, on a fresh connection, of
//! connecting — is disconnected (hyper's header read timeout, on tokio's timer), so a slow
//! or stalled client cannot hold a connection and its task open; a head over
//! [`HttpLimits::max_header_bytes`] is answered `431 Request Header Fields Too Large` and the
//! connection closed, so no client makes the server buffer more than that for one head.
//! Shutdown is graceful like `axum::serve`'s: once `stop` fires no connection is accepted,
//! each open one finishes the request in flight and closes (an idle one closes at once),
//! and [`serve`] returns when every connection has closed.

use std::time::Duration;

use axum::Router;
use axum::serve::Listener;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// What a client may make one connection hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HttpLimits {
    /// Time to send a request's whole head. Default 20 s.
    pub header_read_timeout: Duration,
    /// Bytes of a request's head (request line and headers). Default 32 KiB.
    pub max_header_bytes: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            header_read_timeout: Duration::from_secs(20),
            max_header_bytes: 32 * 1024,
        }
    }
}

/// The connection settings for `limits`: HTTP/1.1 only (the router speaks nothing else).
fn builder(limits: HttpLimits) -> http1::Builder {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_header_size(limits.max_header_bytes)
        // The read buffer never needs more than a head (hyper's minimum is 8 KiB); bodies
        // are streamed through it.
        .max_buf_size(limits.max_header_bytes.max(8192) + 8192);
    builder
}

/// Serves `router` on `listener` until `stop`, then shuts down gracefully (see the module
/// doc). Returns once every connection has closed.
pub(crate) async fn serve(
    mut listener: TcpListener,
    router: Router,
    limits: HttpLimits,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let connections = TaskTracker::new();
    let builder = builder(limits);
    loop {
        let (stream, _peer) = tokio::select! {
            accepted = Listener::accept(&mut listener) => accepted,
            () = stop.cancelled() => break,
        };
        let service = TowerToHyperService::new(router.clone());
        let connection = builder.serve_connection(TokioIo::new(stream), service);
        let stop = stop.clone();
        connections.spawn(async move {
            let mut connection = std::pin::pin!(connection);
            tokio::select! {
                result = connection.as_mut() => {
                    if let Err(e) = result {
                        tracing::debug!(error = %e, "HTTP connection ended with an error");
                    }
                    return;
                }
                () = stop.cancelled() => connection.as_mut().graceful_shutdown(),
            }
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "HTTP connection ended with an error");
            }
        });
    }
    drop(listener);
    connections.close();
    connections.wait().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use axum::routing::get;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;

    /// A server of `GET /` answering `ok`, with `limits`, and its stop and its task.
    async fn server(
        limits: HttpLimits,
    ) -> (
        std::net::SocketAddr,
        CancellationToken,
        tokio::task::JoinHandle<std::io::Result<()>>,
    ) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let router = Router::new().route("/", get(|| async { "ok" }));
        let stop = CancellationToken::new();
        let task = tokio::spawn(serve(listener, router, limits, stop.clone()));
        (address, stop, task)
    }

    /// Everything the server sends until it closes the connection (within `deadline`).
    async fn until_closed(stream: &mut TcpStream, deadline: Duration) -> String {
        let mut got = Vec::new();
        tokio::time::timeout(deadline, stream.read_to_end(&mut got))
            .await
            .expect("the server closes the connection in time")
            .ok();
        String::from_utf8_lossy(&got).into_owned()
    }

    const GET: &[u8] = b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

    #[tokio::test]
    async fn a_client_stalling_in_its_headers_is_disconnected_after_the_timeout() {
        let limits = HttpLimits {
            header_read_timeout: Duration::from_millis(300),
            ..HttpLimits::default()
        };
        let (address, stop, task) = server(limits).await;
        let mut slow = TcpStream::connect(address).await.unwrap();
        let started = Instant::now();
        slow.write_all(b"GET / HT").await.unwrap();
        let answer = until_closed(&mut slow, Duration::from_secs(10)).await;
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(250),
            "not before the timeout: {waited:?}"
        );
        assert!(!answer.contains("200 OK"), "{answer}");
        // A normal request on a new connection is still answered.
        let mut client = TcpStream::connect(address).await.unwrap();
        client.write_all(GET).await.unwrap();
        let answer = until_closed(&mut client, Duration::from_secs(10)).await;
        assert!(
            answer.starts_with("HTTP/1.1 200 OK") && answer.ends_with("ok"),
            "{answer}"
        );
        stop.cancel();
        task.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_head_over_the_cap_is_refused_with_431() {
        let (address, stop, task) = server(HttpLimits::default()).await;
        let mut client = TcpStream::connect(address).await.unwrap();
        let big = format!(
            "GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
            "a".repeat(100 * 1024)
        );
        // The server may close before reading it all: a failed write is fine.
        let _ = client.write_all(big.as_bytes()).await;
        let answer = until_closed(&mut client, Duration::from_secs(10)).await;
        assert!(
            answer.starts_with("HTTP/1.1 431 Request Header Fields Too Large"),
            "{answer}"
        );
        // Just under the cap still works.
        let mut client = TcpStream::connect(address).await.unwrap();
        let fits = format!(
            "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Big: {}\r\n\r\n",
            "a".repeat(30 * 1024)
        );
        client.write_all(fits.as_bytes()).await.unwrap();
        let answer = until_closed(&mut client, Duration::from_secs(10)).await;
        assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
        stop.cancel();
        task.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn stopping_closes_idle_connections_and_returns() {
        let (address, stop, task) = server(HttpLimits::default()).await;
        let mut idle = TcpStream::connect(address).await.unwrap();
        let mut kept = TcpStream::connect(address).await.unwrap();
        kept.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut first = [0u8; 15];
        kept.read_exact(&mut first).await.unwrap();
        assert_eq!(&first, b"HTTP/1.1 200 OK");
        stop.cancel();
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("serve returns once its connections closed")
            .unwrap()
            .unwrap();
        assert_eq!(until_closed(&mut idle, Duration::from_secs(5)).await, "");
        assert!(
            TcpStream::connect(address).await.is_err(),
            "no longer listening"
        );
    }
}
