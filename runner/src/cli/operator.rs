//! The one seam between the commands and where their data lives: [`Operator::Local`] reads
//! and writes the store named by the config; [`Operator::Remote`] goes through a daemon's
//! HTTP API (`--server`) and needs no config file and no database. Both return the same
//! typed rows, so each command's output is written once. Local rows are made by serializing
//! the same store types the API serializes, so the two paths cannot drift apart unnoticed
//! (the suite's `cli_remote` tests compare their output). The rows are typed in `rows`.

use std::time::Duration;

use anyhow::Context;
use nightshift_scheduler::{Intake, RunRequest, StartAt};
use nightshift_store::{CancelOutcome, DeliveryStatus, RunFilter, Store, TaskStatus, Trigger};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::remote::ApiClient;
use nightshift_notify::shown_url;
use nightshift_runner::retention::files::RunFiles;
use nightshift_runner::retention::operator::{PurgeReport, PurgeRequest, purge};

mod rows;
pub use rows::{
    ApprovalRow, AuditRow, EventRow, Fired, NewRunArgs, NotificationRow, QueueView, RunRow,
    RunState, ScheduleRow, Submitted, TaskRow, WakeupRow,
};

/// Where the commands' data comes from.
#[derive(Debug)]
pub enum Operator {
    /// The store the config names, the configured agents' names, and the data directory
    /// (whose files of purged runs `runs purge` removes), and the config.
    Local {
        store: Store,
        /// The config: the agents' definitions and tools, for `runs export`.
        config: Box<nightshift_runner::config::Config>,
        agents: Vec<String>,
        data_dir: std::path::PathBuf,
    },
    /// A daemon's HTTP API.
    Remote(ApiClient),
}

/// How the audit trail names the user of this CLI working on the database directly:
/// `cli:USER` (`$USER`, else `cli:unknown`). Through `--server` the API token names them.
pub(crate) fn cli_actor() -> String {
    let user = std::env::var("USER")
        .ok()
        .filter(|u| !u.trim().is_empty())
        .unwrap_or_else(|| "unknown".into());
    format!("cli:{user}")
}

/// A value of a store type read as the CLI's row type (the same JSON the API sends).
fn row<T: DeserializeOwned>(value: impl Serialize) -> anyhow::Result<T> {
    Ok(serde_json::from_value(serde_json::to_value(value)?)?)
}

/// A query parameter when it is set.
fn param(name: &'static str, value: Option<impl ToString>) -> Option<(&'static str, String)> {
    value.map(|v| (name, v.to_string()))
}

impl Operator {
    /// The time the rows are measured against: the store's clock, or this machine's.
    pub fn now(&self) -> i64 {
        match self {
            Operator::Local { store, .. } => store.now(),
            Operator::Remote(_) => chrono::Utc::now().timestamp_millis(),
        }
    }

    pub async fn submit(&self, args: NewRunArgs) -> anyhow::Result<Submitted> {
        match self {
            Operator::Local { store, agents, .. } => {
                // A run can be enqueued before the daemon first started: bring the schema
                // up first (idempotent, under the migration lock).
                store.migrate().await?;
                let intake = Intake::new(store.clone(), agents.iter().cloned());
                let e = intake
                    .submit(RunRequest {
                        agent: args.agent,
                        prompt: args.prompt,
                        trigger: Trigger::Cli,
                        idempotency_key: args.idempotency_key,
                        lane: args.lane,
                        priority: args.priority,
                        start_at: args
                            .delay_seconds
                            .map_or(StartAt::Now, |s| StartAt::After(Duration::from_secs(s))),
                        max_attempts: args.max_attempts,
                        concurrency_key: None,
                        concurrency_policy: None,
                        trace_parent: None,
                        context: None,
                    })
                    .await?;
                Ok(Submitted {
                    run_id: e.run_id,
                    job_id: e.job_id,
                    duplicate: e.duplicate,
                })
            }
            Operator::Remote(api) => {
                let body = json!({
                    "agent": args.agent,
                    "prompt": args.prompt,
                    "idempotency_key": args.idempotency_key,
                    "lane": args.lane,
                    "priority": args.priority,
                    "delay_seconds": args.delay_seconds,
                    "max_attempts": args.max_attempts,
                });
                api.post("/v1/runs", body).await
            }
        }
    }

    /// The newest runs matching `filter`, at most `limit`.
    pub async fn runs(&self, filter: &RunFilter, limit: i64) -> anyhow::Result<Vec<RunRow>> {
        match self {
            Operator::Local { store, .. } => row(store.runs_page(filter, None, limit).await?.runs),
            Operator::Remote(api) => {
                let query: Vec<(&str, String)> = [
                    param("status", filter.status),
                    param("agent", filter.agent.as_ref()),
                    param("trigger", filter.trigger),
                    param("key", filter.concurrency_key.as_ref()),
                    param("since", filter.since),
                    param("limit", Some(limit)),
                ]
                .into_iter()
                .flatten()
                .collect();
                let page: Value = api.get("/v1/runs", &query).await?;
                Ok(serde_json::from_value(page["runs"].clone())?)
            }
        }
    }

    /// A run, its jobs and its notice deliveries, as `runs show` prints them.
    pub async fn show(&self, id: &str) -> anyhow::Result<Value> {
        let (run, jobs) = match self {
            Operator::Local { store, .. } => {
                let run = store
                    .run(id)
                    .await?
                    .with_context(|| format!("run {id} not found"))?;
                (
                    serde_json::to_value(run)?,
                    serde_json::to_value(store.jobs_of_run(id).await?)?,
                )
            }
            Operator::Remote(api) => {
                let mut run: Value = api.get(&format!("/v1/runs/{id}"), &[]).await?;
                if let Some(fields) = run.as_object_mut() {
                    fields.remove("last_error"); // the jobs say it
                }
                let jobs: Value = api.get(&format!("/v1/runs/{id}/jobs"), &[]).await?;
                (run, jobs["jobs"].clone())
            }
        };
        let notifications: Vec<Value> = self
            .notifications(Some(id), None, 100)
            .await?
            .into_iter()
            .map(|n| {
                json!({
                    "delivery_id": n.delivery_id,
                    "url": n.url,
                    "status": n.status,
                    "attempts": n.attempts,
                    "last_error": n.last_error,
                })
            })
            .collect();
        Ok(json!({ "run": run, "jobs": jobs, "notifications": notifications }))
    }

    pub async fn run_state(&self, id: &str) -> anyhow::Result<RunState> {
        match self {
            Operator::Local { store, .. } => row(store
                .run(id)
                .await?
                .with_context(|| format!("run {id} not found"))?),
            Operator::Remote(api) => api.get(&format!("/v1/runs/{id}"), &[]).await,
        }
    }

    /// The run's events after sequence number `after`.
    pub async fn events(&self, id: &str, after: i64) -> anyhow::Result<Vec<EventRow>> {
        match self {
            Operator::Local { store, .. } => {
                store
                    .run(id)
                    .await?
                    .with_context(|| format!("run {id} not found"))?;
                Ok(store
                    .events(id, after)
                    .await?
                    .into_iter()
                    .map(|e| EventRow {
                        seq: e.seq,
                        created_at: e.created_at,
                        payload: serde_json::from_str(&e.payload)
                            .unwrap_or(Value::String(e.payload)),
                        event_type: e.event_type,
                    })
                    .collect())
            }
            Operator::Remote(api) => {
                let page: Value = api
                    .get(
                        &format!("/v1/runs/{id}/events"),
                        &[("after", after.to_string())],
                    )
                    .await?;
                Ok(serde_json::from_value(page["events"].clone())?)
            }
        }
    }

    pub async fn cancel(&self, id: &str) -> anyhow::Result<CancelOutcome> {
        match self {
            Operator::Local { store, .. } => {
                Ok(store.as_operator(&cli_actor()).cancel_run(id).await?)
            }
            Operator::Remote(api) => {
                let said: Value = api
                    .post(&format!("/v1/runs/{id}/cancel"), json!({}))
                    .await?;
                Ok(if said["status"] == "cancelled" {
                    CancelOutcome::Cancelled
                } else {
                    CancelOutcome::Requested
                })
            }
        }
    }

    pub async fn wake(&self, id: &str) -> anyhow::Result<()> {
        match self {
            Operator::Local { store, .. } => {
                Ok(store.as_operator(&cli_actor()).wake_now(id).await?)
            }
            Operator::Remote(api) => {
                let _: Value = api.post(&format!("/v1/runs/{id}/wake"), json!({})).await?;
                Ok(())
            }
        }
    }

    pub async fn wakeups(&self, limit: i64) -> anyhow::Result<Vec<WakeupRow>> {
        match self {
            Operator::Local { store, .. } => Ok(store
                .pending_wakeups(limit)
                .await?
                .into_iter()
                .map(|w| WakeupRow {
                    reason: w.reason(),
                    run_id: w.run_id,
                    agent: w.agent,
                    due_at: w.due_at,
                })
                .collect()),
            Operator::Remote(api) => {
                let page: Value = api
                    .get("/v1/wakeups", &[("limit", limit.to_string())])
                    .await?;
                Ok(serde_json::from_value(page["wakeups"].clone())?)
            }
        }
    }

    pub async fn approvals(&self) -> anyhow::Result<Vec<ApprovalRow>> {
        match self {
            Operator::Local { store, .. } => row(store.pending_approvals(1000).await?),
            Operator::Remote(api) => {
                let page: Value = api
                    .get("/v1/approvals", &[("limit", "1000".to_string())])
                    .await?;
                Ok(serde_json::from_value(page["approvals"].clone())?)
            }
        }
    }

    /// Operator actions, newest first (of `run` when given), at most `limit`.
    pub async fn audit(&self, run: Option<&str>, limit: i64) -> anyhow::Result<Vec<AuditRow>> {
        match self {
            Operator::Local { store, .. } => row(store.audit_log(run, None, limit).await?),
            Operator::Remote(api) => {
                let mut query = vec![("limit", limit.to_string())];
                query.extend(param("run", run));
                let page: Value = api.get("/v1/audit", &query).await?;
                Ok(serde_json::from_value(page["actions"].clone())?)
            }
        }
    }

    pub async fn decide(
        &self,
        run_id: &str,
        call_id: &str,
        approve: bool,
        reason: Option<String>,
    ) -> anyhow::Result<()> {
        match self {
            Operator::Local { store, .. } => Ok(store
                .as_operator(&cli_actor())
                .decide_approval(run_id, call_id, approve, reason.as_deref())
                .await?),
            Operator::Remote(api) => {
                let decision = if approve { "approve" } else { "deny" };
                let body = json!({ "decision": decision, "reason": reason });
                let _: Value = api
                    .post(&format!("/v1/runs/{run_id}/approvals/{call_id}"), body)
                    .await?;
                Ok(())
            }
        }
    }

    pub async fn queue(&self) -> anyhow::Result<QueueView> {
        match self {
            Operator::Local { store, .. } => {
                let mut view = serde_json::to_value(store.queue_overview().await?)?;
                view["now"] = json!(store.now());
                Ok(serde_json::from_value(view)?)
            }
            Operator::Remote(api) => api.get("/v1/queue", &[]).await,
        }
    }

    pub async fn notifications(
        &self,
        run: Option<&str>,
        status: Option<DeliveryStatus>,
        limit: i64,
    ) -> anyhow::Result<Vec<NotificationRow>> {
        match self {
            Operator::Local { store, .. } => Ok(store
                .notifications(run, status, limit)
                .await?
                .into_iter()
                .map(|n| NotificationRow {
                    url: shown_url(&n.url),
                    delivery_id: n.delivery_id,
                    run_id: n.run_id,
                    status: n.status,
                    attempts: n.attempts,
                    max_attempts: n.max_attempts,
                    last_error: n.last_error,
                })
                .collect()),
            Operator::Remote(api) => {
                let query: Vec<(&str, String)> = [
                    param("run", run),
                    param("status", status),
                    param("limit", Some(limit)),
                ]
                .into_iter()
                .flatten()
                .collect();
                let page: Value = api.get("/v1/notifications", &query).await?;
                Ok(serde_json::from_value(page["notifications"].clone())?)
            }
        }
    }

    pub async fn redeliver(&self, delivery_id: &str) -> anyhow::Result<()> {
        match self {
            Operator::Local { store, .. } => {
                let actor = cli_actor();
                Ok(store.as_operator(&actor).redeliver(delivery_id).await?)
            }
            Operator::Remote(api) => {
                let path = format!("/v1/notifications/{delivery_id}/redeliver");
                let _: Value = api.post(&path, json!({})).await?;
                Ok(())
            }
        }
    }

    /// Background tasks newest first: of one run, or of every run.
    pub async fn tasks(
        &self,
        run: Option<&str>,
        status: Option<TaskStatus>,
        limit: i64,
    ) -> anyhow::Result<Vec<TaskRow>> {
        let mut tasks: Vec<TaskRow> = match (self, run) {
            (Operator::Local { store, .. }, Some(id)) => {
                store
                    .run(id)
                    .await?
                    .with_context(|| format!("run {id} not found"))?;
                let mut tasks: Vec<TaskRow> = row(store.tasks_of_run(id).await?)?;
                tasks.reverse();
                tasks
            }
            (Operator::Local { store, .. }, None) => row(store.list_tasks(status, limit).await?)?,
            (Operator::Remote(api), Some(id)) => {
                let page: Value = api.get(&format!("/v1/runs/{id}/tasks"), &[]).await?;
                let mut tasks: Vec<TaskRow> = serde_json::from_value(page["tasks"].clone())?;
                tasks.reverse();
                tasks
            }
            (Operator::Remote(api), None) => {
                let query: Vec<(&str, String)> =
                    [param("status", status), param("limit", Some(limit))]
                        .into_iter()
                        .flatten()
                        .collect();
                let page: Value = api.get("/v1/tasks", &query).await?;
                serde_json::from_value(page["tasks"].clone())?
            }
        };
        tasks.retain(|t| status.is_none_or(|s| t.status == s));
        tasks.truncate(usize::try_from(limit.max(1)).unwrap_or(50));
        Ok(tasks)
    }

    pub async fn schedules(&self) -> anyhow::Result<Vec<ScheduleRow>> {
        match self {
            Operator::Local { store, .. } => {
                // The schedules table may be newer than the database (idempotent, locked).
                store.migrate().await?;
                let mut rows = Vec::new();
                for r in store.schedules().await? {
                    rows.push(row(nightshift_scheduler::cron::describe(store, r).await?)?);
                }
                Ok(rows)
            }
            Operator::Remote(api) => {
                let page: Value = api.get("/v1/schedules", &[]).await?;
                Ok(serde_json::from_value(page["schedules"].clone())?)
            }
        }
    }

    pub async fn trigger_schedule(&self, name: &str) -> anyhow::Result<Fired> {
        match self {
            Operator::Local { store, agents, .. } => {
                store.migrate().await?;
                let intake = Intake::new(store.clone(), agents.iter().cloned());
                let outcome =
                    nightshift_scheduler::cron::trigger(&intake, name, &cli_actor()).await?;
                row(outcome)
            }
            Operator::Remote(api) => {
                api.post(&format!("/v1/schedules/{name}/trigger"), json!({}))
                    .await
            }
        }
    }
}

impl Operator {
    /// Purges finished runs (or, for a dry run, says what would go): see
    /// `nightshift_runner::retention::operator`.
    pub async fn purge(&self, req: &PurgeRequest) -> anyhow::Result<PurgeReport> {
        match self {
            Operator::Local {
                store, data_dir, ..
            } => {
                let files = RunFiles::new(data_dir);
                Ok(purge(store, &cli_actor(), req, Some(&files)).await?)
            }
            Operator::Remote(api) => Ok(api.post("/v1/runs/purge", json!(req)).await?),
        }
    }
}

impl Operator {
    /// Run `id` as a replay file: recorded here with the config's agent (every string
    /// redacted with the secrets the config names), or by the daemon with its own.
    pub async fn export(&self, id: &str) -> anyhow::Result<nightshift_agent::replay::Recording> {
        match self {
            Operator::Local { store, config, .. } => {
                let secrets = nightshift_runner::redaction::secrets(config);
                Ok(
                    nightshift_runner::replay::export(store, config, secrets.redactor(), id)
                        .await?,
                )
            }
            Operator::Remote(api) => {
                let file: Value = api.get(&format!("/v1/runs/{id}/export"), &[]).await?;
                Ok(nightshift_agent::replay::Recording::parse(
                    &file.to_string(),
                )?)
            }
        }
    }
}
