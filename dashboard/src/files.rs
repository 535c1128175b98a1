//! Files a run left on this daemon's disk, shown read-only: the artifact holding a tool
//! output's whole text (the timeline shows its head and tail), and the newest output of a
//! background task that is still running.
//!
//! Guarantees:
//! - **Already redacted.** Both are written by the tools with every secret value redacted as
//!   the bytes stream (`nightshift_tools::output`, `nightshift_tools::background`); nothing
//!   here reads anything else.
//! - **No way out of the data directory.** A run id, artifact name or task id is accepted
//!   only as `[A-Za-z0-9._-]`, not starting with a dot ([`safe_name`]), so a path is always
//!   `<data_dir>/artifacts/<run>/<name>` or `<data_dir>/tasks/<task>.log`.
//! - **Honest about where files live.** With several daemons on one PostgreSQL, a file is on
//!   the disk of the daemon that ran the call; elsewhere the answer says so (404), it never
//!   pretends the output is empty.
//! - **Served as text.** `text/plain`, inline, under the dashboard's CSP plus `sandbox`, so
//!   an artifact holding HTML is shown as its characters, never run.

use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;

use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::{DashboardState, layout};

/// Bytes of a running task's newest output the timeline shows.
pub const TASK_TAIL_BYTES: u64 = 2048;

/// Where this daemon keeps runs' files (`[runtime] data_dir`).
#[derive(Debug, Clone)]
pub struct Files {
    pub data_dir: PathBuf,
}

/// True for a name that is one plain path segment (pure).
pub fn safe_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 200
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The artifact a tool's result names (`… saved as artifact NAME …`), if any (pure).
pub fn artifact_named(result: &str) -> Option<String> {
    let at = result.rfind("saved as artifact ")? + "saved as artifact ".len();
    let name: String = result[at..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        .collect();
    let name = name.trim_end_matches('.').to_string();
    safe_name(&name).then_some(name)
}

impl Files {
    pub fn artifact_path(&self, run_id: &str, name: &str) -> Option<PathBuf> {
        (safe_name(run_id) && safe_name(name))
            .then(|| self.data_dir.join("artifacts").join(run_id).join(name))
    }

    pub fn task_log_path(&self, task_id: &str) -> Option<PathBuf> {
        safe_name(task_id).then(|| self.data_dir.join("tasks").join(format!("{task_id}.log")))
    }

    /// The newest output of task `task_id`, when its log is on this disk.
    pub fn task_tail(&self, task_id: &str) -> Option<String> {
        let path = self.task_log_path(task_id)?;
        tail_of(&path, TASK_TAIL_BYTES).ok()
    }
}

/// The last `max` bytes of the file at `path`, as text (a character cut by the start is
/// dropped; other bad UTF-8 becomes U+FFFD).
pub fn tail_of(path: &std::path::Path, max: u64) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    let start = len.saturating_sub(max);
    file.seek(SeekFrom::Start(start))?;
    let mut bytes = Vec::new();
    file.take(max).read_to_end(&mut bytes)?;
    let skip = if start > 0 {
        bytes
            .iter()
            .take(3)
            .take_while(|b| (**b & 0xC0) == 0x80)
            .count()
    } else {
        0
    };
    Ok(String::from_utf8_lossy(&bytes[skip..]).into_owned())
}

/// `GET /ui/runs/{id}/artifacts/{name}`: the artifact as plain text.
pub async fn artifact(
    State(state): State<DashboardState>,
    Path((run_id, name)): Path<(String, String)>,
) -> Response {
    let not_here =
        |why: &str| layout::message(&state, StatusCode::NOT_FOUND, "No such artifact", why);
    let Some(files) = state.files.as_deref() else {
        return not_here("this server keeps no run files (it has no data directory)");
    };
    let Some(path) = files.artifact_path(&run_id, &name) else {
        return not_here("an artifact name is letters, digits, '.', '_' and '-' only");
    };
    match tokio::fs::read(&path).await {
        Ok(bytes) => {
            let mut resp = String::from_utf8_lossy(&bytes).into_owned().into_response();
            let h = resp.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            h.insert(
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static("sandbox; default-src 'none'"),
            );
            resp
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => not_here(&format!(
            "artifact {name} of run {run_id} is not on this daemon's disk; with several daemons it is on the one that ran the call"
        )),
        Err(e) => layout::message(
            &state,
            StatusCode::INTERNAL_SERVER_ERROR,
            "The artifact could not be read",
            &e.to_string(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_segments_are_names() {
        for ok in [
            "c1-stdout.txt",
            "01a2377e-4f46-7148-9f93-a69ac59f65c3",
            "t_9",
        ] {
            assert!(safe_name(ok), "{ok}");
        }
        for bad in [
            "",
            "..",
            ".hidden",
            "a/b",
            "a\\b",
            "%2e%2e",
            "a b",
            &"x".repeat(201),
        ] {
            assert!(!safe_name(bad), "{bad}");
        }
    }

    #[test]
    fn the_artifact_is_read_from_the_tools_marker() {
        let cut = "head\n[… 9900 bytes (12 lines) cut; full output saved as artifact call_1-stdout.txt …]\ntail";
        assert_eq!(artifact_named(cut).as_deref(), Some("call_1-stdout.txt"));
        let first = "[… cut; the first 1000 bytes are saved as artifact c-big.txt]";
        assert_eq!(artifact_named(first).as_deref(), Some("c-big.txt"));
        assert_eq!(artifact_named("no marker here"), None);
        assert_eq!(artifact_named("saved as artifact ../../etc/passwd"), None);
    }

    #[test]
    fn a_tail_starts_on_a_character() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.log");
        std::fs::write(&path, "aé—z").unwrap(); // 1 + 2 + 3 + 1 bytes
        assert_eq!(tail_of(&path, 4).unwrap(), "—z");
        assert_eq!(
            tail_of(&path, 5).unwrap(),
            "—z",
            "a cut continuation byte is dropped"
        );
        assert_eq!(tail_of(&path, 100).unwrap(), "aé—z");
    }
}
