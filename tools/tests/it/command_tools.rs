//! Command tools from config: input JSON on stdin, result from stdout, non-zero exit as an
//! error with the stderr tail, config validation, timeouts.

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use nightshift_tools::{CommandTool, CommandToolConfig, Tool, ToolClass};
use serde_json::json;

use crate::common::{Fixture, call};

fn config(name: &str, command: &[&str]) -> CommandToolConfig {
    CommandToolConfig {
        name: name.into(),
        description: "test tool".into(),
        command: command.iter().map(|s| s.to_string()).collect(),
        input_schema: json!({"type": "object", "properties": {"n": {"type": "integer"}}}),
        class: ToolClass::Idempotent,
        timeout_seconds: None,
    }
}

#[tokio::test]
async fn input_goes_to_stdin_and_stdout_is_the_result() {
    let fx = Fixture::new();
    let script = fx.root.join("double.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\nread line\necho \"got $line\"\necho \"key=$NIGHTSHIFT_IDEMPOTENCY_KEY cwd=$(pwd)\"\necho noise >&2\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let tool = CommandTool::new(config("double", &[script.to_str().unwrap()])).unwrap();
    let def = tool.definition();
    assert_eq!(
        (def.name.as_str(), def.class),
        ("double", ToolClass::Idempotent)
    );

    let out = call(&tool, &fx.ctx(), json!({"n": 21})).await;
    assert!(!out.is_error, "{}", out.content);
    assert_eq!(
        out.content,
        format!(
            "got {{\"n\":21}}\nkey=run-1:call-7 cwd={}\n",
            fx.workspace.display()
        )
    );
}

#[tokio::test]
async fn non_zero_exit_is_an_error_with_the_stderr_tail() {
    let fx = Fixture::new();
    let noisy = "i=0; while [ $i -lt 2000 ]; do echo \"filler line $i\" >&2; i=$((i+1)); done; \
                 echo partial; echo 'boom: the real reason' >&2; exit 4";
    let tool = CommandTool::new(config("failing", &["sh", "-c", noisy])).unwrap();
    let out = call(&tool, &fx.ctx(), json!({})).await;
    assert!(out.is_error);
    assert!(
        out.content.starts_with("failing failed: exit code 4"),
        "{}",
        out.content
    );
    assert!(out.content.contains("stdout:\npartial"), "{}", out.content);
    assert!(
        out.content.ends_with("boom: the real reason"),
        "{}",
        out.content
    );
    assert!(
        !out.content.contains("filler line 0\n"),
        "only the tail of stderr is kept"
    );
    assert!(
        out.content.len() < 6000,
        "stderr tail is bounded: {}",
        out.content.len()
    );
}

#[tokio::test]
async fn configured_timeout_kills_the_program() {
    let fx = Fixture::new();
    let mut cfg = config("slow", &["sleep", "30"]);
    cfg.timeout_seconds = Some(1);
    let tool = CommandTool::new(cfg).unwrap();
    let started = Instant::now();
    let out = call(&tool, &fx.ctx(), json!({})).await;
    assert!(out.is_error);
    assert!(
        out.content.contains("timed out after 1 s"),
        "{}",
        out.content
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_missing_program_is_an_error_output() {
    let fx = Fixture::new();
    let tool = CommandTool::new(config("ghost", &["/nonexistent/program"])).unwrap();
    let out = call(&tool, &fx.ctx(), json!({})).await;
    assert!(out.is_error);
    assert!(
        out.content
            .contains("failed to start `/nonexistent/program`"),
        "{}",
        out.content
    );
}

#[test]
fn validation_names_the_problem() {
    let ok = config("fine", &["true"]);
    assert_eq!(ok.validate(), Ok(()));
    let cases: Vec<(CommandToolConfig, &str)> = vec![
        (config("", &["true"]), "the name must be 1-64 characters"),
        (config("has space", &["true"]), "the name must be"),
        (config("empty_cmd", &[]), "command is empty"),
        (
            config("blank_prog", &[" "]),
            "the program (command[0]) is empty",
        ),
        (
            CommandToolConfig {
                description: " ".into(),
                ..config("nodesc", &["true"])
            },
            "description is empty",
        ),
        (
            CommandToolConfig {
                input_schema: json!({"type": "string"}),
                ..config("schema", &["true"])
            },
            "input_schema must be a JSON object schema",
        ),
        (
            CommandToolConfig {
                input_schema: json!({"type": "object", "properties": {"n": {"type": "int"}}}),
                ..config("bad_schema", &["true"])
            },
            "input_schema is not a valid JSON Schema: at /properties/n/type: ",
        ),
        (
            CommandToolConfig {
                timeout_seconds: Some(0),
                ..config("zero", &["true"])
            },
            "timeout_seconds must be at least 1",
        ),
    ];
    for (cfg, expected) in cases {
        let err = cfg.validate().expect_err(expected).to_string();
        assert!(err.contains(expected), "{err}");
        assert!(
            err.contains(&format!("`{}`", cfg.name)),
            "names the tool: {err}"
        );
        assert!(CommandTool::new(cfg).is_err());
    }
}

#[test]
fn config_deserialises_with_defaults_and_rejects_unknown_fields() {
    let cfg: CommandToolConfig = serde_json::from_value(
        json!({"name": "lint", "description": "Run the linter", "command": ["lint"]}),
    )
    .unwrap();
    assert_eq!(cfg.class, ToolClass::SideEffect, "the safe default");
    assert_eq!(cfg.input_schema, json!({"type": "object"}));
    assert_eq!(cfg.timeout_seconds, None);

    let err = serde_json::from_value::<CommandToolConfig>(
        json!({"name": "lint", "description": "d", "command": ["lint"], "timeout": 5}),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("unknown field `timeout`"), "{err}");

    let err = serde_json::from_value::<CommandToolConfig>(
        json!({"name": "lint", "description": "d", "command": ["lint"], "class": "sometimes"}),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("read_only") && err.contains("side_effect"),
        "{err}"
    );
}
