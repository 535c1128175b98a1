//! # nightshift-agent
//!
//! The agent runtime: it turns a leased job into a run of the agent loop — model call, tool
//! calls, repeat — and makes that loop durable.
//!
//! What it guarantees:
//! - **Every step is logged before it matters.** Messages, tool intents (`tool_started`,
//!   committed before the tool runs) and results are events appended under the job's lease;
//!   a worker that lost its lease writes nothing more.
//! - **A crash loses nothing and runs no side effect twice.** Resume folds the newest
//!   checkpoint and the events after it; a call that started without a result is run again
//!   when read-only or idempotent (with the same idempotency key) and reported to the model as
//!   "interrupted, outcome unknown" when it has side effects.
//! - **Resume is invisible to the model.** The next step and the request bytes are a function
//!   of the logged events only, so they equal those of an uninterrupted run.
//! - **Budgets hold across crashes.** Turns, tokens, cost and wall-clock time are counted
//!   from the log and the run row, never from process memory.
//!
//! - **Whatever the model sends, the loop holds.** Tool calls get run-unique ids before a
//!   reply is logged ([`calls`]); every call is answered exactly once; inputs are checked
//!   against the tool's schema before anything runs; every request is normalised and checked
//!   against the rules providers enforce (`nightshift_llm::conversation`); a job that takes
//!   many steps without a model call is stopped.
//!
//! How it fails: a run whose log or checkpoint cannot be read fails with an error naming
//! the run (no crash loop); an unreachable model makes the run wait (no slot, no attempt
//! spent) up to the agent's `outage_limit_seconds`, then fail with the provider's real
//! error; other model errors fail the run with the provider's message.

pub mod approval;
pub mod calls;
pub mod checkpoint;
pub mod config;
pub mod events;
pub mod fork;
pub mod github;
pub mod notify;
pub mod ports;
pub mod pricing;
pub mod replay;
pub mod runtime;
pub mod skills;
pub mod state;
pub mod task_keeper;
pub mod tasks;
pub mod wakeup;
pub mod workspace;

pub use config::{
    AgentConfig, AgentDef, AgentSandbox, Budgets, ConfigError, ContextPolicy, SandboxNetwork,
};
pub use events::{EndStatus, EventError, LeftOutTool, RunEvent};
pub use fork::{ForkError, ForkPlan, ForkRequest};
pub use github::AgentGithub;
pub use nightshift_tools::{ToolClass, ToolOutput};
pub use notify::NotifyTarget;
pub use ports::{
    McpListing, ModelFailure, ModelGateway, PrepareError, PreparedWorkspace, RunStart, ToolBox,
    ToolCall,
};
pub use pricing::{ModelPrices, PriceTable, Pricing};
pub use runtime::{AgentRuntime, Step, next_step, run_ended_by_store};
pub use state::{RunState, StateError};
pub use wakeup::{SCHEDULE_WAKEUP, WakeupPolicy, is_control_tool};
pub use workspace::AgentWorkspace;
