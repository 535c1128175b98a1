//! An MCP server over stdio for the tests, written with the official Rust SDK (`rmcp`): a
//! notebook kept in `notes.txt` in its working directory (the run's workspace), with one tool
//! of each class and tools that misbehave.
//!
//! - `read_notes` (read-only): the notebook's lines.
//! - `set_title` (idempotent): writes `title.txt`.
//! - `add_note` (no annotations, so a side effect): appends a line to `notes.txt`.
//! - `wait` (read-only): answers after `seconds`, or never with `forever`.
//! - `exit_now` (read-only): the process exits without answering (a server that dies).
//! - `crash_once` (read-only): the first call (no `crashed` file in the workspace yet)
//!   exits without answering; later calls answer `survived`.
//! - `big {bytes}` (read-only): answers that many bytes of text.
//!
//! `nightshift-test-mcp-server --http` serves the same notebook over streamable HTTP at
//! `127.0.0.1:<port>/mcp` instead (in its working directory), printing `listening on
//! <address>` first; each request's `Authorization` header is logged to `NOTES_CALLS` as
//! `auth <value>`.
//!
//! It logs its start to stderr with the value of `NOTES_TOKEN` when set (redaction tests).
//! With `NOTES_CALLS` set (a file), each call of `read_notes`, `set_title` and `add_note`
//! appends `<tool> <input>` to it when it begins, and every process appends `start` when it
//! starts; with `NOTES_GATE` set (a file), those calls then wait until it exists (at most
//! 60 s) before doing anything: the crash tests kill the daemon in between.

use std::io::Write;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{ServerCapabilities, ServerConfig};
use rmcp::{ServerHandler, ServiceExt, schemars, tool, tool_handler, tool_router};

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct Note {
    /// The line to add.
    text: String,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct Title {
    title: String,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct Wait {
    /// Seconds to wait before answering.
    seconds: u64,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct Big {
    /// How many bytes to answer.
    bytes: usize,
}

/// Appends `line` to the `NOTES_CALLS` file, when set.
fn log_call(line: &str) {
    if let Ok(path) = std::env::var("NOTES_CALLS") {
        let _ = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| writeln!(f, "{line}"));
    }
}

/// Logs the call, then waits for the `NOTES_GATE` file, when set.
async fn begin(line: &str) {
    log_call(line);
    let Ok(gate) = std::env::var("NOTES_GATE") else {
        return;
    };
    for _ in 0..1200 {
        if std::path::Path::new(&gate).exists() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[derive(Debug, Clone)]
struct Notebook {
    tool_router: ToolRouter<Self>,
}

#[tool_router]
impl Notebook {
    fn new() -> Self {
        Self {
            tool_router: Self::tool_router(),
        }
    }

    #[tool(description = "Reads the notebook", annotations(read_only_hint = true))]
    async fn read_notes(&self) -> String {
        begin("read_notes").await;
        std::fs::read_to_string("notes.txt").unwrap_or_default()
    }

    #[tool(
        description = "Sets the notebook's title",
        annotations(idempotent_hint = true, destructive_hint = false)
    )]
    async fn set_title(&self, Parameters(Title { title }): Parameters<Title>) -> String {
        begin(&format!("set_title {title}")).await;
        match std::fs::write("title.txt", &title) {
            Ok(()) => format!("title set to {title}"),
            Err(e) => format!("cannot set the title: {e}"),
        }
    }

    #[tool(description = "Adds a line to the notebook")]
    async fn add_note(&self, Parameters(Note { text }): Parameters<Note>) -> String {
        begin(&format!("add_note {text}")).await;
        let added = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open("notes.txt")
            .and_then(|mut f| writeln!(f, "{text}"));
        match added {
            Ok(()) => format!("added: {text}"),
            Err(e) => format!("cannot add: {e}"),
        }
    }

    #[tool(
        description = "Answers after a while",
        annotations(read_only_hint = true)
    )]
    async fn wait(&self, Parameters(Wait { seconds }): Parameters<Wait>) -> String {
        tokio::time::sleep(std::time::Duration::from_secs(seconds)).await;
        format!("waited {seconds} s")
    }

    #[tool(
        description = "Exits without answering",
        annotations(read_only_hint = true)
    )]
    fn exit_now(&self) -> String {
        std::process::exit(3)
    }

    #[tool(
        description = "Dies the first time it is called",
        annotations(read_only_hint = true)
    )]
    fn crash_once(&self) -> String {
        if std::fs::metadata("crashed").is_err() {
            let _ = std::fs::write("crashed", "");
            std::process::exit(4)
        }
        "survived".to_string()
    }

    #[tool(description = "Answers many bytes", annotations(read_only_hint = true))]
    fn big(&self, Parameters(Big { bytes }): Parameters<Big>) -> String {
        let line = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde\n";
        line.repeat(bytes / line.len() + 1)[..bytes].to_string()
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Notebook {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

/// Serves the notebook over streamable HTTP on loopback until killed.
async fn serve_http() {
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    let service: StreamableHttpService<Notebook, LocalSessionManager> = StreamableHttpService::new(
        || Ok(Notebook::new()),
        Default::default(),
        StreamableHttpServerConfig::default().with_sse_keep_alive(None),
    );
    let app = axum::Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn(
            |req: axum::extract::Request, next: axum::middleware::Next| async move {
                if let Some(v) = req.headers().get("authorization") {
                    log_call(&format!("auth {}", v.to_str().unwrap_or("?")));
                }
                next.run(req).await
            },
        ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    println!(
        "listening on {}",
        listener.local_addr().expect("an address")
    );
    let _ = axum::serve(listener, app).await;
}

#[tokio::main]
async fn main() {
    let token = std::env::var("NOTES_TOKEN").unwrap_or_default();
    eprintln!("notebook server starting (token {token})");
    log_call("start");
    if std::env::args().any(|a| a == "--http") {
        serve_http().await;
        return;
    }
    match Notebook::new().serve(rmcp::transport::stdio()).await {
        Ok(running) => {
            let _ = running.waiting().await;
        }
        Err(e) => eprintln!("notebook server: {e}"),
    }
}
