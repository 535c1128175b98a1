//! Cron schedules: a named cron expression in an IANA zone that starts runs of an agent with a
//! prompt rendered for each fire.
//!
//! - [`expr`]: cron expressions and fire times, with the DST rules users expect.
//! - [`spec`]: a schedule as written in config or the API, checked and compiled.
//! - [`due`]: which fires are due when a schedule is taken up, and which are missed (pure).
//! - [`service`]: applying the config file, the API's operations, and firing once.
//! - [`timer`]: the leader-elected loop inside `nightshift serve` that fires due schedules.
//!
//! Each module's docs say what it guarantees.

pub mod due;
pub mod expr;
pub mod service;
pub mod spec;
pub mod timer;

pub use due::{Due, due};
pub use expr::{CronExpr, ExprError};
pub use service::{
    ConfigSync, FireOutcome, ScheduleError, SchedulePatch, ScheduleView, apply_config,
    concurrency_key, create, describe, fire, fire_key, trigger, update,
};
pub use spec::{Missed, Overlap, Schedule, ScheduleSpec, SpecError};
pub use timer::{Fired, LEADER_LEASE, Tick, Timer, TimerConfig};
