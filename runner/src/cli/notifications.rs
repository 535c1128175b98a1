//! `nightshift notifications …`: run notice deliveries, and sending a dead one again.

use clap::Subcommand;

use super::operator::Operator;
use super::status_flag;

/// `nightshift notifications …`
#[derive(Debug, Subcommand)]
pub enum NotificationsCommand {
    /// Run notice deliveries, newest first: delivery id, run, status, attempts, last error,
    /// URL (without its path and query).
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
    },
    /// Send a dead delivery again: fresh attempts, the same delivery id.
    Redeliver {
        /// The delivery's id (see `nightshift notifications list`).
        delivery_id: String,
    },
}

pub async fn notifications(op: &Operator, command: NotificationsCommand) -> anyhow::Result<()> {
    match command {
        NotificationsCommand::List { run, status, limit } => {
            let status = status_flag("--status", status)?;
            for n in op.notifications(run.as_deref(), status, limit).await? {
                println!(
                    "{}\t{}\t{}\t{}/{}\t{}\t{}",
                    n.delivery_id,
                    n.run_id,
                    n.status,
                    n.attempts,
                    n.max_attempts,
                    n.last_error.as_deref().unwrap_or("-"),
                    n.url
                );
            }
        }
        NotificationsCommand::Redeliver { delivery_id } => {
            op.redeliver(&delivery_id).await?;
            println!("{delivery_id}\tqueued again; the notifier sends it with fresh attempts");
        }
    }
    Ok(())
}
