//! The interim job handler of `nightshift serve`: it completes each run with its input as the
//! result and records one `echo` event. It stands in for the agent runtime, which replaces it
//! in the next release; everything around it (queue, leases, heartbeats, retries, drain) is
//! the real machinery.

use nightshift_store::RunEnd;
use nightshift_worker::{Handler, JobContext, Outcome, StopReason};

/// Completes every run with its input.
#[derive(Debug, Clone, Copy, Default)]
pub struct EchoHandler;

impl Handler for EchoHandler {
    async fn handle(&self, ctx: JobContext) -> Outcome {
        if ctx.stop_reason() == Some(StopReason::CancelRequested) {
            return Outcome::Done(RunEnd::Cancelled);
        }
        let payload = ctx.lease.job().payload.clone();
        let event = serde_json::json!({ "text": payload }).to_string();
        if let Err(e) = ctx.lease.append_event("echo", &event).await {
            return Outcome::retry(e.to_string());
        }
        Outcome::succeeded(payload)
    }
}
