//! The store's conformance suite, as a library: what every backend of `nightshift-store` must
//! do the same, and the harness that gives each test a database of its own.
//!
//! It depends on the store and plain crates only (no runner, scheduler, agent or worker).
//!
//! - [`TestDb`] is one test's database: a temp SQLite file, or a fresh schema on the
//!   PostgreSQL server of `NIGHTSHIFT_TEST_PG_URL` (else a throwaway cluster made with the
//!   machine's `initdb`/`pg_ctl`, see [`pg`]; else the PostgreSQL tests print a loud
//!   `SKIPPED` line and pass). [`on_both_backends!`] runs a test body of one's own on both.

pub mod pg;

mod db;

pub use db::{Backend, TestDb};
