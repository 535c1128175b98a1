//! Crashes and cancellation of the real `nightshift serve`, driven through the CLI with a
//! scripted model and real command tools: SIGKILL while a tool of each durability class is
//! between `tool_started` and `tool_result`, SIGKILL between model turns, and `runs cancel`
//! stopping a running command.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nightshift_agent::runtime::INTERRUPTED_NOTICE;
use nightshift_agent::{EndStatus, RunEvent, RunState, ToolClass};
use nightshift_llm::{ContentBlock, Role};
use nightshift_store::{Event, Run, RunStatus, Store};
use nightshift_tests::{TestDb, eventually, on_both_backends};
use serde_json::{Value, json};

use crate::process::Proc;

on_both_backends! {
    sigkill_mid_tool_call_recovers_each_durability_class => sigkill_mid_tool_call;
    sigkill_between_model_turns_repeats_no_turn => sigkill_between_model_turns;
    runs_cancel_stops_a_running_command_within_seconds => cancel_stops_a_running_command;
    a_restarted_daemon_kills_the_tool_processes_its_predecessor_left => restart_reaps_orphans;
}

/// Short leases, so a SIGKILLed daemon's jobs are reclaimed quickly.
pub(crate) const FAST_WORKER: &str =
    "slots = 3\nlease_ms = 1500\nheartbeat_ms = 300\npoll_interval_ms = 100\n";

/// The config pieces every suite writes (shared with the browser tests).
pub(crate) use nightshift_tests::config_text::{agent, command_tool, q};

/// A path for a `sh -c` program, single-quoted.
fn sh_path(p: &Path) -> String {
    let s = p.to_str().expect("a UTF-8 path");
    assert!(!s.contains('\''), "no quotes in temp paths: {s}");
    format!("'{s}'")
}

/// The directory beside the data directory that the tests' commands may write (granted in
/// `[sandbox] write` by [`write_config`]): logs, pid files and gates shared with the test.
pub(crate) fn out(dir: &Path) -> PathBuf {
    dir.join("out")
}

/// Writes `nightshift.toml` in `dir`: the test's database, `worker`, data under `dir/data`,
/// commands sandboxed with [`out`] writable, and `body` (providers, agents, command tools).
/// `schema = "…"` for a `[database]` table, when the test's database has its own schema.
pub(crate) fn schema_setting(db: &TestDb) -> String {
    db.config
        .schema
        .as_deref()
        .map(|s| format!("schema = {}\n", q(s)))
        .unwrap_or_default()
}

pub(crate) fn write_config(db: &TestDb, dir: &Path, worker: &str, body: &str) -> PathBuf {
    std::fs::create_dir_all(out(dir)).unwrap();
    let text = format!(
        "[database]\nurl = {}\n{}\n[worker]\n{worker}\n\
         [server]\naddress = \"127.0.0.1:0\"\n\n[runtime]\ndata_dir = \"data\"\n\n\
         [sandbox]\nwrite = [{}]\n\n{body}",
        q(&db.config.url),
        schema_setting(db),
        q(out(dir).to_str().unwrap()),
    );
    let path = dir.join("nightshift.toml");
    std::fs::write(&path, text).unwrap();
    path
}

pub(crate) fn tool_turn(call_id: &str, tool: &str, input: Value) -> Value {
    json!({"content": [{"type": "tool_use", "id": call_id, "name": tool, "input": input}],
           "stop_reason": "tool_use"})
}

pub(crate) fn text_turn(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}], "stop_reason": "end_turn"})
}

/// `nightshift --config cfg …` and `nightshift serve`, from the tests' library.
pub(crate) use nightshift_tests::process::{nightshift, serve};

/// Runs a one-shot CLI command that must succeed; returns its stdout.
pub(crate) fn cli(cfg: &Path, args: &[&str]) -> String {
    let out = nightshift(cfg).args(args).output().expect("run nightshift");
    assert!(
        out.status.success(),
        "nightshift {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `nightshift run AGENT PROMPT`; returns the run id.
pub(crate) fn enqueue(cfg: &Path, agent: &str) -> String {
    let out = cli(cfg, &["run", agent, "Call your tool."]);
    out.split('\t').next().unwrap().trim().to_string()
}

pub(crate) async fn sigkill(serve: &mut Proc) {
    serve.signal("KILL");
    let status = serve.wait_exit(Duration::from_secs(10)).await;
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9),
        "serve died of SIGKILL"
    );
}

pub(crate) async fn sigterm(mut serve: Proc) {
    serve.signal("TERM");
    let status = serve.wait_exit(Duration::from_secs(20)).await;
    assert!(
        status.success(),
        "serve exits cleanly on SIGTERM: {status:?}"
    );
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .map(|t| t.lines().map(str::to_string).collect())
        .unwrap_or_default()
}

/// The run's events, parsed.
/// The result of tool call `call_id` in a run's `log` (from [`events`]): its text and whether
/// it is an error. Panics when the call has no result.
pub(crate) fn call_result(log: &[(Event, RunEvent)], call_id: &str) -> (String, bool) {
    log.iter()
        .find_map(|(_, e)| match e {
            RunEvent::ToolResult {
                call_id: id,
                content,
                is_error,
                ..
            } if id == call_id => Some((content.clone(), *is_error)),
            _ => None,
        })
        .unwrap_or_else(|| panic!("a result for {call_id}"))
}

pub(crate) async fn events(store: &Store, run_id: &str) -> Vec<(Event, RunEvent)> {
    store
        .events(run_id, 0)
        .await
        .unwrap()
        .into_iter()
        .map(|e| {
            let parsed = RunEvent::parse(&e.event_type, &e.payload).unwrap();
            (e, parsed)
        })
        .collect()
}

pub(crate) fn kinds(events: &[(Event, RunEvent)]) -> Vec<&str> {
    events.iter().map(|(e, _)| e.event_type.as_str()).collect()
}

pub(crate) async fn wait_finished(store: &Store, run_id: &str) -> Run {
    eventually(
        Duration::from_secs(60),
        &format!("run {run_id} to finish"),
        || async {
            let run = store.run(run_id).await.unwrap()?;
            run.status.is_terminal().then_some(run)
        },
    )
    .await
}

/// Seqs are 1..=n with no gaps; every call id has exactly one `tool_started` followed by
/// exactly one `tool_result`, and no result lacks its start.
fn assert_log_well_formed(events: &[(Event, RunEvent)]) {
    let seqs: Vec<i64> = events.iter().map(|(e, _)| e.seq).collect();
    let expected: Vec<i64> = (1..=events.len() as i64).collect();
    assert_eq!(seqs, expected, "seqs are 1..=n, in order, with no gaps");
    let mut starts = Vec::new();
    let mut results = Vec::new();
    for (e, parsed) in events {
        match parsed {
            RunEvent::ToolStarted { call_id, .. } => starts.push((call_id.clone(), e.seq)),
            RunEvent::ToolResult { call_id, .. } => results.push((call_id.clone(), e.seq)),
            _ => {}
        }
    }
    for (id, start_seq) in &starts {
        let n = starts.iter().filter(|(c, _)| c == id).count();
        assert_eq!(n, 1, "exactly one tool_started for {id}: {starts:?}");
        let mine: Vec<i64> = results
            .iter()
            .filter(|(c, _)| c == id)
            .map(|(_, s)| *s)
            .collect();
        assert_eq!(
            mine.len(),
            1,
            "exactly one tool_result for {id}: {results:?}"
        );
        assert!(mine[0] > *start_seq, "{id}: the result follows its start");
    }
    assert_eq!(starts.len(), results.len(), "no result without a start");
}

/// The messages the model was sent for the `n`th model call (0-based): the projection of
/// every event before the `n`th `assistant_message`, as the runtime builds its request.
fn request_messages(events: &[(Event, RunEvent)], n: usize) -> Vec<nightshift_llm::Message> {
    let mut state = RunState::default();
    let mut replies = 0;
    for (e, parsed) in events {
        if matches!(parsed, RunEvent::AssistantMessage { .. }) {
            if replies == n {
                return state.messages;
            }
            replies += 1;
        }
        state.apply(e.seq, parsed).unwrap();
    }
    panic!("the run has no model reply #{n}");
}

const CLASSES: [(&str, ToolClass); 3] = [
    ("read_only", ToolClass::ReadOnly),
    ("idempotent", ToolClass::Idempotent),
    ("side_effect", ToolClass::SideEffect),
];

async fn sigkill_mid_tool_call(db: &TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // The tools block until the test creates this file (for at most ~30 s), so the kill
    // surely lands between tool_started and tool_result however slow the machine is.
    let gate = out(d).join("gate");
    let mut body = String::new();
    for (class, _) in CLASSES {
        let tool = format!("tool_{class}");
        let program = format!(
            "echo \"$NIGHTSHIFT_IDEMPOTENCY_KEY\" >> {log}; i=0; \
             while [ ! -e {gate} ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; \
             echo \"done $NIGHTSHIFT_IDEMPOTENCY_KEY\"",
            log = sh_path(&out(d).join(format!("{class}.log"))),
            gate = sh_path(&gate),
        );
        body += &command_tool(&tool, class, &program);
        let turns = json!([
            tool_turn(&format!("call_{class}"), &tool, json!({})),
            text_turn(&format!("{class} finished"))
        ]);
        body += &agent(d, class, &[&tool], turns);
    }
    let cfg = write_config(db, d, FAST_WORKER, &body);
    let store = db.store().await;
    let mut first = serve(&cfg);
    let runs: Vec<String> = CLASSES.iter().map(|(c, _)| enqueue(&cfg, c)).collect();
    eventually(
        Duration::from_secs(30),
        "every tool call to start",
        || async {
            CLASSES
                .iter()
                .all(|(c, _)| !lines(&out(d).join(format!("{c}.log"))).is_empty())
                .then_some(())
        },
    )
    .await;
    sigkill(&mut first).await;

    for ((class, _), run_id) in CLASSES.iter().zip(&runs) {
        let log = events(&store, run_id).await;
        assert_eq!(
            kinds(&log).last(),
            Some(&"tool_started"),
            "{class}: killed between tool_started and tool_result"
        );
    }
    std::fs::write(&gate, "").unwrap();
    let second = serve(&cfg);

    for ((class, durability), run_id) in CLASSES.iter().zip(&runs) {
        let run = wait_finished(&store, run_id).await;
        assert_eq!(run.status, RunStatus::Succeeded, "{class}: {:?}", run.error);
        assert_eq!(run.result, Some(format!("{class} finished")));
        let call_id = format!("call_{class}");
        let key = format!("{run_id}:1:{call_id}");
        let ran = lines(&out(d).join(format!("{class}.log")));
        let times = if *durability == ToolClass::SideEffect {
            1
        } else {
            2
        };
        assert_eq!(
            ran,
            vec![key.clone(); times],
            "{class}: runs (and the key each run got)"
        );

        let log = events(&store, run_id).await;
        assert_eq!(
            kinds(&log),
            [
                "run_started",
                "user_message",
                "assistant_message",
                "tool_started",
                "tool_result",
                "assistant_message",
                "finished"
            ],
            "{class}"
        );
        assert_log_well_formed(&log);
        let (started, result) = (&log[3], &log[4]);
        match &started.1 {
            RunEvent::ToolStarted {
                call_id: id,
                durability: logged,
                idempotency_key,
                ..
            } => assert_eq!((id, logged, idempotency_key), (&call_id, durability, &key)),
            other => panic!("{class}: {other:?}"),
        }
        assert!(
            result.0.lease_token > started.0.lease_token,
            "{class}: the result was written by the second daemon's lease"
        );
        let RunEvent::ToolResult {
            call_id: id,
            content,
            is_error,
            interrupted,
        } = &result.1
        else {
            panic!("{class}: {:?}", result.1);
        };
        assert_eq!(id, &call_id);
        if *durability == ToolClass::SideEffect {
            assert_eq!(
                (content.as_str(), *is_error, *interrupted),
                (INTERRUPTED_NOTICE, true, true),
                "{class}: reported as interrupted, outcome unknown"
            );
        } else {
            assert_eq!(
                (content.trim(), *is_error, *interrupted),
                (format!("done {key}").as_str(), false, false),
                "{class}: the real result of the second run"
            );
        }
        // What the second model call was sent ends with exactly that result.
        let sent = request_messages(&log, 1);
        let last = sent.last().unwrap();
        assert_eq!(last.role, Role::User);
        assert_eq!(
            last.content,
            [ContentBlock::ToolResult {
                tool_use_id: call_id.clone(),
                content: content.clone(),
                is_error: *is_error,
            }],
            "{class}"
        );
        let jobs = store.jobs_of_run(run_id).await.unwrap();
        assert_eq!(jobs.len(), 1, "{class}: the crash made no new job");
        // The killed attempt had recorded progress (its model turn), so its lease expiry
        // gave the attempt back: only the second daemon's attempt counts.
        assert_eq!(
            jobs[0].attempts, 1,
            "{class}: the crash after progress is not counted"
        );
        let error = jobs[0].last_error.as_deref().unwrap_or_default();
        assert!(
            error.contains("the attempt is not counted"),
            "{class}: {error}"
        );
    }
    sigterm(second).await;
}

async fn sigkill_between_model_turns(db: &TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let calls = out(d).join("calls.log");
    let program = format!(
        "echo \"$NIGHTSHIFT_TOOL_CALL_ID\" >> {log}; echo \"probed $NIGHTSHIFT_TOOL_CALL_ID\"",
        log = sh_path(&calls)
    );
    // The second model call is slow, so the kill lands while it is in flight: after the
    // first turn's tool result, before the second reply is logged.
    let mut slow = tool_turn("call_2", "probe", json!({}));
    slow["delay_ms"] = json!(2000);
    let turns = json!([
        tool_turn("call_1", "probe", json!({})),
        slow,
        text_turn("all probed")
    ]);
    let metrics_port = crate::process::free_port();
    let body = format!("[telemetry]\nmetrics_address = \"127.0.0.1:{metrics_port}\"\n\n")
        + &command_tool("probe", "read_only", &program)
        + &agent(d, "prober", &["probe"], turns);
    let cfg = write_config(db, d, FAST_WORKER, &body);
    let store = db.store().await;
    let mut first = serve(&cfg);
    let run_id = enqueue(&cfg, "prober");
    eventually(Duration::from_secs(30), "the first tool result", || async {
        let log = events(&store, &run_id).await;
        kinds(&log).contains(&"tool_result").then_some(())
    })
    .await;
    sigkill(&mut first).await;
    let before = events(&store, &run_id).await;
    assert_eq!(
        kinds(&before)
            .iter()
            .filter(|k| **k == "assistant_message")
            .count(),
        1,
        "killed before the second reply was logged: {:?}",
        kinds(&before)
    );

    let second = serve(&cfg);
    let run = wait_finished(&store, &run_id).await;
    assert_eq!(run.status, RunStatus::Succeeded, "{:?}", run.error);
    assert_eq!(run.result.as_deref(), Some("all probed"));
    assert_eq!(run.turns, 3, "three model calls counted");
    let log = events(&store, &run_id).await;
    assert_eq!(
        kinds(&log),
        [
            "run_started",
            "user_message",
            "assistant_message",
            "tool_started",
            "tool_result",
            "assistant_message",
            "tool_started",
            "tool_result",
            "assistant_message",
            "finished"
        ]
    );
    assert_log_well_formed(&log);
    assert!(
        log[5].0.lease_token > log[2].0.lease_token,
        "the second reply was logged after the restart"
    );
    assert_eq!(
        lines(&calls),
        ["call_1", "call_2"],
        "each call ran once; the finished one was not repeated"
    );
    // The second daemon found the first one's lease expired and put the job back: counted.
    let http = nightshift_llm::http::build_client(nightshift_llm::HttpTimeouts::default()).unwrap();
    let text = http
        .get(format!("http://127.0.0.1:{metrics_port}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let rescued: f64 = nightshift_telemetry::exposition::parse(&text)
        .iter()
        .filter(|s| {
            s.name == "nightshift_lease_expiries_total"
                && s.labels
                    .iter()
                    .any(|(k, v)| k == "outcome" && v == "requeued")
        })
        .map(|s| s.value)
        .sum();
    assert_eq!(rescued, 1.0, "{text}");
    sigterm(second).await;
}

/// Whether `pid` is a live process (a zombie is not).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            !(state.starts_with('Z') || state.starts_with('X'))
        }
        Err(_) => false,
    }
}

fn read_pid(path: &Path) -> Option<u32> {
    crate::process::host_pid(&std::fs::read_to_string(path).ok()?)
}

async fn cancel_stops_a_running_command(db: &TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (sh_pid, sleep_pid) = (out(d).join("sh.pid"), out(d).join("sleep.pid"));
    let command = format!(
        "echo {} > {}; sleep 30 & echo $! $(readlink /proc/self/ns/pid) > {}; wait; echo late",
        crate::process::SHELL_PID,
        sh_path(&sh_pid),
        sh_path(&sleep_pid)
    );
    let turns = json!([
        tool_turn("call_1", "run_command", json!({"command": command})),
        text_turn("not reached")
    ]);
    let body = agent(d, "sleeper", &["run_command"], turns);
    let worker = "slots = 1\nlease_ms = 5000\nheartbeat_ms = 300\npoll_interval_ms = 100\n";
    let cfg = write_config(db, d, worker, &body);
    let store = db.store().await;
    let serve = serve(&cfg);
    let run_id = enqueue(&cfg, "sleeper");
    let (shell, sleeper) = eventually(Duration::from_secs(30), "the command to start", || async {
        Some((read_pid(&sh_pid)?, read_pid(&sleep_pid)?))
    })
    .await;
    assert!(alive(shell) && alive(sleeper), "the command is running");

    let asked = Instant::now();
    let out = cli(&cfg, &["runs", "cancel", &run_id]);
    assert!(out.contains("cancellation requested"), "{out}");
    let run = wait_finished(&store, &run_id).await;
    let took = asked.elapsed();
    assert_eq!(run.status, RunStatus::Cancelled, "{:?}", run.error);
    assert!(
        took < Duration::from_secs(3),
        "cancelled {took:?} after the request"
    );
    assert!(!alive(shell), "the shell {shell} was killed");
    assert!(!alive(sleeper), "its child {sleeper} was killed");

    let log = events(&store, &run_id).await;
    assert_eq!(
        kinds(&log),
        [
            "run_started",
            "user_message",
            "assistant_message",
            "tool_started",
            "tool_result",
            "finished"
        ],
        "no model call after the cancel"
    );
    assert_log_well_formed(&log);
    match &log[4].1 {
        RunEvent::ToolResult {
            content, is_error, ..
        } => {
            assert!(*is_error, "{content}");
            assert!(content.contains("cancelled"), "{content}");
            assert!(!content.contains("late"), "{content}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        log[5].1,
        RunEvent::Finished {
            status: EndStatus::Cancelled,
            detail: None
        }
    );
    sigterm(serve).await;
}

async fn restart_reaps_orphans(db: &TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let pid_file = out(d).join("tool.pid");
    let program = format!(
        "echo {} > {}; exec sleep 60",
        crate::process::SHELL_PID,
        sh_path(&pid_file)
    );
    let body = agent(
        d,
        "orphan",
        &["slow"],
        json!([tool_turn("call_1", "slow", json!({})), text_turn("done")]),
    ) + &command_tool("slow", "side_effect", &program);
    let cfg = write_config(db, d, FAST_WORKER, &body);
    let mut first = serve(&cfg);
    let run_id = enqueue(&cfg, "orphan");
    let pid = eventually(Duration::from_secs(30), "the tool to start", || async {
        read_pid(&pid_file)
    })
    .await;
    sigkill(&mut first).await;
    assert!(
        alive(pid),
        "SIGKILL of the daemon leaves its tool running (the case handled here)"
    );
    let second = serve(&cfg);
    eventually(
        Duration::from_secs(15),
        "the orphaned tool to be killed",
        || async { (!alive(pid)).then_some(()) },
    )
    .await;
    let store = db.store().await;
    let run = wait_finished(&store, &run_id).await;
    assert_eq!(run.status, RunStatus::Succeeded);
    let results: Vec<bool> = events(&store, &run_id)
        .await
        .into_iter()
        .filter_map(|(_, e)| match e {
            RunEvent::ToolResult { interrupted, .. } => Some(interrupted),
            _ => None,
        })
        .collect();
    assert_eq!(
        results,
        vec![true],
        "the side effect is reported as interrupted, not re-run"
    );
    sigterm(second).await;
}
