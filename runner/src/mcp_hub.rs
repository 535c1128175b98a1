//! The runs' MCP sessions: one per run and server, started when the run first needs it
//! (its listing, or a call after a restart), started again when it is found closed, and
//! closed when the run ends or has not used it for [`IDLE`].
//!
//! What it guarantees:
//! - **Confined like a command.** A stdio server is started through
//!   [`nightshift_tools::StdioServer`] with the context a call of the run gets: in the run's
//!   workspace, under its sandbox, its process group recorded (a crashed daemon's next start
//!   kills it). An HTTP server is reached only when the daemon's `runtime.http_allowlist`
//!   allows its URL, and a header's secret only when that secret may go to its host — the
//!   rules `http_request` follows; nothing is sent otherwise.
//! - **Never a hung run.** Every start, listing and call is bounded by the server's
//!   timeouts (see [`nightshift_mcp::session`]).
//! - **An outcome not known is never called a failure.** A connection lost during a call is
//!   an unresolved output: the loop keeps a `read_only` or `idempotent` call open and tries
//!   the job again (the server is started again), and tells the model of a `side_effect`
//!   call that its outcome is not known. A server that did not start is unresolved too, and
//!   says the call was not made. A call past its timeout is an error that says it may have
//!   taken effect; the server is started again for the next call.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nightshift_agent::{AgentDef, LeftOutTool, McpListing, PrepareError, RunStart, ToolCall};
use nightshift_mcp::{McpError, McpServerConfig, McpSession, Transport};
use nightshift_tools::{HttpAllowlist, SecretBindings, StdioServer, ToolContext, ToolOutput};
use tokio_util::sync::CancellationToken;

use crate::toolbox::Tools;

/// How long a run's session may go unused before it is closed (a parked run's servers do
/// not wait for it; the next job starts them again).
pub(crate) const IDLE: Duration = Duration::from_secs(300);

/// A live session and, over stdio, the process behind it.
struct Live {
    session: McpSession,
    process: Option<StdioServer>,
    used: Instant,
    /// The definition it was started from (a reload that changes it starts it again).
    config: McpServerConfig,
}

impl Live {
    /// Whether it can take a request (a stdio server that exited cannot).
    fn usable(&mut self) -> bool {
        !self.session.is_closed() && !self.process.as_mut().is_some_and(StdioServer::has_exited)
    }

    /// Why it went away, with what the server last wrote to stderr.
    fn stderr_note(&self) -> String {
        self.process
            .as_ref()
            .map(StdioServer::stderr_tail)
            .filter(|t| !t.is_empty())
            .map(|t| format!(" (its stderr ends: {t})"))
            .unwrap_or_default()
    }
}

/// One run's session with one server, and whether its tools must be listed again: the
/// server said its list changed, or a session was started again — the list may have
/// changed while no session listened. Cleared only once a listing was handed over.
#[derive(Default)]
struct SlotState {
    live: Option<Live>,
    relist: bool,
}

type Slot = Arc<tokio::sync::Mutex<SlotState>>;

/// Every run's sessions, by (run id, server name).
#[derive(Default)]
pub(crate) struct McpHub {
    slots: Mutex<HashMap<(String, String), Slot>>,
    /// Whether the task that closes idle sessions runs (started with the first session).
    reaping: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for McpHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        f.debug_struct("McpHub")
            .field("sessions", &slots.len())
            .finish()
    }
}

impl McpHub {
    /// Starts the task that closes sessions idle for [`IDLE`], once; it ends with the hub.
    fn reap_idle(self: &Arc<Self>) {
        if self.reaping.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let hub = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(IDLE / 5);
            loop {
                tick.tick().await;
                let Some(hub) = hub.upgrade() else {
                    return;
                };
                hub.close_idle().await;
            }
        });
    }

    fn slot(&self, run_id: &str, server: &str) -> Slot {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots
            .entry((run_id.to_string(), server.to_string()))
            .or_default()
            .clone()
    }

    /// The listings due for `run` (see [`nightshift_agent::ToolBox::mcp_listings`]).
    pub(crate) async fn listings(
        self: &Arc<Self>,
        tools: &Tools,
        agent: &AgentDef,
        run: RunStart<'_>,
        listed: &[String],
        cancel: &CancellationToken,
    ) -> Result<Vec<McpListing>, PrepareError> {
        self.reap_idle();
        let mut due = Vec::new();
        for server in &agent.config.mcp {
            let slot = self.slot(run.run_id, &server.name);
            let mut state = slot.lock().await;
            if state
                .live
                .as_ref()
                .is_some_and(|live| live.session.take_tools_changed())
            {
                state.relist = true;
            }
            if listed.contains(&server.name) && !state.relist {
                continue;
            }
            let call = ToolCall {
                run_id: run.run_id,
                call_id: "mcp-listing",
                name: "",
                input: &serde_json::Value::Null,
                idempotency_key: "",
                context: run.context,
                store: run.store,
            };
            let ctx = tools
                .context_for(agent, &call, run.context.cloned(), cancel)
                .map_err(|e| {
                    PrepareError::Transient(format!("the run's workspace is not usable: {e}"))
                })?;
            let live = ensure(&mut state, tools, server, &ctx, cancel)
                .await
                .map_err(|e| PrepareError::Transient(e.to_string()))?;
            let listed_tools = match live.session.list_tools().await {
                Ok(t) => t,
                Err(e) => {
                    let note = live.stderr_note();
                    state.live = None;
                    return Err(PrepareError::Transient(format!("{e}{note}")));
                }
            };
            live.used = Instant::now();
            state.relist = false;
            let catalog = nightshift_mcp::catalog(server, &listed_tools);
            due.push(McpListing {
                server: server.name.clone(),
                tools: catalog.tools.into_iter().map(|t| t.definition).collect(),
                left_out: catalog
                    .left_out
                    .into_iter()
                    .map(|(tool, reason)| LeftOutTool { tool, reason })
                    .collect(),
            });
        }
        Ok(due)
    }

    /// Runs MCP call `call` (`mcp__<server>__<tool>`) on its server.
    pub(crate) async fn call(
        self: &Arc<Self>,
        tools: &Tools,
        agent: &AgentDef,
        call: ToolCall<'_>,
        ctx: &ToolContext,
        cancel: &CancellationToken,
    ) -> ToolOutput {
        let Some((server_name, tool)) = nightshift_mcp::split_name(call.name) else {
            return ToolOutput::error(format!("{} is not an MCP tool's name", call.name));
        };
        let Some(server) = agent.config.mcp.iter().find(|s| s.name == server_name) else {
            return ToolOutput::error(format!(
                "{}: agent {} has no MCP server named {server_name} (any more); call one of \
                 the tools you were given",
                call.name, agent.config.name
            ));
        };
        self.reap_idle();
        let slot = self.slot(call.run_id, server_name);
        let mut state = slot.lock().await;
        let live = match ensure(&mut state, tools, server, ctx, cancel).await {
            Ok(live) => live,
            Err(e) => return ToolOutput::unresolved(format!("{e}; the call was not made")),
        };
        let answered = tokio::select! {
            answered = live.session.call(tool, call.input) => answered,
            () = cancel.cancelled() => Err(McpError::Closed {
                server: server.name.clone(),
                reason: "the job was cancelled during the call".into(),
            }),
        };
        live.used = Instant::now();
        match answered {
            Ok(result) => nightshift_tools::shown_output(
                ctx,
                "mcp_result",
                nightshift_mcp::to_output(&result),
            ),
            Err(e @ McpError::Refused { .. }) => ToolOutput::error(e.to_string()),
            Err(e @ McpError::Timeout { .. }) => {
                let note = live.stderr_note();
                state.live = None; // a hung server is started again for the next call
                ToolOutput::error(format!(
                    "{e}{note}: the call was given up, and the server is started again for \
                     the next call. It may or may not have taken effect: check before calling \
                     it again"
                ))
            }
            Err(e) => {
                let note = live.stderr_note();
                state.live = None;
                ToolOutput::unresolved(format!(
                    "{e}{note}: the call's outcome is not known (it may or may not have taken \
                     effect)"
                ))
            }
        }
    }

    /// Closes every session of run `run_id` (its servers' processes are killed).
    pub(crate) async fn run_ended(&self, run_id: &str) {
        let ended: Vec<Slot> = {
            let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
            let keys: Vec<_> = slots.keys().filter(|(r, _)| r == run_id).cloned().collect();
            keys.iter().filter_map(|k| slots.remove(k)).collect()
        };
        for slot in ended {
            close(slot.lock().await.live.take()).await;
        }
    }

    /// Closes the sessions no run has used for [`IDLE`].
    async fn close_idle(&self) {
        let slots: Vec<((String, String), Slot)> = {
            let slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
            slots.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
        };
        for (key, slot) in slots {
            // A slot in use is not idle.
            let Ok(mut state) = slot.try_lock() else {
                continue;
            };
            if state
                .live
                .as_ref()
                .is_some_and(|l| l.used.elapsed() >= IDLE)
            {
                tracing::debug!(run_id = %key.0, server = %key.1, "closing an idle MCP session");
                close(state.live.take()).await;
            }
        }
        // Empty slots no one holds go (a run that parked here and ended on another daemon).
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots.retain(|_, slot| {
            Arc::strong_count(slot) > 1
                || slot
                    .try_lock()
                    .map_or(true, |s| s.live.is_some() || s.relist)
        });
    }
}

/// Ends a session: the protocol's close, then the process's group killed.
async fn close(live: Option<Live>) {
    if let Some(live) = live {
        live.session.close().await;
        if let Some(process) = live.process {
            process.kill().await;
        }
    }
}

/// The slot's live session, started when there is none, it went away, or the server's
/// definition changed (a reload). A session started marks the server for listing again.
async fn ensure<'g>(
    state: &'g mut SlotState,
    tools: &Tools,
    server: &McpServerConfig,
    ctx: &ToolContext,
    cancel: &CancellationToken,
) -> Result<&'g mut Live, McpError> {
    let guard = &mut state.live;
    if guard
        .as_mut()
        .is_some_and(|l| !l.usable() || l.config != *server)
    {
        let gone = guard.take();
        tracing::info!(run_id = %ctx.run_id(), server = %server.name,
            "the MCP server's session went away or its definition changed; starting it again");
        close(gone).await;
    }
    if guard.is_none() {
        state.relist = true;
        let started = tokio::select! {
            started = start(tools, server, ctx) => started?,
            () = cancel.cancelled() => return Err(McpError::Start {
                server: server.name.clone(),
                reason: "the job was cancelled while it started".into(),
            }),
        };
        *guard = Some(started);
    }
    Ok(guard.as_mut().expect("just set"))
}

/// Starts `server` with `ctx`, the context a call of the run gets (its workspace, sandbox,
/// secrets and allowlist).
async fn start(
    tools: &Tools,
    server: &McpServerConfig,
    ctx: &ToolContext,
) -> Result<Live, McpError> {
    let fail = |reason: String| McpError::Start {
        server: server.name.clone(),
        reason,
    };
    match server.transport {
        Transport::Stdio => {
            let env: Vec<(String, String)> = server
                .env
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let program = server.command.as_deref().unwrap_or_default();
            let mut process = StdioServer::spawn(ctx, program, &server.args, &env)
                .map_err(|e| fail(e.to_string()))?;
            let (read, write) = process
                .take_pipes()
                .ok_or_else(|| fail("its pipes were not open".into()))?;
            match McpSession::over_stdio(server, read, write).await {
                Ok(session) => Ok(Live {
                    session,
                    process: Some(process),
                    used: Instant::now(),
                    config: server.clone(),
                }),
                Err(e) => {
                    let tail = process.stderr_tail();
                    process.kill().await;
                    Err(match e {
                        McpError::Start { server, reason } if !tail.is_empty() => McpError::Start {
                            server,
                            reason: format!("{reason} (its stderr ends: {tail})"),
                        },
                        e => e,
                    })
                }
            }
        }
        Transport::Http | Transport::Sse => {
            let headers = http_headers(ctx, server).map_err(fail)?;
            let client = tools.mcp_http_client().map_err(fail)?;
            let session = McpSession::over_http(server, &headers, client).await?;
            Ok(Live {
                session,
                process: None,
                used: Instant::now(),
                config: server.clone(),
            })
        }
    }
}

/// Whether the daemon may reach HTTP server `server` — the rules `http_request` follows: its
/// `url` on `allowlist`, and each secret in its headers allowed to go to the URL's host by
/// `bindings`. `Err` names the key (`url` or `headers`) and what is wrong. The load checks
/// the config with it, and every start checks again.
pub(crate) fn check_http_target(
    server: &McpServerConfig,
    allowlist: &HttpAllowlist,
    bindings: &SecretBindings,
) -> Result<(), (&'static str, String)> {
    let text = server.url.as_deref().unwrap_or_default();
    let url =
        url::Url::parse(text).map_err(|e| ("url", format!("'{text}' does not parse: {e}")))?;
    if !allowlist.allows(&url) {
        return Err((
            "url",
            format!(
                "{url} is not on runtime.http_allowlist (allowed: {}): the daemon reaches an \
                 HTTP MCP server only where http_request may go; add its host (and port) there",
                allowlist.entries().join(", ")
            ),
        ));
    }
    let default_port = if url.scheme() == "https" { 443 } else { 80 };
    let port = url.port_or_known_default().unwrap_or(default_port);
    bindings
        .check(
            server.headers.values().map(String::as_str),
            url.host_str().unwrap_or_default(),
            port,
            default_port,
        )
        .map_err(|e| ("headers", e.to_string()))
}

/// The headers of an HTTP server with their secrets filled in, once
/// [`check_http_target`] lets it be reached; nothing is sent otherwise.
fn http_headers(
    ctx: &ToolContext,
    server: &McpServerConfig,
) -> Result<Vec<(String, String)>, String> {
    check_http_target(server, ctx.http_allowlist(), ctx.secret_bindings())
        .map_err(|(key, why)| format!("its {key}: {why}; nothing was sent"))?;
    server
        .headers
        .iter()
        .map(|(name, value)| {
            ctx.secrets()
                .substitute(value)
                .map(|v| (name.clone(), v))
                .map_err(|e| format!("header {name}: {e}"))
        })
        .collect()
}
