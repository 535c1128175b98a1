//! `nightshift schedules …`: the cron schedules and firing one by hand.

use clap::Subcommand;

use super::operator::{Fired, Operator};

/// `nightshift schedules …`
#[derive(Debug, Subcommand)]
pub enum SchedulesCommand {
    /// List the schedules: next fire in the schedule's zone and in UTC, last fire, last run.
    List,
    /// Fire a schedule now (its timing is unchanged; the overlap policy applies).
    Trigger {
        /// The schedule's name (see `nightshift schedules list`).
        name: String,
    },
}

pub async fn schedules(op: &Operator, command: SchedulesCommand) -> anyhow::Result<()> {
    match command {
        SchedulesCommand::List => {
            let rows = op.schedules().await?;
            if rows.is_empty() {
                println!(
                    "no schedules; add [[schedules]] to nightshift.toml or POST /v1/schedules"
                );
                return Ok(());
            }
            println!(
                "NAME\tSOURCE\tCRON\tZONE\tNEXT (LOCAL)\tNEXT (UTC)\tLAST FIRE (LOCAL)\tLAST RUN\t\
                 STATUS\tFIRED/SKIPPED/MISSED"
            );
            for v in rows {
                let next_local = match (&v.next_fire_local, v.enabled) {
                    (_, false) => "disabled".to_string(),
                    (Some(t), true) => t.clone(),
                    (None, true) => "never".to_string(),
                };
                println!(
                    "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}/{}/{}",
                    v.name,
                    v.source,
                    v.cron,
                    v.timezone,
                    next_local,
                    v.next_fire_utc.as_deref().unwrap_or("-"),
                    v.last_fire_local.as_deref().unwrap_or("-"),
                    v.last_run_id.as_deref().unwrap_or("-"),
                    v.last_run_status.map_or("-".to_string(), |s| s.to_string()),
                    v.fired_count,
                    v.skipped_count,
                    v.missed_count,
                );
            }
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
