//! One connection to an MCP server: the protocol's handshake, its tool list (every page), and
//! calls, each bounded in time.
//!
//! What it guarantees:
//! - **Never a hung run.** Starting (the handshake and the first listing) is bounded by the
//!   server's `startup_timeout_seconds`, each call by its `timeout_seconds`; past either the
//!   answer is [`McpError::Timeout`]. A server that exits or closes its pipe is
//!   [`McpError::Closed`], and [`McpSession::is_closed`] says so, so that the caller starts
//!   it again.
//! - **Bounded lines.** A stdio message over [`MAX_MESSAGE_BYTES`] is dropped by the SDK; the
//!   call it answered then times out with a clear error instead of the daemon buffering it.
//! - **Transport-blind callers.** Over stdio the caller spawns the process (under the run's
//!   sandbox) and hands its pipes here; over streamable HTTP the caller gives the URL and the
//!   headers with their secrets already substituted. Either way the session is the same.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rmcp::model::ClientConfig;
use rmcp::model::{CallToolRequestParams, CallToolResult, Tool};
use rmcp::service::NotificationContext;
use rmcp::service::{RoleClient, RunningService, ServiceError};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ServiceExt};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::config::McpServerConfig;

/// The largest message read from a stdio server (a tool result with its JSON framing).
pub const MAX_MESSAGE_BYTES: usize = 8 * 1024 * 1024;

/// Why a session could not do what was asked; each says which server and what to do.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// The server did not complete the handshake or could not be reached.
    #[error("MCP server {server} did not start: {reason}")]
    Start { server: String, reason: String },
    /// Past the time it was given.
    #[error("MCP server {server} did not answer {what} within {seconds} s")]
    Timeout {
        server: String,
        what: String,
        seconds: u64,
    },
    /// The connection is gone (the process exited, the pipe or the HTTP session closed).
    #[error("MCP server {server} closed the connection: {reason}")]
    Closed { server: String, reason: String },
    /// The server answered with a protocol error (an unknown tool, bad arguments, …).
    #[error("MCP server {server} refused the request: {reason}")]
    Refused { server: String, reason: String },
}

/// The client's side of the protocol: it notes a server's `notifications/tools/list_changed`
/// (the loop lists that server again before its next model call).
#[derive(Debug, Clone, Default)]
struct Watcher {
    tools_changed: Arc<AtomicBool>,
}

impl ClientHandler for Watcher {
    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl std::future::Future<Output = ()> + Send + '_ {
        self.tools_changed.store(true, Ordering::SeqCst);
        std::future::ready(())
    }

    fn get_info(&self) -> ClientConfig {
        let mut info = ClientConfig::default();
        info.client_info.name = "nightshift".into();
        info.client_info.version = env!("CARGO_PKG_VERSION").into();
        info
    }
}

/// The client to reach HTTP servers with: no redirects (one could lead off the allowed
/// host), no proxy from the environment, TLS by ring's provider.
pub fn http_client() -> Result<reqwest::Client, String> {
    // Another provider may already be installed by the process; either is fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))
}

/// A live connection to one server.
pub struct McpSession {
    server: String,
    call_timeout: Duration,
    startup_timeout: Duration,
    tools_changed: Arc<AtomicBool>,
    service: RunningService<RoleClient, Watcher>,
}

impl std::fmt::Debug for McpSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpSession")
            .field("server", &self.server)
            .field("closed", &self.is_closed())
            .finish()
    }
}

impl McpSession {
    /// The session over a started stdio server's stdout (`read`) and stdin (`write`).
    pub async fn over_stdio<R, W>(
        config: &McpServerConfig,
        read: R,
        write: W,
    ) -> Result<McpSession, McpError>
    where
        R: AsyncRead + Send + Unpin + 'static,
        W: AsyncWrite + Send + Unpin + 'static,
    {
        let transport =
            AsyncRwTransport::new_client(read, write).with_max_line_length(MAX_MESSAGE_BYTES);
        let watcher = Watcher::default();
        let changed = watcher.tools_changed.clone();
        Self::start(config, changed, watcher.serve(transport)).await
    }

    /// The session over streamable HTTP at the config's `url`, sending `headers` (their
    /// secrets substituted) with every request, through `client`.
    pub async fn over_http(
        config: &McpServerConfig,
        headers: &[(String, String)],
        client: reqwest::Client,
    ) -> Result<McpSession, McpError> {
        let start_err = |reason: String| McpError::Start {
            server: config.name.clone(),
            reason,
        };
        let url = config.url.clone().unwrap_or_default();
        let mut custom = HashMap::new();
        for (name, value) in headers {
            let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                .map_err(|e| start_err(format!("header '{name}' is not a header name: {e}")))?;
            let value = reqwest::header::HeaderValue::from_str(value).map_err(|e| {
                start_err(format!("the value of header '{name}' cannot be sent: {e}"))
            })?;
            custom.insert(name, value);
        }
        let transport_config = StreamableHttpClientTransportConfig::with_uri(url)
            .custom_headers(custom)
            .max_sse_event_size(MAX_MESSAGE_BYTES);
        let transport = StreamableHttpClientTransport::with_client(client, transport_config);
        let watcher = Watcher::default();
        let changed = watcher.tools_changed.clone();
        Self::start(config, changed, watcher.serve(transport)).await
    }

    async fn start<F, E>(
        config: &McpServerConfig,
        tools_changed: Arc<AtomicBool>,
        serving: F,
    ) -> Result<McpSession, McpError>
    where
        F: std::future::Future<Output = Result<RunningService<RoleClient, Watcher>, E>>,
        E: std::fmt::Display,
    {
        let startup_timeout = Duration::from_secs(config.startup_timeout_seconds);
        let service = match tokio::time::timeout(startup_timeout, serving).await {
            Ok(Ok(service)) => service,
            Ok(Err(e)) => {
                return Err(McpError::Start {
                    server: config.name.clone(),
                    reason: e.to_string(),
                });
            }
            Err(_) => {
                return Err(McpError::Timeout {
                    server: config.name.clone(),
                    what: "the handshake".into(),
                    seconds: config.startup_timeout_seconds,
                });
            }
        };
        Ok(McpSession {
            server: config.name.clone(),
            call_timeout: Duration::from_secs(config.timeout_seconds),
            startup_timeout,
            tools_changed,
            service,
        })
    }

    /// The server's name.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// Whether the connection is gone (start a new session).
    pub fn is_closed(&self) -> bool {
        self.service.is_closed() || self.service.peer().is_transport_closed()
    }

    /// Whether the server said its tool list changed since this was last asked (asking
    /// clears it).
    pub fn take_tools_changed(&self) -> bool {
        self.tools_changed.swap(false, Ordering::SeqCst)
    }

    /// Every tool the server lists (all pages), as it lists them.
    pub async fn list_tools(&self) -> Result<Vec<Tool>, McpError> {
        let listing = self.service.peer().list_all_tools();
        match tokio::time::timeout(self.startup_timeout, listing).await {
            Ok(Ok(tools)) => Ok(tools),
            Ok(Err(e)) => Err(self.failure(e)),
            Err(_) => Err(McpError::Timeout {
                server: self.server.clone(),
                what: "tools/list".into(),
                seconds: self.startup_timeout.as_secs(),
            }),
        }
    }

    /// Calls the server's tool `tool` with `arguments` (a JSON object, or null for none).
    pub async fn call(&self, tool: &str, arguments: &Value) -> Result<CallToolResult, McpError> {
        let mut params = CallToolRequestParams::new(tool.to_string());
        params.arguments = match arguments {
            Value::Object(map) => Some(map.clone()),
            Value::Null => None,
            other => {
                return Err(McpError::Refused {
                    server: self.server.clone(),
                    reason: format!("the arguments of {tool} must be a JSON object, not {other}"),
                });
            }
        };
        let call = self.service.peer().call_tool(params);
        match tokio::time::timeout(self.call_timeout, call).await {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(e)) => Err(self.failure(e)),
            Err(_) => Err(McpError::Timeout {
                server: self.server.clone(),
                what: format!("tools/call {tool}"),
                seconds: self.call_timeout.as_secs(),
            }),
        }
    }

    /// Ends the session (a stdio server sees its stdin close).
    pub async fn close(self) {
        let _ = self.service.cancel().await;
    }

    fn failure(&self, e: ServiceError) -> McpError {
        let server = self.server.clone();
        match e {
            ServiceError::McpError(data) => McpError::Refused {
                server,
                reason: data.message.to_string(),
            },
            other => McpError::Closed {
                server,
                reason: other.to_string(),
            },
        }
    }
}
