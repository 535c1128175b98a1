//! The operator CLI against a real daemon: `runs follow` on a webhook-started run, and the
//! remote mode (`--server`), run from an empty directory with no config and no database,
//! printing what local mode prints.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use nightshift_tests::{TestDb, eventually, on_both_backends};
use serde_json::Value;

use crate::process::{API_TOKEN, Proc, free_port, nightshift_bin};

on_both_backends! {
    runs_follow_prints_a_webhook_started_run_as_it_happens => follow_webhook_run;
    the_remote_cli_prints_what_the_local_cli_prints => remote_matches_local;
    runs_fork_and_rerun_work_in_both_modes => fork_and_rerun;
}

const HOOK_SECRET: &str = "cli-test-hook-secret";

/// A daemon on `db` with a webhook `gh` (GitHub signatures) starting agent `bot`, whose
/// first turn is slow and calls `read_file`, and an agent `guarded` whose `read_file` needs
/// an approval. Returns the daemon, its config file and its API's base URL.
async fn daemon(db: &TestDb, dir: &Path) -> (Proc, std::path::PathBuf, String) {
    let turns = r#"[
      {"content": [{"type": "text", "text": "Let me look."},
                   {"type": "tool_use", "id": "toolu_01look", "name": "read_file",
                    "input": {"path": "notes.txt"}}],
       "stop_reason": "tool_use", "delay_ms": 1500},
      {"content": [{"type": "text", "text": "all done here"}], "stop_reason": "end_turn"}
    ]"#;
    std::fs::write(dir.join("script.json"), turns).unwrap();
    let naps = r#"[
      {"content": [{"type": "tool_use", "id": "toolu_01nap", "name": "schedule_wakeup",
                    "input": {"delay_seconds": 3600, "reason": "a long nap"}}],
       "stop_reason": "tool_use"},
      {"content": [{"type": "text", "text": "rested"}], "stop_reason": "end_turn"}
    ]"#;
    std::fs::write(dir.join("naps.json"), naps).unwrap();
    let port = free_port();
    // Nothing listens here: the guarded agent's notices fail and are dead after one attempt.
    let closed = free_port();
    let config = format!(
        "[database]\nurl = \"{}\"\n{}\n\
         [server]\naddress = \"127.0.0.1:{port}\"\n\
         [worker]\nslots = 2\nheartbeat_ms = 200\nlease_ms = 2000\npoll_interval_ms = 100\n\
         [runtime]\ndata_dir = \"data\"\n\
         [providers.scripted]\nkind = \"scripted\"\nscript = \"script.json\"\n\
         [[agents]]\nname = \"bot\"\nprovider = \"scripted\"\nmodel = \"scripted-1\"\n\
         tools = [\"read_file\"]\n\
         [[agents]]\nname = \"guarded\"\nprovider = \"scripted\"\nmodel = \"scripted-1\"\n\
         tools = [\"read_file\"]\n\
         [agents.tool_overrides.read_file]\napproval = \"required\"\n\
         [[agents.notify]]\nurl = \"http://127.0.0.1:{closed}/notices\"\n\
         secret_env = \"CLI_TEST_HOOK_SECRET\"\nmax_attempts = 1\n\
         [providers.naps]\nkind = \"scripted\"\nscript = \"naps.json\"\n\
         [[agents]]\nname = \"sleeper\"\nprovider = \"naps\"\nmodel = \"scripted-1\"\n\
         tools = [\"schedule_wakeup\"]\n\
         [[schedules]]\nname = \"yearly\"\ncron = \"0 0 1 1 *\"\nagent = \"sleeper\"\n\
         prompt = \"once a year\"\n\
         [[hooks]]\nname = \"gh\"\nsignature = \"github\"\nsecret_env = \"CLI_TEST_HOOK_SECRET\"\n\
         [[hooks.routes]]\nname = \"look\"\nevent = \"push\"\nagent = \"bot\"\n\
         prompt = \"Look at {{{{ repository.full_name }}}}\"\n",
        db.config.url,
        db.config
            .schema
            .as_ref()
            .map(|s| format!("schema = \"{s}\""))
            .unwrap_or_default()
    );
    let cfg = dir.join("nightshift.toml");
    std::fs::write(&cfg, config).unwrap();
    let serve = Proc {
        child: Command::new(nightshift_bin())
            .arg("--config")
            .arg(&cfg)
            .arg("serve")
            .env("NIGHTSHIFT_API_TOKEN", API_TOKEN)
            .env("CLI_TEST_HOOK_SECRET", HOOK_SECRET)
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

/// `nightshift --server API ARGS` from an empty directory with no config and no database
/// URL, with `token` in NIGHTSHIFT_API_TOKEN.
fn remote(api: &str, token: &str, args: &[&str]) -> Output {
    let empty = tempfile::tempdir().unwrap();
    Command::new(nightshift_bin())
        .current_dir(empty.path())
        .arg("--server")
        .arg(api)
        .args(args)
        .env_remove("NIGHTSHIFT_DATABASE_URL")
        .env_remove("NIGHTSHIFT_SERVER")
        .env("NIGHTSHIFT_API_TOKEN", token)
        .output()
        .expect("run nightshift")
}

/// `nightshift --config CFG ARGS`: the local mode on the daemon's database.
fn local(cfg: &Path, args: &[&str]) -> Output {
    Command::new(nightshift_bin())
        .arg("--config")
        .arg(cfg)
        .args(args)
        .env_remove("NIGHTSHIFT_SERVER")
        .output()
        .expect("run nightshift")
}

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

/// Both modes' stdout for `args`, each checked to have succeeded.
fn both(cfg: &Path, api: &str, args: &[&str]) -> (String, String) {
    let l = local(cfg, args);
    assert!(l.status.success(), "local {args:?}: {}", text(&l.stderr));
    let r = remote(api, API_TOKEN, args);
    assert!(r.status.success(), "remote {args:?}: {}", text(&r.stderr));
    (text(&l.stdout), text(&r.stdout))
}

async fn follow_webhook_run(db: &TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let (mut serve, cfg, api) = daemon(db, dir.path()).await;
    let body = br#"{"repository": {"full_name": "acme/widgets"}}"#;
    let signature = crate::hooks::harness::github_signature(body, HOOK_SECRET);
    let answer: Value = nightshift_llm::http::build_client(nightshift_llm::HttpTimeouts::default())
        .unwrap()
        .post(format!("{api}/hooks/gh"))
        .header("X-GitHub-Event", "push")
        .header("X-GitHub-Delivery", "delivery-1")
        .header("X-Hub-Signature-256", signature)
        .header("Content-Type", "application/json")
        .body(body.to_vec())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let run_id = answer["runs"][0]["run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("a run: {answer}"))
        .to_string();

    // Locally and remotely; the first turn takes 1.5 s, so the followers start while the
    // run is under way and see the rest as it happens.
    let (local_follow, remote_follow) = tokio::join!(
        tokio::task::spawn_blocking({
            let (cfg, id) = (cfg.clone(), run_id.clone());
            move || local(&cfg, &["runs", "follow", &id])
        }),
        tokio::task::spawn_blocking({
            let (api, id) = (api.clone(), run_id.clone());
            move || remote(&api, API_TOKEN, &["runs", "follow", &id])
        })
    );
    for out in [local_follow.unwrap(), remote_follow.unwrap()] {
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
        assert!(stdout.contains("user> Look at acme/widgets"), "{stdout}");
        assert!(stdout.contains("→ read_file"), "{stdout}");
        assert!(
            stdout.contains("assistant (scripted-1)> all done here"),
            "{stdout}"
        );
        assert!(stdout.contains("status: succeeded"), "{stdout}");
        assert!(
            text(&out.stderr).contains("Ctrl-C stops following; the run goes on"),
            "{}",
            text(&out.stderr)
        );
    }

    // A run that does not succeed: the follower exits non-zero.
    let queued = remote(
        &api,
        API_TOKEN,
        &["run", "bot", "never mind", "--delay", "3600"],
    );
    let queued_id = text(&queued.stdout).lines().next().unwrap().to_string();
    let follower = tokio::task::spawn_blocking({
        let (api, id) = (api.clone(), queued_id.clone());
        move || remote(&api, API_TOKEN, &["runs", "follow", &id])
    });
    let cancelled = remote(&api, API_TOKEN, &["runs", "cancel", &queued_id]);
    assert_eq!(text(&cancelled.stdout), format!("{queued_id}\tcancelled\n"));
    let out = follower.await.unwrap();
    assert!(!out.status.success(), "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains("status: cancelled"));
    assert!(
        text(&out.stderr).contains(&format!("run {queued_id} ended as cancelled")),
        "{}",
        text(&out.stderr)
    );

    serve.signal("TERM");
    serve.wait_exit(Duration::from_secs(20)).await;
}

async fn remote_matches_local(db: &TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let (mut serve, cfg, api) = daemon(db, dir.path()).await;

    // A run enqueued remotely and followed to its end.
    let done = remote(&api, API_TOKEN, &["run", "bot", "hello remote", "--wait"]);
    assert!(done.status.success(), "{}", text(&done.stderr));
    let done_id = text(&done.stdout).lines().next().unwrap().to_string();
    assert!(text(&done.stdout).contains("status: succeeded"));

    // A waiting one, to filter and cancel.
    let later = remote(
        &api,
        API_TOKEN,
        &[
            "run", "guarded", "later", "--delay", "3600", "--lane", "slow",
        ],
    );
    assert!(later.status.success(), "{}", text(&later.stderr));
    let later_id = text(&later.stdout).lines().next().unwrap().to_string();

    let (l, r) = both(&cfg, &api, &["runs", "list", "--json", "--agent", "bot"]);
    assert_eq!(l, r);
    let listed: Vec<Value> = r
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(listed.len(), 1, "{r}");
    assert_eq!(listed[0]["id"], done_id.as_str());
    let filters = ["--status", "queued", "--trigger", "api", "--since", "1h"];
    let (l, r) = both(
        &cfg,
        &api,
        &[&["runs", "list", "--json"][..], &filters].concat(),
    );
    assert_eq!(l, r);
    assert!(r.contains(&later_id) && !r.contains(&done_id), "{r}");
    // The table (its ages move with the clock, so it is read, not compared).
    let (_, r) = both(&cfg, &api, &[&["runs", "list"][..], &filters].concat());
    let header: Vec<&str> = r.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "ID", "AGENT", "STATUS", "TRIGGER", "AGE", "DURATION", "TURNS", "COST", "ERROR"
        ]
    );
    assert_eq!(r.lines().count(), 2, "{r}");
    assert!(
        r.contains(&later_id) && r.contains("guarded  queued  api"),
        "{r}"
    );

    let (l, r) = both(&cfg, &api, &["runs", "show", &done_id]);
    assert_eq!(l, r);
    let (l, r) = both(&cfg, &api, &["runs", "events", "--json", &done_id]);
    assert_eq!(l, r);
    for line in r.lines() {
        let event: Value = serde_json::from_str(line).unwrap();
        assert!(event["payload"].is_object(), "a JSON payload: {line}");
    }
    let (l, r) = both(&cfg, &api, &["runs", "events", &done_id]);
    assert_eq!(l, r);
    assert!(
        r.contains("user_message") && r.contains("hello remote"),
        "{r}"
    );

    let (_, r) = both(&cfg, &api, &["queue"]);
    assert!(r.contains("queued") && r.contains("slow"), "{r}");
    assert!(r.contains("LAST HEARTBEAT") && r.contains("ago"), "{r}");

    // An approval: the guarded agent's read_file waits for a person.
    let asks = remote(&api, API_TOKEN, &["run", "guarded", "read it"]);
    let asks_id = text(&asks.stdout).lines().next().unwrap().to_string();
    let listed = eventually(Duration::from_secs(30), "the approval", || async {
        let out = text(&remote(&api, API_TOKEN, &["approvals"]).stdout);
        out.contains(&asks_id).then_some(out)
    })
    .await;
    assert!(listed.contains("toolu_01look") && listed.contains("read_file"));
    let (l, r) = both(&cfg, &api, &["runs", "events", &asks_id]);
    assert_eq!(l, r);
    let decided = remote(&api, API_TOKEN, &["approve", &asks_id, "toolu_01look"]);
    assert!(decided.status.success(), "{}", text(&decided.stderr));
    let followed = remote(&api, API_TOKEN, &["runs", "follow", &asks_id]);
    let out = text(&followed.stdout);
    assert!(
        out.contains(&format!("nightshift approve {asks_id} toolu_01look")),
        "the hint names the real run and call: {out}"
    );
    assert!(followed.status.success(), "{out}");
    let again = remote(&api, API_TOKEN, &["approve", &asks_id, "toolu_01look"]);
    assert!(!again.status.success());
    assert!(
        text(&again.stderr).contains("the server answered 4"),
        "{}",
        text(&again.stderr)
    );

    let cancel = remote(&api, API_TOKEN, &["runs", "cancel", &later_id]);
    assert_eq!(text(&cancel.stdout), format!("{later_id}\tcancelled\n"));
    let missing = remote(&api, API_TOKEN, &["runs", "show", "nope"]);
    assert!(
        text(&missing.stderr).contains("404 Not Found: run nope not found"),
        "{}",
        text(&missing.stderr)
    );

    // A sleeping run: listed alike in both modes, then woken remotely.
    let sleeps = remote(&api, API_TOKEN, &["run", "sleeper", "take a nap"]);
    let sleeps_id = text(&sleeps.stdout).lines().next().unwrap().to_string();
    eventually(Duration::from_secs(30), "the run to sleep", || async {
        let out = text(&remote(&api, API_TOKEN, &["runs", "wakeups", "--json"]).stdout);
        out.contains(&sleeps_id).then_some(())
    })
    .await;
    let (l, r) = both(&cfg, &api, &["runs", "wakeups", "--json"]);
    assert_eq!(l, r);
    let sleeping: Value = serde_json::from_str(
        r.lines()
            .find(|l| l.contains(&sleeps_id))
            .expect("the sleeping run"),
    )
    .unwrap();
    assert_eq!(sleeping["agent"], "sleeper");
    assert_eq!(sleeping["reason"], "a long nap");
    let (_, r) = both(&cfg, &api, &["runs", "wakeups"]);
    assert!(r.starts_with("RUN") && r.contains("in 59m"), "{r}");
    let woken = remote(&api, API_TOKEN, &["runs", "wake", &sleeps_id]);
    assert!(
        text(&woken.stdout).contains("woken"),
        "{}",
        text(&woken.stderr)
    );
    let followed = remote(&api, API_TOKEN, &["runs", "follow", &sleeps_id]);
    assert!(
        text(&followed.stdout).contains("rested"),
        "{}",
        text(&followed.stdout)
    );

    // A denial, made remotely; the model is told and finishes.
    let denied = remote(&api, API_TOKEN, &["run", "guarded", "read it, maybe"]);
    let denied_id = text(&denied.stdout).lines().next().unwrap().to_string();
    eventually(Duration::from_secs(30), "the second approval", || async {
        let out = text(&remote(&api, API_TOKEN, &["approvals"]).stdout);
        out.contains(&denied_id).then_some(())
    })
    .await;
    let decided = remote(
        &api,
        API_TOKEN,
        &["deny", &denied_id, "toolu_01look", "--reason", "not today"],
    );
    assert!(decided.status.success(), "{}", text(&decided.stderr));
    let followed = remote(&api, API_TOKEN, &["runs", "follow", &denied_id]);
    assert!(followed.status.success(), "{}", text(&followed.stderr));
    let (l, r) = both(&cfg, &api, &["runs", "events", &denied_id]);
    assert_eq!(l, r);
    assert!(r.contains("not today"), "the reason is in the events: {r}");

    // Schedules: listed alike, fired remotely.
    let (l, r) = both(&cfg, &api, &["schedules", "list", "--json"]);
    assert_eq!(l, r);
    let yearly: Value = serde_json::from_str(r.trim()).expect("one schedule");
    assert_eq!(
        (yearly["name"].as_str(), yearly["cron"].as_str()),
        (Some("yearly"), Some("0 0 1 1 *"))
    );
    let (l, r) = both(&cfg, &api, &["schedules", "list"]);
    assert_eq!(l, r);
    assert!(
        r.starts_with("NAME") && r.contains("yearly  config  0 0 1 1 *"),
        "{r}"
    );
    let fired = remote(&api, API_TOKEN, &["schedules", "trigger", "yearly"]);
    assert!(
        text(&fired.stdout).contains("(enqueued)"),
        "{}",
        text(&fired.stderr)
    );

    // Notices: the guarded runs' notices went nowhere and are dead; listed alike, sent again.
    let dead = eventually(Duration::from_secs(30), "a dead notice", || async {
        let out = remote(
            &api,
            API_TOKEN,
            &["notifications", "list", "--status", "dead", "--json"],
        );
        let line = text(&out.stdout).lines().next()?.to_string();
        Some(serde_json::from_str::<Value>(&line).unwrap())
    })
    .await;
    let (l, r) = both(&cfg, &api, &["notifications", "list", "--json"]);
    assert_eq!(l, r);
    let (l, r) = both(&cfg, &api, &["notifications", "list", "--status", "dead"]);
    assert_eq!(l, r);
    assert!(r.starts_with("DELIVERY") && r.contains("1/1"), "{r}");
    assert!(!r.contains("/notices"), "URLs without their path: {r}");
    let delivery = dead["delivery_id"].as_str().unwrap();
    let again = remote(&api, API_TOKEN, &["notifications", "redeliver", delivery]);
    assert!(
        text(&again.stdout).contains("queued again"),
        "{}",
        text(&again.stderr)
    );

    // Background tasks: none here, and both modes agree on that.
    let (l, r) = both(&cfg, &api, &["runs", "tasks", "--json"]);
    assert_eq!((l.as_str(), r.as_str()), ("", ""));

    // A wrong token, and a server that is not there.
    let refused = remote(&api, "not-the-token", &["runs", "list"]);
    assert!(!refused.status.success());
    assert!(
        text(&refused.stderr).contains("set NIGHTSHIFT_API_TOKEN"),
        "{}",
        text(&refused.stderr)
    );
    let nobody = format!("http://127.0.0.1:{}", free_port());
    let unreachable = remote(&nobody, API_TOKEN, &["queue"]);
    assert!(!unreachable.status.success());
    let err = text(&unreachable.stderr);
    assert!(
        err.contains(&format!("cannot reach the Nightshift server at {nobody}"))
            && err.contains("check --server"),
        "{err}"
    );

    serve.signal("TERM");
    serve.wait_exit(Duration::from_secs(20)).await;
}

/// `runs fork` and `runs rerun`, locally and through `--server`: a fork from turn 1 reads the
/// first turn's `read_file` result instead of calling it again and ends like its parent; a
/// replaced result reaches the model; a turn past the run's calls is refused with the count;
/// a bulk dry run names the runs and changes nothing; each fork is audited.
async fn fork_and_rerun(db: &TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let (mut serve, cfg, api) = daemon(db, dir.path()).await;
    let done = remote(&api, API_TOKEN, &["run", "bot", "hello fork", "--wait"]);
    assert!(done.status.success(), "{}", text(&done.stderr));
    let parent = text(&done.stdout).lines().next().unwrap().to_string();

    let forked = local(&cfg, &["runs", "fork", &parent, "--from-turn", "1"]);
    assert!(forked.status.success(), "{}", text(&forked.stderr));
    let out = text(&forked.stdout);
    let fork_id = out.split('\t').next().unwrap().to_string();
    assert!(
        out.contains(&format!("forked from {parent} at turn 1")),
        "{out}"
    );
    let followed = remote(&api, API_TOKEN, &["runs", "follow", &fork_id]);
    assert!(followed.status.success(), "{}", text(&followed.stderr));
    assert!(
        text(&followed.stdout).contains("forked from run"),
        "{}",
        text(&followed.stdout)
    );

    let replaced = remote(
        &api,
        API_TOKEN,
        &[
            "runs",
            "fork",
            &parent,
            "--from-turn",
            "1",
            "--tool-result",
            "toolu_01look=a replaced result",
        ],
    );
    assert!(replaced.status.success(), "{}", text(&replaced.stderr));
    let replaced_id = text(&replaced.stdout)
        .split('\t')
        .next()
        .unwrap()
        .to_string();
    let events = remote(&api, API_TOKEN, &["runs", "events", &replaced_id, "--json"]);
    assert!(
        text(&events.stdout).contains("a replaced result"),
        "{}",
        text(&events.stdout)
    );

    // Every run made so far has ended, so the list below changes only if something is made.
    let ended = remote(&api, API_TOKEN, &["runs", "follow", &replaced_id]);
    assert!(ended.status.success(), "{}", text(&ended.stderr));
    let before = remote(&api, API_TOKEN, &["runs", "list", "--json"]);
    for args in [
        &["runs", "fork", &parent, "--from-turn", "9"][..],
        &[
            "runs",
            "fork",
            &parent,
            "--from-turn",
            "1",
            "--tool-result",
            "nocall",
        ][..],
    ] {
        let refused = remote(&api, API_TOKEN, args);
        assert!(!refused.status.success(), "{args:?} was refused");
        let err = text(&refused.stderr);
        assert!(
            err.contains("model call(s)") || err.contains("CALL=TEXT"),
            "{err}"
        );
    }
    // A model the agent can neither answer with nor price is refused at once, locally and
    // through the daemon, naming the models it may ask for.
    let typo = [
        "runs",
        "fork",
        &parent,
        "--from-turn",
        "1",
        "--model",
        "scripted-2",
    ];
    for refused in [local(&cfg, &typo), remote(&api, API_TOKEN, &typo)] {
        assert!(
            !refused.status.success(),
            "a fork with an unknown model was made"
        );
        let err = text(&refused.stderr);
        assert!(
            err.contains("cannot answer a fork with model 'scripted-2'")
                && err.contains("[prices.\"scripted-2\"]"),
            "{err}"
        );
    }
    let dry = both(
        &cfg,
        &api,
        &[
            "runs",
            "rerun",
            "--status",
            "succeeded",
            "--agent",
            "bot",
            "--dry-run",
        ],
    );
    assert_eq!(dry.0, dry.1);
    assert!(
        dry.1.contains(&format!("{parent}\twould rerun")),
        "{}",
        dry.1
    );
    let after = remote(&api, API_TOKEN, &["runs", "list", "--json"]);
    assert_eq!(
        text(&before.stdout),
        text(&after.stdout),
        "refusals and a dry run make nothing"
    );

    let audit = local(&cfg, &["audit", "--run", &fork_id]);
    assert!(
        text(&audit.stdout).contains("fork"),
        "{}",
        text(&audit.stdout)
    );
    serve.signal("TERM");
    serve.wait_exit(Duration::from_secs(20)).await;
}
