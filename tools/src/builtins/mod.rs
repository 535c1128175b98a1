//! The built-in tools, one module per tool or group, and the helpers they share.
//!
//! Guarantees: [`BUILTIN_TOOLS`] lists exactly the names [`by_name`] knows, sorted; every
//! built-in parses its input strictly (unknown fields and wrong types are `is_error` outputs
//! naming the problem), and blocking file-system work runs off the async runtime; a panic
//! inside such work becomes an `is_error` output instead of unwinding.

pub(crate) mod files;
pub(crate) mod github;
pub(crate) mod http;
pub(crate) mod lines;
pub(crate) mod read_file;
pub(crate) mod run_command;
pub(crate) mod search;
pub(crate) mod tasks;
pub(crate) mod todo;

use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::{Tool, ToolOutput};

/// Names of the built-in tools, sorted.
pub const BUILTIN_TOOLS: [&str; 18] = [
    "edit_file",
    "github_check_run",
    "github_comment",
    "github_file",
    "github_pr_diff",
    "github_pr_files",
    "github_pull_request",
    "github_pull_requests",
    "github_review",
    "grep",
    "http_request",
    "list_files",
    "read_file",
    "run_command",
    "task_output",
    "task_stop",
    "todo_write",
    "write_file",
];

/// A fresh instance of the built-in tool `name`.
pub(crate) fn by_name(name: &str) -> Option<Arc<dyn Tool>> {
    Some(match name {
        "read_file" => Arc::new(read_file::ReadFile),
        "write_file" => Arc::new(files::WriteFile),
        "edit_file" => Arc::new(files::EditFile),
        "list_files" => Arc::new(search::ListFiles),
        "grep" => Arc::new(search::Grep),
        "run_command" => Arc::new(run_command::RunCommand),
        "http_request" => Arc::new(http::HttpRequest::new()),
        "todo_write" => Arc::new(todo::TodoWrite),
        "task_output" => Arc::new(tasks::TaskOutput),
        "task_stop" => Arc::new(tasks::TaskStop),
        "github_pull_request" => Arc::new(github::PullRequest),
        "github_pr_files" => Arc::new(github::PrFiles),
        "github_pr_diff" => Arc::new(github::PrDiff),
        "github_file" => Arc::new(github::File),
        "github_check_run" => Arc::new(github::CheckRun),
        "github_comment" => Arc::new(github::Comment),
        "github_pull_requests" => Arc::new(github::PullRequests),
        "github_review" => Arc::new(github::Review),
        _ => return None,
    })
}

/// Deserialize a tool's input, or an error output saying what is wrong with it.
pub(crate) fn parse_input<T: DeserializeOwned>(tool: &str, input: Value) -> Result<T, ToolOutput> {
    serde_json::from_value(input)
        .map_err(|e| ToolOutput::error(format!("invalid input for {tool}: {e}")))
}

/// Run blocking work on the blocking pool.
pub(crate) async fn blocking<F>(work: F) -> ToolOutput
where
    F: FnOnce() -> ToolOutput + Send + 'static,
{
    match tokio::task::spawn_blocking(work).await {
        Ok(output) => output,
        Err(e) => ToolOutput::error(format!("internal error in tool: {e}")),
    }
}

/// Render `text` as `cat -n` style numbered lines starting at `first`.
pub(crate) fn numbered<'a>(lines: impl IntoIterator<Item = &'a str>, first: usize) -> String {
    let mut out = String::new();
    for (i, line) in lines.into_iter().enumerate() {
        out.push_str(&format!("{:>6}\t{}\n", first + i, line));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_builtin_exists_under_its_own_name() {
        let mut sorted = BUILTIN_TOOLS;
        sorted.sort();
        assert_eq!(sorted, BUILTIN_TOOLS);
        for name in BUILTIN_TOOLS {
            let tool = by_name(name).expect(name);
            assert_eq!(tool.definition().name, name);
        }
        assert!(by_name("nope").is_none());
    }

    #[test]
    fn every_builtin_schema_is_a_valid_json_schema_of_an_object() {
        for name in BUILTIN_TOOLS {
            let schema = by_name(name).expect(name).definition().input_schema;
            assert_eq!(schema["type"], "object", "{name}");
            if let Err(e) = crate::InputSchema::compile(&schema) {
                panic!("the input schema of {name} is not a valid JSON Schema: {e}");
            }
        }
    }

    #[test]
    fn builtin_schemas_refuse_what_their_tools_refuse() {
        let cases = [
            ("read_file", serde_json::json!({})),
            ("read_file", serde_json::json!({"path": "a", "offset": "2"})),
            (
                "write_file",
                serde_json::json!({"path": "a", "content": "x", "mode": 1}),
            ),
            ("run_command", serde_json::json!({"command": ["ls"]})),
            (
                "http_request",
                serde_json::json!({"method": "BREW", "url": "http://x"}),
            ),
            (
                "todo_write",
                serde_json::json!({"todos": [{"content": "a", "status": "done"}]}),
            ),
            ("grep", serde_json::json!("pattern")),
        ];
        for (name, input) in cases {
            let schema =
                crate::InputSchema::compile(&by_name(name).unwrap().definition().input_schema)
                    .unwrap();
            let err = schema.check(name, &input).expect_err(name).to_string();
            assert!(
                err.starts_with(&format!("input for `{name}` does not match")),
                "{err}"
            );
        }
        let http = crate::InputSchema::compile(
            &by_name("http_request").unwrap().definition().input_schema,
        )
        .unwrap();
        for method in ["GET", "post", "DELETE", "options"] {
            let input = serde_json::json!({"method": method, "url": "http://x"});
            assert_eq!(http.check("http_request", &input), Ok(()), "{method}");
        }
    }

    #[test]
    fn helpers_format_and_report() {
        assert_eq!(numbered(["a", "b"], 9), "     9\ta\n    10\tb\n");
        #[derive(serde::Deserialize, Debug)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Input {
            path: String,
        }
        let err = parse_input::<Input>("t", serde_json::json!({"path": 1})).unwrap_err();
        assert!(
            err.is_error && err.content.starts_with("invalid input for t: "),
            "{}",
            err.content
        );
    }
}
