//! The scripted provider: turn selection by the number of assistant messages (so a resumed
//! conversation gets the same next turn), clear errors for a bad or exhausted script,
//! request recording, and cancellable delays.

use std::path::PathBuf;
use std::time::Duration;

use nightshift_llm::{
    CancellationToken, ContentBlock, Message, ModelRequest, Provider, ProviderConfig,
    ProviderError, ProviderKind, Role, ScriptError, ScriptedProvider, ScriptedTurn, StopReason,
    Usage,
};
use serde_json::json;

const SCRIPT: &str = r#"[
  {"content": [{"type": "text", "text": "Let me look."},
               {"type": "tool_use", "id": "toolu_1", "name": "read_file",
                "input": {"path": "README.md"}}],
   "stop_reason": "tool_use",
   "usage": {"input_tokens": 120, "output_tokens": 30}},
  {"content": [{"type": "text", "text": "Done."}], "stop_reason": "end_turn"}
]"#;

/// A scratch directory unique to this test process and name, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("nightshift-llm-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn file(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn req(messages: Vec<Message>) -> ModelRequest {
    ModelRequest {
        model: "scripted-model".into(),
        system: "sys".into(),
        messages,
        tools: vec![],
        max_tokens: 100,
        stop_sequences: vec![],
        thinking: None,
        effort: None,
    }
}

async fn send(
    p: &ScriptedProvider,
    r: &ModelRequest,
) -> Result<nightshift_llm::ModelResponse, ProviderError> {
    p.send(r, &CancellationToken::new()).await
}

#[tokio::test]
async fn the_turn_is_chosen_by_the_number_of_assistant_messages() {
    let dir = Scratch::new("turns");
    let p = ScriptedProvider::from_file(dir.file("s.json", SCRIPT)).unwrap();
    let fresh = req(vec![Message::user_text("Summarise the README")]);
    let first = send(&p, &fresh).await.unwrap();
    assert_eq!(first.stop_reason, StopReason::ToolUse);
    assert_eq!(
        first.usage,
        Usage {
            input_tokens: 120,
            output_tokens: 30,
            ..Usage::default()
        }
    );
    assert_eq!(first.model, "scripted-model");
    assert_eq!(
        first.message().tool_uses().next().unwrap().input,
        &json!({"path": "README.md"})
    );

    let mut convo = fresh.messages.clone();
    convo.push(first.message());
    convo.push(Message {
        role: Role::User,
        content: vec![ContentBlock::ToolResult {
            tool_use_id: "toolu_1".into(),
            content: "# Nightshift".into(),
            is_error: false,
        }],
    });
    let second = send(&p, &req(convo.clone())).await.unwrap();
    assert_eq!(
        (second.stop_reason.clone(), second.message().text()),
        (StopReason::EndTurn, "Done.".to_string())
    );

    // A crash before the reply was stored resends the same conversation: same turn again.
    let again = send(&p, &req(convo)).await.unwrap();
    assert_eq!(again, second);
    // And a fresh provider (a new process) agrees.
    let restarted = ScriptedProvider::from_file(dir.0.join("s.json")).unwrap();
    assert_eq!(send(&restarted, &fresh).await.unwrap(), first);
}

#[tokio::test]
async fn running_out_of_turns_names_the_script() {
    let dir = Scratch::new("exhausted");
    let path = dir.file("short.json", SCRIPT);
    let p = ScriptedProvider::from_file(&path).unwrap();
    let a = Message {
        role: Role::Assistant,
        content: vec![ContentBlock::Text { text: "x".into() }],
    };
    let err = send(
        &p,
        &req(vec![
            Message::user_text("q"),
            a.clone(),
            Message::user_text("q"),
            a,
            Message::user_text("q"),
        ]),
    )
    .await
    .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, ProviderError::Script { .. }));
    assert!(text.contains(&path.display().to_string()), "{text}");
    assert!(
        text.contains("ran out of turns")
            && text.contains("2 assistant message(s)")
            && text.contains("only 2 turn(s)"),
        "{text}"
    );
    assert!(!err.is_retryable());
}

#[test]
fn a_malformed_or_missing_script_is_a_clear_error() {
    let dir = Scratch::new("malformed");
    let missing_stop = dir.file("a.json", "[\n  {\"content\": []}\n]");
    let err = ScriptedProvider::from_file(&missing_stop).unwrap_err();
    assert!(
        matches!(&err, ScriptError::Parse { line: 2, .. }),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains(&missing_stop.display().to_string()) && text.contains("stop_reason"),
        "{text}"
    );

    let unknown = dir.file(
        "b.json",
        r#"[{"content": [], "stop_reason": "end_turn", "delay": 5}]"#,
    );
    let text = ScriptedProvider::from_file(&unknown)
        .unwrap_err()
        .to_string();
    assert!(text.contains("unknown field `delay`"), "{text}");

    let bad_block = dir.file(
        "c.json",
        r#"[{"content": [{"type": "image"}], "stop_reason": "end_turn"}]"#,
    );
    assert!(
        ScriptedProvider::from_file(&bad_block)
            .unwrap_err()
            .to_string()
            .contains("image")
    );

    let empty = dir.file("d.json", "[]");
    assert!(matches!(
        ScriptedProvider::from_file(&empty),
        Err(ScriptError::Empty { .. })
    ));

    let nowhere = dir.0.join("nope.json");
    let text = ScriptedProvider::from_file(&nowhere)
        .unwrap_err()
        .to_string();
    assert!(
        text.starts_with("cannot read script") && text.contains("nope.json"),
        "{text}"
    );
}

#[tokio::test]
async fn every_request_is_recorded_as_its_exact_bytes() {
    let p = ScriptedProvider::new(vec![ScriptedTurn::text("hi")]);
    let mut r = req(vec![Message::user_text("hello")]);
    r.tools.push(nightshift_llm::ToolSpec {
        name: "t".into(),
        description: "d".into(),
        input_schema: json!({"type": "object", "properties": {}}),
    });
    send(&p, &r).await.unwrap();
    send(&p, &r.clone()).await.unwrap();
    let recorded = p.requests();
    assert_eq!(recorded.len(), 2);
    assert_eq!(recorded[0], recorded[1]);
    assert_eq!(recorded[0], ScriptedProvider::request_bytes(&r));
    let back: ModelRequest = serde_json::from_slice(&recorded[0]).unwrap();
    assert_eq!(back, r);
    assert_eq!(
        String::from_utf8(recorded[0].clone()).unwrap(),
        r#"{"max_tokens":100,"messages":[{"content":[{"text":"hello","type":"text"}],"role":"user"}],"model":"scripted-model","system":"sys","tools":[{"description":"d","input_schema":{"properties":{},"type":"object"},"name":"t"}]}"#
    );
}

#[tokio::test(start_paused = true)]
async fn delay_ms_is_waited_and_cancellable() {
    let slow = ScriptedTurn {
        delay_ms: 5_000,
        ..ScriptedTurn::text("late")
    };
    let p = std::sync::Arc::new(ScriptedProvider::new(vec![slow]));
    let started = tokio::time::Instant::now();
    send(&p, &req(vec![Message::user_text("q")])).await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(5_000));

    let cancel = CancellationToken::new();
    let call = tokio::spawn({
        let (p, cancel) = (p.clone(), cancel.clone());
        async move { p.send(&req(vec![Message::user_text("q")]), &cancel).await }
    });
    while p.requests().len() < 2 {
        tokio::task::yield_now().await; // until the call is inside its delay
    }
    let at = tokio::time::Instant::now();
    cancel.cancel();
    assert!(matches!(call.await.unwrap(), Err(ProviderError::Cancelled)));
    assert!(at.elapsed() < Duration::from_millis(5_000));
}

#[tokio::test]
async fn a_scripted_config_builds_a_working_provider() {
    let dir = Scratch::new("config");
    let mut config = ProviderConfig::new(ProviderKind::Scripted);
    config.script = Some(dir.file("s.json", SCRIPT));
    let p = config.build_provider().unwrap();
    assert_eq!(p.name(), "scripted");
    let resp = p
        .send(
            &req(vec![Message::user_text("q")]),
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(resp.message().text(), "Let me look.");
}
