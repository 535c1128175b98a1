//! Provider configuration as read from TOML: defaults, unknown keys rejected, validation
//! messages that name the key, and building providers from it.

use nightshift_llm::{
    AnthropicOptions, AnthropicProvider, ApiKey, ClientConfig, ConfigError, HttpTimeouts,
    OpenAiOptions, OpenAiProvider, ProviderConfig, ProviderKind, SetupError,
};
use std::time::Duration;

fn parse(text: &str) -> Result<ProviderConfig, String> {
    toml::from_str(text).map_err(|e| e.to_string())
}

fn invalid(text: &str) -> ConfigError {
    parse(text).unwrap().validate().unwrap_err()
}

#[test]
fn a_full_entry_parses_and_a_minimal_one_gets_the_defaults() {
    let full = parse(
        r#"
        kind = "openai"
        base_url = "http://localhost:11434/v1"
        api_key_env = "OLLAMA_KEY"
        stream = false
        retry = { max_attempts = 2, base_delay_ms = 10, max_delay_ms = 100, max_retry_after_ms = 1000 }
        breaker = { failure_threshold = 3, cooldown_ms = 50 }
        timeouts = { connect_ms = 1, read_idle_ms = 2, total_ms = 3 }
        "#,
    )
    .unwrap();
    full.validate().unwrap();
    assert_eq!(full.kind, ProviderKind::OpenAi);
    assert!(!full.stream);
    assert_eq!(
        full.client_config(),
        ClientConfig {
            max_attempts: 2,
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(100),
            max_retry_after: Duration::from_millis(1000),
            jitter: true,
            failure_threshold: 3,
            cooldown: Duration::from_millis(50),
        }
    );
    assert_eq!(full.http_timeouts().total, Duration::from_millis(3));
    assert_eq!(
        full.resolved_base_url().as_deref(),
        Some("http://localhost:11434/v1")
    );

    let minimal = parse(r#"kind = "anthropic""#).unwrap();
    minimal.validate().unwrap();
    assert_eq!(minimal, ProviderConfig::new(ProviderKind::Anthropic));
    assert!(minimal.stream);
    assert_eq!(minimal.key_env(), Some("ANTHROPIC_API_KEY"));
    assert_eq!(ProviderConfig::new(ProviderKind::OpenAi).key_env(), None);
    assert_eq!(minimal.client_config().max_attempts, 5);
}

#[test]
fn unknown_keys_are_rejected_at_every_level() {
    let e = parse("kind = \"anthropic\"\napi_key = \"sk-ant-123\"").unwrap_err();
    assert!(e.contains("unknown field `api_key`"), "{e}");
    let e = parse("kind = \"anthropic\"\nretry = { attempts = 3 }").unwrap_err();
    assert!(e.contains("unknown field `attempts`"), "{e}");
    let e = parse("kind = \"gemini\"").unwrap_err();
    assert!(e.contains("gemini") && e.contains("anthropic"), "{e}");
}

#[test]
fn validation_names_the_key() {
    let e = invalid(r#"kind = "scripted""#);
    assert_eq!(
        (e.key.as_str(), e.message.as_str()),
        ("script", "required when kind = \"scripted\"")
    );
    let e = invalid("kind = \"scripted\"\nscript = \"s.json\"\nbase_url = \"http://x.example\"");
    assert_eq!(e.key, "base_url");
    let e = invalid("kind = \"anthropic\"\nscript = \"s.json\"");
    assert_eq!(e.key, "script");
    let e = invalid("kind = \"anthropic\"\nbase_url = \"ftp://example.com\"");
    assert_eq!(e.key, "base_url");
    assert!(
        e.to_string().starts_with("base_url: must be an http"),
        "{e}"
    );

    let e = invalid("kind = \"anthropic\"\napi_key_env = \"sk-ant-api03-SECRET\"");
    assert_eq!(e.key, "api_key_env");
    assert!(
        !e.to_string().contains("SECRET"),
        "the value is not echoed: {e}"
    );

    let e = invalid("kind = \"openai\"\nretry = { max_attempts = 0 }");
    assert_eq!(e.key, "retry.max_attempts");
    let e = invalid("kind = \"openai\"\nretry = { base_delay_ms = 5000, max_delay_ms = 10 }");
    assert_eq!(e.key, "retry.base_delay_ms");
    let e = invalid("kind = \"openai\"\nbreaker = { failure_threshold = 0 }");
    assert_eq!(e.key, "breaker.failure_threshold");
    let e = invalid("kind = \"openai\"\ntimeouts = { connect_ms = 0 }");
    assert_eq!(e.key, "timeouts.connect_ms");
}

#[test]
fn building_needs_the_key_variable_to_be_set() {
    let cfg =
        parse("kind = \"anthropic\"\napi_key_env = \"NIGHTSHIFT_TEST_UNSET_KEY_VAR\"").unwrap();
    let e = cfg.build_provider().err().expect("the variable is not set");
    assert_eq!(e.key, "api_key_env");
    assert!(
        e.message
            .contains("NIGHTSHIFT_TEST_UNSET_KEY_VAR is not set"),
        "{e}"
    );

    let local = parse("kind = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"").unwrap();
    assert_eq!(local.build_provider().unwrap().name(), "openai");

    let e = parse("kind = \"scripted\"\nscript = \"/nonexistent/nightshift/script.json\"")
        .unwrap()
        .build_provider()
        .err()
        .unwrap();
    assert_eq!(e.key, "script");
    assert!(
        e.message.contains("/nonexistent/nightshift/script.json"),
        "{e}"
    );
}

#[test]
fn a_key_that_cannot_be_a_header_is_refused_when_the_provider_is_built() {
    let key = || ApiKey::new("sk-line\nbreak");
    let e = AnthropicProvider::new(AnthropicOptions {
        base_url: "http://127.0.0.1:9".into(),
        api_key: key(),
        stream: true,
        timeouts: HttpTimeouts::default(),
    })
    .unwrap_err();
    assert!(matches!(e, SetupError::KeyNotAHeader), "{e:?}");
    assert_eq!(
        e.to_string(),
        "the API key contains characters not allowed in a header"
    );
    let e = OpenAiProvider::new(OpenAiOptions {
        base_url: "http://127.0.0.1:9/v1".into(),
        api_key: Some(key()),
        stream: true,
        timeouts: HttpTimeouts::default(),
    })
    .unwrap_err();
    assert!(matches!(e, SetupError::KeyNotAHeader), "{e:?}");
    assert!(!format!("{e:?}").contains("sk-line"));
}
