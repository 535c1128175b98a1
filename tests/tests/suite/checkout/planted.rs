//! A `.git` planted in the workspace by a run's commands never steers the daemon's git: not
//! at a fresh checkout (made in staging) and not when a run resumes (kept from the daemon's
//! record, or replaced from staging), so nothing planted ever runs.

use std::path::Path;

use nightshift_tests::git_http::git;

use super::{REPO, TOKEN, host, run, spec};

/// A workspace the run's own commands could write: a `.git` planted there with a filter (and
/// attributes applying it to every file) that would run a command of the model's choosing as
/// the daemon, outside the sandbox. The fresh checkout is made in the daemon's staging
/// directory, so the planted configuration is never read: the command never runs, and the
/// workspace ends up holding the clean checkout.
#[tokio::test]
async fn a_git_config_planted_in_the_workspace_never_steers_the_daemons_git() {
    let host = host().await;
    let dest = tempfile::tempdir().unwrap();
    let pwned = dest.path().with_extension("pwned");
    let git_dir = dest.path().join(".git");
    std::fs::create_dir_all(git_dir.join("info")).unwrap();
    std::fs::write(git_dir.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::write(
        git_dir.join("config"),
        format!(
            "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\
             [filter \"x\"]\n\tsmudge = touch {} && cat\n\tclean = cat\n\
             [http]\n\tproxy = http://127.0.0.1:9\n",
            pwned.display()
        ),
    )
    .unwrap();
    std::fs::write(git_dir.join("info/attributes"), "* filter=x\n").unwrap();
    std::fs::create_dir_all(git_dir.join("objects")).unwrap();
    std::fs::create_dir_all(git_dir.join("refs")).unwrap();

    let done = run(
        &host,
        &spec(REPO, "main", Some(1)),
        Some(TOKEN),
        dest.path(),
        Some(&host.shas[2]),
    )
    .await
    .unwrap();
    assert_eq!(done.commit, host.shas[2]);
    assert!(!done.reused);
    assert!(!pwned.exists(), "the planted filter ran as the daemon");
    let config = std::fs::read_to_string(git_dir.join("config")).unwrap();
    assert!(
        !config.contains("filter") && !config.contains("proxy"),
        "the workspace holds the clean checkout's config: {config}"
    );
}

/// What a run's command can plant in its workspace's `.git` to run code as whoever runs git
/// there next: an askpass program with a promisor remote and its objects deleted (a lazy
/// fetch that asks for credentials), fsmonitor, hooks, a credential helper, a filter, an
/// ssh command, an upload-pack. Each would `touch` a file outside the workspace.
fn plant_everything(dest: &Path, pwned: &Path, remote: &str) {
    let git_dir = dest.join(".git");
    let script = git_dir.join("ap.sh");
    std::fs::write(
        &script,
        format!("#!/bin/sh\ntouch {}\necho x\n", pwned.display()),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let run = script.display();
    let config = format!(
        "[core]\n\trepositoryformatversion = 1\n\tbare = false\n\taskPass = {run}\n\
         \tfsmonitor = {run}\n\thooksPath = {hooks}\n\tsshCommand = {run}\n\
         [extensions]\n\tpartialClone = origin\n\
         [remote \"origin\"]\n\turl = {remote}\n\tpromisor = true\n\tuploadpack = {run}\n\
         [credential]\n\thelper = !{run}\n\
         [filter \"x\"]\n\tsmudge = {run}\n\tclean = {run}\n\tprocess = {run}\n",
        hooks = git_dir.join("hooks").display(),
    );
    std::fs::write(git_dir.join("config"), config).unwrap();
    std::fs::create_dir_all(git_dir.join("info")).unwrap();
    std::fs::write(git_dir.join("info/attributes"), "* filter=x\n").unwrap();
    std::fs::create_dir_all(git_dir.join("hooks")).unwrap();
    for hook in ["post-checkout", "reference-transaction", "pre-auto-gc"] {
        std::os::unix::fs::symlink(&script, git_dir.join("hooks").join(hook)).unwrap();
    }
    std::fs::remove_dir_all(git_dir.join("objects")).unwrap();
    std::fs::create_dir_all(git_dir.join("objects/pack")).unwrap();
}

/// The attack of issue 40 on a resume: the workspace's `.git` planted after the checkout
/// (objects deleted, askpass behind a promisor remote answering 401, and every other hook
/// into git). Resuming at the pinned commit keeps the workspace from the daemon's record:
/// no git runs there, nothing planted runs, and the host is not asked. Pinned to another
/// commit, the fresh checkout is made in staging and replaces the planted `.git`, still
/// running nothing planted.
#[tokio::test]
async fn a_planted_git_config_never_runs_when_a_run_resumes() {
    let host = host().await;
    let root = tempfile::tempdir().unwrap();
    let dest = root.path().join("ws");
    let pwned = root.path().join("pwned");
    let first = run(
        &host,
        &spec(REPO, "main", Some(1)),
        Some(TOKEN),
        &dest,
        None,
    )
    .await
    .unwrap();
    plant_everything(
        &dest,
        &pwned,
        host.base.join(&format!("{REPO}.git")).unwrap().as_str(),
    );
    let asked = host.fake.requests().len();

    let resumed = run(
        &host,
        &spec(REPO, "main", Some(1)),
        Some(TOKEN),
        &dest,
        Some(&first.commit),
    )
    .await
    .unwrap();
    assert!(resumed.reused, "{resumed:?}");
    assert_eq!(host.fake.requests().len(), asked, "nothing was fetched");
    assert!(!pwned.exists(), "planted code ran as the daemon");

    let moved = run(
        &host,
        &spec(REPO, "main", Some(1)),
        Some(TOKEN),
        &dest,
        Some(&host.shas[1]),
    )
    .await
    .unwrap();
    assert!(!moved.reused);
    assert!(!pwned.exists(), "planted code ran as the daemon");
    let config = std::fs::read_to_string(dest.join(".git/config")).unwrap();
    assert!(
        !config.contains("askPass"),
        "the clean checkout's config: {config}"
    );
    assert_eq!(git(&dest, &["rev-parse", "HEAD"]), host.shas[1]);
}
