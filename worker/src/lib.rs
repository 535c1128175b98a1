//! # nightshift-worker
//!
//! The worker pool: it leases jobs from the store and runs a [`Handler`] on each.
//!
//! What it guarantees:
//! - At most `slots` jobs run at once, and it claims only for free slots; slots reserved for
//!   a lane are never taken by other lanes (so interactive work never waits behind a batch
//!   burst).
//! - Every running job's lease is extended every `heartbeat_ms`; its [`CancellationToken`]
//!   fires within one heartbeat of a cancel request or a lost lease.
//! - The handler's [`JobOutcome`] is written under the job's lease (ack, retry with backoff,
//!   defer without spending an attempt, park, fail); a stale worker's outcome is dropped,
//!   never written.
//! - Ends of jobs that finish close together are written in one transaction, together with
//!   the claims that refill their slots (group commit, `Store::settle`); each end is still
//!   fenced by its own lease and counted on its own, and a slot is reused only once the end
//!   that freed it is durable. Nothing waits for a batch to fill.
//! - On shutdown it stops claiming, lets running jobs finish until the grace period ends,
//!   then releases their leases so another worker takes them at once.
//!
//! How it fails: store errors while claiming are logged and retried after the poll interval;
//! a panicking handler leaves its lease to expire, and the job is retried elsewhere.
//!
//! [`CancellationToken`]: tokio_util::sync::CancellationToken

pub mod config;
pub mod handler;
mod job;
mod plan;
pub mod pool;
pub mod signals;
pub mod slots;

pub use config::{ConfigError, PoolConfig};
pub use handler::{CancelReason, Handler, JobContext, JobOutcome};
pub use job::{Finished, apply_outcome};
pub use pool::{Pool, PoolReport, hostname};
pub use signals::shutdown_on_signals;
