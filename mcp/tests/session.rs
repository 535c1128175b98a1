//! A session against a real MCP server written with the official Rust SDK's server side,
//! spoken to over a pipe as a stdio server is: the handshake, every tool listed with its
//! annotations mapped to a class, results (text, an `isError` answer) mapped to outputs, a
//! call past its timeout answered as a timeout, and a server that goes away answered as closed.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use nightshift_mcp::{McpError, McpServerConfig, McpSession, catalog, to_output};
use nightshift_tools::ToolClass;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, ServerCapabilities, ServerConfig};
use rmcp::{ErrorData, ServerHandler, ServiceExt, schemars, tool, tool_handler, tool_router};
use serde_json::json;

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct Query {
    q: String,
}

/// A server with one tool per class, one that fails and one that never answers.
#[derive(Debug, Clone)]
struct Shop {
    sent: Arc<AtomicUsize>,
    tool_router: ToolRouter<Self>,
}

#[tool_router]
impl Shop {
    fn new(sent: Arc<AtomicUsize>) -> Self {
        Self {
            sent,
            tool_router: Self::tool_router(),
        }
    }

    #[tool(description = "Looks an item up", annotations(read_only_hint = true))]
    fn lookup(&self, Parameters(Query { q }): Parameters<Query>) -> String {
        format!("found {q}")
    }

    #[tool(
        description = "Sets an item's price",
        annotations(idempotent_hint = true, destructive_hint = false)
    )]
    fn set_price(&self, Parameters(Query { q }): Parameters<Query>) -> String {
        format!("price of {q} set")
    }

    #[tool(description = "Sends an order")]
    fn send_order(&self, Parameters(Query { q }): Parameters<Query>) -> String {
        self.sent.fetch_add(1, Ordering::SeqCst);
        format!("order {q} sent")
    }

    #[tool(description = "Always fails", annotations(read_only_hint = true))]
    fn broken(&self) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::error(vec![ContentBlock::text(
            "the shop is closed",
        )]))
    }

    #[tool(description = "Restocks, which changes the tool list")]
    async fn restock(&self, context: rmcp::service::RequestContext<rmcp::RoleServer>) -> String {
        let _ = context.peer.notify_tool_list_changed().await;
        "restocked".into()
    }

    #[tool(description = "Never answers", annotations(read_only_hint = true))]
    async fn hang(&self) -> String {
        std::future::pending::<()>().await;
        unreachable!()
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Shop {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

fn config(json: serde_json::Value) -> McpServerConfig {
    let mut base = json!({"name": "shop", "command": "shop-server"});
    base.as_object_mut()
        .unwrap()
        .extend(json.as_object().unwrap().clone());
    serde_json::from_value(base).unwrap()
}

/// A session with a `Shop` serving the other end of a pipe; the server's task.
async fn connect(
    cfg: &McpServerConfig,
) -> (McpSession, Arc<AtomicUsize>, tokio::task::JoinHandle<()>) {
    let sent = Arc::new(AtomicUsize::new(0));
    let (client_end, server_end) = tokio::io::duplex(64 * 1024);
    let shop = Shop::new(sent.clone());
    let server = tokio::spawn(async move {
        let (read, write) = tokio::io::split(server_end);
        if let Ok(running) = shop.serve((read, write)).await {
            let _ = running.waiting().await;
        }
    });
    let (read, write) = tokio::io::split(client_end);
    let session = McpSession::over_stdio(cfg, read, write).await.unwrap();
    (session, sent, server)
}

#[tokio::test]
async fn tools_are_listed_with_their_classes_and_called() {
    let cfg = config(json!({"deny": ["hang", "restock"]}));
    let (session, sent, _server) = connect(&cfg).await;
    let listed = session.list_tools().await.unwrap();
    let offered = catalog(&cfg, &listed);
    let classes: Vec<(&str, ToolClass)> = offered
        .tools
        .iter()
        .map(|t| (t.definition.name.as_str(), t.definition.class))
        .collect();
    assert_eq!(
        classes,
        [
            ("mcp__shop__broken", ToolClass::ReadOnly),
            ("mcp__shop__lookup", ToolClass::ReadOnly),
            ("mcp__shop__send_order", ToolClass::SideEffect),
            ("mcp__shop__set_price", ToolClass::Idempotent),
        ]
    );
    let lookup = &offered.tools[1];
    assert_eq!(lookup.definition.description, "Looks an item up");
    assert_eq!(
        lookup.definition.input_schema["properties"]["q"]["type"], "string",
        "the server's input schema is offered as it is"
    );

    let out = to_output(&session.call("lookup", &json!({"q": "lamp"})).await.unwrap());
    assert_eq!((out.content.as_str(), out.is_error), ("found lamp", false));
    let out = to_output(
        &session
            .call("send_order", &json!({"q": "7"}))
            .await
            .unwrap(),
    );
    assert_eq!(out.content, "order 7 sent");
    assert_eq!(sent.load(Ordering::SeqCst), 1);
    let out = to_output(&session.call("broken", &json!({})).await.unwrap());
    assert_eq!(
        (out.content.as_str(), out.is_error),
        ("the shop is closed", true)
    );

    // Refusals of the protocol are errors naming the server, not crashes.
    match session.call("no_such_tool", &json!({})).await {
        Err(McpError::Refused { server, .. }) => assert_eq!(server, "shop"),
        other => panic!("an unknown tool was not refused: {other:?}"),
    }
    match session
        .call("lookup", &json!(["not", "an", "object"]))
        .await
    {
        Err(McpError::Refused { reason, .. }) => {
            assert!(reason.contains("JSON object"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    session.close().await;
}

#[tokio::test]
async fn a_call_past_its_timeout_is_a_timeout() {
    let cfg = config(json!({"timeout_seconds": 1}));
    let (session, _sent, _server) = connect(&cfg).await;
    match session.call("hang", &json!({})).await {
        Err(e @ McpError::Timeout { .. }) => {
            assert_eq!(
                e.to_string(),
                "MCP server shop did not answer tools/call hang within 1 s"
            );
        }
        other => panic!("a hung call was not timed out: {other:?}"),
    }
    // The session is still usable.
    let out = to_output(&session.call("lookup", &json!({"q": "x"})).await.unwrap());
    assert_eq!(out.content, "found x");
}

#[tokio::test]
async fn a_server_that_goes_away_is_closed() {
    let cfg = config(json!({}));
    let (session, _sent, server) = connect(&cfg).await;
    server.abort();
    let _ = server.await;
    match session.call("lookup", &json!({"q": "x"})).await {
        Err(McpError::Closed { server, .. }) => assert_eq!(server, "shop"),
        other => panic!("a call to a gone server was not closed: {other:?}"),
    }
    until(|| session.is_closed()).await;
}

#[tokio::test]
async fn a_server_saying_its_tool_list_changed_is_noted_once() {
    let cfg = config(json!({}));
    let (session, _sent, _server) = connect(&cfg).await;
    assert!(!session.take_tools_changed());
    let out = to_output(&session.call("restock", &json!({})).await.unwrap());
    assert_eq!(out.content, "restocked");
    until(|| session.take_tools_changed()).await;
    assert!(!session.take_tools_changed(), "taking it clears it");
}

/// Waits (bounded) until `done`: the client notices the closed pipe on its own task.
async fn until(done: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "not done in time");
        tokio::task::yield_now().await;
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_server_that_never_shakes_hands_times_out_at_start() {
    let cfg = config(json!({"startup_timeout_seconds": 1}));
    let (client_end, _silent) = tokio::io::duplex(1024);
    let (read, write) = tokio::io::split(client_end);
    match McpSession::over_stdio(&cfg, read, write).await {
        Err(e @ McpError::Timeout { .. }) => {
            assert!(e.to_string().contains("the handshake"), "{e}")
        }
        other => panic!("{other:?}"),
    }
}

/// Streamable HTTP: the same server behind the SDK's HTTP service on loopback; the session
/// sends the configured headers with every request.
#[tokio::test]
async fn a_streamable_http_server_is_listed_and_called_with_its_headers() {
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };

    let _ = rustls::crypto::ring::default_provider().install_default();
    let stop = tokio_util::sync::CancellationToken::new();
    let sent = Arc::new(AtomicUsize::new(0));
    let service: StreamableHttpService<Shop, LocalSessionManager> = StreamableHttpService::new(
        move || Ok(Shop::new(sent.clone())),
        Default::default(),
        StreamableHttpServerConfig::default()
            .with_sse_keep_alive(None)
            .with_cancellation_token(stop.child_token()),
    );
    let seen = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let record = seen.clone();
    let app = axum::Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn(
            move |req: axum::extract::Request, next: axum::middleware::Next| {
                let record = record.clone();
                async move {
                    if let Some(v) = req.headers().get("x-shop-key") {
                        record.lock().unwrap().push(v.to_str().unwrap().to_string());
                    }
                    next.run(req).await
                }
            },
        ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server_stop = stop.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move { server_stop.cancelled().await })
            .await;
    });

    let cfg: McpServerConfig = serde_json::from_value(json!({
        "name": "shop", "type": "http", "url": format!("http://{addr}/mcp"),
        "headers": {"X-Shop-Key": "{{secret:SHOP_KEY}}"}
    }))
    .unwrap();
    cfg.check("bot").unwrap();
    // The caller substitutes secrets; the session sends what it is given.
    let headers = [("X-Shop-Key".to_string(), "k-123".to_string())];
    let session = McpSession::over_http(&cfg, &headers, reqwest::Client::new())
        .await
        .unwrap();
    let offered = catalog(&cfg, &session.list_tools().await.unwrap());
    assert_eq!(offered.tools.len(), 6);
    let out = to_output(&session.call("lookup", &json!({"q": "desk"})).await.unwrap());
    assert_eq!(out.content, "found desk");
    let seen = seen.lock().unwrap().clone();
    assert!(
        seen.len() >= 3 && seen.iter().all(|v| v == "k-123"),
        "every request carried the header: {seen:?}"
    );
    session.close().await;
    stop.cancel();
}
