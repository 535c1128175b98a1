//! A run exported as a replay file and replayed as a test (`nightshift runs export`,
//! `GET /v1/runs/{id}/export`, `nightshift replay`), over the agent crate's replay machine
//! ([`nightshift_agent::replay`]).
//!
//! What it guarantees:
//! - **Only what the store holds leaves it.** The file is the run's stored events (redacted
//!   before they were stored) and the requests the loop builds from them with the
//!   exporter's config; every string of it goes through the daemon's redactor once more, so
//!   no secret the daemon holds (a system prompt that names one, say) is written.
//! - **Replay is offline.** It needs a config for the agent's definition and tools, never a
//!   database (a scratch SQLite store in a temporary directory is made and removed), never
//!   the network, and runs no tool.
//! - **Bad input changes nothing.** A run not found or not ended, an agent not in the config,
//!   a file of another format or version: each is an error saying what to do.

use std::sync::Arc;

use anyhow::Context;
use nightshift_agent::replay::{self, Mode, Recording, Replayed};
use nightshift_agent::{AgentDef, RunEvent};
use nightshift_store::Store;
use nightshift_tools::Redactor;

use crate::config::Config;
use crate::toolbox::Tools;

/// Why a run was not exported.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("run {0} not found")]
    NotFound(String),
    #[error("run {run_id} is {status}; a run can be exported once it has ended")]
    NotEnded { run_id: String, status: String },
    #[error("{0}")]
    Config(String),
    #[error(
        "run {run_id} cannot be exported: its recording does not carry its loop through with \
         this config ({why}); export it where the config it ran with is"
    )]
    Diverged { run_id: String, why: String },
    #[error(transparent)]
    Store(#[from] nightshift_store::Error),
    #[error("run {run_id}: {why}")]
    Unreadable { run_id: String, why: String },
}

/// The definition of agent `name` in `config`, or an error naming the configured ones.
pub fn agent_def(config: &Config, name: &str, whose: &str) -> Result<AgentDef, String> {
    let Some(agent) = config.agents.iter().find(|a| a.name == name) else {
        let names: Vec<&str> = config.agents.iter().map(|a| a.name.as_str()).collect();
        return Err(format!(
            "{whose} agent '{name}' is not in the config (configured agents: {}); pass --config \
             with a config that defines it",
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        ));
    };
    let prices = config.price_table().map_err(|e| e.to_string())?;
    agent
        .resolve_with(&config.base_dir, &prices)
        .map_err(|e| format!("invalid config: {e}"))
}

/// Records run `run_id` of `store` for replay with `config`'s agent and tools; every string
/// of the file is redacted with `redactor`.
pub async fn export(
    store: &Store,
    config: &Config,
    redactor: &Redactor,
    run_id: &str,
) -> Result<Recording, ExportError> {
    let run = store
        .run(run_id)
        .await?
        .ok_or_else(|| ExportError::NotFound(run_id.to_string()))?;
    if !run.status.is_terminal() {
        return Err(ExportError::NotEnded {
            run_id: run_id.to_string(),
            status: run.status.as_str().to_string(),
        });
    }
    let def = agent_def(config, &run.agent, "the run's").map_err(ExportError::Config)?;
    let tools = Tools::offline(config).map_err(|e| ExportError::Config(format!("{e:#}")))?;
    let mut events = Vec::new();
    for stored in store.events(run_id, 0).await? {
        let event = RunEvent::parse(&stored.event_type, &stored.payload).map_err(|e| {
            ExportError::Unreadable {
                run_id: run_id.to_string(),
                why: format!("event {}: {e}", stored.seq),
            }
        })?;
        events.push(replay::RecordedEvent {
            seq: stored.seq,
            at: stored.created_at,
            event,
        });
    }
    let input = prompt(&events).unwrap_or_else(|| run.input.clone());
    let replayed = run_loop(def.clone(), tools, redactor, &input, &events, Mode::Record)
        .await
        .map_err(|e| ExportError::Unreadable {
            run_id: run_id.to_string(),
            why: format!("{e:#}"),
        })?;
    if let Some(d) = replayed
        .divergence
        .as_ref()
        .filter(|d| !matches!(d.kind, replay::DivergenceKind::Unreplayable { .. }))
    {
        return Err(ExportError::Diverged {
            run_id: run_id.to_string(),
            why: d.to_string(),
        });
    }
    let run_agent_hash = events.iter().find_map(|e| match &e.event {
        RunEvent::RunStarted { agent_hash, .. } => Some(agent_hash.clone()),
        _ => None,
    });
    let recording = Recording {
        format: replay::FORMAT.into(),
        version: replay::VERSION,
        exported_by: env!("CARGO_PKG_VERSION").into(),
        exported_at: chrono::Utc::now().timestamp_millis(),
        run_id: run_id.to_string(),
        agent: run.agent.clone(),
        agent_hash: def.hash.clone(),
        run_agent_hash,
        input,
        events,
        model_calls: replayed.model_calls,
        tool_calls: replayed.tool_calls,
    };
    redacted(recording, redactor).map_err(|why| ExportError::Unreadable {
        run_id: run_id.to_string(),
        why,
    })
}

/// Replays `recording` with `config`'s agent and tools: the first divergence, if any.
pub async fn replay(config: &Config, recording: &Recording) -> anyhow::Result<Replayed> {
    let def = agent_def(config, &recording.agent, "the recording's").map_err(anyhow::Error::msg)?;
    let tools = Tools::offline(config)?;
    let calls = recording.model_calls.clone();
    run_loop(
        def,
        tools,
        &Redactor::default(),
        &recording.input,
        &recording.events,
        Mode::Compare(calls),
    )
    .await
    .context("replay failed")
}

async fn run_loop(
    def: AgentDef,
    tools: Tools,
    redactor: &Redactor,
    input: &str,
    events: &[replay::RecordedEvent],
    mode: Mode,
) -> anyhow::Result<Replayed> {
    // The loop's own lines (`run started`, `run ended`) are the replay's, not a real run's.
    use tracing::Instrument;
    let replayed = replay::run_loop(def, Arc::new(tools), redactor.clone(), input, events, mode)
        .instrument(tracing::info_span!("replay"))
        .await?;
    Ok(replayed)
}

/// The run's prompt: its first user message.
fn prompt(events: &[replay::RecordedEvent]) -> Option<String> {
    events.iter().find_map(|e| match &e.event {
        RunEvent::UserMessage { message } => Some(message.text()),
        _ => None,
    })
}

/// `recording` with every string redacted by `redactor`.
fn redacted(recording: Recording, redactor: &Redactor) -> Result<Recording, String> {
    fn walk(value: &mut serde_json::Value, redactor: &Redactor) {
        match value {
            serde_json::Value::String(s) => {
                let r = redactor.redact(s);
                if r != *s {
                    *s = r;
                }
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(|v| walk(v, redactor)),
            serde_json::Value::Object(map) => map.values_mut().for_each(|v| walk(v, redactor)),
            _ => {}
        }
    }
    let mut value = serde_json::to_value(&recording).map_err(|e| e.to_string())?;
    walk(&mut value, redactor);
    nightshift_llm::json::from_value(value).map_err(|e| e.to_string())
}
