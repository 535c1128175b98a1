//! The `nightshift` command line: config layering, bad input refused with nothing changed,
//! and the run commands.

use std::path::Path;
use std::process::{Command, Output};

use crate::process::nightshift_bin;

fn nightshift(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(nightshift_bin());
    cmd.current_dir(dir)
        .args(args)
        .env_remove("NIGHTSHIFT_DATABASE_URL");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run nightshift")
}

/// `nightshift.toml` in `d`: agent `a` on a scripted provider.
fn write_agent_config(d: &Path) {
    std::fs::write(
        d.join("nightshift.toml"),
        "[providers.p]\nkind = \"scripted\"\nscript = \"s.json\"\n\
         [[agents]]\nname = \"a\"\nprovider = \"p\"\nmodel = \"m\"\n",
    )
    .unwrap();
}

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

#[test]
fn unknown_config_key_is_refused_before_anything_is_touched() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("nightshift.toml"), "[worker]\nslot = 2\n").unwrap();
    let out = nightshift(dir.path(), &["migrate"], &[]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("nightshift.toml (line 2)") && err.contains("unknown field `slot`"),
        "{err}"
    );
    assert!(err.contains("`slots`"), "says what is allowed: {err}");
    assert!(
        !dir.path().join("nightshift.db").exists(),
        "no database was created"
    );

    std::fs::write(
        dir.path().join("nightshift.toml"),
        "[worker]\nslots = 2\nlanes = { fast = 3 }\n",
    )
    .unwrap();
    let out = nightshift(dir.path(), &["migrate"], &[]);
    assert!(text(&out.stderr).contains("worker.lanes reserve 3 slots but worker.slots is 2"));
    let missing = nightshift(dir.path(), &["--config", "nope.toml", "migrate"], &[]);
    assert!(text(&missing.stderr).contains("cannot read the config file nope.toml"));
}

#[test]
fn database_url_comes_from_file_then_env_then_flag() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("nightshift.toml"),
        "[database]\nurl = \"sqlite://from-file.db\"\n",
    )
    .unwrap();
    assert!(nightshift(dir.path(), &["migrate"], &[]).status.success());
    assert!(dir.path().join("from-file.db").exists());
    let env = [("NIGHTSHIFT_DATABASE_URL", "sqlite://from-env.db")];
    assert!(nightshift(dir.path(), &["migrate"], &env).status.success());
    assert!(dir.path().join("from-env.db").exists());
    let out = nightshift(
        dir.path(),
        &["--database-url", "sqlite://from-flag.db", "migrate"],
        &env,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(dir.path().join("from-flag.db").exists());
}

#[test]
fn run_commands_enqueue_show_and_cancel() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_agent_config(d);
    assert!(nightshift(d, &["migrate"], &[]).status.success());
    let bad = nightshift(d, &["run", "nobody", "hi"], &[]);
    assert!(!bad.status.success());
    assert!(
        text(&bad.stderr).contains("agent 'nobody' is not configured (configured: a)"),
        "{}",
        text(&bad.stderr)
    );
    let bad = nightshift(d, &["run", "a", "hi", "--priority", "-5000"], &[]);
    assert!(text(&bad.stderr).contains("priority -5000 is out of range"));
    let queue = text(&nightshift(d, &["queue"], &[]).stdout);
    assert!(
        queue.starts_with("no live jobs\n"),
        "nothing was enqueued: {queue}"
    );

    let out = nightshift(
        d,
        &[
            "run",
            "a",
            "hello",
            "--lane",
            "batch",
            "--priority",
            "3",
            "--delay",
            "3600",
        ],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let run_id = text(&out.stdout).lines().next().unwrap().to_string();
    let show: serde_json::Value =
        serde_json::from_slice(&nightshift(d, &["runs", "show", &run_id], &[]).stdout).unwrap();
    assert_eq!(show["run"]["status"], "queued");
    assert_eq!(show["jobs"][0]["lane"], "batch");
    assert_eq!(show["jobs"][0]["priority"], 3);
    let delay = show["jobs"][0]["run_at"].as_i64().unwrap()
        - show["jobs"][0]["created_at"].as_i64().unwrap();
    // The intake reads the clock for `run_at` a moment before the store stamps `created_at`.
    assert!(
        (3_599_000..=3_600_000).contains(&delay),
        "run_at is an hour after the request: {delay} ms"
    );
    let queue = text(&nightshift(d, &["queue"], &[]).stdout);
    let rows: Vec<Vec<&str>> = queue
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows[0], ["STATE", "LANE", "JOBS"], "{queue}");
    assert_eq!(rows[1], ["queued", "batch", "1"], "{queue}");
    assert!(
        !queue.contains("oldest due job"),
        "a delayed job is not due: {queue}"
    );

    let cancel = nightshift(d, &["runs", "cancel", &run_id], &[]);
    assert_eq!(text(&cancel.stdout), format!("{run_id}\tcancelled\n"));
    let again = nightshift(d, &["runs", "cancel", &run_id], &[]);
    assert!(!again.status.success());
    assert!(text(&again.stderr).contains("already finished as cancelled"));
    let missing = nightshift(d, &["runs", "show", "nope"], &[]);
    assert!(text(&missing.stderr).contains("run nope not found"));
}

#[test]
fn run_wait_without_a_daemon_says_so_and_how_to_detach() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_agent_config(d);
    let mut child = Command::new(nightshift_bin())
        .current_dir(d)
        .args(["run", "a", "hi", "--wait"])
        .env_remove("NIGHTSHIFT_DATABASE_URL")
        .env_remove("NIGHTSHIFT_SERVER")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    // Read until the notice; a follower that never printed it would end this loop only when
    // killed, so the notice is looked for line by line and the process killed right after.
    let mut said = Vec::new();
    for line in stderr.lines() {
        let line = line.unwrap();
        let done = line.contains("no daemon is consuming the queue");
        said.push(line);
        if done {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let notice = said.last().cloned().unwrap_or_default();
    assert!(
        notice.contains("no daemon is consuming the queue") && notice.contains("nightshift serve"),
        "{said:?}"
    );
    assert!(
        notice.contains("Ctrl-C stops following") && notice.contains("nightshift runs follow "),
        "{notice}"
    );
}

#[test]
fn the_demo_runs_an_agent_end_to_end_without_an_api_key() {
    let dir = tempfile::tempdir().unwrap();
    let keep = dir.path().join("demo");
    let out = nightshift(
        dir.path(),
        &["demo", "--keep", keep.to_str().unwrap()],
        &[("ANTHROPIC_API_KEY", "")],
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("→ edit_file"), "{stdout}");
    assert!(
        stdout.contains("← Hello, Nightshift! [ok]"),
        "the real command ran: {stdout}"
    );
    assert!(stdout.contains("status:  succeeded"), "{stdout}");
    assert!(stdout.contains("usage:   5 model calls"), "{stdout}");
    let workspaces: Vec<_> = std::fs::read_dir(keep.join("data/workspaces"))
        .unwrap()
        .collect();
    assert_eq!(workspaces.len(), 1);
    let fixed =
        std::fs::read_to_string(workspaces[0].as_ref().unwrap().path().join("greet.sh")).unwrap();
    assert!(
        fixed.contains("echo \"Hello, "),
        "the file was really edited: {fixed}"
    );
}

/// `nightshift runs list | head` where the reader is gone before anything is written: the
/// command ends by SIGPIPE, quietly — no panic, no backtrace, no exit 101.
#[test]
fn a_closed_output_pipe_ends_a_command_quietly() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_agent_config(d);
    assert!(nightshift(d, &["migrate"], &[]).status.success());
    assert!(nightshift(d, &["run", "a", "hi"], &[]).status.success());
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader); // the reader went away: every write fails
    let out = Command::new(nightshift_bin())
        .current_dir(d)
        .args(["runs", "list"])
        .env_remove("NIGHTSHIFT_DATABASE_URL")
        .env("RUST_BACKTRACE", "1")
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .expect("run nightshift");
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(
        out.status.signal(),
        Some(13),
        "ended by SIGPIPE, as ls would be: {:?} {stderr}",
        out.status
    );
}

/// An operator command where nothing says which database to use is refused, naming the file
/// it looked for, and creates nothing; one on a database without the schema says to migrate.
#[test]
fn without_a_config_nothing_is_created_and_an_empty_database_says_to_migrate() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for args in [&["runs", "list"][..], &["run", "a", "hi"], &["queue"]] {
        let out = nightshift(d, args, &[]);
        assert!(!out.status.success(), "{args:?}");
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains(&format!(
                "no config: there is no nightshift.toml in {}",
                d.canonicalize().unwrap().display()
            )) && stderr.contains("--database-url"),
            "{args:?}: {stderr}"
        );
    }
    let entries: Vec<_> = std::fs::read_dir(d).unwrap().collect();
    assert!(entries.is_empty(), "nothing was created: {entries:?}");

    let url = format!("sqlite://{}", d.join("fresh.db").display());
    let out = nightshift(d, &["runs", "list", "--database-url", &url], &[]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("has no Nightshift schema yet; run `nightshift migrate`"),
        "{stderr}"
    );
}

/// `nightshift run` prints the id alone (the job's number on stderr), or one JSON line.
#[test]
fn run_prints_the_id_alone_or_json() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_agent_config(d);
    assert!(nightshift(d, &["migrate"], &[]).status.success());
    let out = nightshift(d, &["run", "a", "hi", "--idempotency-key", "k1"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let id = text(&out.stdout);
    assert_eq!(id.lines().count(), 1, "{id:?}");
    let id = id.trim().to_string();
    assert!(uuid::Uuid::parse_str(&id).is_ok(), "the id alone: {id:?}");
    assert!(
        text(&out.stderr).contains("enqueued as job 1"),
        "{}",
        text(&out.stderr)
    );
    let again = nightshift(
        d,
        &["run", "a", "hi", "--idempotency-key", "k1", "--json"],
        &[],
    );
    let line: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(line["run_id"], serde_json::json!(id));
    assert_eq!(line["job_id"], 1);
    assert_eq!(line["duplicate"], true);
}

/// The CLI working on the database records its actions in the audit trail as `cli:$USER`,
/// and `nightshift audit` shows them.
#[test]
fn cli_actions_are_audited_as_the_user_and_listed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_agent_config(d);
    std::fs::write(
        d.join("s.json"),
        r#"[{"content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn"}]"#,
    )
    .unwrap();
    assert!(nightshift(d, &["migrate"], &[]).status.success());
    let enqueue = |prompt: &str| {
        let out = nightshift(d, &["run", "a", prompt], &[]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout).trim().to_string()
    };
    let (waiting, doomed) = (enqueue("wait"), enqueue("doomed"));
    let url = format!("sqlite://{}", d.join("nightshift.db").display());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let store = rt.block_on(async {
        let store = nightshift_store::Store::connect(
            &nightshift_store::StoreConfig::for_url(&url),
            std::sync::Arc::new(nightshift_store::SystemClock),
        )
        .await
        .unwrap();
        store
            .request_approval(&nightshift_store::NewApproval {
                run_id: &waiting,
                call_id: "call_1",
                tool: "deploy",
                input: "{}",
                input_hash: "h",
                expires_at: store.now() + 3_600_000,
            })
            .await
            .unwrap();
        store
    });
    let alice = [("USER", "alice")];
    let out = nightshift(
        d,
        &["approve", &waiting, "call_1", "--reason", "fine"],
        &alice,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = nightshift(d, &["runs", "cancel", &doomed], &alice);
    assert!(out.status.success(), "{}", text(&out.stderr));

    let approval = rt
        .block_on(store.approval(&waiting, "call_1"))
        .unwrap()
        .unwrap();
    assert_eq!(approval.decided_by.as_deref(), Some("cli:alice"));
    let listed = text(&nightshift(d, &["audit"], &[]).stdout);
    let rows: Vec<Vec<&str>> = listed
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows[0],
        ["WHEN", "WHO", "ACTION", "TARGET", "RUN", "DETAIL"],
        "{listed}"
    );
    assert_eq!(rows.len(), 3, "{listed}");
    assert!(
        rows[1].contains(&"cli:alice")
            && rows[1].contains(&"cancel")
            && rows[1].contains(&doomed.as_str()),
        "newest first: {listed}"
    );
    assert!(
        rows[2].contains(&"approve") && rows[2].contains(&"fine"),
        "{listed}"
    );
    let one = text(&nightshift(d, &["audit", "--run", &waiting], &[]).stdout);
    assert_eq!(one.lines().count(), 2, "{one}");
    assert!(one.contains("approve") && !one.contains("cancel"), "{one}");
    rt.block_on(store.close());
}
