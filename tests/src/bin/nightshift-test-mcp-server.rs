//! An MCP server over stdio for the tests, written with the official Rust SDK (`rmcp`): a
//! notebook kept in `notes.txt` in its working directory (the run's workspace), with one tool
//! of each class and tools that misbehave.
//!
//! - `read_notes` (read-only): the notebook's lines.
//! - `set_title` (idempotent): writes `title.txt`.
//! - `add_note` (no annotations, so a side effect): appends a line to `notes.txt`.
//! - `wait` (read-only): answers after `seconds`, or never with `forever`.
//! - `exit_now` (read-only): the process exits without answering (a server that dies).
//!
//! It logs its start to stderr with the value of `NOTES_TOKEN` when set (redaction tests).

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
    fn read_notes(&self) -> String {
        std::fs::read_to_string("notes.txt").unwrap_or_default()
    }

    #[tool(
        description = "Sets the notebook's title",
        annotations(idempotent_hint = true, destructive_hint = false)
    )]
    fn set_title(&self, Parameters(Title { title }): Parameters<Title>) -> String {
        match std::fs::write("title.txt", &title) {
            Ok(()) => format!("title set to {title}"),
            Err(e) => format!("cannot set the title: {e}"),
        }
    }

    #[tool(description = "Adds a line to the notebook")]
    fn add_note(&self, Parameters(Note { text }): Parameters<Note>) -> String {
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
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Notebook {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

#[tokio::main]
async fn main() {
    let token = std::env::var("NOTES_TOKEN").unwrap_or_default();
    eprintln!("notebook server starting (token {token})");
    match Notebook::new().serve(rmcp::transport::stdio()).await {
        Ok(running) => {
            let _ = running.waiting().await;
        }
        Err(e) => eprintln!("notebook server: {e}"),
    }
}
