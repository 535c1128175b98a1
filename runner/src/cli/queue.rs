//! `nightshift queue`: live jobs per state and lane, how long the oldest due job has
//! waited, and the workers with the age of their last heartbeat.

use super::format;
use super::operator::Operator;

pub(crate) async fn queue(op: &Operator) -> anyhow::Result<()> {
    let view = op.queue().await?;
    let now = view.now;
    if view.by_state_lane.is_empty() {
        println!("no live jobs");
    } else {
        let rows: Vec<Vec<String>> = view
            .by_state_lane
            .iter()
            .map(|c| vec![c.state.to_string(), c.lane.clone(), c.count.to_string()])
            .collect();
        println!("{}", format::table(&["STATE", "LANE", "JOBS"], &rows));
    }
    if let Some(oldest) = view.oldest_queued_at {
        println!("oldest due job waiting since {}", format::ago(now, oldest));
    }
    if view.workers.is_empty() {
        println!("no workers (start one with `nightshift serve`)");
    } else {
        let rows: Vec<Vec<String>> = view
            .workers
            .iter()
            .map(|w| {
                vec![
                    w.id.clone(),
                    w.host.clone(),
                    w.pid.to_string(),
                    format::ago(now, w.started_at),
                    format::ago(now, w.last_heartbeat_at),
                ]
            })
            .collect();
        println!(
            "\n{}",
            format::table(
                &["WORKER", "HOST", "PID", "STARTED", "LAST HEARTBEAT"],
                &rows
            )
        );
    }
    Ok(())
}
