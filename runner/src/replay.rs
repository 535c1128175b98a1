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
    #[error("run {0} was purged by retention: its events are gone and there is nothing to replay")]
    Purged(String),
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
    if run.purged_at.is_some() {
        return Err(ExportError::Purged(run_id.to_string()));
    }
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

/// What a replay found, and whether the agent's definition is the one the file was recorded
/// with.
#[derive(Debug, Clone)]
pub struct Report {
    pub replayed: Replayed,
    /// False when the config's definition of the agent hashes differently from the one the
    /// requests were recorded with (a change that may or may not show in the requests).
    pub same_definition: bool,
}

/// Replays `recording` with `config`'s agent and tools: the first divergence, if any.
pub async fn replay(config: &Config, recording: &Recording) -> anyhow::Result<Report> {
    let def = agent_def(config, &recording.agent, "the recording's").map_err(anyhow::Error::msg)?;
    let same_definition = def.hash == recording.agent_hash;
    let tools = Tools::offline(config)?;
    let calls = recording.model_calls.clone();
    let replayed = run_loop(
        def,
        tools,
        &Redactor::default(),
        &recording.input,
        &recording.events,
        Mode::Compare(calls),
    )
    .await
    .context("replay failed")?;
    Ok(Report {
        replayed,
        same_definition,
    })
}

/// Runs the replay machine on a thread of its own, with a runtime of its own and a no-op
/// metrics recorder: a replayed run is not a run of the daemon's, so it counts in none of its
/// metrics (runs started, tool calls). Its log lines carry the span `replay`.
async fn run_loop(
    def: AgentDef,
    tools: Tools,
    redactor: &Redactor,
    input: &str,
    events: &[replay::RecordedEvent],
    mode: Mode,
) -> anyhow::Result<Replayed> {
    use tracing::Instrument;
    let (redactor, input, events) = (redactor.clone(), input.to_string(), events.to_vec());
    let span = tracing::info_span!("replay");
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("replay".into())
        .spawn(move || {
            let _quiet = metrics::set_default_local_recorder(&metrics::NoopRecorder);
            let result = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(anyhow::Error::from)
                .and_then(|rt| {
                    let tools = Arc::new(tools);
                    let replayed = replay::run_loop(def, tools, redactor, &input, &events, mode);
                    Ok(rt.block_on(replayed.instrument(span))?)
                });
            let _ = tx.send(result);
        })
        .context("cannot start the replay's thread")?;
    rx.await.context("the replay's thread stopped")?
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

#[cfg(test)]
mod tests {
    use super::*;
    use nightshift_agent::replay::{CallPurpose, RecordedCall};
    use nightshift_llm::{Message, ModelRequest};

    #[test]
    fn every_string_of_the_file_is_redacted_and_the_file_stays_a_recording() {
        let secret = "s3cr3t-deploy-key-0123456789";
        let request = ModelRequest {
            model: "m".into(),
            system: format!("Deploy with {secret}."),
            messages: vec![Message::user_text(format!("the key is {secret}"))],
            tools: Vec::new(),
            max_tokens: 100,
            stop_sequences: Vec::new(),
            thinking: None,
            effort: None,
        };
        let recording = Recording {
            format: replay::FORMAT.into(),
            version: replay::VERSION,
            exported_by: "test".into(),
            exported_at: 0,
            run_id: "r".into(),
            agent: "a".into(),
            agent_hash: "h".into(),
            run_agent_hash: None,
            input: format!("use {secret}"),
            events: vec![replay::RecordedEvent {
                seq: 1,
                at: 0,
                event: RunEvent::UserMessage {
                    message: Message::user_text(format!("use {secret}")),
                },
            }],
            model_calls: vec![RecordedCall {
                turn: 1,
                purpose: CallPurpose::Turn,
                request,
            }],
            tool_calls: 0,
        };
        let redactor = Redactor::new([("DEPLOY_KEY", secret)]);
        let clean = redacted(recording, &redactor).unwrap();
        let text = clean.to_text();
        assert!(!text.contains(secret), "{text}");
        assert!(
            clean.model_calls[0]
                .request
                .system
                .starts_with("Deploy with ")
        );
        assert_eq!(Recording::parse(&text).unwrap(), clean);
    }
}
