//! Background commands over a real store on both backends, through the agent runtime with the
//! real tool box and supervisor: a run that ends its turn while its task runs parks holding no
//! worker, is woken when the task ends and hears how it ended in the same conversation; a task
//! whose daemon stopped refreshing it is reported lost, never succeeded; a cancelled run's task
//! is stopped. The task rows themselves (first ending wins, lost after a stale heartbeat, woken
//! runs) are in the store's conformance suite (`store-conformance/src/tasks.rs`).
//!
//! In process: `waiting` and `stopping`; through the real daemon: `daemon`. The runtime and
//! the supervisor they are built on are here.

mod daemon;
mod stopping;
mod waiting;

use std::path::Path;
use std::sync::Arc;

use nightshift_agent::AgentRuntime;
use nightshift_agent::task_keeper::{BackgroundConfig, TaskKeeper, supervisor};
use nightshift_llm::ContentBlock;
use nightshift_runner::config::Config;
use nightshift_runner::toolbox::Tools;
use nightshift_store::{NewTask, Store};
use nightshift_tests::{TestDb, on_both_backends};
use nightshift_tools::TaskSupervisor;
use serde_json::json;

use super::fakes::*;
use daemon::{daemon_killed_task_lost, daemon_sigterm_task_lost, task_wakes_run_in_daemon};
use stopping::{
    cancelled_run_stops_task, interrupted_start_names_task, task_stop_from_another_daemon,
};
use waiting::{run_waits_for_task, task_reported_lost};

on_both_backends! {
    a_run_waits_for_its_background_task_and_hears_how_it_ended => run_waits_for_task;
    a_task_whose_daemon_stopped_is_reported_lost_never_succeeded => task_reported_lost;
    a_cancelled_runs_task_is_stopped => cancelled_run_stops_task;
    task_stop_on_another_daemon_reaches_the_owner => task_stop_from_another_daemon;
    an_interrupted_background_start_names_its_task => interrupted_start_names_task;
}

fn new_task<'a>(id: &'a str, run_id: &'a str, owner: &'a str) -> NewTask<'a> {
    NewTask {
        id,
        run_id,
        call_id: id,
        command: "make",
        owner,
        deadline_at: 10_000_000,
    }
}

/// A runtime with the real tool box (run_command, task_output) under `supervisor`, and the
/// scripted `model`.
fn runtime(dir: &Path, model: Arc<ScriptModel>, tasks: TaskSupervisor) -> Arc<AgentRuntime> {
    // Sandboxed like the daemon's; this test binary is no launcher, the nightshift binary is.
    let text = format!(
        "[runtime]\ndata_dir = {}\n\n[sandbox]\nlauncher = {}\n\n\
         [[agents]]\nname = \"builder\"\nprovider = \"scripted\"\n\
         model = \"scripted-1\"\ntools = [\"run_command\", \"task_output\"]\n",
        json!(dir.join("data").to_str().unwrap()),
        json!(super::process::nightshift_bin().to_str().unwrap())
    );
    let mut config = Config::parse(&text, "test config").unwrap();
    config.base_dir = dir.to_path_buf();
    let agent = config.agents[0].resolve(dir).unwrap();
    let tools = Tools::build(&config).unwrap().with_tasks(tasks);
    Arc::new(AgentRuntime::new([agent], model, Arc::new(tools)))
}

fn background(command: &str) -> ContentBlock {
    ContentBlock::ToolUse {
        id: "bg1".into(),
        name: "run_command".into(),
        input: json!({"command": command, "background": true}),
        unparsed: None,
    }
}

struct Setup {
    h: Harness,
    dir: tempfile::TempDir,
    supervisor: TaskSupervisor,
    keeper: TaskKeeper,
}

async fn setup(db: &TestDb, model: Arc<ScriptModel>, owner: &str) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let (store, clock) = db.manual().await;
    let config = BackgroundConfig::default();
    let supervisor = supervisor(&store, owner, dir.path().join("tasks"), &config);
    let runtime = runtime(dir.path(), model, supervisor.clone());
    let keeper = TaskKeeper::new(store.clone(), owner, supervisor.clone(), &config);
    Setup {
        h: Harness {
            store,
            clock,
            runtime,
        },
        dir,
        supervisor,
        keeper,
    }
}

async fn task_of(store: &Store, run_id: &str) -> nightshift_store::Task {
    store.tasks_of_run(run_id).await.unwrap().remove(0)
}

// ---- through the real daemon ---------------------------------------------------------------

on_both_backends! {
    a_background_task_wakes_its_run_in_the_daemon => task_wakes_run_in_daemon;
    a_daemon_killed_with_a_task_running_reports_it_lost_after_restart => daemon_killed_task_lost;
    a_daemon_stopped_with_sigterm_stops_its_task_and_reports_it_lost => daemon_sigterm_task_lost;
}
