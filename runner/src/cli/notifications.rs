//! `nightshift notifications …`: run notice deliveries, and sending a dead one again.

use clap::Subcommand;

use super::format;
use super::operator::Operator;
use super::{print_listing, status_flag};

/// The most characters of an error the table shows.
const ERROR_CHARS: usize = 60;

/// `nightshift notifications …`
#[derive(Debug, Subcommand)]
pub(crate) enum NotificationsCommand {
    /// Run notice deliveries, newest first: delivery id, run, status, attempts, URL (without
    /// its path and query), last error.
    List {
        /// Only this run's deliveries.
        #[arg(long)]
        run: Option<String>,
        /// Only deliveries in this state (pending, delivered, dead).
        #[arg(long)]
        status: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: i64,
        /// JSON lines, one delivery each, instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Send a dead delivery again: fresh attempts, the same delivery id.
    Redeliver {
        /// The delivery's id (see `nightshift notifications list`).
        delivery_id: String,
    },
}

pub(crate) async fn notifications(
    op: &Operator,
    command: NotificationsCommand,
) -> anyhow::Result<()> {
    match command {
        NotificationsCommand::List {
            run,
            status,
            limit,
            json,
        } => {
            let status = status_flag("--status", status)?;
            print_listing(
                op.notifications(run.as_deref(), status, limit).await?,
                json,
                &["DELIVERY", "RUN", "STATUS", "ATTEMPTS", "URL", "LAST ERROR"],
                |n| {
                    vec![
                        n.delivery_id,
                        n.run_id,
                        n.status.to_string(),
                        format!("{}/{}", n.attempts, n.max_attempts),
                        n.url,
                        n.last_error
                            .map_or("-".to_string(), |e| format::first_line(&e, ERROR_CHARS)),
                    ]
                },
            )?;
        }
        NotificationsCommand::Redeliver { delivery_id } => {
            op.redeliver(&delivery_id).await?;
            println!("{delivery_id}\tqueued again; the notifier sends it with fresh attempts");
        }
    }
    Ok(())
}
