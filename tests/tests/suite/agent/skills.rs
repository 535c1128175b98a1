//! Skills in the loop: named in the system prompt, read on demand with `load_skill` (whole,
//! then one of its files), logged as read-only results, and sent in the same bytes after a
//! crash and a resume even when the skill's files changed meanwhile.

use std::sync::Arc;

use crate::fakes::*;
use nightshift_agent::{RunEvent, ToolClass};
use nightshift_llm::StopReason;
use nightshift_store::RunStatus;
use nightshift_tests::TestDb;
use serde_json::json;

pub(super) async fn skills_are_listed_loaded_and_stable_across_a_crash(db: &TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let skill = dir.path().join("release-notes");
    std::fs::create_dir_all(skill.join("templates")).unwrap();
    std::fs::write(
        skill.join("SKILL.md"),
        "---\nname: release-notes\ndescription: Writes release notes. Use for changelogs.\n---\n\
         Group by label.\n",
    )
    .unwrap();
    std::fs::write(skill.join("templates/notes.md"), "## Fixes\n").unwrap();
    let model = ScriptModel::new(vec![
        reply(
            vec![call_with(
                "s1",
                "load_skill",
                json!({"name": "release-notes"}),
            )],
            StopReason::ToolUse,
        ),
        reply(
            vec![call_with(
                "s2",
                "load_skill",
                json!({"name": "release-notes", "file": "templates/notes.md"}),
            )],
            StopReason::ToolUse,
        ),
        reply(
            vec![call_with(
                "s3",
                "load_skill",
                json!({"name": "release-notes", "file": "../../etc/passwd"}),
            )],
            StopReason::ToolUse,
        ),
        reply(vec![text("notes written")], StopReason::EndTurn),
    ]);
    *model.stall_at.lock().unwrap() = Some(2);
    let a = agent(json!({"skills": [skill.to_str().unwrap()]}));
    let h = Harness::new(db, a, model.clone(), Arc::new(FakeTools::default())).await;
    let run_id = h.enqueue("helper", "write the notes").await;
    h.crash_when(&model.stalled).await;
    // The skill changes while the run is down: what it already read stays as it was logged.
    std::fs::write(skill.join("templates/notes.md"), "## Changed\n").unwrap();
    *model.stall_at.lock().unwrap() = None;
    h.run_once().await;
    let (status, _, error) = h.status(&run_id).await;
    assert_eq!(status, RunStatus::Succeeded, "{error:?}");

    let first = model.request(0);
    let system = first.system.clone();
    assert!(
        system.contains("# Skills")
            && system.contains("- release-notes: Writes release notes. Use for changelogs."),
        "{system}"
    );
    assert!(
        !system.contains("Group by label"),
        "only the name and description"
    );
    assert!(first.tools.iter().any(|t| t.name == "load_skill"));
    let requests = model.requests();
    assert_eq!(requests.len(), 5, "first, second, crashed, resumed, last");
    assert_eq!(
        requests[2], requests[3],
        "the resumed request is the crashed one, byte for byte"
    );

    let events = h.events(&run_id).await;
    let result = |id: &str| {
        events
            .iter()
            .find_map(|e| match e {
                RunEvent::ToolResult {
                    call_id,
                    content,
                    is_error,
                    ..
                } if call_id == id => Some((content.clone(), *is_error)),
                _ => None,
            })
            .unwrap()
    };
    let (body, failed) = result("s1");
    assert!(!failed && body.contains("Group by label.") && body.contains("templates/notes.md"));
    assert_eq!(result("s2"), ("## Fixes\n".to_string(), false));
    let (escape, failed) = result("s3");
    assert!(failed && !escape.contains("root:"), "{escape}");
    let classes: Vec<ToolClass> = events
        .iter()
        .filter_map(|e| match e {
            RunEvent::ToolStarted { durability, .. } => Some(*durability),
            _ => None,
        })
        .collect();
    assert_eq!(classes, [ToolClass::ReadOnly; 3]);
}
