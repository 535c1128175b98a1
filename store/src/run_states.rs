// The run statuses as the store's SQL sees them: each stored name, and whether a run in it
// has ended (never leaves it). The one list the SQL files' `{terminal_run_states}` and
// `{live_run_states}` are rendered from (`store/build.rs`, which `include!`s this file, so it
// holds nothing but the list); `states::tests` ties it to `RunStatus::is_terminal`.

/// (stored name, terminal) for every run status, in the schema's `CHECK` order.
pub const RUN_STATES: &[(&str, bool)] = &[
    ("queued", false),
    ("running", false),
    ("waiting", false),
    ("awaiting_approval", false),
    ("succeeded", true),
    ("failed", true),
    ("cancelled", true),
    ("budget_exhausted", true),
    ("max_rounds", true),
    ("superseded", true),
];
