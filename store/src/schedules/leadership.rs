//! The timer's leadership: among the daemons sharing a store, one holds the lease named
//! for the timer and fires schedules; a standby takes it once it expires or is given up. The
//! lease's epoch grows whenever it changes hands, and an advance carries a [`LeaderFence`]
//! checked in the same statement, so a leader that lost its lease advances nothing.

use std::time::Duration;

use super::ScheduleStatements;
use crate::Result;
use crate::clock::{Millis, duration_millis};
use crate::store::{Store, dispatch};

/// The leader writing an advance, checked in the same statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderFence {
    pub lease: String,
    pub holder: String,
    pub epoch: i64,
}

/// A leader lease, as stored.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
pub struct LeaderLease {
    pub name: String,
    pub holder: String,
    /// Grows whenever the lease changes hands.
    pub epoch: i64,
    pub acquired_at: Millis,
    pub expires_at: Millis,
}

async fn acquire<B: ScheduleStatements>(
    b: &B,
    name: &str,
    holder: &str,
    ttl_ms: i64,
    now: Millis,
) -> Result<Option<LeaderLease>> {
    B::acquire_leader(&mut *b.writer().await?, name, holder, ttl_ms, now).await
}

async fn leader<B: ScheduleStatements>(b: &B, name: &str) -> Result<Option<LeaderLease>> {
    B::get_leader(&mut *b.writer().await?, name).await
}

async fn release<B: ScheduleStatements>(
    b: &B,
    name: &str,
    holder: &str,
    now: Millis,
) -> Result<bool> {
    B::release_leader(&mut *b.writer().await?, name, holder, now).await
}

impl Store {
    /// Takes or renews lease `name` for `holder` for `ttl` from now; `None` while another
    /// holder's lease is live.
    pub async fn acquire_leadership(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<LeaderLease>> {
        let now = self.schedule_now().await?;
        let ttl = duration_millis(ttl).max(1);
        dispatch!(self, b => acquire(b, name, holder, ttl, now))
    }

    /// Lease `name` as stored (it may have expired).
    pub async fn leader(&self, name: &str) -> Result<Option<LeaderLease>> {
        dispatch!(self, b => leader(b, name))
    }

    /// Gives up lease `name` if `holder` holds it, so a standby can take it at once.
    pub async fn release_leadership(&self, name: &str, holder: &str) -> Result<bool> {
        let now = self.schedule_now().await?;
        dispatch!(self, b => release(b, name, holder, now))
    }
}
