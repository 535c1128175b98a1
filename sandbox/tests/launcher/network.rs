//! The network: off reaches nothing (and on reaches the host), with the network on TCP
//! reaches only the listed ports, and a proxied network reaches no local service unless
//! granted.

use std::net::TcpListener;

use nightshift_sandbox::{Network, Policy, Sandbox};

use super::{LAUNCHER, Layout, abi, layout, run_in, sandbox, text, unsandboxed};

#[test]
fn network_off_reaches_nothing_and_on_reaches_the_host() {
    let l = layout();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let connect = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected");
    let on = run_in(&sandbox(&l, Network::On, &[]), &l, "bash", &connect);
    assert!(
        String::from_utf8_lossy(&on.stdout).contains("connected"),
        "network on: {}",
        text(&on)
    );
    let off = run_in(&sandbox(&l, Network::Off, &[]), &l, "bash", &connect);
    let t = text(&off);
    assert!(!off.status.success() && !t.contains("connected"), "{t}");
    assert!(
        t.contains("Network is unreachable")
            || t.contains("Permission denied")
            || t.contains("Connection refused"),
        "a network error: {t}"
    );
    // Files still work with the network off (the user namespace keeps the uid).
    let files = run_in(
        &sandbox(&l, Network::Off, &[]),
        &l,
        "sh",
        "echo x > f && cat f && id -u",
    );
    assert!(files.status.success(), "{}", text(&files));
    let uid = String::from_utf8_lossy(&unsandboxed(&l, "id -u").stdout).to_string();
    assert!(
        String::from_utf8_lossy(&files.stdout).ends_with(&uid),
        "same uid inside: {}",
        text(&files)
    );
}

/// With the network on and a port list, TCP connects go to the listed ports only: a listener
/// on loopback (as the daemon's database or API would be) is refused with a permission
/// error until its port is listed. Binding and listening stay allowed.
#[test]
fn with_the_network_on_tcp_reaches_only_the_listed_ports() {
    let l = layout();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let connect = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected");
    let limited = |ports: Vec<u16>| {
        let policy = Policy::standard(&l.workspace, &l.temp, &[], &[], Network::On, abi())
            .in_pid_namespace()
            .with_tcp_ports(Some(ports));
        Sandbox::new(LAUNCHER, policy)
    };
    let refused = run_in(&limited(vec![443]), &l, "bash", &connect);
    let t = text(&refused);
    assert!(!refused.status.success() && !t.contains("connected"), "{t}");
    assert!(t.contains("Permission denied"), "{t}");
    let allowed = run_in(&limited(vec![443, port]), &l, "bash", &connect);
    assert!(
        String::from_utf8_lossy(&allowed.stdout).contains("connected"),
        "{}",
        text(&allowed)
    );
    // A `connect` grant's port is allowed too (Landlock knows ports, not addresses).
    let granted = Policy::standard(&l.workspace, &l.temp, &[], &[], Network::On, abi())
        .in_pid_namespace()
        .with_tcp_ports(Some(vec![443]))
        .with_connect(vec![format!("127.0.0.1:{port}")]);
    let out = run_in(&Sandbox::new(LAUNCHER, granted), &l, "bash", &connect);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("connected"),
        "{}",
        text(&out)
    );
    let listens = run_in(
        &limited(vec![]),
        &l,
        "sh",
        "perl -MIO::Socket::INET -e 'IO::Socket::INET->new(LocalAddr => \"127.0.0.1\", \
         Listen => 1) or die \"listen: $!\"; print \"listening\\n\"'",
    );
    assert!(
        String::from_utf8_lossy(&listens.stdout).contains("listening"),
        "{}",
        text(&listens)
    );
}

/// An HTTP server on the host's loopback answering every request `200 host-secret`, as the
/// daemon's API or a local service would.
fn host_http_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                use std::io::{Read, Write};
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
                    head.push(byte[0]);
                }
                let _ = stream.write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-length: 11\r\nconnection: close\r\n\r\nhost-secret",
                );
            });
        }
    });
    port
}

fn proxied(l: &Layout, ports: Option<Vec<u16>>, connect: Vec<String>) -> Sandbox {
    let policy = Policy::standard(&l.workspace, &l.temp, &[], &[], Network::Proxied, abi())
        .in_pid_namespace()
        .with_tcp_ports(ports)
        .with_connect(connect);
    Sandbox::new(LAUNCHER, policy)
}

/// The default network (`on`): a namespace of the command's own whose one way out is the
/// launcher's proxy. The host's loopback is not reachable directly (its own is empty), the
/// proxy refuses loopback, private and link-local destinations with a reason, and a
/// `host:port` the config grants is reached through it, by `curl` reading the standard
/// proxy variables. The control: the server answers outside the sandbox.
#[test]
fn a_proxied_network_reaches_no_local_service_unless_granted() {
    let l = layout();
    let port = host_http_server();
    let url = format!("http://127.0.0.1:{port}/");
    let control = unsandboxed(&l, &format!("curl -sS --noproxy '*' {url}"));
    assert!(
        String::from_utf8_lossy(&control.stdout).contains("host-secret"),
        "{}",
        text(&control)
    );
    let sb = proxied(&l, Some(vec![80, 443]), vec![]);
    // Directly: the command's own loopback has nothing on that port; no other route.
    let direct = run_in(
        &sb,
        &l,
        "bash",
        &format!(
            "exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected; exec 3<>/dev/tcp/10.0.0.1/80 && echo routed"
        ),
    );
    let t = text(&direct);
    assert!(!t.contains("connected") && !t.contains("routed"), "{t}");
    // Through the proxy (curl sends loopback to it only when told: NO_PROXY keeps the
    // command's own loopback direct), and every non-public class is refused by name.
    for (target, says) in [
        (url.clone(), "loopback"),
        (format!("http://localhost:{port}/"), "loopback"),
        (
            "http://169.254.169.254/latest/meta-data/".to_string(),
            "link-local",
        ),
        ("http://10.1.2.3/".to_string(), "private"),
        ("http://[::1]:80/".to_string(), "loopback"),
    ] {
        let out = run_in(
            &sb,
            &l,
            "sh",
            &format!("curl -sS --noproxy '' -w ' status=%{{http_code}}' {target}"),
        );
        let t = text(&out);
        assert!(!t.contains("host-secret"), "{target}: {t}");
        assert!(
            t.contains("not allowed") && t.contains(says),
            "{target}: {t}"
        );
    }
    let https = run_in(
        &sb,
        &l,
        "sh",
        &format!("curl -sS --noproxy '' https://127.0.0.1:{port}/"),
    );
    let t = text(&https);
    assert!(
        !https.status.success() && t.contains("403"),
        "CONNECT refused: {t}"
    );
    // Granted by name: reached, through the proxy, with the standard variables only.
    let granted = proxied(&l, Some(vec![443]), vec![format!("127.0.0.1:{port}")]);
    let out = run_in(&granted, &l, "sh", &format!("curl -sS --noproxy '' {url}"));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("host-secret"),
        "{}",
        text(&out)
    );
    // A tunnel (CONNECT, as for HTTPS or any TCP a client tunnels) to the grant works too.
    let tunnel = run_in(
        &granted,
        &l,
        "sh",
        &format!("curl -sS --noproxy '' --proxytunnel {url}"),
    );
    assert!(
        String::from_utf8_lossy(&tunnel.stdout).contains("host-secret"),
        "{}",
        text(&tunnel)
    );
    // The proxy's process ends with its command: none of this test's is left.
    let workspace = l.workspace.display().to_string();
    let left = || {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
            .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
            .filter(|c| c.contains("--egress") && c.contains(&workspace))
            .count()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while left() > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(left(), 0, "an egress proxy outlived its command");
    let env = run_in(&granted, &l, "sh", "echo $HTTPS_PROXY $NO_PROXY");
    assert_eq!(
        String::from_utf8_lossy(&env.stdout).trim(),
        "http://127.0.0.1:3128 localhost,127.0.0.1,::1"
    );
}
