//! Registry: built from config, sorted and byte-stable specs, unknown names, overrides,
//! per-call classes, redaction of every output and refusal to start cancelled calls.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use nightshift_tools::{
    BUILTIN_TOOLS, CommandToolConfig, Registry, RegistryConfig, RegistryError, SecretResolver,
    ToolClass, ToolOverride,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::common::Fixture;

fn lint_tool() -> CommandToolConfig {
    CommandToolConfig {
        name: "lint".into(),
        description: "Run the linter".into(),
        command: vec!["sh".into(), "-c".into(), "cat".into()],
        // Keys deliberately out of order: specs must come out sorted anyway.
        input_schema: serde_json::from_str(
            r#"{"type":"object","required":["file"],"properties":{"file":{"type":"string"}}}"#,
        )
        .unwrap(),
        class: ToolClass::ReadOnly,
        timeout_seconds: None,
    }
}

fn config() -> RegistryConfig {
    RegistryConfig {
        tools: vec![
            "write_file".into(),
            "read_file".into(),
            "run_command".into(),
            "grep".into(),
        ],
        command_tools: vec![lint_tool()],
        overrides: BTreeMap::new(),
    }
}

#[test]
fn specs_are_sorted_and_byte_stable() {
    let a = Registry::build(&config()).unwrap();
    let names: Vec<String> = a.specs().into_iter().map(|d| d.name).collect();
    assert_eq!(
        names,
        ["grep", "lint", "read_file", "run_command", "write_file"]
    );

    let mut reordered = config();
    reordered.tools.reverse();
    let b = Registry::build(&reordered).unwrap();
    assert_eq!(a.specs_json(), b.specs_json(), "same tools → same bytes");
    assert_eq!(a.specs_json(), a.specs_json());

    let json = a.specs_json();
    let lint = json.find(r#""name":"lint""#).expect("lint spec");
    let lint_spec = &json[lint..];
    assert!(
        lint_spec.find(r#""properties""#).unwrap() < lint_spec.find(r#""required""#).unwrap()
            && lint_spec.find(r#""required""#).unwrap()
                < lint_spec.find(r#""type":"object""#).unwrap(),
        "schema keys are sorted: {lint_spec}"
    );
    assert!(json.contains(r#""class":"read_only""#) && json.contains(r#""class":"side_effect""#));
}

#[test]
fn every_builtin_is_known_and_sorted() {
    let all = Registry::build(&RegistryConfig {
        tools: BUILTIN_TOOLS.iter().rev().map(|s| s.to_string()).collect(),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(all.names(), BUILTIN_TOOLS.to_vec());
    for name in BUILTIN_TOOLS {
        let def = all.definition(name).unwrap();
        assert_eq!(def.input_schema["type"], "object", "{name}");
        assert!(!def.description.is_empty(), "{name}");
    }
}

#[test]
fn unknown_tool_names_are_a_clear_error() {
    let mut cfg = config();
    cfg.tools.push("read_fiel".into());
    let err = Registry::build(&cfg).unwrap_err();
    let RegistryError::UnknownTool { name, known } = &err else {
        panic!("wrong error: {err:?}");
    };
    assert_eq!(name, "read_fiel");
    assert!(known.contains(&"read_file".to_string()) && known.contains(&"lint".to_string()));
    let message = err.to_string();
    assert!(message.contains("unknown tool `read_fiel`"), "{message}");
    assert!(
        message.contains(
            "edit_file, github_check_run, github_comment, github_file, github_pr_diff, github_pr_files, github_pull_request, \
             github_pull_requests, github_review, grep, \
             http_request, lint, list_files, read_file"
        ),
        "{message}"
    );
}

#[test]
fn bad_configs_are_refused() {
    let mut dup = config();
    dup.command_tools.push(lint_tool());
    assert_eq!(
        Registry::build(&dup).unwrap_err(),
        RegistryError::Duplicate("lint".into())
    );

    let mut shadow = config();
    shadow.command_tools[0].name = "grep".into();
    assert_eq!(
        Registry::build(&shadow).unwrap_err(),
        RegistryError::Duplicate("grep".into())
    );

    let mut invalid = config();
    invalid.command_tools[0].command.clear();
    let err = Registry::build(&invalid).unwrap_err().to_string();
    assert!(
        err.contains("command tool `lint`: command is empty"),
        "{err}"
    );

    let mut disabled = config();
    disabled
        .overrides
        .insert("http_request".into(), ToolOverride::default());
    let err = Registry::build(&disabled).unwrap_err().to_string();
    assert!(
        err.contains("override for tool `http_request`, which is not enabled"),
        "{err}"
    );

    let err = serde_json::from_value::<RegistryConfig>(json!({"tools": [], "tool": []}))
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown field `tool`"), "{err}");
}

#[tokio::test]
async fn overrides_change_description_class_and_timeout() {
    let fx = Fixture::new();
    let mut cfg = config();
    cfg.overrides.insert(
        "run_command".into(),
        ToolOverride {
            description: Some("Run tests only.".into()),
            timeout_seconds: Some(1),
            class: Some(ToolClass::Idempotent),
            approval: None,
        },
    );
    let registry = Registry::build(&cfg).unwrap();
    let def = registry.definition("run_command").unwrap();
    assert_eq!(def.description, "Run tests only.");
    assert_eq!(def.class, ToolClass::Idempotent);
    assert_eq!(
        registry.class_for("run_command", &json!({})),
        Some(ToolClass::Idempotent)
    );
    assert!(
        registry
            .class_for("run_command", &json!({}))
            .unwrap()
            .rerun_on_recovery()
    );
    assert_eq!(registry.class_for("nope", &json!({})), None);

    let started = Instant::now();
    let out = registry
        .call(&fx.ctx(), "run_command", json!({"command": "sleep 20"}))
        .await;
    assert!(
        out.content.contains("timed out after 1 s"),
        "{}",
        out.content
    );
    assert!(started.elapsed() < Duration::from_secs(4));
}

#[tokio::test]
async fn calls_to_unknown_tools_are_error_outputs() {
    let fx = Fixture::new();
    let registry = Registry::build(&config()).unwrap();
    let out = registry
        .call(&fx.ctx(), "delete_everything", json!({}))
        .await;
    assert!(out.is_error);
    assert_eq!(
        out.content,
        "unknown tool `delete_everything`; available tools: grep, lint, read_file, run_command, write_file"
    );
}

#[tokio::test]
async fn outputs_are_redacted_and_cancelled_runs_start_nothing() {
    let fx = Fixture::new();
    let registry = Registry::build(&config()).unwrap();
    let ctx = fx
        .ctx()
        .with_secrets(SecretResolver::from_map([("TOKEN", "abc123xyz")]));
    // The value is assembled by the command, so it can only be caught on the way out.
    let out = registry
        .call(
            &ctx,
            "run_command",
            json!({"command": "printf 'key=abc%s\\n' 123xyz"}),
        )
        .await;
    assert!(
        out.content.starts_with("key=[REDACTED:TOKEN]\n"),
        "{}",
        out.content
    );
    let lint = registry
        .call(&ctx, "lint", json!({"file": "abc123xyz"}))
        .await;
    assert_eq!(lint.content, r#"{"file":"[REDACTED:TOKEN]"}"#);

    let cancel = CancellationToken::new();
    cancel.cancel();
    let cancelled = registry
        .call(
            &ctx.clone().with_cancel(cancel),
            "run_command",
            json!({"command": "touch ran"}),
        )
        .await;
    assert!(
        cancelled.is_error && cancelled.content.contains("cancelled"),
        "{}",
        cancelled.content
    );
    assert!(!fx.ws("ran").exists());
}
