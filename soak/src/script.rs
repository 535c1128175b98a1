//! What every soak run is scripted to do, and the daemon config that runs it (pure: text in,
//! text out; the binary writes the files).
//!
//! Two agents, `soak-short` and `soak-long`, each with a scripted provider. Tool turn `i`
//! of an agent's script is one reply holding a text block `soak turn {i}` and one `tool_use`
//! of each [`CLASSES`] tool with input `{"turn": i}`; the last reply is the text
//! [`final_text`] with `end_turn`. The scripted provider answers a request with the turn
//! whose index is the number of assistant messages already in it, so a run that resumes
//! after a crash gets the same next turn, and the marker text tells which script turn an
//! `assistant_message` event is.

use std::path::Path;

use serde_json::{Value, json};

/// The three durability classes, with the command tool that has each one. Every tool appends
/// `run_id call_id idempotency_key class` to the ledger when it runs.
pub const CLASSES: [(&str, &str); 3] = [
    ("side_effect", "soak_side_effect"),
    ("idempotent", "soak_idempotent"),
    ("read_only", "soak_read_only"),
];

/// One scripted agent: its name and how many tool turns come before its final text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentScript {
    pub name: &'static str,
    pub tool_turns: usize,
}

/// The agents runs alternate between (run `i` uses `AGENTS[i % 2]`).
pub const AGENTS: [AgentScript; 2] = [
    AgentScript {
        name: "soak-short",
        tool_turns: 2,
    },
    AgentScript {
        name: "soak-long",
        tool_turns: 4,
    },
];

/// The agent script with this name.
pub fn agent(name: &str) -> Option<&'static AgentScript> {
    AGENTS.iter().find(|a| a.name == name)
}

/// The marker text of tool turn `i`.
pub fn turn_text(i: usize) -> String {
    format!("soak turn {i}")
}

/// The final reply's text (also the run's expected `result`).
pub fn final_text(agent: &AgentScript) -> String {
    format!(
        "soak done: {} after {} tool turns",
        agent.name, agent.tool_turns
    )
}

/// Which script turn a reply is, from its text blocks: `Some(i)` for `soak turn i`,
/// `Some(tool_turns)` for the final text, `None` for anything the script never sends.
pub fn turn_of_reply(agent: &AgentScript, texts: &[&str]) -> Option<usize> {
    let fin = final_text(agent);
    texts.iter().find_map(|t| {
        if *t == fin {
            return Some(agent.tool_turns);
        }
        t.strip_prefix("soak turn ")
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|n| *n < agent.tool_turns)
    })
}

/// The script file's JSON: `tool_turns` tool replies (each waits `delay_ms` first, so kills
/// land inside model calls too) and the final text.
pub fn script_json(agent: &AgentScript, delay_ms: u64) -> Value {
    let mut turns: Vec<Value> = (0..agent.tool_turns)
        .map(|i| {
            let mut content = vec![json!({"type": "text", "text": turn_text(i)})];
            for (class, tool) in CLASSES {
                content.push(json!({"type": "tool_use", "id": format!("t{i}_{class}"),
                                    "name": tool, "input": {"turn": i}}));
            }
            json!({"content": content, "stop_reason": "tool_use", "delay_ms": delay_ms})
        })
        .collect();
    turns.push(
        json!({"content": [{"type": "text", "text": final_text(agent)}],
                      "stop_reason": "end_turn", "delay_ms": delay_ms}),
    );
    Value::Array(turns)
}

/// Everything a daemon's config needs that differs between daemons and backends.
#[derive(Debug, Clone)]
pub struct DaemonConfig<'a> {
    pub database_url: &'a str,
    pub schema: Option<&'a str>,
    pub port: u16,
    pub data_dir: &'a Path,
    /// The directory holding `script-<agent>.json` for every agent.
    pub script_dir: &'a Path,
    /// argv prefix of the tools: the soak binary itself (`<exe> tool`).
    pub tool_exe: &'a Path,
    pub ledger: &'a Path,
    /// How long each tool sleeps before and after its ledger line.
    pub tool_sleep_ms: u64,
}

/// A TOML string (JSON's string syntax is valid TOML).
fn q(s: &str) -> String {
    Value::from(s).to_string()
}

fn path(p: &Path) -> String {
    q(&p.display().to_string())
}

/// The `nightshift.toml` text of one daemon: short leases and heartbeats so that a killed
/// daemon's jobs are rescued within about two seconds, quick retries, three tools, two agents;
/// the tools run sandboxed, allowed to run the soak binary and to write the ledger's directory.
pub fn config_toml(c: &DaemonConfig<'_>) -> String {
    let mut out = format!("[database]\nurl = {}\n", q(c.database_url));
    if let Some(schema) = c.schema {
        out += &format!("schema = {}\n", q(schema));
    }
    out += &format!(
        "\n[server]\naddress = \"127.0.0.1:{}\"\n\n\
         [worker]\nslots = 3\nlease_ms = 1500\nheartbeat_ms = 300\npoll_interval_ms = 100\n\
         shutdown_grace_ms = 5000\nretry_base_ms = 200\nretry_cap_ms = 2000\n\n\
         [runtime]\ndata_dir = {}\n\n[sandbox]\nread = [{}]\nwrite = [{}]\n\n",
        c.port,
        path(c.data_dir),
        path(c.tool_exe.parent().unwrap_or(Path::new("/"))),
        path(c.ledger.parent().unwrap_or(Path::new("/"))),
    );
    let schema = "{ type = \"object\", properties = { turn = { type = \"integer\", minimum = 0 } }, \
                  required = [\"turn\"], additionalProperties = false }";
    for (class, tool) in CLASSES {
        let argv = json!([
            c.tool_exe.display().to_string(),
            "tool",
            "--ledger",
            c.ledger.display().to_string(),
            "--class",
            class,
            "--sleep-ms",
            c.tool_sleep_ms.to_string()
        ]);
        out += &format!(
            "[[command_tools]]\nname = {}\ndescription = \"Soak tool ({class}): appends one line \
             to the soak ledger.\"\ncommand = {argv}\nclass = {}\ninput_schema = {}\n\
             timeout_seconds = 30\n\n",
            q(tool),
            q(class),
            schema,
        );
    }
    for agent in &AGENTS {
        let tools: Vec<&str> = CLASSES.iter().map(|(_, t)| *t).collect();
        out += &format!(
            "[providers.{name}]\nkind = \"scripted\"\nscript = {}\n\n\
             [[agents]]\nname = {}\nprovider = {}\nmodel = \"scripted-1\"\ntools = {}\n\n",
            path(&c.script_dir.join(format!("script-{}.json", agent.name))),
            q(agent.name),
            q(agent.name),
            json!(tools),
            name = q(agent.name),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_is_known_by_its_marker_text() {
        let a = &AGENTS[0];
        assert_eq!(turn_of_reply(a, &["soak turn 1"]), Some(1));
        assert_eq!(turn_of_reply(a, &[&final_text(a)]), Some(a.tool_turns));
        assert_eq!(turn_of_reply(a, &["soak turn 9"]), None, "past the script");
        assert_eq!(turn_of_reply(a, &["hello"]), None);
    }

    #[test]
    fn the_script_has_one_call_of_each_class_per_tool_turn() {
        let a = &AGENTS[1];
        let s = script_json(a, 5);
        let turns = s.as_array().unwrap();
        assert_eq!(turns.len(), a.tool_turns + 1);
        for (i, t) in turns[..a.tool_turns].iter().enumerate() {
            let content = t["content"].as_array().unwrap();
            assert_eq!(content[0]["text"], turn_text(i));
            assert_eq!(content.len(), 1 + CLASSES.len());
            assert!(content[1..].iter().all(|b| b["input"]["turn"] == i));
        }
        assert_eq!(turns[a.tool_turns]["stop_reason"], "end_turn");
    }

    #[test]
    fn the_config_parses_as_toml() {
        let dir = Path::new("/tmp/soak");
        let text = config_toml(&DaemonConfig {
            database_url: "sqlite:///tmp/soak/db.sqlite",
            schema: None,
            port: 1234,
            data_dir: &dir.join("data"),
            script_dir: dir,
            tool_exe: Path::new("/bin/crash-soak"),
            ledger: &dir.join("shared/ledger"),
            tool_sleep_ms: 3,
        });
        let config = nightshift_runner::config::Config::parse(&text, "soak config").expect(&text);
        config.validate().expect("a valid config");
        assert_eq!(config.command_tools.len(), 3);
        assert_eq!(
            config.command_tools[0].input_schema["required"],
            json!(["turn"])
        );
        assert_eq!(config.agents.len(), AGENTS.len());
    }
}
