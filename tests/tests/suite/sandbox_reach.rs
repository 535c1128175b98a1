//! What a sandboxed command can reach besides files, through the real `nightshift serve`
//! (issue 40): a scripted model runs, with its agent's network `on` (the egress proxy) and
//! `off`, `psql` against the test PostgreSQL over its UNIX socket and over TCP, `curl` to an
//! HTTP service on the host's loopback, a connect to a pathname UNIX socket made outside,
//! and `ipcs` for a SysV message queue made outside. Each is refused (nothing answers), and
//! a loopback `host:port` granted in `[sandbox] connect` is reached, by `curl` and by a raw
//! TCP client, with the network on, and only then.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;

use nightshift_store::RunStatus;
use nightshift_tests::{TestDb, on_both_backends};
use serde_json::json;

use crate::crash::{agent, enqueue, sigterm, text_turn, wait_finished};
use crate::sandbox::{results, run_command, serve, write_config};

on_both_backends! {
    commands_reach_no_local_service_the_config_does_not_grant => reach_only_what_is_granted;
}

/// An HTTP service on the host's loopback that answers every request with `body`.
fn service(body: &'static str) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
                    head.push(byte[0]);
                }
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    port
}

/// A SysV message queue made outside, removed when dropped; `key` as `ipcs` prints it.
struct Queue {
    id: String,
    key: String,
}

impl Queue {
    fn make() -> Queue {
        let made = Command::new("ipcmk")
            .args(["-Q", "-p", "0600"])
            .output()
            .unwrap();
        assert!(made.status.success(), "ipcmk: {made:?}");
        let id: String = String::from_utf8_lossy(&made.stdout)
            .chars()
            .filter(char::is_ascii_digit)
            .collect();
        let listed = Command::new("ipcs").arg("-q").output().unwrap();
        let key = String::from_utf8_lossy(&listed.stdout)
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(id.as_str()))
            .and_then(|l| l.split_whitespace().next().map(str::to_string))
            .expect("the queue is listed outside");
        Queue { id, key }
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        let _ = Command::new("ipcrm").args(["-q", &self.id]).output();
    }
}

/// The attacks, one `run_command` each.
fn attacks(pg_url: &str, local: u16, granted: u16, socket: &Path) -> Vec<(&'static str, String)> {
    vec![
        (
            "psql_socket",
            "PGCONNECT_TIMEOUT=5 psql -h /var/run/postgresql -U postgres -d test -Atc \
             'select 4242' 2>&1; echo end"
                .to_string(),
        ),
        (
            "psql_tcp",
            format!("PGCONNECT_TIMEOUT=5 psql '{pg_url}' -Atc 'select 4242' 2>&1; echo end"),
        ),
        (
            "local_http",
            format!("curl -sS -m 10 --noproxy '' http://127.0.0.1:{local}/ 2>&1; echo end"),
        ),
        (
            "local_direct",
            format!(
                "bash -c 'exec 3<>/dev/tcp/127.0.0.1/{local} && echo connected' 2>&1; echo end"
            ),
        ),
        (
            "unix_socket",
            format!(
                "perl -MIO::Socket::UNIX -e 'IO::Socket::UNIX->new(Peer => \"{}\") or die \
                 \"connect: $!\\n\"; print \"connected\\n\"' 2>&1; echo end",
                socket.display()
            ),
        ),
        ("sysv", "ipcs -q 2>&1; echo end".to_string()),
        (
            "granted_http",
            format!("curl -sS -m 10 http://127.0.0.1:{granted}/ 2>&1; echo end"),
        ),
        (
            "granted_raw",
            format!(
                "bash -c 'exec 3<>/dev/tcp/127.0.0.1/{granted} && \
                 printf \"GET / HTTP/1.0\\r\\n\\r\\n\" >&3 && cat <&3' 2>&1; echo end"
            ),
        ),
    ]
}

async fn reach_only_what_is_granted(db: &TestDb) {
    let Some(pg_url) = nightshift_tests::pg::url().await else {
        eprintln!("SKIPPED: no PostgreSQL server to aim at");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let local = service("local-service-answer");
    let granted = service("granted-service-answer");
    let socket = d.join("service.sock");
    let _listening = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let queue = Queue::make();
    let attacks = attacks(&pg_url, local, granted, &socket);
    let turns = |last: &str| {
        let mut turns: Vec<serde_json::Value> =
            attacks.iter().map(|(id, c)| run_command(id, c)).collect();
        turns.push(text_turn(last));
        json!(turns)
    };
    let mut body = agent(d, "online", &["run_command"], turns("online done"));
    body += &agent(d, "offline", &["run_command"], turns("offline done"));
    body += "[agents.sandbox]\nnetwork = \"off\"\n\n";
    let grant = format!("connect = [\"127.0.0.1:{granted}\"]\n");
    let cfg = write_config(db, d, &grant, &body);
    let store = db.store().await;
    let (daemon, _lines) = serve(&cfg, &[]);
    let online = enqueue(&cfg, "online");
    let offline = enqueue(&cfg, "offline");

    for (run_id, network) in [(&online, "on"), (&offline, "off")] {
        let run = wait_finished(&store, run_id).await;
        assert_eq!(
            run.status,
            RunStatus::Succeeded,
            "{network}: {:?}",
            run.error
        );
        let results = results(&store, run_id).await;
        let said = |id: &str| {
            results
                .iter()
                .find(|(call, _)| call == id)
                .map(|(_, content)| content.clone())
                .unwrap_or_else(|| panic!("{network}: no result for {id}: {results:?}"))
        };
        for id in ["psql_socket", "psql_tcp"] {
            let out = said(id);
            assert!(
                out.contains("end") && !out.contains("4242"),
                "{network} {id}: {out}"
            );
            assert!(
                out.contains("No such file or directory")
                    || out.contains("Connection refused")
                    || out.contains("Network is unreachable")
                    || out.contains("could not connect")
                    || out.contains("Permission denied"),
                "{network} {id}: a connection error: {out}"
            );
        }
        let out = said("local_http");
        assert!(!out.contains("local-service-answer"), "{network}: {out}");
        if network == "on" {
            assert!(
                out.contains("not allowed") && out.contains("loopback"),
                "the proxy says why: {out}"
            );
        }
        let out = said("local_direct");
        assert!(!out.contains("connected"), "{network}: {out}");
        let out = said("unix_socket");
        assert!(
            !out.contains("connected") && out.contains("No such file or directory"),
            "{network}: {out}"
        );
        let out = said("sysv");
        assert!(
            out.contains("Message Queues")
                && !out
                    .lines()
                    .any(|l| l.split_whitespace().next() == Some(queue.key.as_str())),
            "{network}: the host's queue is not listed: {out}"
        );
        // A loopback grant is the same address and port on the command's own loopback,
        // forwarded to the host's: a client that knows no proxy reaches it too.
        for id in ["granted_http", "granted_raw"] {
            let out = said(id);
            assert_eq!(
                out.contains("granted-service-answer"),
                network == "on",
                "{network} {id}: the grant is reached only with the network on: {out}"
            );
        }
    }
    sigterm(daemon).await;
}
