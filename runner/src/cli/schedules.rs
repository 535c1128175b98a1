//! `nightshift schedules …`: the cron schedules and firing one by hand.

use clap::Subcommand;

use super::operator::{Fired, Operator, ScheduleRow};
use super::print_listing;

/// `nightshift schedules …`
#[derive(Debug, Subcommand)]
pub(crate) enum SchedulesCommand {
    /// List the schedules: next fire in the schedule's zone and in UTC, last fire, last run.
    List {
        /// JSON lines, one schedule each, instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Fire a schedule now (its timing is unchanged; the overlap policy applies).
    Trigger {
        /// The schedule's name (see `nightshift schedules list`).
        name: String,
    },
}

pub(crate) async fn schedules(op: &Operator, command: SchedulesCommand) -> anyhow::Result<()> {
    match command {
        SchedulesCommand::List { json } => {
            let rows = op.schedules().await?;
            if rows.is_empty() && !json {
                println!(
                    "no schedules; add [[schedules]] to nightshift.toml or POST /v1/schedules"
                );
                return Ok(());
            }
            print_listing(
                rows,
                json,
                &[
                    "NAME",
                    "SOURCE",
                    "CRON",
                    "ZONE",
                    "NEXT (LOCAL)",
                    "NEXT (UTC)",
                    "LAST FIRE (LOCAL)",
                    "LAST RUN",
                    "STATUS",
                    "FIRED/SKIPPED/MISSED",
                ],
                schedule_cells,
            )?;
        }
        SchedulesCommand::Trigger { name } => match op.trigger_schedule(&name).await? {
            Fired::Enqueued { run_id, duplicate } => {
                println!(
                    "{run_id}\t(enqueued{})",
                    if duplicate { ", already" } else { "" }
                )
            }
            Fired::Skipped { active_run } => println!(
                "skipped: run {active_run} of this schedule is still active (overlap = skip)"
            ),
        },
    }
    Ok(())
}

/// A schedule's cells in the table.
fn schedule_cells(v: ScheduleRow) -> Vec<String> {
    let next_local = match (v.next_fire_local, v.enabled) {
        (_, false) => "disabled".to_string(),
        (Some(t), true) => t,
        (None, true) => "never".to_string(),
    };
    let dash = |o: Option<String>| o.unwrap_or_else(|| "-".to_string());
    vec![
        v.name,
        v.source,
        v.cron,
        v.timezone,
        next_local,
        dash(v.next_fire_utc),
        dash(v.last_fire_local),
        dash(v.last_run_id),
        v.last_run_status.map_or("-".to_string(), |s| s.to_string()),
        format!("{}/{}/{}", v.fired_count, v.skipped_count, v.missed_count),
    ]
}
