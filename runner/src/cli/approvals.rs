//! `nightshift approvals`, `approve` and `deny`: the tool calls waiting for a person; and
//! `nightshift audit`: who decided, cancelled, woke or changed what.

use super::format;
use super::operator::Operator;

pub(crate) async fn list(op: &Operator) -> anyhow::Result<()> {
    let now = op.now();
    let rows = op.approvals().await?;
    if rows.is_empty() {
        println!("no tool calls are waiting for a decision");
        return Ok(());
    }
    let cells: Vec<Vec<String>> = rows
        .into_iter()
        .map(|a| {
            vec![
                a.run_id,
                a.call_id,
                a.tool,
                format::ago(now, a.requested_at),
                format::ago(now, a.expires_at),
                format::first_line(&a.input, 80),
            ]
        })
        .collect();
    println!(
        "{}",
        format::table(
            &["RUN", "CALL", "TOOL", "ASKED", "EXPIRES", "INPUT"],
            &cells
        )
    );
    println!(
        "decide with: nightshift approve RUN CALL   (or: nightshift deny RUN CALL --reason …)"
    );
    Ok(())
}

pub(crate) async fn decide(
    op: &Operator,
    run_id: &str,
    call_id: &str,
    approve: bool,
    reason: Option<String>,
) -> anyhow::Result<()> {
    op.decide(run_id, call_id, approve, reason).await?;
    let verb = if approve { "approved" } else { "denied" };
    println!("{run_id}\t{call_id}\t{verb}; the run resumes as soon as a worker is free");
    Ok(())
}

/// `nightshift audit`: operator actions, newest first.
pub(crate) async fn audit(op: &Operator, run: Option<&str>, limit: i64) -> anyhow::Result<()> {
    let now = op.now();
    let rows = op.audit(run, limit).await?;
    if rows.is_empty() {
        println!("no operator actions recorded");
        return Ok(());
    }
    let cells: Vec<Vec<String>> = rows
        .into_iter()
        .map(|a| {
            vec![
                format::ago(now, a.at),
                a.actor,
                a.action,
                a.target,
                a.run_id.unwrap_or_default(),
                format::first_line(a.detail.as_deref().unwrap_or(""), 60),
            ]
        })
        .collect();
    println!(
        "{}",
        format::table(
            &["WHEN", "WHO", "ACTION", "TARGET", "RUN", "DETAIL"],
            &cells
        )
    );
    Ok(())
}
