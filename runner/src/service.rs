//! The one shape of the daemon's long-running services, so that [`crate::daemon`] only
//! composes them: the worker pool, the background task keeper, the notifier, the HTTP API,
//! the metrics listener, the schedule timer and retention (the purger and the sweep) are each a [`Service`], `run(self, stop)`
//! until `stop` is cancelled, then wound down, returning `Result<Output>`.
//!
//! [`Spawned`] is a service running on a task of its own, with the token that stops it.
//! What it guarantees:
//! - joining it gives the service's own result, or, when its task panicked or was aborted,
//!   an error saying "`NAME` failed" — a service is never lost silently;
//! - one started with [`Spawned::linked`] cancels its token when it returns on its own (an
//!   HTTP server whose listener failed), so it takes down with it everything that token
//!   stops;
//! - [`Spawned::stop_within`] cancels the token and, when the service is still running after
//!   the grace, aborts it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use nightshift_agent::task_keeper::TaskKeeper;
use nightshift_notify::Notifier;
use nightshift_scheduler::cron::Timer;
use nightshift_worker::{Pool, PoolReport};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::api::ApiState;
use crate::reload::LiveRuntime;

/// A long-running part of the daemon.
pub(crate) trait Service: Send + 'static {
    /// What it returns once stopped.
    type Output: Send + 'static;
    /// What an error names it: "`NAME` failed".
    const NAME: &'static str;
    /// Runs until `stop` is cancelled (or it fails, or ends on its own), winds down and
    /// returns.
    fn run(
        self,
        stop: CancellationToken,
    ) -> impl Future<Output = anyhow::Result<Self::Output>> + Send;
}

/// A [`Service`] running on a task of its own.
#[derive(Debug)]
pub(crate) struct Spawned<T> {
    name: &'static str,
    stop: CancellationToken,
    handle: JoinHandle<anyhow::Result<T>>,
}

impl<T: Send + 'static> Spawned<T> {
    /// Runs `service` until `stop` is cancelled.
    pub(crate) fn spawn<S: Service<Output = T>>(service: S, stop: CancellationToken) -> Self {
        let handle = tokio::spawn(service.run(stop.clone()));
        Spawned {
            name: S::NAME,
            stop,
            handle,
        }
    }

    /// Runs `service` until `stop` is cancelled, and cancels `stop` when it returns on its
    /// own: everything else `stop` stops goes down with it.
    pub(crate) fn linked<S: Service<Output = T>>(service: S, stop: CancellationToken) -> Self {
        let run = service.run(stop.clone());
        let ends = stop.clone();
        let handle = tokio::spawn(async move {
            let done = run.await;
            ends.cancel();
            done
        });
        Spawned {
            name: S::NAME,
            stop,
            handle,
        }
    }

    /// Asks the service to stop, without waiting for it.
    pub(crate) fn cancel(&self) {
        self.stop.cancel();
    }

    /// Waits for the service to return (stopped by whoever cancels its token).
    pub(crate) async fn join(self) -> anyhow::Result<T> {
        let name = self.name;
        self.handle
            .await
            .with_context(|| format!("{name} failed"))?
    }

    /// Stops the service and waits for it.
    pub(crate) async fn stop(self) -> anyhow::Result<T> {
        self.cancel();
        self.join().await
    }

    /// Stops the service and waits at most `grace` for it; `None` when it was still running
    /// then, and was aborted.
    pub(crate) async fn stop_within(mut self, grace: Duration) -> Option<anyhow::Result<T>> {
        self.cancel();
        match tokio::time::timeout(grace, &mut self.handle).await {
            Ok(joined) => {
                let name = self.name;
                Some(
                    joined
                        .with_context(|| format!("{name} failed"))
                        .and_then(|done| done),
                )
            }
            Err(_) => {
                self.handle.abort();
                None
            }
        }
    }
}

/// The running notifier, which a reload replaces: the daemon stops whichever runs last.
pub(crate) type NotifierSlot = Arc<Mutex<Option<Spawned<()>>>>;

impl Service for Pool<LiveRuntime> {
    type Output = PoolReport;
    const NAME: &'static str = "the worker pool";

    /// Claims until `stop`, then drains.
    async fn run(self, stop: CancellationToken) -> anyhow::Result<PoolReport> {
        Ok(Pool::run(self, stop).await?)
    }
}

impl Service for TaskKeeper {
    type Output = ();
    const NAME: &'static str = "the background task keeper";

    /// Keeps the task rows true until `stop`, then stops every task (recorded as lost).
    async fn run(self, stop: CancellationToken) -> anyhow::Result<()> {
        TaskKeeper::run(self, stop).await;
        Ok(())
    }
}

impl Service for Notifier {
    type Output = ();
    const NAME: &'static str = "the notifier";

    /// Delivers until `stop`, then makes one last pass.
    async fn run(self, stop: CancellationToken) -> anyhow::Result<()> {
        Notifier::run(self, stop).await;
        Ok(())
    }
}

impl Service for Timer {
    type Output = ();
    const NAME: &'static str = "the schedule timer";

    /// Fires schedules until `stop`, then gives up its lease.
    async fn run(self, stop: CancellationToken) -> anyhow::Result<()> {
        Timer::run(self, stop).await;
        Ok(())
    }
}

impl Service for crate::retention::Retention {
    type Output = ();
    const NAME: &'static str = "retention";

    /// Purges (while leading) and sweeps until `stop`, then gives up the purger's lease.
    async fn run(self, stop: CancellationToken) -> anyhow::Result<()> {
        crate::retention::Retention::run(self, stop).await;
        Ok(())
    }
}

/// The HTTP API on its listener.
pub(crate) struct ApiServer {
    pub(crate) listener: TcpListener,
    pub(crate) state: ApiState,
    pub(crate) data_dir: std::path::PathBuf,
    /// The config as reloads leave it: what exports record with and forks are checked
    /// against.
    pub(crate) live: crate::api::LiveConfig,
}

impl Service for ApiServer {
    type Output = ();
    const NAME: &'static str = "the HTTP server";

    /// Serves until `stop`, answering the requests in flight.
    async fn run(self, stop: CancellationToken) -> anyhow::Result<()> {
        let router =
            crate::api::router_with_data_dir(self.state, Some(self.data_dir), Some(self.live));
        let limits = crate::http_server::HttpLimits::default();
        crate::http_server::serve(self.listener, router, limits, stop)
            .await
            .context("the HTTP server failed")
    }
}

/// `GET /metrics` without the token, on `telemetry.metrics_address`.
pub(crate) struct MetricsServer {
    pub(crate) listener: TcpListener,
    pub(crate) state: ApiState,
}

impl Service for MetricsServer {
    type Output = ();
    // As the API's: the same server, on another listener.
    const NAME: &'static str = "the HTTP server";

    /// Serves until `stop`, answering the requests in flight.
    async fn run(self, stop: CancellationToken) -> anyhow::Result<()> {
        crate::metrics::serve(self.listener, self.state, stop)
            .await
            .context("the HTTP server failed")
    }
}
