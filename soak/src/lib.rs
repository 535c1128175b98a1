//! The crash soak behind `crash-soak`: real `nightshift serve` daemons SIGKILLed at random
//! while scripted runs call tools of every durability class, then the truth read back from
//! the database and the tools' ledger.
//!
//! What it guarantees to measure, per backend (definitions in [`verdict`]):
//! - runs accepted by the API, terminal at the end, lost (accepted but missing or not
//!   terminal), and the count per status;
//! - executions per side-effect call (max must be 1), calls reported "outcome unknown",
//!   re-runs per class (ledger executions minus distinct calls);
//! - duplicated model turns: a reply of the script logged twice in one run;
//! - for every succeeded run, whether its log holds every model turn and tool call (start
//!   and result) its script asked for;
//! - idempotency keys that changed between re-runs of one call or were shared by two calls,
//!   and successful tool results that no execution produced.
//!
//! It does not see model calls whose reply was never logged (the scripted provider runs inside
//! the daemon); the kill times are reproducible from the seed, what the daemons were doing at
//! those times is not.

pub mod daemon;
pub mod plan;
pub mod run;
pub mod script;
pub mod truth;
pub mod verdict;
