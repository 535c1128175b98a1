//! # nightshift-notify
//!
//! What a run's end tells the world outside the daemon, from the store's outbox (the row the
//! transaction that ends a notifying run writes):
//! - **run notices** ([`Notifier`], `notifier.rs`): each one POSTed, signed with HMAC-SHA256,
//!   to every `[[agents.notify]]` URL of the run's agent, at least once, with a stable
//!   delivery id to dedupe on, and retried with capped backoff until delivered or `dead`;
//! - **the check run** an agent keeps on a pull request ([`checks`]): started by the run's
//!   jobs, completed from the outbox whatever ended the run, never made twice by a crash, a
//!   slow answer or a race.
//!
//! How it fails: a store that cannot be reached is logged and retried (the outbox rows and
//! the deliveries' claims are durable, so nothing is lost; a daemon that dies mid-POST leaves
//! a claim that runs out). A receiver or GitHub that refuses is a failed attempt, retried
//! until its `max_attempts`, then the delivery is `dead` with its last error, redacted with
//! every secret the daemon holds. A notify entry whose signing secret is not set refuses to
//! build the notifier ([`NotifierError`]): a notice is never sent unsigned.

pub mod checks;
mod notifier;

pub use notifier::{Notifier, NotifierError, SecretSource, shown_url};
