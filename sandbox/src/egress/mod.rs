//! The egress proxy of a command whose network is `on`: the command's network namespace has
//! only its own loopback, where the launcher's init listens on [`PROXY_PORT`] (and on each
//! loopback grant, see [`loopback_forwards`]); those sockets are handed to the proxy's own
//! process ([`run`]), outside, in the daemon's network, which serves them as an HTTP proxy (`CONNECT host:port` for HTTPS and any TCP protocol a
//! client tunnels, absolute-form `GET http://…` for plain HTTP) under the policy's
//! [`Rules`]. The command finds it through `HTTP_PROXY`, `HTTPS_PROXY` and `ALL_PROXY` (and
//! their lower-case forms), set by the launcher; `NO_PROXY` keeps its own loopback direct.
//!
//! Guarantees: a destination is connected only as [`Rules::decide`] allows (public unicast
//! addresses on allowed ports, or granted by name), to the very address decided; a refusal
//! answers `403` with the reason in the body, a name that does not resolve `502`, a request
//! the proxy cannot read `400`; a request head is read up to [`MAX_HEAD`] bytes within
//! [`HEAD_TIMEOUT`], and at most [`MAX_CONNECTIONS`] connections are served at once (more
//! wait in the listen queue). Nothing the command sends reaches the daemon's loopback,
//! its private network or the metadata endpoint unless the config grants it by name.

mod rules;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

pub use rules::{Refused, Rules, not_public, split_host_port};

/// The port the proxy listens on in the command's own network namespace.
pub const PROXY_PORT: u16 = 3128;
/// The longest request head the proxy reads.
pub const MAX_HEAD: usize = 16 * 1024;
/// How long a client may take to send its request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// How long connecting to a destination may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 128;
/// Loopback grants forwarded as they are (see [`loopback_forwards`]), at most.
pub const MAX_FORWARDS: usize = 16;

/// The grants on the host's loopback (`127.0.0.1:5433`, `[::1]:8080`, `localhost:6380`),
/// which the command reaches at the same address and port on its own loopback, forwarded
/// byte for byte to the host's: what a client that knows no proxy (`psql`, `redis-cli`)
/// needs for a test database. Other grants are reached through the proxy. Pure.
pub fn loopback_forwards(granted: &[String]) -> Vec<SocketAddr> {
    let mut forwards: Vec<SocketAddr> = granted
        .iter()
        .filter_map(|g| split_host_port(g))
        .filter_map(|(host, port)| {
            let ip: std::net::IpAddr = if host.eq_ignore_ascii_case("localhost") {
                [127, 0, 0, 1].into()
            } else {
                host.parse().ok()?
            };
            ip.is_loopback().then_some(SocketAddr::new(ip, port))
        })
        .filter(|at| at.port() != PROXY_PORT)
        .collect();
    forwards.sort();
    forwards.dedup();
    forwards.truncate(MAX_FORWARDS);
    forwards
}

/// The variables that point a command at the proxy.
pub fn proxy_env() -> Vec<(&'static str, String)> {
    let url = format!("http://127.0.0.1:{PROXY_PORT}");
    let local = "localhost,127.0.0.1,::1".to_string();
    [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ]
    .into_iter()
    .map(|name| (name, url.clone()))
    .chain([("NO_PROXY", local.clone()), ("no_proxy", local)])
    .collect()
}

/// What a request head asks the proxy for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ask {
    pub host: String,
    pub port: u16,
    /// `CONNECT`: a tunnel, answered `200` before bytes flow.
    pub tunnel: bool,
    /// For plain HTTP: the head to send on, in origin form.
    pub forward: Vec<u8>,
}

/// Why the proxy cannot read a request head; `Display` is the reason its `400` answer gives.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BadAsk {
    #[error("the request head is not UTF-8")]
    NotUtf8,
    #[error("no request line")]
    NoRequestLine,
    #[error("not an HTTP request line: {0:?}")]
    NotARequestLine(String),
    #[error("unsupported protocol {0:?}")]
    Protocol(String),
    #[error("CONNECT needs host:port, not {0:?}")]
    ConnectWithoutPort(String),
    #[error("only http:// URLs are proxied this way (use CONNECT for https): {0:?}")]
    NotHttp(String),
    #[error("credentials in the URL are not proxied")]
    Credentials,
    #[error("no host in {0:?}")]
    NoHost(String),
}

/// Reads what a complete request head (through its blank line) asks for. Pure.
pub(crate) fn read_ask(head: &[u8]) -> Result<Ask, BadAsk> {
    let text = std::str::from_utf8(head).map_err(|_| BadAsk::NotUtf8)?;
    let (line, rest) = text.split_once("\r\n").ok_or(BadAsk::NoRequestLine)?;
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(BadAsk::NotARequestLine(line.to_string()));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(BadAsk::Protocol(version.to_string()));
    }
    if method == "CONNECT" {
        let (host, port) = split_host_port(target)
            .ok_or_else(|| BadAsk::ConnectWithoutPort(target.to_string()))?;
        return Ok(Ask {
            host: host.to_string(),
            port,
            tunnel: true,
            forward: Vec::new(),
        });
    }
    let rest_of_url = target
        .strip_prefix("http://")
        .ok_or_else(|| BadAsk::NotHttp(target.to_string()))?;
    let (authority, path) = match rest_of_url.find('/') {
        Some(at) => rest_of_url.split_at(at),
        None => (rest_of_url, "/"),
    };
    if authority.contains('@') {
        return Err(BadAsk::Credentials);
    }
    let (host, port) = match split_host_port(authority) {
        Some((host, port)) => (host, port),
        None if !authority.is_empty()
            && (!authority.contains(':')
                || (authority.starts_with('[') && authority.ends_with(']'))) =>
        {
            (authority.trim_start_matches('[').trim_end_matches(']'), 80)
        }
        None => return Err(BadAsk::NoHost(target.to_string())),
    };
    let mut forward = format!("{method} {path} {version}\r\n").into_bytes();
    forward.extend_from_slice(rest.as_bytes());
    Ok(Ask {
        host: host.to_string(),
        port,
        tunnel: false,
        forward,
    })
}

/// `sandbox-exec --egress <channel fd> <policy>`: the proxy's own process, started by the
/// supervisor before it enters the namespaces (a process that made a pid namespace for its
/// children cannot start threads, and the proxy needs one per connection; it also stays in
/// the daemon's network and mount namespaces). It dies with the supervisor (parent-death
/// signal), ends when the init closes the channel without sending a socket, and otherwise
/// serves until killed. Returns an exit code only on failure.
pub(crate) fn run(rest: &[std::ffi::OsString]) -> i32 {
    let fail = |message: String| {
        eprintln!("nightshift sandbox: egress proxy: {message}");
        crate::launch::EXIT_FAILED
    };
    let [fd, json] = rest else {
        return fail("usage: sandbox-exec --egress <fd> <policy>".into());
    };
    if let Err(e) = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL) {
        return fail(format!("prctl(PR_SET_PDEATHSIG): {e}"));
    }
    let _ = nix::sys::prctl::set_dumpable(false);
    let Some(fd) = fd.to_str().and_then(|f| f.parse::<i32>().ok()) else {
        return fail("the channel is not a descriptor number".into());
    };
    let channel = crate::namespaces::adopt_stream(fd);
    let policy: crate::Policy = match json.to_str().map(serde_json::from_str) {
        Some(Ok(policy)) => policy,
        _ => return fail("the policy is malformed".into()),
    };
    let rules = Rules {
        ports: policy.tcp_ports,
        granted: policy.connect,
    };
    // The supervisor may already be gone (before the parent-death signal was set): then the
    // init is too, the channel is closed, and this ends here.
    let Some(mut listeners) = crate::namespaces::take_over(&channel) else {
        return 0;
    };
    drop(channel);
    let forwards = loopback_forwards(&rules.granted);
    let proxy = listeners.remove(0);
    for (listener, to) in listeners.into_iter().zip(forwards) {
        std::thread::spawn(move || forward(listener, to));
    }
    serve(proxy, rules);
    0
}

/// Forwards every connection to `listener` (on the command's loopback) to `to` on the
/// host's, byte for byte.
fn forward(listener: TcpListener, to: SocketAddr) {
    for client in listener.incoming() {
        let Ok(client) = client else { continue };
        std::thread::spawn(move || {
            if let Ok(upstream) = TcpStream::connect_timeout(&to, CONNECT_TIMEOUT) {
                splice(client, upstream);
            }
        });
    }
}

/// Serves the proxy on `listener` (a socket of the command's namespace), one thread per
/// connection, until the process ends.
pub(crate) fn serve(listener: TcpListener, rules: Rules) {
    let rules = Arc::new(rules);
    let open = Arc::new(AtomicUsize::new(0));
    for client in listener.incoming() {
        let Ok(client) = client else { continue };
        while open.load(Ordering::SeqCst) >= MAX_CONNECTIONS {
            std::thread::sleep(Duration::from_millis(20));
        }
        open.fetch_add(1, Ordering::SeqCst);
        let (rules, open) = (rules.clone(), open.clone());
        std::thread::spawn(move || {
            handle(client, &rules);
            open.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

fn answer(client: &mut TcpStream, status: &str, why: &str) {
    let body = format!("nightshift sandbox: {why}\n");
    let _ = write!(
        client,
        "HTTP/1.1 {status}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{body}",
        body.len()
    );
}

/// Reads the head (and whatever came after it in the same reads).
fn read_head(client: &mut TcpStream) -> Result<(Vec<u8>, Vec<u8>), String> {
    client
        .set_read_timeout(Some(HEAD_TIMEOUT))
        .map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(end + 4);
            client.set_read_timeout(None).map_err(|e| e.to_string())?;
            return Ok((buf, rest));
        }
        if buf.len() > MAX_HEAD {
            return Err(format!("the request head is longer than {MAX_HEAD} bytes"));
        }
        match client.read(&mut chunk) {
            Ok(0) => return Err("the client closed before its request head ended".into()),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => return Err(format!("reading the request head: {e}")),
        }
    }
}

fn handle(mut client: TcpStream, rules: &Rules) {
    let (head, early) = match read_head(&mut client) {
        Ok(read) => read,
        Err(why) => return answer(&mut client, "400 Bad Request", &why),
    };
    let ask = match read_ask(&head) {
        Ok(ask) => ask,
        Err(why) => return answer(&mut client, "400 Bad Request", &why.to_string()),
    };
    let resolved: Vec<SocketAddr> = match (ask.host.as_str(), ask.port).to_socket_addrs() {
        Ok(addrs) => addrs.collect(),
        Err(e) => {
            let why = format!("cannot resolve {}: {e}", ask.host);
            return answer(&mut client, "502 Bad Gateway", &why);
        }
    };
    let to = match rules.decide(&ask.host, ask.port, &resolved) {
        Ok(to) => to,
        Err(Refused(why)) => {
            let why = format!(
                "connecting to {}:{} is not allowed: {why}",
                ask.host, ask.port
            );
            return answer(&mut client, "403 Forbidden", &why);
        }
    };
    let mut upstream = match TcpStream::connect_timeout(&to, CONNECT_TIMEOUT) {
        Ok(stream) => stream,
        Err(e) => {
            let why = format!("cannot connect to {}:{} ({to}): {e}", ask.host, ask.port);
            return answer(&mut client, "502 Bad Gateway", &why);
        }
    };
    let sent = if ask.tunnel {
        client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .and_then(|()| upstream.write_all(&early))
    } else {
        upstream
            .write_all(&ask.forward)
            .and_then(|()| upstream.write_all(&early))
    };
    if sent.is_ok() {
        splice(client, upstream);
    }
}

/// Copies both ways until each side has ended its half.
fn splice(client: TcpStream, upstream: TcpStream) {
    let (Ok(mut client_in), Ok(mut upstream_out)) = (client.try_clone(), upstream.try_clone())
    else {
        return;
    };
    let up = std::thread::spawn(move || {
        let _ = std::io::copy(&mut client_in, &mut upstream_out);
        let _ = upstream_out.shutdown(Shutdown::Write);
    });
    let (mut upstream_in, mut client_out) = (upstream, client);
    let _ = std::io::copy(&mut upstream_in, &mut client_out);
    let _ = client_out.shutdown(Shutdown::Write);
    let _ = up.join();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connect_is_a_tunnel_to_its_host_and_port() {
        let ask =
            read_ask(b"CONNECT github.com:443 HTTP/1.1\r\nHost: github.com:443\r\n\r\n").unwrap();
        assert_eq!(
            (ask.host.as_str(), ask.port, ask.tunnel),
            ("github.com", 443, true)
        );
        let ask = read_ask(b"CONNECT [2606:4700::1111]:443 HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!(ask.host, "2606:4700::1111");
    }

    #[test]
    fn plain_http_is_forwarded_in_origin_form() {
        let ask = read_ask(
            b"GET http://example.com/a/b?c=1 HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\n\r\n",
        )
        .unwrap();
        assert_eq!(
            (ask.host.as_str(), ask.port, ask.tunnel),
            ("example.com", 80, false)
        );
        assert_eq!(
            ask.forward,
            b"GET /a/b?c=1 HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\n\r\n"
        );
        let ask = read_ask(b"POST http://127.0.0.1:8080 HTTP/1.0\r\n\r\n").unwrap();
        assert_eq!((ask.host.as_str(), ask.port), ("127.0.0.1", 8080));
        assert!(ask.forward.starts_with(b"POST / HTTP/1.0\r\n"));
    }

    #[test]
    fn what_the_proxy_cannot_read_is_refused_with_a_reason() {
        for (head, says) in [
            (&b"GET /local HTTP/1.1\r\n\r\n"[..], "only http://"),
            (b"GET https://x/ HTTP/1.1\r\n\r\n", "CONNECT"),
            (b"CONNECT github.com HTTP/1.1\r\n\r\n", "host:port"),
            (b"GET http://u:p@x/ HTTP/1.1\r\n\r\n", "credentials"),
            (b"HELLO\r\n\r\n", "not an HTTP request line"),
            (b"GET http://x/ SPDY/3\r\n\r\n", "unsupported protocol"),
            (b"GET http://:80/ HTTP/1.1\r\n\r\n", "no host"),
            (b"\xff\r\n\r\n", "the request head is not UTF-8"),
        ] {
            let err = read_ask(head).unwrap_err().to_string();
            assert!(
                err.contains(says),
                "{}: {err}",
                String::from_utf8_lossy(head)
            );
        }
    }

    #[test]
    fn loopback_grants_are_forwarded_and_others_go_through_the_proxy() {
        let granted = [
            "127.0.0.1:5433",
            "localhost:6380",
            "[::1]:8080",
            "db.internal:5432",
            "10.0.0.7:5432",
            "127.0.0.1:3128",
            "127.0.0.1:5433",
        ]
        .map(String::from);
        let forwards: Vec<String> = loopback_forwards(&granted)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(forwards, ["127.0.0.1:5433", "127.0.0.1:6380", "[::1]:8080"]);
    }

    #[test]
    fn the_environment_points_at_the_proxy_and_keeps_loopback_direct() {
        let env = proxy_env();
        let get = |k: &str| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("HTTPS_PROXY"), Some("http://127.0.0.1:3128"));
        assert_eq!(get("http_proxy"), Some("http://127.0.0.1:3128"));
        assert_eq!(get("NO_PROXY"), Some("localhost,127.0.0.1,::1"));
    }
}
