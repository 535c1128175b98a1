//! [`QueueStatements`](super::QueueStatements) for a backend, from its SQL directory: the
//! binding of each statement's parameters and the reading of its rows, which both backends do
//! the same way (text goes through [`Text`](crate::text::Text), which escapes NUL bytes on
//! PostgreSQL). Nothing here decides anything.

/// Binds an [`EventRow`](super::EventRow) to `$query`, in the order both event statements
/// (`append_event`, `append_event_live`) take it.
macro_rules! bind_event_row {
    ($query:expr, $event:expr) => {
        $query
            .bind($event.job_id)
            .bind($event.token)
            .bind($crate::text::Text($event.event_type))
            .bind($event.blob_id)
            .bind($event.now)
    };
}
pub(crate) use bind_event_row;

/// Implements `QueueStatements` for `$backend` with the statements of `store/sql/$dir/`.
mod lease;
mod reads;
mod runs;

pub(crate) use lease::lease_statements;
pub(crate) use reads::read_statements;
pub(crate) use runs::run_statements;

/// Implements `QueueStatements` for `$backend` with the statements of `store/sql/$dir/`.
macro_rules! queue_statements {
    ($backend:ty, $dir:literal) => {
        impl $crate::queue::QueueStatements for $backend {
            $crate::queue::binds::run_statements!($dir);
            $crate::queue::binds::lease_statements!($dir);
            $crate::queue::binds::read_statements!($dir);
        }
    };
}
pub(crate) use queue_statements;
