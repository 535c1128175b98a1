//! Opening a job: the run's state loaded from its checkpoint and log, the run begun on its
//! first job (its start and prompt logged), and a resume job's reason delivered once.
//!
//! What it guarantees: a job works on the state its run's log holds, never on a guess; a
//! run's first events are `run_started` then its prompt, whichever job writes them; a resume
//! job's reminder is appended at most once per job ([`reminder_for`] decides, from the job
//! and the state alone) and never between a tool call and its result — interrupted calls
//! are recovered first.

use nightshift_llm::Message;
use nightshift_store::{JobKind, LeasedJob, ResumeReason, Run, RunEnd, Store};
use nightshift_worker::JobOutcome;

use super::{AgentRuntime, Session, Stop, ToolsEnd};
use crate::checkpoint;
use crate::events::RunEvent;
use crate::ports::{PrepareError, RunStart};
use crate::state::RunState;
use crate::wakeup;

/// The reminder a resume job should append now, if any: only a resume job, only for a run
/// already begun and not ended, only once per job.
pub(super) fn reminder_for(
    kind: JobKind,
    job_id: i64,
    payload: &str,
    state: &RunState,
    now: i64,
) -> Option<String> {
    let due = kind == JobKind::Resume
        && state.through_seq > 0
        && state.ending.is_none()
        && state.last_resumed_job != Some(job_id)
        && !state.taken_messages.contains(&job_id);
    if due {
        resume_reminder(payload, state, now)
    } else {
        None
    }
}

/// The text a message reaches the model as: the message, and when it cut a wakeup short
/// (`wakeup`, the one the run had set), which one.
pub(super) fn message_text(text: String, wakeup: Option<&wakeup::ArmedWakeup>) -> String {
    match wakeup {
        Some(w) => format!(
            "{text}\n\n[This message woke you early from a wakeup due at {}: {}]",
            wakeup::rfc3339(w.due_at),
            w.reason
        ),
        None => text,
    }
}

/// What the model is told when a resume job delivers its reason, if anything.
fn resume_reminder(payload: &str, state: &RunState, now: i64) -> Option<String> {
    match (ResumeReason::from_payload(payload), &state.wakeup) {
        (Some(ResumeReason::Message { text }), w) => Some(message_text(text, w.as_ref())),
        (Some(ResumeReason::Task { .. }), Some(w)) => Some(format!(
            "[A background task ended before your wakeup due at {} ({}); you were woken early.]",
            wakeup::rfc3339(w.due_at),
            w.reason
        )),
        // The task's ending itself is reported before the next model call.
        (Some(ResumeReason::Task { .. }), None) => None,
        (_, Some(w)) => Some(wakeup::reminder(w, now)),
        (_, None) => None,
    }
}

/// Loads the run: the newest checkpoint, then every event after it.
pub(super) async fn load_state(store: &Store, run_id: &str) -> Result<RunState, Stop> {
    // Stored content that does not read back (a damaged blob or checkpoint) fails the run
    // rather than retrying it in a crash loop; the store's message names the run.
    let unreadable = |e: nightshift_store::Error| match e {
        nightshift_store::Error::Corrupt(m) => Stop::Corrupt(m),
        e => Stop::Store(e),
    };
    let newest = store.latest_checkpoint(run_id).await.map_err(unreadable)?;
    let mut state = match newest {
        Some(cp) => checkpoint::decode(&cp.document)
            .map_err(|e| Stop::Corrupt(format!("run {run_id}: {e}")))?,
        None => RunState::default(),
    };
    let events = store
        .events(run_id, state.through_seq)
        .await
        .map_err(unreadable)?;
    for stored in events {
        let event = RunEvent::parse(&stored.event_type, &stored.payload)
            .map_err(|e| Stop::Corrupt(format!("run {run_id}, event {}: {e}", stored.seq)))?;
        state
            .apply(stored.seq, &event)
            .map_err(|e| Stop::Corrupt(format!("run {run_id}: the event log disagrees: {e}")))?;
    }
    Ok(state)
}

impl Session<'_> {
    /// On a run's first job, logs its start and its prompt (a resume job of a run that never
    /// began takes the run's input). A run whose prompt is empty ends failed, saying so;
    /// that outcome is returned.
    pub(super) async fn begin(&mut self, run: &Run) -> Result<Option<JobOutcome>, Stop> {
        if self
            .state
            .forked_at
            .is_some_and(|at| at == self.state.through_seq)
        {
            // A fork's first job: its own history is its `forked` event alone.
            tracing::info!(
                job_kind = self.ctx.lease.job().kind.as_str(),
                "fork started"
            );
            nightshift_telemetry::run_started(&self.agent.config.name);
            return Ok(None);
        }
        if self.state.through_seq > 0 {
            if self.state.agent_hash.as_deref() != Some(self.agent.hash.as_str()) {
                tracing::warn!(
                    run_id = %self.run_id,
                    agent = %self.agent.config.name,
                    "the agent's definition changed since this run started; resuming with the new one"
                );
            }
            tracing::info!(
                job_kind = self.ctx.lease.job().kind.as_str(),
                turns = self.state.turns,
                "run resumed"
            );
            return Ok(None);
        }
        tracing::info!(job_kind = self.ctx.lease.job().kind.as_str(), "run started");
        self.log(RunEvent::RunStarted {
            agent: self.agent.config.name.clone(),
            agent_hash: self.agent.hash.clone(),
        })
        .await?;
        nightshift_telemetry::run_started(&self.agent.config.name);
        let job = self.ctx.lease.job();
        let prompt = match job.kind {
            JobKind::Start => job.payload.clone(),
            JobKind::Resume => run.input.clone(),
        };
        let empty = prompt.trim().is_empty();
        self.log(RunEvent::UserMessage {
            message: Message::user_text(prompt),
        })
        .await?;
        if !empty {
            return Ok(None);
        }
        // The intake refuses these; a run enqueued around it fails saying so.
        self.finish(RunEnd::Failed {
            error: "the run's prompt is empty: there is nothing to ask the model; enqueue it \
                    again with a prompt"
                .into(),
        })
        .await
        .map(Some)
    }
}

impl AgentRuntime {
    /// Has the tool box prepare the run for this job (see [`ToolBox::prepare`]): a fatal
    /// failure ends the run failed with its message, a transient one has the job tried again.
    /// A cancelled job skips it (the loop ends the run).
    pub(super) async fn prepare(
        &self,
        s: &mut Session<'_>,
        notifies: bool,
    ) -> Result<Option<JobOutcome>, Stop> {
        // A cancelled job leaves it to the loop; a run whose log says it ended (its job died
        // before the ack) needs nothing.
        if s.ctx.cancel.is_cancelled() || s.state.ending.is_some() {
            return Ok(None);
        }
        let start = RunStart {
            run_id: &s.run_id,
            context: s.context.as_ref(),
            workspace_commit: s.state.workspace_commit.as_deref(),
            store: s.ctx.lease.store(),
            notifies,
        };
        match self.tools.prepare(s.agent, start, &s.ctx.cancel).await {
            Ok(Some(w)) if s.state.workspace_commit.is_none() => {
                tracing::info!(repo = %w.repo, commit = %w.commit, "workspace prepared");
                s.log(RunEvent::WorkspacePrepared {
                    repo: w.repo,
                    git_ref: w.git_ref,
                    commit: w.commit,
                    setup: w.setup,
                })
                .await?;
                Ok(None)
            }
            Ok(_) => Ok(None),
            // Cancelled (or superseded) while it was being prepared: the run ends so.
            Err(_) if s.ctx.cancel.is_cancelled() => s.finish(RunEnd::Cancelled).await.map(Some),
            Err(PrepareError::Transient(why)) => {
                tracing::warn!(run_id = %s.run_id, error = %why,
                    "the run could not be prepared; the job is tried again");
                Ok(Some(JobOutcome::retry(format!(
                    "preparing the run failed: {why}"
                ))))
            }
            Err(PrepareError::Fatal(why)) => s
                .finish(RunEnd::Failed {
                    error: format!("preparing the run failed: {why}"),
                })
                .await
                .map(Some),
        }
    }

    /// Delivers a resume job's reminder once (see [`reminder_for`]), recovering the calls a
    /// dead worker left first. Returns the job's outcome when that recovery ended it (the run
    /// was cancelled, or a call awaits approval).
    pub(super) async fn deliver_resume(
        &self,
        s: &mut Session<'_>,
    ) -> Result<Option<JobOutcome>, Stop> {
        let lease: &LeasedJob = &s.ctx.lease;
        let job = lease.job();
        let Some(reminder) = reminder_for(
            job.kind,
            job.id,
            &job.payload,
            &s.state,
            lease.store().now(),
        ) else {
            return Ok(None);
        };
        let job_id = job.id;
        if matches!(
            ResumeReason::from_payload(&job.payload),
            Some(ResumeReason::Message { .. })
        ) {
            // A message is taken now, whatever runs: while calls lack results it follows
            // their results (also after an approval this run still waits for).
            s.log(RunEvent::MessageReceived {
                job_id,
                text: reminder,
            })
            .await?;
            return self.recover_calls(s).await;
        }
        if let Some(outcome) = self.recover_calls(s).await? {
            return Ok(Some(outcome));
        }
        s.log(RunEvent::Resumed { job_id, reminder }).await?;
        Ok(None)
    }

    /// Runs the calls a dead worker left without results, before anything else is told to
    /// the model. Returns the job's outcome when that ended it (the run was cancelled, or a
    /// call awaits approval).
    async fn recover_calls(&self, s: &mut Session<'_>) -> Result<Option<JobOutcome>, Stop> {
        if !s.state.pending.is_empty() {
            // A reminder never lands between a tool call and its result.
            match self.run_tools(s).await? {
                ToolsEnd::Done => {}
                ToolsEnd::Refused => return s.finish(RunEnd::Cancelled).await.map(Some),
                ToolsEnd::AwaitApproval { call_id, until } => {
                    return s.await_approval(call_id, until).await.map(Some);
                }
                ToolsEnd::Unresolved { error } => return Ok(Some(super::unresolved(error))),
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn begun() -> RunState {
        RunState {
            through_seq: 3,
            ..RunState::default()
        }
    }

    fn message(text: &str) -> String {
        ResumeReason::Message { text: text.into() }.to_payload()
    }

    #[test]
    fn a_resume_job_delivers_its_message_once_to_a_begun_unended_run() {
        let state = begun();
        assert_eq!(
            reminder_for(JobKind::Resume, 7, &message("look again"), &state, 0).as_deref(),
            Some("look again")
        );
        let delivered = RunState {
            last_resumed_job: Some(7),
            ..begun()
        };
        assert_eq!(
            reminder_for(JobKind::Resume, 7, &message("look again"), &delivered, 0),
            None,
            "the same job never delivers twice"
        );
        assert_eq!(
            reminder_for(JobKind::Start, 7, &message("x"), &state, 0),
            None
        );
        assert_eq!(
            reminder_for(JobKind::Resume, 7, &message("x"), &RunState::default(), 0),
            None,
            "nothing is delivered before the run has begun (its prompt comes first)"
        );
    }
}
