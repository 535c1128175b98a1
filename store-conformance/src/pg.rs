//! Finding a PostgreSQL server for tests: `NIGHTSHIFT_TEST_PG_URL`, else a throwaway cluster
//! made with `initdb` and started with `pg_ctl` (once per test process, stopped by a watchdog when
//! the test process ends), else none.

use std::path::PathBuf;
use std::process::Command;

use tokio::sync::OnceCell;

static URL: OnceCell<Option<String>> = OnceCell::const_new();

/// The server URL for tests, if any.
pub async fn url() -> Option<String> {
    URL.get_or_init(|| async {
        if let Ok(url) = std::env::var("NIGHTSHIFT_TEST_PG_URL")
            && !url.trim().is_empty()
        {
            return Some(url);
        }
        tokio::task::spawn_blocking(throwaway_cluster)
            .await
            .ok()
            .flatten()
    })
    .await
    .clone()
}

fn find(tool: &str) -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).map(|d| d.join(tool)).collect())
        .unwrap_or_default();
    if let Ok(dirs) = std::fs::read_dir("/usr/lib/postgresql") {
        for d in dirs.flatten() {
            candidates.push(d.path().join("bin").join(tool));
        }
    }
    candidates.into_iter().find(|p| p.is_file())
}

/// Starts a private cluster on a free loopback port. As root, runs the tools as `postgres`
/// (initdb refuses root).
fn throwaway_cluster() -> Option<String> {
    let initdb = find("initdb")?;
    let pg_ctl = find("pg_ctl")?;
    let dir = std::env::temp_dir().join(format!("nightshift-pg-{}", std::process::id()));
    let data = dir.join("data");
    std::fs::create_dir_all(&dir).ok()?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .ok()?
        .local_addr()
        .ok()?
        .port();
    let as_root = nix_is_root();
    let run = |program: &PathBuf, args: &[&str]| -> bool {
        let mut cmd = if as_root {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(program);
            c
        } else {
            Command::new(program)
        };
        cmd.args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    };
    if as_root {
        let _ = Command::new("chown")
            .args(["-R", "postgres"])
            .arg(&dir)
            .status();
    }
    let data_s = data.display().to_string();
    if !run(&initdb, &["-D", &data_s, "-A", "trust", "-U", "postgres"]) {
        eprintln!("note: initdb failed; PostgreSQL tests will be skipped");
        return None;
    }
    let opts = format!(
        "-p {port} -k {} -c listen_addresses=127.0.0.1",
        dir.display()
    );
    let log = dir.join("log").display().to_string();
    if !run(
        &pg_ctl,
        &["-D", &data_s, "-o", &opts, "-l", &log, "-w", "start"],
    ) {
        eprintln!("note: pg_ctl start failed; PostgreSQL tests will be skipped");
        return None;
    }
    // Stop the cluster when this test process ends, however it ends.
    let watchdog = format!(
        "while kill -0 {pid} 2>/dev/null; do sleep 1; done; \
         {stop} '{pg_ctl}' -D '{data_s}' -m immediate stop; rm -rf '{dir}'",
        pid = std::process::id(),
        stop = if as_root {
            "runuser -u postgres --"
        } else {
            ""
        },
        pg_ctl = pg_ctl.display(),
        dir = dir.display(),
    );
    let _ = Command::new("sh")
        .args(["-c", &watchdog])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    eprintln!("started a throwaway PostgreSQL cluster on 127.0.0.1:{port} ({data_s})");
    Some(format!("postgres://postgres@127.0.0.1:{port}/postgres"))
}

fn nix_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(|u| u == "0"))
        })
        .unwrap_or(false)
}
