//! Tool input schemas, compiled once and enforced before a tool runs: [`InputSchema`].
//!
//! Guarantees:
//!
//! - [`InputSchema::compile`] accepts only a valid JSON Schema: the schema is first checked
//!   against its meta-schema (the draft named by `$schema`, 2020-12 when it names none) and
//!   every violation is reported with the place in the schema where it is; then it is compiled
//!   (which also refuses, e.g., a `pattern` that is not a valid regular expression).
//! - **Nothing is ever fetched**: a `$ref` to anything outside the schema itself (`http:`,
//!   `https:`, `file:` or any other URI) is refused when the schema is compiled, saying to move
//!   the definition into the schema's `$defs`.
//! - `format` is enforced (an input whose `"format": "date"` string is not a date is refused);
//!   formats this crate does not know are ignored.
//! - [`InputSchema::check`] never panics; its error ([`InputRejected`]) names every violation (instance path and
//!   what was wrong, at most [`MAX_VIOLATIONS`] of them, each cut to [`MAX_LINE_CHARS`]
//!   characters so a huge input is not echoed back whole) in words the model can act on.
//!
//! The functions that word a report ([`describe_violations`]) are separate from the ones that
//! run the validator.

use std::fmt;

use jsonschema::{Retrieve, Uri, ValidationError, Validator};
use serde_json::Value;

/// At most this many violations are listed in one report; the rest are counted.
pub const MAX_VIOLATIONS: usize = 5;
/// Each violation's text is cut to this many characters.
pub const MAX_LINE_CHARS: usize = 240;

/// One place where a value broke a schema: the JSON Pointer of the value (`""` for the
/// root) and what was wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub path: String,
    pub message: String,
}

impl From<ValidationError<'_>> for Violation {
    fn from(e: ValidationError<'_>) -> Self {
        Violation {
            path: e.instance_path().to_string(),
            message: e.to_string(),
        }
    }
}

/// Why a schema is not a usable JSON Schema. `Display` says what is wrong and where, without
/// naming the tool (the caller adds that).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// Its `$schema` names no draft this crate can check against.
    #[error("its `$schema` is not usable: {0}")]
    UnusableDraft(String),
    /// It breaks its meta-schema: each place and what is wrong there.
    #[error("{}", describe_violations(.0))]
    Invalid(Vec<Violation>),
    /// It is valid but cannot be compiled (a `pattern` that is not a regular expression, a
    /// `$ref` outside the schema).
    #[error("it cannot be compiled: {0}")]
    Uncompilable(String),
}

/// An input that broke its tool's schema. `Display` is what the model is told: every
/// violation (at most [`MAX_VIOLATIONS`], each cut to [`MAX_LINE_CHARS`] characters) and to
/// call the tool again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "input for `{tool}` does not match its schema: {}. Fix the input and call the tool again.",
    describe_violations(.violations)
)]
pub struct InputRejected {
    pub tool: String,
    pub violations: Vec<Violation>,
}

/// A tool's input schema, compiled.
#[derive(Clone)]
pub struct InputSchema {
    validator: Validator,
}

impl fmt::Debug for InputSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("InputSchema")
    }
}

/// Refuses every external reference: tool schemas must be self-contained.
struct NoRetrieval;

impl Retrieve for NoRetrieval {
    fn retrieve(
        &self,
        uri: &Uri<String>,
    ) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        Err(format!(
            "`{uri}` is outside the schema and is never fetched; copy the definition into the \
             schema's `$defs` and refer to it as `#/$defs/...`"
        )
        .into())
    }
}

impl InputSchema {
    /// Check `schema` against its meta-schema and compile it. The error says what is wrong
    /// and where (e.g. `at /properties/amount/type: "integr" is not valid under any of the
    /// schemas listed in the 'anyOf' keyword`), without naming the tool.
    pub fn compile(schema: &Value) -> Result<InputSchema, SchemaError> {
        let meta = jsonschema::meta::validator_for(schema)
            .map_err(|e| SchemaError::UnusableDraft(e.to_string()))?;
        let violations: Vec<Violation> = meta.iter_errors(schema).map(Violation::from).collect();
        if !violations.is_empty() {
            return Err(SchemaError::Invalid(violations));
        }
        let validator = jsonschema::options()
            .with_retriever(NoRetrieval)
            .should_validate_formats(true)
            .build(schema)
            .map_err(|e| SchemaError::Uncompilable(e.to_string()))?;
        Ok(InputSchema { validator })
    }

    /// Every violation of the schema by `input` (empty when it is valid).
    pub(crate) fn violations(&self, input: &Value) -> Vec<Violation> {
        self.validator
            .iter_errors(input)
            .map(Violation::from)
            .collect()
    }

    /// `Ok` when `input` is valid; otherwise every violation, for the model.
    pub fn check(&self, tool: &str, input: &Value) -> Result<(), InputRejected> {
        let violations = self.violations(input);
        if violations.is_empty() {
            Ok(())
        } else {
            Err(InputRejected {
                tool: tool.to_string(),
                violations,
            })
        }
    }
}

/// `at /amount: "5" is not of type "integer"; at (root): ...`, at most [`MAX_VIOLATIONS`]
/// entries (then `and N more`), each cut to [`MAX_LINE_CHARS`] characters.
pub(crate) fn describe_violations(violations: &[Violation]) -> String {
    let mut parts: Vec<String> = violations
        .iter()
        .take(MAX_VIOLATIONS)
        .map(|v| {
            let path = if v.path.is_empty() { "(root)" } else { &v.path };
            cut(&format!("at {path}: {}", v.message), MAX_LINE_CHARS)
        })
        .collect();
    if violations.len() > MAX_VIOLATIONS {
        parts.push(format!(
            "and {} more violation(s)",
            violations.len() - MAX_VIOLATIONS
        ));
    }
    parts.join("; ")
}

/// `text` cut to at most `max` characters, with `…` marking a cut.
fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_string(),
        Some((end, _)) => format!("{}…", &text[..end]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn violation(path: &str, message: &str) -> Violation {
        Violation {
            path: path.into(),
            message: message.into(),
        }
    }

    #[test]
    fn a_report_names_each_violation_and_its_place() {
        let text = InputRejected {
            tool: "pay".into(),
            violations: vec![
                violation("/amount", "\"5\" is not of type \"integer\""),
                violation(
                    "",
                    "Additional properties are not allowed ('memo' was unexpected)",
                ),
            ],
        }
        .to_string();
        assert_eq!(
            text,
            "input for `pay` does not match its schema: at /amount: \"5\" is not of type \
             \"integer\"; at (root): Additional properties are not allowed ('memo' was \
             unexpected). Fix the input and call the tool again."
        );
    }

    #[test]
    fn a_report_is_bounded_in_entries_and_length() {
        let many: Vec<Violation> = (0..9)
            .map(|i| violation(&format!("/{i}"), &"é".repeat(1000)))
            .collect();
        let text = describe_violations(&many);
        assert_eq!(text.matches("at /").count(), MAX_VIOLATIONS, "{text}");
        assert!(text.ends_with("and 4 more violation(s)"), "{text}");
        assert!(
            text.chars().count() < (MAX_LINE_CHARS + 3) * (MAX_VIOLATIONS + 1),
            "{}",
            text.len()
        );
        assert_eq!(cut("abc", 3), "abc");
        assert_eq!(cut("abcd", 3), "abc…");
    }

    #[test]
    fn the_validator_reports_every_violation_with_its_path() {
        let schema = InputSchema::compile(&json!({
            "type": "object",
            "properties": {
                "amount": {"type": "integer"},
                "memo": {"type": "string", "maxLength": 3}
            },
            "required": ["amount"],
            "additionalProperties": false
        }))
        .unwrap();
        assert_eq!(
            schema.check("pay", &json!({"amount": 5, "memo": "ok"})),
            Ok(())
        );
        let err = schema
            .check("pay", &json!({"amount": "5", "memo": "toolong", "x": 1}))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("input for `pay` does not match its schema: "),
            "{err}"
        );
        assert!(
            err.contains("at /amount: \"5\" is not of type \"integer\""),
            "{err}"
        );
        assert!(
            err.contains("at /memo: \"toolong\" is longer than 3 characters"),
            "{err}"
        );
        assert!(
            err.contains("at (root): ") && err.contains("'x' was unexpected"),
            "{err}"
        );
        let err = schema.check("pay", &json!([])).unwrap_err().to_string();
        assert!(
            err.contains("at (root): [] is not of type \"object\""),
            "{err}"
        );
    }

    #[test]
    fn formats_are_enforced() {
        let schema = InputSchema::compile(&json!({
            "type": "object",
            "properties": {"day": {"type": "string", "format": "date"}}
        }))
        .unwrap();
        assert_eq!(schema.check("t", &json!({"day": "2024-02-29"})), Ok(()));
        let err = schema
            .check("t", &json!({"day": "yesterday"}))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("at /day: \"yesterday\" is not a \"date\""),
            "{err}"
        );
    }

    #[test]
    fn invalid_schemas_are_refused_saying_where() {
        let err = InputSchema::compile(&json!({
            "type": "object",
            "properties": {"amount": {"type": "integr"}}
        }))
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("at /properties/amount/type: \"integr\" is not valid"),
            "{err}"
        );

        let err = InputSchema::compile(&json!({
            "type": "object",
            "required": "amount",
            "properties": {"n": {"minimum": "one"}}
        }))
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("at /required: ") && err.contains("at /properties/n/minimum: "),
            "{err}"
        );

        let err = InputSchema::compile(&json!({
            "type": "object",
            "properties": {"s": {"type": "string", "pattern": "(unclosed"}}
        }))
        .unwrap_err()
        .to_string();
        assert!(err.contains("(unclosed"), "{err}");
    }

    #[test]
    fn external_references_are_never_fetched() {
        for target in [
            "http://127.0.0.1:9/schema.json",
            "https://example.invalid/schema.json",
            "file:///etc/passwd",
        ] {
            let err = InputSchema::compile(&json!({
                "type": "object",
                "properties": {"x": {"$ref": target}}
            }))
            .unwrap_err()
            .to_string();
            assert!(
                err.contains("is never fetched") && err.contains("$defs"),
                "{target}: {err}"
            );
        }
        let local = InputSchema::compile(&json!({
            "type": "object",
            "$defs": {"n": {"type": "integer"}},
            "properties": {"x": {"$ref": "#/$defs/n"}}
        }))
        .unwrap();
        assert!(local.check("t", &json!({"x": 1})).is_ok());
        assert!(local.check("t", &json!({"x": "1"})).is_err());
    }
}
