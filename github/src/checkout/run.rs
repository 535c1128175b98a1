//! The checkout's doing: git run in the daemon's staging directory, and the finished tree
//! moved into the workspace.
//!
//! Guarantees: git never runs in the workspace (everything beneath it is the run's to
//! write); a workspace the daemon's record says holds the pinned commit is kept untouched; a
//! workspace with files that are not a checkout is never emptied (an error instead); the
//! record is removed before the workspace's contents are replaced and written again only once
//! the whole tree is in, and the caller is told (`touched`) before anything in the workspace
//! changes, so that it can empty what a failure left half-moved.

use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};

use super::decide::{Plan, classify, fetch_args, git_env};
use super::{Checkout, CheckoutError, record};
use crate::tokens::Secret;

/// What the workspace directory holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dest {
    Empty,
    /// A `.git` directory (a checkout, or what a failed one left).
    Checkout,
    /// Files, and no `.git` directory.
    Other,
}

/// Checks out `plan` into `dest` by way of `staging`; sets `touched` before it changes
/// anything in `dest`.
pub(super) async fn run(
    plan: &Plan,
    token: Option<&Secret>,
    dest: &Path,
    staging: &Path,
    touched: &AtomicBool,
) -> Result<Checkout, CheckoutError> {
    if let Some(kept) = keep_or_check(plan, dest, staging).await? {
        return Ok(kept);
    }
    let fetched = stage(plan, token, staging).await?;
    move_in(staging, dest, &fetched, touched).await?;
    Ok(Checkout {
        commit: fetched,
        reused: false,
    })
}

/// A `reason` the directory `path` cannot be used.
fn unusable(path: &Path, reason: String) -> CheckoutError {
    CheckoutError::Workspace {
        path: path.to_path_buf(),
        reason,
    }
}

/// Makes `dest` if there is none. The checkout it holds when the daemon's record says it holds
/// the pinned commit (kept as it is); else `None`, once `dest` is found empty or a checkout
/// (files that are not one are refused, never deleted).
async fn keep_or_check(
    plan: &Plan,
    dest: &Path,
    staging: &Path,
) -> Result<Option<Checkout>, CheckoutError> {
    tokio::fs::create_dir_all(dest)
        .await
        .map_err(|e| unusable(dest, format!("cannot create it: {e}")))?;
    // Kept when the daemon's record says it holds the run's commit: whatever the run did
    // since (commits, another branch, changed files, even `.git` removed) is its own work.
    if let Some(expect) = plan.expect.as_ref().filter(|_| plan.pinned)
        && record::holds(staging, dest, expect)
    {
        return Ok(Some(Checkout {
            commit: expect.clone(),
            reused: true,
        }));
    }
    let held = inspect(dest)
        .await
        .map_err(|e| unusable(dest, format!("cannot read it: {e}")))?;
    match held {
        Dest::Empty | Dest::Checkout => Ok(None),
        Dest::Other => Err(unusable(
            dest,
            "it holds files that are not a git checkout; they are not deleted: give the \
             checkout an empty directory"
                .into(),
        )),
    }
}

/// Fetches `plan` into a fresh `staging` and checks it out there, detached: the commit, once
/// it is the one the plan expects and `HEAD` is on it.
async fn stage(
    plan: &Plan,
    token: Option<&Secret>,
    staging: &Path,
) -> Result<String, CheckoutError> {
    let _ = tokio::fs::remove_dir_all(staging).await;
    tokio::fs::create_dir_all(staging)
        .await
        .map_err(|e| unusable(staging, format!("cannot create it: {e}")))?;
    let git = Git {
        plan,
        dest: staging,
        plain: git_env(&plan.git_base, None, &|name| std::env::var(name).ok()),
    };
    let fetched = git.fetch(token).await?;
    if let Some(expect) = &plan.expect
        && &fetched != expect
    {
        return Err(CheckoutError::CommitMismatch {
            repo: plan.repo.clone(),
            git_ref: plan.want.clone(),
            expected: expect.clone(),
            got: fetched,
        });
    }
    git.check_out(&fetched).await?;
    Ok(fetched)
}

/// Moves the tree checked out in `staging` into `dest`, then records that `dest` holds
/// `fetched`.
async fn move_in(
    staging: &Path,
    dest: &Path,
    fetched: &str,
    touched: &AtomicBool,
) -> Result<(), CheckoutError> {
    // The finished tree replaces whatever `dest` held; the record is gone while it does.
    record::forget(staging)
        .map_err(|e| unusable(staging, format!("cannot remove its record: {e}")))?;
    touched.store(true, Ordering::SeqCst);
    empty(dest)
        .await
        .map_err(|e| unusable(dest, format!("cannot empty the previous checkout: {e}")))?;
    move_entries(staging, dest)
        .await
        .map_err(|e| unusable(dest, format!("cannot move the checkout into it: {e}")))?;
    record::write(staging, dest, fetched)
        .map_err(|e| unusable(staging, format!("cannot write its record: {e}")))
}

/// Moves every entry of `from` into `to` (renames: both are on the daemon's data disk).
async fn move_entries(from: &Path, to: &Path) -> std::io::Result<()> {
    let mut entries = tokio::fs::read_dir(from).await?;
    while let Some(entry) = entries.next_entry().await? {
        tokio::fs::rename(entry.path(), to.join(entry.file_name())).await?;
    }
    Ok(())
}

/// The git processes of one checkout.
struct Git<'a> {
    plan: &'a Plan,
    dest: &'a Path,
    /// The environment without the token.
    plain: Vec<(String, String)>,
}

impl Git<'_> {
    /// Runs `git args`; `in_repo`: on the repository in `dest` (never one above it). Its
    /// stdout, trimmed.
    async fn run(
        &self,
        step: &'static str,
        args: &[&str],
        token: Option<&Secret>,
        in_repo: bool,
    ) -> Result<String, CheckoutError> {
        let env = match token {
            Some(_) => git_env(&self.plan.git_base, token, &|name| std::env::var(name).ok()),
            None => self.plain.clone(),
        };
        let mut command = tokio::process::Command::new("git");
        command
            .args(args)
            .env_clear()
            .envs(env)
            .current_dir(self.dest)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if in_repo {
            command
                .env("GIT_DIR", self.dest.join(".git"))
                .env("GIT_WORK_TREE", self.dest);
        }
        let output = command.output().await.map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => CheckoutError::GitMissing {
                reason: "no git on PATH".into(),
            },
            _ => CheckoutError::GitMissing {
                reason: e.to_string(),
            },
        })?;
        if output.status.success() {
            return Ok(String::from_utf8_lossy(&output.stdout).trim().to_string());
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        Err(classify(
            self.plan,
            step,
            output.status.to_string(),
            &stderr,
            token,
        ))
    }

    /// Makes a repository in `dest` and fetches the plan's ref or commit into it (with
    /// `token`, in `git fetch`'s environment only): the commit fetched.
    async fn fetch(&self, token: Option<&Secret>) -> Result<String, CheckoutError> {
        let dest = self.dest.to_string_lossy().into_owned();
        self.run(
            "init",
            &["init", "--quiet", "--template=", &dest],
            None,
            false,
        )
        .await?;
        let remote = self.plan.remote.as_str();
        self.run(
            "remote add",
            &["remote", "add", "origin", remote],
            None,
            true,
        )
        .await?;
        let fetch = fetch_args(self.plan);
        let fetch: Vec<&str> = fetch.iter().map(String::as_str).collect();
        self.run("fetch", &fetch, token, true).await?;
        self.run(
            "rev-parse",
            &["rev-parse", "--verify", "FETCH_HEAD^{commit}"],
            None,
            true,
        )
        .await
    }

    /// Checks `commit` out, detached, and makes sure `HEAD` is on it.
    async fn check_out(&self, commit: &str) -> Result<(), CheckoutError> {
        self.run(
            "checkout",
            &["checkout", "--quiet", "--detach", commit],
            None,
            true,
        )
        .await?;
        match self.head().await {
            Some(head) if head == commit => Ok(()),
            other => Err(CheckoutError::CommitMismatch {
                repo: self.plan.repo.clone(),
                git_ref: self.plan.want.clone(),
                expected: commit.to_string(),
                got: other.unwrap_or_else(|| "no commit".into()),
            }),
        }
    }

    /// The commit `HEAD` of the repository in `dest` is on, if any.
    async fn head(&self) -> Option<String> {
        let args = ["rev-parse", "--verify", "--quiet", "HEAD^{commit}"];
        self.run("rev-parse", &args, None, true).await.ok()
    }
}

async fn inspect(dest: &Path) -> std::io::Result<Dest> {
    let mut entries = tokio::fs::read_dir(dest).await?;
    let mut any = false;
    while let Some(entry) = entries.next_entry().await? {
        if entry.file_name() == ".git" && entry.file_type().await?.is_dir() {
            return Ok(Dest::Checkout);
        }
        any = true;
    }
    Ok(if any { Dest::Other } else { Dest::Empty })
}

/// Deletes everything in `dest` (not `dest` itself; symbolic links, not what they point to).
pub(super) async fn empty(dest: &Path) -> std::io::Result<()> {
    let mut entries = tokio::fs::read_dir(dest).await?;
    while let Some(entry) = entries.next_entry().await? {
        if entry.file_type().await?.is_dir() {
            tokio::fs::remove_dir_all(entry.path()).await?;
        } else {
            tokio::fs::remove_file(entry.path()).await?;
        }
    }
    Ok(())
}
