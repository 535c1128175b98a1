//! Secrets through a real `nightshift serve`: a model that makes commands print every secret
//! the daemon holds — plainly, base64 (three alignments and base64url), hex (both cases),
//! percent-encoded, JSON-escaped, reversed, and across the output's head and tail cuts,
//! `read_file`'s line cut and `grep`'s cut — that puts secrets in its own tool inputs and
//! final text, and a provider whose 401 echoes the key. Afterwards [`sweep::Sweep`] searches
//! every byte the daemon wrote or sent (database dump with checkpoints decompressed, data
//! directory, logs, API answers, notification bodies, requests to the provider) for any
//! secret, any covered encoding of one, or any 8-character piece of one.
//!
//! - `sweep`: the reusable sweep.
//! - `leaks`: the daemon and its fakes, and the cases.
//! - `partial`: pieces of secrets — prefixes, suffixes, middle runs, a print paused
//!   mid-secret in a background task, a notify receiver's error echoing secrets — and the same
//!   sweep, which finds no run of 8 characters of any.

mod leaks;
mod partial;
pub mod sweep;

use std::path::Path;
use std::time::Duration;

use crate::process::Proc;

/// Waits up to 30 s for `serve` to answer `GET {api}/healthz`; fails with its stderr (the
/// file at `stderr`) if it exits first.
async fn wait_until_serving(serve: &mut Proc, http: &reqwest::Client, api: &str, stderr: &Path) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = serve.child.try_wait().unwrap() {
            panic!(
                "serve exited ({status}): {}",
                std::fs::read_to_string(stderr).unwrap_or_default()
            );
        }
        let up = http.get(format!("{api}/healthz")).send().await;
        if up.is_ok_and(|r| r.status().is_success()) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the API did not answer within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
