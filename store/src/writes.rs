//! The store's write seam: every path an enqueue or a webhook delivery can take to the
//! database, in one place, counted as it is taken.
//!
//! Commits wait for the disk, and SQLite commits one transaction at a time, so how a write
//! reaches the database is chosen for throughput; what it writes never depends on the path
//! (the conformance suite runs the same writes down each path and compares the answers).
//!
//! | path ([`WritePath`]) | written by | taken when | why |
//! |---|---|---|---|
//! | `run_statement` | the caller, one statement (`QueuePaths::enqueue_plain`) | a single enqueue that decides nothing (no concurrency key, or policy `queue`) while nothing else is being written | one round trip, no transaction to open |
//! | `run_transaction` | the caller, a transaction of its own | a single enqueue whose policy reads its key's other runs: always on PostgreSQL, on SQLite while nothing else is being written | PostgreSQL runs such transactions side by side; a batch would queue them behind each other |
//! | `many_runs` | the caller, one transaction (one statement when every run decides nothing) | `Store::enqueue_many` (the batch API) | the caller already has the batch |
//! | `delivery_alone` | the caller, a transaction of its own (`intake::take`) | a webhook delivery: always on PostgreSQL, on SQLite while nothing else is being written | a delivery's claim, enqueue and record are several round trips |
//! | `group_runs` | the group writers, one transaction for the batch (`queue::enqueue_runs`) | single enqueues arriving while others are written (SQLite: every kind; PostgreSQL: runs that decide nothing) | one commit for many producers |
//! | `group_lone_delivery` | the group writer, the delivery's own transaction | a batch that is one delivery (SQLite) | its own transaction undoes a refusal |
//! | `group_deliveries_together` | the group writer, three statements for the batch (`webhooks/together.rs`, a [`BatchIntake`](crate::webhooks::together::BatchIntake) only SQLite has) | a batch of deliveries that all start runs deciding nothing, no two the same | three round trips instead of three per delivery |
//! | `group_one_transaction` | the group writer, one transaction, item by item | a batch of deliveries that cannot go together (a resume or a cancel, a start whose policy decides, two copies of one delivery) | one commit, each item as it would be alone |
//! | `group_retried_alone` | the group writer, each item in a transaction of its own | a batch whose transaction failed (one item refused, such as a resume of no run, or a copy that finished first elsewhere) | one item's failure is never another's |
//!
//! Which writer takes a write is decided by [`Group::writer`](crate::group::Group::writer)
//! from whether the group takes that kind of write and whether anything else is being
//! written; [`ForcedWrites`] overrides that choice so that tests take each path on purpose,
//! not only under load (`ForcedWrites::Batches` even gives the batch its shape). On SQLite,
//! deliveries and runs have writers of their own, so a batch holds one kind.

use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};

/// A path a write takes to the database (see the module documentation's table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WritePath {
    RunStatement,
    RunTransaction,
    ManyRuns,
    DeliveryAlone,
    GroupRuns,
    GroupLoneDelivery,
    GroupDeliveriesTogether,
    GroupOneTransaction,
    GroupRetriedAlone,
}

impl WritePath {
    /// Every path, in the table's order.
    pub const ALL: [WritePath; 9] = [
        WritePath::RunStatement,
        WritePath::RunTransaction,
        WritePath::ManyRuns,
        WritePath::DeliveryAlone,
        WritePath::GroupRuns,
        WritePath::GroupLoneDelivery,
        WritePath::GroupDeliveriesTogether,
        WritePath::GroupOneTransaction,
        WritePath::GroupRetriedAlone,
    ];

    /// The path's name, as the table gives it.
    pub fn as_str(self) -> &'static str {
        match self {
            WritePath::RunStatement => "run_statement",
            WritePath::RunTransaction => "run_transaction",
            WritePath::ManyRuns => "many_runs",
            WritePath::DeliveryAlone => "delivery_alone",
            WritePath::GroupRuns => "group_runs",
            WritePath::GroupLoneDelivery => "group_lone_delivery",
            WritePath::GroupDeliveriesTogether => "group_deliveries_together",
            WritePath::GroupOneTransaction => "group_one_transaction",
            WritePath::GroupRetriedAlone => "group_retried_alone",
        }
    }

    fn index(self) -> usize {
        Self::ALL.iter().position(|p| *p == self).unwrap_or(0)
    }
}

/// Which writer takes the writes the group could take: the natural choice, or one forced
/// (for tests that take each path on purpose).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ForcedWrites {
    /// The group when something else is being written, else the caller at once.
    #[default]
    Natural,
    /// Always the caller, alone.
    Alone,
    /// Always the group's writers (batches of one when nothing else waits).
    Grouped,
    /// Always the group's writers, and each batch waits until it holds this many writes
    /// (at most the batch limit): a test hands over exactly the writes it wants in one batch
    /// and so takes `group_deliveries_together`, `group_one_transaction` or
    /// `group_retried_alone` on purpose. Never for a daemon: a batch short of its count
    /// waits for more.
    Batches(usize),
}

/// The seam's state: the forced choice and how often each path was taken.
#[derive(Debug, Default)]
pub(crate) struct WriteSeam {
    forced: AtomicU8,
    /// With [`ForcedWrites::Batches`], the writes each batch waits for.
    batch_of: AtomicUsize,
    taken: [AtomicU64; WritePath::ALL.len()],
}

impl WriteSeam {
    /// Counts one write down `path`.
    pub(crate) fn took(&self, path: WritePath) {
        self.taken[path.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts `n` writes down `path`.
    pub(crate) fn took_n(&self, path: WritePath, n: usize) {
        let n = u64::try_from(n).unwrap_or(u64::MAX);
        self.taken[path.index()].fetch_add(n, Ordering::Relaxed);
    }

    /// How often each path was taken.
    pub(crate) fn taken(&self) -> Vec<(WritePath, u64)> {
        WritePath::ALL
            .iter()
            .map(|p| (*p, self.taken[p.index()].load(Ordering::Relaxed)))
            .collect()
    }

    /// How many writes a batch waits for before it is written: 1 (none) unless forced with
    /// [`ForcedWrites::Batches`].
    pub(crate) fn batch_fill(&self) -> usize {
        match self.forced() {
            ForcedWrites::Batches(n) => n,
            _ => 1,
        }
    }

    pub(crate) fn forced(&self) -> ForcedWrites {
        match self.forced.load(Ordering::Relaxed) {
            1 => ForcedWrites::Alone,
            2 => ForcedWrites::Grouped,
            3 => ForcedWrites::Batches(self.batch_of.load(Ordering::Relaxed)),
            _ => ForcedWrites::Natural,
        }
    }

    pub(crate) fn force(&self, forced: ForcedWrites) {
        let code = match forced {
            ForcedWrites::Natural => 0,
            ForcedWrites::Alone => 1,
            ForcedWrites::Grouped => 2,
            ForcedWrites::Batches(n) => {
                self.batch_of.store(n.max(1), Ordering::Relaxed);
                3
            }
        };
        self.forced.store(code, Ordering::Relaxed);
    }
}

impl crate::Store {
    /// Forces which writer takes the writes the group could take (see [`ForcedWrites`]).
    /// For tests: each path's semantics are checked on purpose, not only under load.
    #[doc(hidden)]
    pub fn force_writes(&self, forced: ForcedWrites) {
        self.inner.writes.force(forced);
    }

    /// How often this store took each write path ([`WritePath`]) since it was opened.
    pub fn write_paths_taken(&self) -> Vec<(WritePath, u64)> {
        self.inner.writes.taken()
    }
}
