//! `run_command {command, timeout_seconds?}`: a shell command in the run's workspace
//! (side_effect).
//!
//! Guarantees: the command runs as `sh -c` in the workspace, in its own process group, with
//! the cleared environment of `process` (daemon secrets never leak into it); on timeout or
//! cancellation the whole group is killed within about `kill_grace` (SIGTERM, then SIGKILL);
//! stdout and stderr are captured together, cut at the output cap with the full text saved as
//! an artifact; the exit code (or signal, timeout, cancellation) is always reported, and any
//! ending but exit code 0 is `is_error`. A foreground `sleep` longer than
//! `max_foreground_sleep` is refused before anything runs, with advice to set a wakeup.
//!
//! With `background: true` the command is handed to the context's task supervisor (see
//! `background`) and the call returns its task id at once; the timeout then defaults to
//! `background_timeout` and is capped at `max_background_timeout`. Without a supervisor a
//! background call is an `is_error` output and nothing runs.

use std::sync::LazyLock;
use std::time::Duration;

use futures::future::BoxFuture;
use regex::Regex;
use serde::Deserialize;
use serde_json::{Value, json};

use super::parse_input;
use crate::context::ToolContext;
use crate::process::{self, Ending, ProcessSpec};
use crate::{Tool, ToolClass, ToolDefinition, ToolOutput};

/// `sleep N[smhd]` at the start of a command or after a separator / keyword.
static SLEEP: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?:^|[;&|(){}\n`]|\bthen\b|\bdo\b|\belse\b)\s*sleep\s+([0-9]*\.?[0-9]+)([smhd]?)")
        .expect("static regex is valid")
});

/// The longest `sleep` in `command` that would run in the foreground.
pub(crate) fn longest_foreground_sleep(command: &str) -> Option<Duration> {
    SLEEP
        .captures_iter(command)
        .filter_map(|caps| {
            let end = caps.get(0)?.end();
            let after = command[end..].trim_start_matches([' ', '\t']);
            let backgrounded = after.starts_with('&') && !after.starts_with("&&");
            if backgrounded {
                return None;
            }
            let n: f64 = caps[1].parse().ok()?;
            let unit = match &caps[2] {
                "m" => 60.0,
                "h" => 3600.0,
                "d" => 86400.0,
                _ => 1.0,
            };
            Duration::try_from_secs_f64(n * unit).ok()
        })
        .max()
}

/// `run_command`: see the module documentation.
#[derive(Debug, Default, Clone, Copy)]
pub struct RunCommand;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RunInput {
    command: String,
    timeout_seconds: Option<f64>,
    #[serde(default)]
    background: bool,
}

impl Tool for RunCommand {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: "run_command".into(),
            description: "Run a shell command (`sh -c`) in the workspace directory and return its \
                          combined stdout and stderr and its exit code. The environment is minimal \
                          (PATH, HOME, LANG, TERM and configured variables). Long outputs are cut \
                          (head and tail kept, full text saved as an artifact). Do not sleep to \
                          wait for something: end your turn with a wakeup instead. For a long \
                          command (a build, a test suite, a server) set background: true: you get \
                          a task id at once, can check it with task_output or stop it with \
                          task_stop, and get a reminder with its exit status and output when it \
                          ends (it wakes you if you are sleeping)."
                .into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "The shell command line."},
                    "timeout_seconds": {"type": "number", "exclusiveMinimum": 0, "description": "Kill the command after this many seconds."},
                    "background": {"type": "boolean", "description": "Run it in the background and return a task id at once."}
                },
                "required": ["command"],
                "additionalProperties": false
            }),
            class: ToolClass::SideEffect,
        }
    }

    fn call<'a>(&'a self, ctx: &'a ToolContext, input: Value) -> BoxFuture<'a, ToolOutput> {
        Box::pin(run(ctx, input))
    }
}

async fn run(ctx: &ToolContext, input: Value) -> ToolOutput {
    let input: RunInput = match parse_input("run_command", input) {
        Ok(i) => i,
        Err(e) => return e,
    };
    if input.command.trim().is_empty() {
        return ToolOutput::error("command is empty");
    }
    let limits = ctx.limits();
    if input.background {
        return start_background(ctx, &input).await;
    }
    if let Some(sleep) = longest_foreground_sleep(&input.command)
        && sleep > limits.max_foreground_sleep
    {
        return ToolOutput::error(format!(
            "refused: this command sleeps {} s in the foreground (the limit is {} s), which would \
             hold a worker while nothing happens. To wait, end your turn and set a wakeup for \
             when you want to continue; to start something long-running, run it in the \
             background and check on it after a wakeup.",
            sleep.as_secs_f64(),
            limits.max_foreground_sleep.as_secs_f64()
        ));
    }
    let (timeout, note) = match pick_timeout(
        input.timeout_seconds,
        limits.command_timeout,
        limits.max_command_timeout,
    ) {
        Ok(t) => t,
        Err(e) => return e,
    };
    let spec = ProcessSpec {
        program: "sh".into(),
        args: vec!["-c".into(), input.command.clone()],
        extra_env: Vec::new(),
        stdin: None,
        timeout,
        merge_stderr: true,
        label: "run_command".into(),
    };
    let result = match process::run(ctx, spec).await {
        Ok(r) => r,
        Err(e) => return ToolOutput::error(e.to_string()),
    };
    let mut content = result.output.text;
    if content.is_empty() {
        content.push_str("(no output)\n");
    } else if !content.ends_with('\n') {
        content.push('\n');
    }
    if result.pipe_left_open {
        content.push_str(
            "[a process that left the command's process group kept its output open; \
             later output is not shown]\n",
        );
    }
    content.push_str(&format!(
        "[{}; {:.2} s{note}]",
        process::describe(result.ending, timeout),
        result.elapsed.as_secs_f64()
    ));
    let is_error = result.ending != Ending::Exited(0);
    ToolOutput {
        content,
        is_error,
        artifact: result.output.artifact,
        unresolved: false,
    }
}

/// The timeout a call asked for (or `default`), capped at `max`, with a note for the model
/// when it was capped; an error output for a value that is not a positive number.
fn pick_timeout(
    asked: Option<f64>,
    default: Duration,
    max: Duration,
) -> Result<(Duration, String), ToolOutput> {
    let timeout = match asked {
        Some(s) if !(s.is_finite() && s > 0.0) => {
            return Err(ToolOutput::error(
                "timeout_seconds must be a positive number",
            ));
        }
        Some(s) => Duration::try_from_secs_f64(s).unwrap_or(max),
        None => default,
    };
    if timeout > max {
        Ok((max, format!(" (timeout capped at {} s)", max.as_secs_f64())))
    } else {
        Ok((timeout, String::new()))
    }
}

/// `background: true`: start the command as a task and return its id.
async fn start_background(ctx: &ToolContext, input: &RunInput) -> ToolOutput {
    let Some(tasks) = ctx.tasks() else {
        return ToolOutput::error(
            "background commands are not available in this daemon; run the command without \
             background",
        );
    };
    let limits = ctx.limits();
    let (timeout, note) = match pick_timeout(
        input.timeout_seconds,
        limits.background_timeout,
        limits.max_background_timeout,
    ) {
        Ok(t) => t,
        Err(e) => return e,
    };
    match tasks.start(ctx, &input.command, timeout).await {
        Ok(id) => ToolOutput::ok(format!(
            "started background task {id}; it is stopped after {} s{note}. You get a reminder \
             with its exit status and output when it ends (it wakes you if you sleep); \
             task_output {{\"task_id\": \"{id}\"}} shows its progress and task_stop stops it.",
            timeout.as_secs_f64()
        )),
        Err(e) => ToolOutput::error(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_default_are_capped_and_must_be_positive() {
        let (default, max) = (Duration::from_secs(10), Duration::from_secs(60));
        assert_eq!(
            pick_timeout(None, default, max).unwrap(),
            (default, String::new())
        );
        assert_eq!(
            pick_timeout(Some(2.5), default, max).unwrap(),
            (Duration::from_millis(2500), String::new())
        );
        assert_eq!(
            pick_timeout(Some(600.0), default, max).unwrap(),
            (max, " (timeout capped at 60 s)".to_string())
        );
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let err = pick_timeout(Some(bad), default, max).unwrap_err();
            assert!(err.is_error && err.content.contains("positive"), "{bad}");
        }
    }

    #[test]
    fn finds_foreground_sleeps_only() {
        let s = |c: &str| longest_foreground_sleep(c).map(|d| d.as_secs());
        assert_eq!(s("sleep 600"), Some(600));
        assert_eq!(s("make && sleep 2m; echo"), Some(120));
        assert_eq!(s("while true; do sleep 1h; done"), Some(3600));
        assert_eq!(s("sleep 600 & echo started"), None);
        assert_eq!(s("sleep 600 && echo done"), Some(600));
        assert_eq!(s("echo nosleep 600"), None);
        assert_eq!(s("ls"), None);
    }
}
