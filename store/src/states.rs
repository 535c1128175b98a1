//! The lifecycles, each one enum whose names are mirrored by a `CHECK` constraint in the
//! schema (`migrations/*/0001_init.sql`) and drawn in `docs/states.md`. Sets of states are
//! named explicitly (`is_terminal`), never derived from declaration order.

/// A name that is none of an enum's names: read from the database, a query string or a
/// config file. Says what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} '{name}'; expected one of: {}", allowed.join(", "))]
pub struct UnknownName {
    /// What the name was meant to be, in words (`run status`).
    pub what: &'static str,
    /// The name given.
    pub name: String,
    /// Every allowed name.
    pub allowed: &'static [&'static str],
}

/// An enum stored and shown by name: `as_str`, `Display`, `FromStr` and `TryFrom<String>`
/// (for sqlx's `try_from`) with [`UnknownName`] as the error, and `ALL` in declaration order.
/// `$what` names it in errors (`"run status"`).
macro_rules! string_enum {
    ($(#[$meta:meta])* $name:ident ($what:literal) { $($(#[$vmeta:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum $name { $($(#[$vmeta])* $variant),+ }

        impl $name {
            /// Every value, in the order of the schema's `CHECK` list.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The name stored in the database and shown to users.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::states::UnknownName;
            fn from_str(s: &str) -> ::std::result::Result<Self, Self::Err> {
                match s {
                    $($text => Ok($name::$variant),)+
                    other => Err($crate::states::UnknownName {
                        what: $what,
                        name: other.to_string(),
                        allowed: &[$($text),+],
                    }),
                }
            }
        }

        impl TryFrom<String> for $name {
            type Error = $crate::states::UnknownName;
            fn try_from(s: String) -> ::std::result::Result<Self, Self::Error> {
                s.parse()
            }
        }
    };
}
pub(crate) use string_enum;

string_enum! {
    /// Where a run is in its lifecycle.
    RunStatus("run status") {
        /// Waiting for a worker to start it.
        Queued => "queued",
        /// A worker holds its job.
        Running => "running",
        /// Parked until a time (a wakeup); holds no worker.
        Waiting => "waiting",
        /// Parked until a person approves a tool call; holds no worker.
        AwaitingApproval => "awaiting_approval",
        /// Finished with a result.
        Succeeded => "succeeded",
        /// Finished with an error (including dead-lettered jobs).
        Failed => "failed",
        /// Stopped on request.
        Cancelled => "cancelled",
        /// Stopped by one of its budgets (tokens, cost, wall-clock time).
        BudgetExhausted => "budget_exhausted",
        /// Stopped at the round cap (model calls per run), its work kept.
        MaxRounds => "max_rounds",
        /// Replaced by a newer run with the same concurrency key.
        Superseded => "superseded",
    }
}

impl RunStatus {
    /// States a run never leaves.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RunStatus::Succeeded
                | RunStatus::Failed
                | RunStatus::Cancelled
                | RunStatus::BudgetExhausted
                | RunStatus::MaxRounds
                | RunStatus::Superseded
        )
    }
}

string_enum! {
    /// Where a job is in its lifecycle.
    JobState("job state") {
        /// Claimable once `run_at` has come (fresh, retrying or released).
        Queued => "queued",
        /// Leased by a worker until `lease_expires_at`.
        Running => "running",
        /// Done: the run finished or moved on.
        Succeeded => "succeeded",
        /// Done: the run parked; a later job resumes it.
        Parked => "parked",
        /// Dead-lettered: failed permanently or ran out of attempts; `last_error` says why.
        Dead => "dead",
        /// Cancelled before or while running.
        Cancelled => "cancelled",
    }
}

impl JobState {
    /// States a job never leaves.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobState::Succeeded | JobState::Parked | JobState::Dead | JobState::Cancelled
        )
    }
}

string_enum! {
    /// Where a background task is (`migrations/*/0007_tasks.sql`).
    TaskStatus("task status") {
        /// Its process runs.
        Running => "running",
        /// Exited with code 0.
        Succeeded => "succeeded",
        /// Exited with another code, or was killed by a signal.
        Failed => "failed",
        /// Ran past its deadline and was killed.
        TimedOut => "timed_out",
        /// Stopped on purpose: `task_stop`, or its run ended.
        Stopped => "stopped",
        /// Its daemon died or shut down before it ended: it may or may not have done its work.
        Lost => "lost",
    }
}

string_enum! {
    /// What a job does when it runs.
    JobKind("job kind") {
        /// Start a run from its prompt.
        Start => "start",
        /// Continue a run's session from its checkpoint.
        Resume => "resume",
    }
}

string_enum! {
    /// What created a run.
    Trigger("trigger") {
        Api => "api",
        Cli => "cli",
        Webhook => "webhook",
        Schedule => "schedule",
        Wakeup => "wakeup",
        Approval => "approval",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_explained() {
        for s in RunStatus::ALL {
            assert_eq!(s.as_str().parse::<RunStatus>().unwrap(), *s);
        }
        for s in JobState::ALL {
            assert_eq!(s.as_str().parse::<JobState>().unwrap(), *s);
        }
        let err = "done".parse::<JobState>().unwrap_err().to_string();
        assert!(
            err.contains("unknown job state 'done'") && err.contains("queued, running"),
            "{err}"
        );
    }

    #[test]
    fn the_state_diagrams_name_every_state() {
        let doc = include_str!("../../docs/states.md");
        let (jobs, runs) = doc.split_once("## Run").expect("a run section");
        let (runs, tasks) = runs.split_once("## Task").expect("a task section");
        for s in TaskStatus::ALL {
            assert!(
                tasks.contains(&format!("| `{s}` |")),
                "task state {s} missing from docs"
            );
        }
        for s in JobState::ALL {
            assert!(
                jobs.contains(&format!("| `{s}` |")),
                "job state {s} missing from docs"
            );
        }
        for s in RunStatus::ALL {
            assert!(
                runs.contains(&format!("| `{s}` |")),
                "run state {s} missing from docs"
            );
        }
    }

    #[test]
    fn schema_check_lists_match_the_enums() {
        for schema in [
            include_str!("../../migrations/sqlite/0001_init.sql"),
            include_str!("../../migrations/postgres/0001_init.sql"),
        ] {
            let flat: String = schema.split_whitespace().collect::<Vec<_>>().join(" ");
            let runs: Vec<String> = RunStatus::ALL.iter().map(|s| format!("'{s}'")).collect();
            let jobs: Vec<String> = JobState::ALL.iter().map(|s| format!("'{s}'")).collect();
            let kinds: Vec<String> = JobKind::ALL.iter().map(|s| format!("'{s}'")).collect();
            let triggers: Vec<String> = Trigger::ALL.iter().map(|s| format!("'{s}'")).collect();
            assert!(flat.contains(&format!("status IN ({})", runs.join(", "))));
            assert!(flat.contains(&format!("status IN ({})", jobs.join(", "))));
            assert!(flat.contains(&format!("kind IN ({})", kinds.join(", "))));
            assert!(flat.contains(&format!("trigger_kind IN ({})", triggers.join(", "))));
        }
        for schema in [
            include_str!("../../migrations/sqlite/0007_tasks.sql"),
            include_str!("../../migrations/postgres/0007_tasks.sql"),
        ] {
            let flat: String = schema.split_whitespace().collect::<Vec<_>>().join(" ");
            let tasks: Vec<String> = TaskStatus::ALL.iter().map(|s| format!("'{s}'")).collect();
            assert!(flat.contains(&format!("status IN ({})", tasks.join(", "))));
        }
    }

    #[test]
    fn the_sql_files_run_state_lists_are_the_enums() {
        let listed: Vec<(&str, bool)> = RunStatus::ALL
            .iter()
            .map(|s| (s.as_str(), s.is_terminal()))
            .collect();
        assert_eq!(
            listed,
            crate::run_states::RUN_STATES,
            "store/src/run_states.rs (what the SQL files are rendered with) lists every \
             RunStatus, in order, terminal exactly when is_terminal says so"
        );
        // Rendered: a statement that names the ended runs names all of them.
        let set_status = crate::statement("sqlite", "set_run_status").unwrap();
        let terminal: Vec<String> = RunStatus::ALL
            .iter()
            .filter(|s| s.is_terminal())
            .map(|s| format!("'{s}'"))
            .collect();
        assert!(
            set_status.contains(&format!("NOT IN ({})", terminal.join(", "))),
            "{set_status}"
        );
        for backend in ["sqlite", "postgres"] {
            for name in ["set_run_status", "supersede_run", "active_runs_of_key"] {
                let text = crate::statement(backend, name).unwrap();
                assert!(!text.contains("_run_states}"), "{backend}/{name}: {text}");
            }
        }
        assert_eq!(crate::statement("sqlite", "no_such_statement"), None);
    }
}
