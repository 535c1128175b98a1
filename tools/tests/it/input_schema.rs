//! Input schemas are enforced: a command tool whose schema forbids an input never runs for it
//! (its ledger file stays absent) and the model gets an `is_error` result naming every
//! violation; a valid input runs the program exactly once. Schemas that are not valid JSON
//! Schema are refused when the registry is built, naming the tool and the config key.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::future::BoxFuture;
use nightshift_tools::{
    CommandToolConfig, Registry, RegistryConfig, RegistryError, Tool, ToolClass, ToolContext,
    ToolDefinition, ToolOutput,
};
use serde_json::{Value, json};

use crate::common::Fixture;

/// A `side_effect` tool `pay` whose program appends its input to `ledger` and says "paid".
fn pay_registry(fx: &Fixture, ledger: &Path) -> Registry {
    let script = fx.root.join("pay.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\ncat >> \"$1\"\necho >> \"$1\"\necho paid\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let pay = CommandToolConfig {
        name: "pay".into(),
        description: "Pay an amount (in cents)".into(),
        command: vec![script.display().to_string(), ledger.display().to_string()],
        input_schema: json!({
            "type": "object",
            "properties": {
                "amount": {"type": "integer", "minimum": 1},
                "memo": {"type": "string", "maxLength": 16}
            },
            "required": ["amount"],
            "additionalProperties": false
        }),
        class: ToolClass::SideEffect,
        timeout_seconds: None,
    };
    Registry::build(&RegistryConfig {
        tools: vec!["pay".into()],
        command_tools: vec![pay],
        overrides: BTreeMap::new(),
    })
    .unwrap()
}

fn ledger(fx: &Fixture) -> PathBuf {
    fx.root.join("ledger.txt")
}

#[tokio::test]
async fn inputs_that_break_the_schema_never_reach_the_program() {
    let fx = Fixture::new();
    let ledger = ledger(&fx);
    let registry = pay_registry(&fx, &ledger);
    let long = "m".repeat(17);
    let cases: Vec<(Value, Vec<String>)> = vec![
        (
            json!({}),
            vec![r#"at (root): "amount" is a required property"#.into()],
        ),
        (
            json!({"amount": "5"}),
            vec![r#"at /amount: "5" is not of type "integer""#.into()],
        ),
        (
            json!({"amount": 5, "note": "x"}),
            vec!["at (root): ".into(), "'note' was unexpected".into()],
        ),
        (
            json!({"amount": 5, "memo": long}),
            vec![format!(
                r#"at /memo: "{long}" is longer than 16 characters"#
            )],
        ),
        (
            json!({"amount": 0}),
            vec!["at /amount: 0 is less than the minimum of 1".into()],
        ),
        (
            json!([]),
            vec![r#"at (root): [] is not of type "object""#.into()],
        ),
        (
            json!("x"),
            vec![r#"at (root): "x" is not of type "object""#.into()],
        ),
        (
            json!(5),
            vec![r#"at (root): 5 is not of type "object""#.into()],
        ),
        (
            json!({"amount": "5", "memo": 7, "note": true}),
            vec![
                r#"at /amount: "5" is not of type "integer""#.into(),
                r#"at /memo: 7 is not of type "string""#.into(),
                "'note' was unexpected".into(),
            ],
        ),
    ];
    for (input, expected) in cases {
        let checked = registry.check_input("pay", &input).unwrap_err().to_string();
        let out = registry.call(&fx.ctx(), "pay", input.clone()).await;
        assert!(out.is_error, "{input}: {}", out.content);
        assert_eq!(out.content, checked, "call and check_input say the same");
        assert!(
            out.content
                .starts_with("input for `pay` does not match its schema: at "),
            "{input}: {}",
            out.content
        );
        assert!(
            out.content
                .ends_with(". Fix the input and call the tool again."),
            "{input}: {}",
            out.content
        );
        for part in expected {
            assert!(
                out.content.contains(&part),
                "{input}: {part}: {}",
                out.content
            );
        }
        assert!(
            !ledger.exists(),
            "{input}: the program ran although the schema forbids the input"
        );
    }
}

#[tokio::test]
async fn a_valid_input_runs_the_program_once() {
    let fx = Fixture::new();
    let ledger = ledger(&fx);
    let registry = pay_registry(&fx, &ledger);
    let input = json!({"amount": 500, "memo": "lunch"});
    assert_eq!(registry.check_input("pay", &input), Ok(()));
    let out = registry.call(&fx.ctx(), "pay", input).await;
    assert!(!out.is_error, "{}", out.content);
    assert_eq!(out.content, "paid\n");
    assert_eq!(
        std::fs::read_to_string(&ledger).unwrap(),
        "{\"amount\":500,\"memo\":\"lunch\"}\n",
        "one entry: the program ran once"
    );
}

#[test]
fn unknown_tools_are_left_to_call() {
    let fx = Fixture::new();
    let registry = pay_registry(&fx, &ledger(&fx));
    assert_eq!(registry.check_input("refund", &json!([])), Ok(()));
}

#[test]
fn builtins_are_checked_through_the_same_path() {
    let registry = Registry::build(&RegistryConfig {
        tools: vec!["read_file".into(), "todo_write".into()],
        ..Default::default()
    })
    .unwrap();
    let err = registry
        .check_input("read_file", &json!({"path": 3, "lines": 2}))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(r#"at /path: 3 is not of type "string""#) && err.contains("'lines'"),
        "{err}"
    );
    let err = registry
        .check_input(
            "todo_write",
            &json!({"todos": [{"content": "a", "status": "done"}]}),
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("at /todos/0/status: "), "{err}");
    assert_eq!(
        registry.check_input("read_file", &json!({"path": "a.txt", "offset": 2})),
        Ok(())
    );
}

#[test]
fn a_command_tool_with_an_invalid_schema_is_refused_naming_the_key() {
    let mut config = CommandToolConfig {
        name: "pay".into(),
        description: "Pay".into(),
        command: vec!["true".into()],
        input_schema: json!({"type": "object", "properties": {"amount": {"type": "integr"}}}),
        class: ToolClass::SideEffect,
        timeout_seconds: None,
    };
    let err = config.validate().unwrap_err().to_string();
    assert!(
        err.starts_with(
            "command tool `pay`: input_schema is not a valid JSON Schema: at \
             /properties/amount/type: \"integr\" is not valid"
        ),
        "{err}"
    );
    assert!(
        err.ends_with("fix `command_tools.pay.input_schema`"),
        "{err}"
    );
    let err = Registry::build(&RegistryConfig {
        command_tools: vec![config.clone()],
        ..Default::default()
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("command_tools.pay.input_schema"), "{err}");

    config.input_schema = json!({
        "type": "object",
        "properties": {"x": {"$ref": "https://example.invalid/x.json"}}
    });
    let err = config.validate().unwrap_err().to_string();
    assert!(
        err.contains("is never fetched") && err.contains("command_tools.pay.input_schema"),
        "{err}"
    );
}

/// A tool whose schema is broken, as a bug in a built-in would be.
struct Broken;

impl Tool for Broken {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: "broken".into(),
            description: "d".into(),
            input_schema: json!({"type": "object", "required": "x"}),
            class: ToolClass::ReadOnly,
        }
    }

    fn call<'a>(&'a self, _ctx: &'a ToolContext, _input: Value) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async { ToolOutput::ok("ran") })
    }
}

#[test]
fn any_tool_with_an_invalid_schema_is_refused_when_added() {
    let err = Registry::new().insert(Arc::new(Broken)).unwrap_err();
    let RegistryError::InvalidSchema { name, reason } = &err else {
        panic!("wrong error: {err:?}");
    };
    assert_eq!(name, "broken");
    assert!(reason.starts_with("at /required: "), "{reason}");
    assert!(
        err.to_string()
            .starts_with("tool `broken`: input_schema is not a valid JSON Schema: at /required"),
        "{err}"
    );
}
