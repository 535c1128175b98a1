//! The examples in `ops/examples/`, each run as a user runs it: its real `nightshift.toml`
//! (with its system prompt) copied as it is, with only what a test must change — the test's
//! database and a free API port appended, the hosts of outside services pointed at fakes on
//! loopback — loaded with `Config::load` (and compared with the real file's config, so
//! nothing else differs), then run by a real `nightshift serve` whose environment holds the
//! keys the example names. The model is a fake of the Anthropic Messages API (the example's
//! `[providers.anthropic]` is left as it is; `ANTHROPIC_BASE_URL` points it at the fake) that
//! decides each reply from the conversation it is sent, as a model does.
//!
//! - `nightly-digest`: the schedule fired with `nightshift schedules trigger`; its prompt
//!   carries the date, the agent lists that day's merged pull requests from the suite's fake
//!   GitHub and posts a digest naming both to a fake Slack incoming webhook, whose URL (the
//!   credential) the daemon fills in from `{{secret:SLACK_WEBHOOK_URL}}` — a URL that is in no
//!   stored event, run field or model request.
//! - `long-task`: a background command started with a wakeup in the same reply; the run is
//!   seen `waiting`, wakes in the same conversation, reads the command's output with
//!   `task_output`, stops it with `task_stop` and succeeds with the last line it read.
//!
//! Each example's test is in its module ([`nightly_digest`], [`long_task`]), the fake model in
//! [`model`]; loading an example's config as a user's and running its CLI are here.

mod long_task;
mod model;
mod nightly_digest;

use std::path::{Path, PathBuf};
use std::process::Command;

use nightshift_runner::config::{Config, Overrides};
use nightshift_tests::config_text::q;
use nightshift_tests::{TestDb, on_both_backends};

use crate::crash::nightshift;
use long_task::long_task;
use nightly_digest::nightly_digest;

on_both_backends! {
    the_nightly_digest_example_posts_the_days_merged_pull_requests_to_slack => nightly_digest;
    the_long_task_example_sleeps_checks_and_stops_its_background_command => long_task;
}

/// The key the fake model expects (`x-api-key`), given to `serve` as `ANTHROPIC_API_KEY`.
const MODEL_KEY: &str = "sk-ant-examples-suite-0123456789";

/// `ops/examples/<name>`.
fn example_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../ops/examples")
        .join(name)
}

/// `text` with the one occurrence of `from` replaced by `to` (a test's change must hit exactly
/// the line it means).
fn change(text: &str, from: &str, to: &str) -> String {
    assert_eq!(
        text.matches(from).count(),
        1,
        "the example should contain {from:?} exactly once"
    );
    text.replacen(from, to, 1)
}

/// Copies the example's files (its config and prompts, not a database or data directory a
/// local run left) into `dest`, writes its `nightshift.toml` changed by `edit` with the test's
/// database and a free API port appended, and returns (the real file's config, the copy's,
/// the copy's path). Both are loaded with `Config::load` as `serve` loads them.
fn example_config(
    name: &str,
    db: &TestDb,
    dest: &Path,
    edit: impl FnOnce(String) -> String,
) -> (Config, Config, PathBuf) {
    let src = example_dir(name);
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let file = path.file_name().unwrap().to_str().unwrap().to_string();
        if path.is_file() && (file.ends_with(".toml") || file.ends_with(".md")) {
            std::fs::copy(&path, dest.join(&file)).unwrap();
        }
    }
    let real = src.join("nightshift.toml");
    let original = Config::load(Some(&real), &Overrides::default())
        .unwrap_or_else(|e| panic!("{} loads: {e:#}", real.display()));
    let schema = db
        .config
        .schema
        .as_deref()
        .map(|s| format!("schema = {}\n", q(s)))
        .unwrap_or_default();
    let text = edit(std::fs::read_to_string(&real).unwrap())
        + &format!(
            "\n# Added by the test: its database, and the API on a free port.\n\
             [database]\nurl = {}\n{schema}\n[server]\naddress = \"127.0.0.1:0\"\n",
            q(&db.config.url)
        );
    let cfg = dest.join("nightshift.toml");
    std::fs::write(&cfg, text).unwrap();
    let copy = Config::load(Some(&cfg), &Overrides::default())
        .unwrap_or_else(|e| panic!("the test's copy loads: {e:#}"));
    assert_eq!(copy.database.schema, db.config.schema);
    (original, copy, cfg)
}

/// `original` with what [`example_config`] always changes set as in `copy`: where the file
/// is (so the data directory is next to the copy), the database and the API address.
fn moved(original: &Config, copy: &Config) -> Config {
    let mut expected = original.clone();
    expected.base_dir = copy.base_dir.clone();
    expected.runtime.data_dir = copy.base_dir.join("nightshift-data");
    assert_eq!(
        original.runtime.data_dir,
        original.base_dir.join("nightshift-data")
    );
    expected.database = copy.database.clone();
    expected.server.address = "127.0.0.1:0".into();
    expected
}

/// `nightshift --config cfg …` with the example's variables (and the fake model's address).
fn with_env(mut cmd: Command, env: &[(&str, String)]) -> Command {
    for (name, value) in env {
        cmd.env(name, value);
    }
    cmd
}

fn cli(cfg: &Path, env: &[(&str, String)], args: &[&str]) -> String {
    let out = with_env(nightshift(cfg), env)
        .args(args)
        .output()
        .expect("run nightshift");
    assert!(
        out.status.success(),
        "nightshift {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}
