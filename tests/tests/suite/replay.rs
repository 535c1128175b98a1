//! Replay as a test: real runs of a daemon (a scripted model, real file tools, a wakeup
//! woken early, an approval, a sleep cut short by a message) exported with `nightshift runs export` — locally and through the
//! API with `--server` — and replayed offline with `nightshift replay`: no divergence with the
//! config they ran with; a changed system prompt is reported at turn 1 (non-zero exit, naming
//! the system prompt); a bad file, another version and an agent missing from the config are
//! clear errors.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use nightshift_tests::{TestDb, eventually, on_both_backends};
use serde_json::Value;

use crate::process::{API_TOKEN, Proc, free_port, nightshift_bin};

on_both_backends! {
    an_exported_run_replays_without_divergence_and_a_changed_system_prompt_is_reported_at_turn_1
        => export_then_replay;
}

const SYSTEM: &str = "You keep notes. Be brief.";
const HOOK_SECRET: &str = "replay-test-hook-secret";

/// Starts a sleeper run keyed `nap-7` through the API: its id.
async fn keyed_sleeper(http: &reqwest::Client, api: &str) -> String {
    let answer: Value = http
        .post(format!("{api}/v1/runs"))
        .bearer_auth(API_TOKEN)
        .json(
            &serde_json::json!({"agent": "sleeper", "prompt": "Nap until told.",
                                  "concurrency_key": "nap-7"}),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    answer["run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{answer}"))
        .to_string()
}

/// The daemon's run and tool-call counters, as `/metrics` shows them.
async fn counters(http: &reqwest::Client, api: &str) -> Vec<String> {
    let text = http
        .get(format!("{api}/metrics"))
        .bearer_auth(API_TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|l| {
            l.starts_with("nightshift_runs_started_total")
                || l.starts_with("nightshift_tool_calls_total")
        })
        .map(str::to_string)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// Comments on issue 7: a message to the run keyed `nap-7`.
async fn comment(http: &reqwest::Client, api: &str, text: &str) {
    let body = serde_json::json!({"issue": {"number": 7}, "comment": {"body": text}}).to_string();
    let signature = crate::hooks::harness::github_signature(body.as_bytes(), HOOK_SECRET);
    let status = http
        .post(format!("{api}/hooks/gh"))
        .header("X-GitHub-Event", "issue_comment")
        .header("X-GitHub-Delivery", "comment-1")
        .header("X-Hub-Signature-256", signature)
        .header("Content-Type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap()
        .status();
    assert!(status.is_success(), "{status}");
}

/// The config of the test daemon on `db`, with `system` as the agents' system prompt.
fn config_text(db: &TestDb, port: u16, system: &str) -> String {
    format!(
        "[database]\nurl = \"{}\"\n{}\n\
         [server]\naddress = \"127.0.0.1:{port}\"\n\
         [worker]\nslots = 2\nheartbeat_ms = 200\nlease_ms = 2000\npoll_interval_ms = 100\n\
         [runtime]\ndata_dir = \"data\"\n\
         [providers.notes]\nkind = \"scripted\"\nscript = \"notes.json\"\n\
         [providers.naps]\nkind = \"scripted\"\nscript = \"naps.json\"\n\
         [[agents]]\nname = \"notes\"\nprovider = \"notes\"\nmodel = \"scripted-1\"\n\
         system = \"{system}\"\ntools = [\"read_file\", \"write_file\"]\n\
         [[agents]]\nname = \"sleeper\"\nprovider = \"naps\"\nmodel = \"scripted-1\"\n\
         system = \"{system}\"\ntools = [\"schedule_wakeup\"]\n\
         [[agents]]\nname = \"guarded\"\nprovider = \"notes\"\nmodel = \"scripted-1\"\n\
         system = \"{system}\"\ntools = [\"read_file\", \"write_file\"]\n\
         [agents.tool_overrides.write_file]\napproval = \"required\"\n\
         [[hooks]]\nname = \"gh\"\nsignature = \"github\"\nsecret_env = \"REPLAY_TEST_HOOK_SECRET\"\n\
         [[hooks.routes]]\nname = \"comment\"\nevent = \"issue_comment\"\nkind = \"resume\"\n\
         run_key = \"nap-{{{{ issue.number }}}}\"\nprompt = \"{{{{ comment.body }}}}\"\n",
        db.config.url,
        db.config
            .schema
            .as_ref()
            .map(|s| format!("schema = \"{s}\""))
            .unwrap_or_default()
    )
}

/// A daemon on `db` in `dir`: its process, config file and API URL.
async fn daemon(db: &TestDb, dir: &Path) -> (Proc, std::path::PathBuf, String) {
    let notes = r#"[
      {"content": [{"type": "text", "text": "Writing it down."},
                   {"type": "tool_use", "id": "toolu_01write", "name": "write_file",
                    "input": {"path": "notes.txt", "content": "remember the milk"}}],
       "stop_reason": "tool_use"},
      {"content": [{"type": "tool_use", "id": "toolu_02read", "name": "read_file",
                    "input": {"path": "notes.txt"}}],
       "stop_reason": "tool_use"},
      {"content": [{"type": "text", "text": "Noted: remember the milk."}], "stop_reason": "end_turn"}
    ]"#;
    std::fs::write(dir.join("notes.json"), notes).unwrap();
    let naps = r#"[
      {"content": [{"type": "tool_use", "id": "toolu_01nap", "name": "schedule_wakeup",
                    "input": {"delay_seconds": 3600, "reason": "a long nap"}}],
       "stop_reason": "tool_use"},
      {"content": [{"type": "text", "text": "rested"}], "stop_reason": "end_turn"}
    ]"#;
    std::fs::write(dir.join("naps.json"), naps).unwrap();
    let port = free_port();
    let cfg = dir.join("nightshift.toml");
    std::fs::write(&cfg, config_text(db, port, SYSTEM)).unwrap();
    let serve = Proc {
        child: Command::new(nightshift_bin())
            .arg("--config")
            .arg(&cfg)
            .arg("serve")
            .env("NIGHTSHIFT_API_TOKEN", API_TOKEN)
            .env("REPLAY_TEST_HOOK_SECRET", HOOK_SECRET)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn nightshift serve"),
    };
    let api = format!("http://127.0.0.1:{port}");
    let http = nightshift_llm::http::build_client(nightshift_llm::HttpTimeouts::default()).unwrap();
    crate::process::wait_for_api(&http, &api).await;
    (serve, cfg, api)
}

/// `nightshift ARGS` in `dir`, with neither a server nor a database URL from the caller's
/// environment.
fn nightshift(dir: &Path, args: &[&str]) -> Output {
    Command::new(nightshift_bin())
        .current_dir(dir)
        .args(args)
        .env_remove("NIGHTSHIFT_SERVER")
        .env_remove("NIGHTSHIFT_DATABASE_URL")
        .env("NIGHTSHIFT_API_TOKEN", API_TOKEN)
        .env("REPLAY_TEST_HOOK_SECRET", HOOK_SECRET)
        .output()
        .expect("run nightshift")
}

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

/// Runs `args`, which must succeed; its stdout.
fn ok(dir: &Path, args: &[&str]) -> String {
    let out = nightshift(dir, args);
    assert!(
        out.status.success(),
        "{args:?}: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// Waits until run `id` has status `status`.
async fn wait_for(dir: &Path, cfg: &str, id: &str, status: &str) {
    let what = format!("run {id} {status}");
    eventually(Duration::from_secs(30), &what, || async {
        let shown: Value = serde_json::from_str(&ok(dir, &["--config", cfg, "runs", "show", id]))
            .expect("runs show prints JSON");
        (shown["run"]["status"] == status).then_some(())
    })
    .await;
}

async fn export_then_replay(db: &TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (mut serve, cfg, api) = daemon(db, d).await;
    let cfg_s = cfg.to_str().unwrap();

    // A run with two tool calls, a run that sleeps and is woken early, a run whose call
    // waits for an approval.
    let notes = ok(d, &["--config", cfg_s, "run", "notes", "Take a note."]);
    let notes = notes.trim();
    let sleeper = ok(
        d,
        &["--config", cfg_s, "run", "sleeper", "Nap, then report."],
    );
    let sleeper = sleeper.trim();
    let guarded = ok(d, &["--config", cfg_s, "run", "guarded", "Take a note."]);
    let guarded = guarded.trim();
    wait_for(d, cfg_s, notes, "succeeded").await;
    wait_for(d, cfg_s, sleeper, "waiting").await;
    ok(d, &["--config", cfg_s, "runs", "wake", sleeper]);
    wait_for(d, cfg_s, sleeper, "succeeded").await;
    wait_for(d, cfg_s, guarded, "awaiting_approval").await;
    ok(d, &["--config", cfg_s, "approve", guarded, "toolu_01write"]);
    wait_for(d, cfg_s, guarded, "succeeded").await;
    // A run that sleeps and is woken by a message.
    let http = nightshift_llm::http::build_client(nightshift_llm::HttpTimeouts::default()).unwrap();
    let told = keyed_sleeper(&http, &api).await;
    let told = told.as_str();
    wait_for(d, cfg_s, told, "waiting").await;
    comment(&http, &api, "Wake up, the build is green.").await;
    wait_for(d, cfg_s, told, "succeeded").await;

    // An unended run is not exported.
    let queued = ok(
        d,
        &[
            "--config", cfg_s, "run", "notes", "Later.", "--delay", "3600",
        ],
    );
    let refused = nightshift(d, &["--config", cfg_s, "runs", "export", queued.trim()]);
    assert!(!refused.status.success());
    assert!(
        text(&refused.stderr).contains("once it has ended"),
        "{}",
        text(&refused.stderr)
    );

    // Exported locally (to a file) and through the API (to stdout).
    let before = counters(&http, &api).await;
    assert!(
        before.iter().any(|l| l.contains("agent=\"notes\"")),
        "{before:?}"
    );
    let elsewhere = tempfile::tempdir().unwrap();
    let e = elsewhere.path();
    for (run, calls, tools) in [
        (notes, 3, 2),
        (sleeper, 2, 0),
        (guarded, 3, 2),
        (told, 2, 0),
    ] {
        let local = d.join(format!("{run}.local.json"));
        let out = nightshift(
            d,
            &[
                "--config",
                cfg_s,
                "runs",
                "export",
                run,
                "--output",
                local.to_str().unwrap(),
            ],
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        let remote_text = ok(e, &["--server", &api, "runs", "export", run]);
        let remote = d.join(format!("{run}.remote.json"));
        std::fs::write(&remote, &remote_text).unwrap();
        let file: Value = serde_json::from_str(&remote_text).unwrap();
        assert_eq!(file["format"], "nightshift-replay");
        assert_eq!(file["version"], 1);
        assert_eq!(file["run_id"], run);
        assert_eq!(
            file["model_calls"].as_array().unwrap().len(),
            calls,
            "{run}"
        );
        assert!(
            !remote_text.contains(API_TOKEN),
            "no secret of the daemon's in the file"
        );
        let local_file: Value =
            serde_json::from_str(&std::fs::read_to_string(&local).unwrap()).unwrap();
        assert_eq!(local_file["model_calls"], file["model_calls"], "{run}");
        assert_eq!(local_file["events"], file["events"], "{run}");

        // Replayed offline, from a directory with no database, with the config it ran with.
        for f in [&local, &remote] {
            let out = ok(e, &["--config", cfg_s, "replay", f.to_str().unwrap()]);
            assert_eq!(
                out.trim(),
                format!("replayed {calls} model calls and {tools} tool calls: no divergence"),
                "{run}"
            );
        }
    }
    // The daemon's exports ran the loop, but counted no run and no tool call of its own.
    assert_eq!(counters(&http, &api).await, before);
    serve.signal("TERM");
    serve.wait_exit(Duration::from_secs(30)).await;

    // The system prompt changed: reported at turn 1, non-zero.
    let changed = e.join("changed.toml");
    let text_changed = config_text(db, free_port(), "You keep notes. Be thorough.");
    std::fs::write(&changed, text_changed).unwrap();
    let file = d.join(format!("{notes}.remote.json"));
    let out = nightshift(
        e,
        &[
            "--config",
            changed.to_str().unwrap(),
            "replay",
            file.to_str().unwrap(),
        ],
    );
    let err = text(&out.stderr);
    assert!(!out.status.success(), "{}", text(&out.stdout));
    assert!(err.contains("divergence at turn 1"), "{err}");
    assert!(err.contains("the system prompt"), "{err}");
    assert!(
        err.contains("Be brief.") && err.contains("Be thorough."),
        "{err}"
    );
    assert!(
        err.contains("note: the agent 'notes' is defined differently"),
        "{err}"
    );

    bad_input(e, cfg_s, &file);
    let mut left: Vec<String> = std::fs::read_dir(e)
        .unwrap()
        .map(|f| f.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(
        left,
        ["bad.json", "changed.toml"],
        "replay made no database or file"
    );
}

/// `nightshift replay` in `e` on a broken file, a file of another version, a file whose
/// agent the config lacks, and without a config: each refused with what to do.
fn bad_input(e: &Path, cfg_s: &str, file: &Path) {
    let bad = e.join("bad.json");
    std::fs::write(&bad, "{not json").unwrap();
    let out = nightshift(e, &["--config", cfg_s, "replay", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("is not JSON"),
        "{}",
        text(&out.stderr)
    );
    let mut other: Value = serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    other["version"] = 99.into();
    std::fs::write(&bad, other.to_string()).unwrap();
    let out = nightshift(e, &["--config", cfg_s, "replay", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("version 99") && err.contains("export the run again"),
        "{err}"
    );
    let mut stranger: Value =
        serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    stranger["agent"] = "nobody".into();
    std::fs::write(&bad, stranger.to_string()).unwrap();
    let out = nightshift(e, &["--config", cfg_s, "replay", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("agent 'nobody' is not in the config"), "{err}");
    let out = nightshift(e, &["replay", file.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("pass --config"),
        "{}",
        text(&out.stderr)
    );
}
