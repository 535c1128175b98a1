//! The audit trail (`audit_log`, migration 0021): one row per operator action — an approval
//! or denial, a cancel, a wake, a schedule made, changed, deleted or triggered, a redelivery —
//! with who did it (a named API token, a dashboard session's token name, or the CLI's user)
//! and when. Rows are only ever added.
//!
//! A row is written by the action itself, in the action's own transaction
//! ([`Store::as_operator`], `operator.rs`): the action and its record commit together or not
//! at all, so there is never an action without its row nor a row for an action that did not
//! happen. A refused action changes nothing and records nothing. Each committed action is
//! also one log line (`operator action`, with the actor, action, run and detail, and the
//! target as `object`), so the trail is in the logs even where nobody reads the table.

use std::future::Future;

use crate::Result;
use crate::backend::{Backend, Conn};
use crate::clock::Millis;
use crate::store::{Store, dispatch};

/// An action to record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewAudit<'a> {
    /// Who: `token:NAME`, `dashboard:NAME`, `cli:USER`.
    pub actor: &'a str,
    /// What: `approve`, `deny`, `cancel`, `wake`, `message`, `schedule_create`,
    /// `schedule_update`, `schedule_delete`, `schedule_trigger`, `redeliver`.
    pub action: &'a str,
    /// The run it touched, when it touched one.
    pub run_id: Option<&'a str>,
    /// What it acted on: a run id, `RUN/CALL` for an approval, a schedule's name, a delivery
    /// id.
    pub target: &'a str,
    /// What was said with it: a reason, the keys a change set.
    pub detail: Option<&'a str>,
}

/// A recorded action.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
pub struct AuditEntry {
    pub id: i64,
    /// When, epoch milliseconds.
    pub at: Millis,
    #[sqlx(try_from = "crate::text::DbText")]
    pub actor: String,
    pub action: String,
    pub run_id: Option<String>,
    #[sqlx(try_from = "crate::text::DbText")]
    pub target: String,
    #[sqlx(try_from = "crate::text::DbOptText")]
    pub detail: Option<String>,
}

/// The statements of the audit trail (`store/sql/<backend>/audit/`).
pub(crate) trait AuditStatements: Backend {
    /// `audit/insert.sql`.
    fn insert_audit(
        c: &mut Conn<Self>,
        entry: &NewAudit<'_>,
        at: Millis,
    ) -> impl Future<Output = Result<()>> + Send;
    /// `audit/list.sql`.
    fn list_audit(
        c: &mut Conn<Self>,
        run_id: Option<&str>,
        before: i64,
        limit: i64,
    ) -> impl Future<Output = Result<Vec<AuditEntry>>> + Send;
}

/// Implements [`AuditStatements`] for a backend from its SQL directory.
macro_rules! audit_statements {
    ($backend:ty, $dir:literal) => {
        impl $crate::audit::AuditStatements for $backend {
            async fn insert_audit(
                c: &mut $crate::backend::Conn<Self>,
                entry: &$crate::audit::NewAudit<'_>,
                at: i64,
            ) -> $crate::Result<()> {
                sqlx::query($crate::backend::sql!($dir, "audit/insert"))
                    .bind(at)
                    .bind($crate::text::Text(entry.actor))
                    .bind(entry.action)
                    .bind(entry.run_id)
                    .bind($crate::text::Text(entry.target))
                    .bind($crate::text::Text::opt(entry.detail))
                    .execute(c)
                    .await?;
                Ok(())
            }

            async fn list_audit(
                c: &mut $crate::backend::Conn<Self>,
                run_id: Option<&str>,
                before: i64,
                limit: i64,
            ) -> $crate::Result<Vec<$crate::audit::AuditEntry>> {
                Ok(sqlx::query_as($crate::backend::sql!($dir, "audit/list"))
                    .bind(run_id)
                    .bind(before)
                    .bind(limit)
                    .fetch_all(c)
                    .await?)
            }
        }
    };
}
pub(crate) use audit_statements;

async fn list<B: AuditStatements>(
    b: &B,
    run_id: Option<&str>,
    before: i64,
    limit: i64,
) -> Result<Vec<AuditEntry>> {
    B::list_audit(&mut *b.reader().await?, run_id, before, limit).await
}

/// Stores `audit` (when there is one) in `tx`, at `at`: called by an action just before it
/// commits, only when the action took effect, so that the two commit together.
pub(crate) async fn record_in<B: AuditStatements>(
    tx: &mut Conn<B>,
    audit: Option<&NewAudit<'_>>,
    at: Millis,
) -> Result<()> {
    match audit {
        Some(entry) => B::insert_audit(tx, entry, at).await,
        None => Ok(()),
    }
}

/// Writes the `operator action` log line of a committed action.
pub(crate) fn log_action(entry: &NewAudit<'_>) {
    tracing::info!(
        actor = entry.actor,
        action = entry.action,
        object = entry.target,
        run_id = entry.run_id,
        detail = entry.detail,
        "operator action"
    );
}

impl Store {
    /// Recorded actions, newest first: of `run_id` when given, else all; with ids below
    /// `before` (a page's last id; `None` for the newest); at most `limit` (1-1000).
    pub async fn audit_log(
        &self,
        run_id: Option<&str>,
        before: Option<i64>,
        limit: i64,
    ) -> Result<Vec<AuditEntry>> {
        let before = before.unwrap_or(i64::MAX);
        let limit = limit.clamp(1, 1000);
        dispatch!(self, b => list(b, run_id, before, limit))
    }
}
