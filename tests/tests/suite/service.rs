//! `ops/nightshift.service` as systemd reads it, and the daemon run under what the unit
//! imposes:
//!
//! - `systemd-analyze verify` accepts the unit (every hardening directive is one systemd
//!   knows, with a valid value) once its `ExecStart` names a binary that exists;
//! - `nightshift serve` as an unprivileged user with `no_new_privs`, no capabilities (not even
//!   in the bounding set), a read-only root file system but for its state directory, and a
//!   private `/tmp` — `User=`, `NoNewPrivileges=`, `CapabilityBoundingSet=`,
//!   `ProtectSystem=strict` with `ReadWritePaths=` and `PrivateTmp=`, set up with `unshare`
//!   and `setpriv` — still runs a command tool inside the sandbox (Landlock and its own
//!   namespaces), and stops cleanly on SIGTERM.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use nightshift_agent::RunEvent;
use nightshift_store::{RunStatus, Store, StoreConfig, SystemClock};
use nightshift_tests::eventually;
use nightshift_tests::http::post_json;
use serde_json::json;

use crate::crash::{agent, command_tool, events, q, text_turn, tool_turn, wait_finished};
use crate::process::{API_TOKEN, Proc, free_port, nightshift_bin};

/// The unprivileged user the daemon runs as (`nobody`).
const UID: u32 = 65534;

/// `tool` on PATH, or `None` outside CI (which must have it: Debian's systemd and
/// util-linux packages).
fn required_tool(tool: &str) -> Option<std::path::PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(tool))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var("CI").is_err(),
            "{tool} is required under CI (apt-get install systemd util-linux, as .ci/run does)"
        );
        eprintln!("SKIPPED: {tool} is not installed");
    }
    found
}

#[test]
fn the_systemd_unit_passes_systemd_analyze_verify() {
    let Some(analyze) = required_tool("systemd-analyze") else {
        return;
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let unit = std::fs::read_to_string(root.join("ops/nightshift.service")).unwrap();
    let installed = "ExecStart=/usr/local/bin/nightshift ";
    assert!(
        unit.contains(installed),
        "the unit runs the installed binary"
    );
    let bin = nightshift_bin();
    let unit = unit.replace(installed, &format!("ExecStart={} ", bin.display()));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nightshift.service");
    std::fs::write(&path, unit).unwrap();
    let out = Command::new(analyze)
        .arg("verify")
        .arg(&path)
        .output()
        .expect("run systemd-analyze");
    let said =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "systemd-analyze verify: {said}");
    assert_eq!(said.trim(), "", "systemd-analyze has no complaint");
}

/// The config: SQLite and data under `state` (absolute, as the unit's header says), one agent
/// whose model calls a command tool that reports who it runs as.
fn config(dir: &Path, state: &Path, port: u16) -> std::path::PathBuf {
    let body = agent(
        dir,
        "probe",
        &["whoami_probe"],
        json!([
            tool_turn("call_1", "whoami_probe", json!({})),
            text_turn("probed"),
        ]),
    );
    let text = format!(
        "[database]\nurl = {}\n\n[server]\naddress = \"127.0.0.1:{port}\"\n\n\
         [worker]\nslots = 1\nheartbeat_ms = 200\nlease_ms = 2000\npoll_interval_ms = 100\n\n\
         [runtime]\ndata_dir = {}\n\n{}{body}",
        q(&format!("sqlite://{}/nightshift.db", state.display())),
        q(&state.join("data").display().to_string()),
        command_tool(
            "whoami_probe",
            "read_only",
            "echo sandboxed-ok uid=$(id -u)"
        ),
    );
    let path = dir.join("nightshift.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Sets up what the unit imposes, then execs `nightshift serve` (same pid: unshare, sh and
/// setpriv each exec the next).
const HARDENED: &str = r#"set -e
mount --bind "$STATE" "$STATE"
mount -o bind,remount,ro /
mount -t tmpfs -o mode=1777 tmpfs /tmp
exec setpriv --reuid="$NS_UID" --regid="$NS_UID" --clear-groups --no-new-privs \
  --inh-caps=-all --bounding-set=-all -- "$NS_BIN" --config "$NS_CFG" serve"#;

#[tokio::test]
async fn serve_runs_sandboxed_commands_under_the_units_restrictions() {
    let (Some(unshare), Some(_)) = (required_tool("unshare"), required_tool("setpriv")) else {
        return;
    };
    // Outside /tmp (the private /tmp hides it), on a path the unprivileged user can reach:
    // the build's own temp dir, or /var/tmp when the clone itself lies under /tmp.
    let under_tmp = |p: &Path| p.starts_with("/tmp");
    let base = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let base = if under_tmp(base) {
        Path::new("/var/tmp")
    } else {
        base
    };
    let dir = tempfile::tempdir_in(base).unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    std::os::unix::fs::chown(&state, Some(UID), Some(UID)).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        let open = std::fs::Permissions::from_mode(0o755);
        std::fs::set_permissions(dir.path(), open).unwrap();
    }
    // The binary too, when the private /tmp would hide it (a clone under /tmp).
    let bin = match nightshift_bin() {
        built if under_tmp(&built) => {
            let copy = dir.path().join("nightshift");
            std::fs::copy(&built, &copy).unwrap();
            copy
        }
        built => built,
    };
    let port = free_port();
    let cfg = config(dir.path(), &state, port);
    let log_path = dir.path().join("serve.log");
    let mut serve = Proc {
        child: Command::new(unshare)
            .args([
                "--mount",
                "--propagation",
                "private",
                "--",
                "sh",
                "-c",
                HARDENED,
            ])
            .env("STATE", &state)
            .env("NS_UID", UID.to_string())
            .env("NS_BIN", &bin)
            .env("NS_CFG", &cfg)
            .env("NIGHTSHIFT_API_TOKEN", API_TOKEN)
            .env("RUST_LOG", "info,sqlx=warn")
            .env_remove("NIGHTSHIFT_DATABASE_URL")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log_path).unwrap())
            .spawn()
            .expect("spawn the hardened serve"),
    };
    let api = format!("http://127.0.0.1:{port}");
    let http = nightshift_llm::http::build_client(nightshift_llm::HttpTimeouts::default()).unwrap();
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let pid = serve.pid();
    eventually(Duration::from_secs(30), "the API to answer", || async {
        assert!(
            Path::new(&format!("/proc/{pid}")).exists(),
            "serve exited: {}",
            log()
        );
        let r = http.get(format!("{api}/healthz")).send().await.ok()?;
        r.status().is_success().then_some(())
    })
    .await;
    let (_, created) = post_json(
        &http,
        &format!("{api}/v1/runs"),
        API_TOKEN,
        &json!({"agent": "probe", "prompt": "Who runs you?"}),
    )
    .await;
    let run_id = created["run_id"].as_str().expect("a run id").to_string();

    // The daemon made the file and its WAL; reading it as root leaves them the daemon's.
    let store = Store::connect(
        &StoreConfig::for_url(format!("sqlite://{}/nightshift.db", state.display())),
        Arc::new(SystemClock),
    )
    .await
    .expect("open the daemon's database");
    let run = wait_finished(&store, &run_id).await;
    assert_eq!(run.status, RunStatus::Succeeded, "{run:?}\n{}", log());
    let result = events(&store, &run_id)
        .await
        .into_iter()
        .find_map(|(_, e)| match e {
            RunEvent::ToolResult {
                content, is_error, ..
            } => Some((content, is_error)),
            _ => None,
        })
        .expect("the tool's result");
    assert!(!result.1, "the tool ran: {}", result.0);
    assert!(
        result.0.contains(&format!("sandboxed-ok uid={UID}")),
        "the command ran as the unprivileged user: {}",
        result.0
    );
    let written = log();
    assert!(
        written.contains("commands run sandboxed"),
        "the sandbox is enforced, not switched off: {written}"
    );
    assert!(
        !written.contains("ERROR"),
        "nothing failed under the restrictions: {written}"
    );
    serve.signal("TERM");
    let status = serve.wait_exit(Duration::from_secs(20)).await;
    assert!(
        status.success(),
        "serve exits cleanly: {status:?}\n{}",
        log()
    );
    store.close().await;
}
