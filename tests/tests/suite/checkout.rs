//! `nightshift_github::checkout` against a fake git host on loopback
//! ([`nightshift_tests::git_http`]: `git http-backend` behind GitHub's token check), no
//! network:
//! - a pull request's head SHA at depth 1 is exactly that commit and one commit of history;
//!   a branch is its tip;
//! - a pinned commit the workspace already holds is kept without a request to the host (the
//!   run's files stay); on an empty workspace, or one on another commit, it is fetched by SHA
//!   even after the branch moved;
//! - the token is in no byte under the workspace (`.git` included) and not in the remote
//!   URL, though every request carried it;
//! - a refused token, no token, a missing repository and a missing ref or commit each end in
//!   their own error, leaving no checkout; files that are not a checkout are never deleted,
//!   and a checkout a cancelled call had not started to replace is kept.

use std::path::Path;
use std::time::Duration;

use base64::Engine;
use nightshift_github::{Checkout, CheckoutError, CheckoutSpec, Secret, checkout};
use nightshift_tests::git_http::{GitHttp, git, make_repo, set_ref};
use reqwest::Url;
use tokio_util::sync::CancellationToken;

const TOKEN: &str = "ghs_checkoutSuiteToken0123456789abcdef";
const REPO: &str = "octo-org/hello-world";

/// A fake host with `REPO`: `main` is three commits, `feature` the first.
struct Host {
    _root: tempfile::TempDir,
    fake: GitHttp,
    base: Url,
    shas: Vec<String>,
}

async fn host() -> Host {
    let root = tempfile::tempdir().unwrap();
    let shas = make_repo(
        root.path(),
        REPO,
        &[
            &[("README.md", "one\n")],
            &[("README.md", "two\n"), ("src/lib.rs", "pub fn two() {}\n")],
            &[("README.md", "three\n")],
        ],
    );
    set_ref(root.path(), REPO, "refs/heads/feature", &shas[0]);
    let fake = GitHttp::new(root.path());
    fake.accept(TOKEN);
    let base = fake.serve().await;
    Host {
        _root: root,
        fake,
        base,
        shas,
    }
}

fn spec(repo: &str, git_ref: &str, depth: Option<u32>) -> CheckoutSpec {
    CheckoutSpec {
        repo: repo.into(),
        git_ref: git_ref.into(),
        depth,
    }
}

async fn run(
    host: &Host,
    spec: &CheckoutSpec,
    token: Option<&str>,
    dest: &Path,
    pinned: Option<&str>,
) -> Result<Checkout, CheckoutError> {
    let token = token.map(Secret::new);
    let cancel = CancellationToken::new();
    let timeout = Duration::from_secs(120);
    checkout(
        &host.base,
        spec,
        token.as_ref(),
        dest,
        &dest.with_extension("staging"),
        pinned,
        timeout,
        &cancel,
    )
    .await
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_pull_requests_head_sha_is_checked_out_at_depth_one() {
    let host = host().await;
    let dest = tempfile::tempdir().unwrap();
    let head = &host.shas[1];
    let done = run(
        &host,
        &spec(REPO, head, Some(1)),
        Some(TOKEN),
        dest.path(),
        None,
    )
    .await
    .unwrap();
    assert_eq!(
        done,
        Checkout {
            commit: head.clone(),
            reused: false
        }
    );
    assert_eq!(&git(dest.path(), &["rev-parse", "HEAD"]), head);
    assert_eq!(git(dest.path(), &["rev-list", "--count", "HEAD"]), "1");
    let readme = std::fs::read_to_string(dest.path().join("README.md")).unwrap();
    assert_eq!(readme, "two\n");
    assert!(dest.path().join("src/lib.rs").is_file());
    assert_eq!(git(dest.path(), &["status", "--porcelain"]), "");
}

#[tokio::test]
async fn a_branch_is_checked_out_at_its_tip() {
    let host = host().await;
    for (branch, sha) in [("feature", &host.shas[0]), ("main", &host.shas[2])] {
        let dest = tempfile::tempdir().unwrap();
        let done = run(
            &host,
            &spec(REPO, branch, None),
            Some(TOKEN),
            dest.path(),
            None,
        )
        .await
        .unwrap();
        assert_eq!(&done.commit, sha, "{branch}");
        assert_eq!(&git(dest.path(), &["rev-parse", "HEAD"]), sha, "{branch}");
    }
}

#[tokio::test]
async fn a_pinned_commit_is_kept_when_present_and_fetched_by_sha_otherwise() {
    let host = host().await;
    let dest = tempfile::tempdir().unwrap();
    let first = run(
        &host,
        &spec(REPO, "main", Some(1)),
        Some(TOKEN),
        dest.path(),
        None,
    )
    .await
    .unwrap();
    assert_eq!(first.commit, host.shas[2]);
    std::fs::write(dest.path().join("NOTES.md"), "the run's own work\n").unwrap();

    // The branch moves on; a resumed run is pinned to what the first job checked out.
    set_ref(host.fake.root(), REPO, "refs/heads/main", &host.shas[0]);
    let asked = host.fake.requests().len();
    let resumed = run(
        &host,
        &spec(REPO, "main", Some(1)),
        Some(TOKEN),
        dest.path(),
        Some(&first.commit),
    )
    .await
    .unwrap();
    assert_eq!(
        resumed,
        Checkout {
            commit: first.commit.clone(),
            reused: true
        }
    );
    assert_eq!(
        host.fake.requests().len(),
        asked,
        "a kept checkout asks the host nothing"
    );
    assert!(
        dest.path().join("NOTES.md").is_file(),
        "the run's files are kept"
    );

    // Another daemon, an empty workspace: the same commit, although main is elsewhere now.
    let elsewhere = tempfile::tempdir().unwrap();
    let fetched = run(
        &host,
        &spec(REPO, "main", Some(1)),
        Some(TOKEN),
        elsewhere.path(),
        Some(&first.commit),
    )
    .await
    .unwrap();
    assert_eq!(
        fetched,
        Checkout {
            commit: first.commit.clone(),
            reused: false
        }
    );
    assert!(host.fake.requests().len() > asked);
    assert_eq!(git(elsewhere.path(), &["rev-parse", "HEAD"]), first.commit);

    // A workspace on another commit is replaced by the pinned one.
    let other = tempfile::tempdir().unwrap();
    run(
        &host,
        &spec(REPO, "feature", None),
        Some(TOKEN),
        other.path(),
        None,
    )
    .await
    .unwrap();
    std::fs::write(other.path().join("NOTES.md"), "stale\n").unwrap();
    let replaced = run(
        &host,
        &spec(REPO, "feature", None),
        Some(TOKEN),
        other.path(),
        Some(&host.shas[1]),
    )
    .await
    .unwrap();
    assert_eq!(
        replaced,
        Checkout {
            commit: host.shas[1].clone(),
            reused: false
        }
    );
    assert!(!other.path().join("NOTES.md").exists());
}

#[tokio::test]
async fn the_token_reaches_no_file_and_not_the_remote_url() {
    let host = host().await;
    let dest = tempfile::tempdir().unwrap();
    run(
        &host,
        &spec(REPO, "main", None),
        Some(TOKEN),
        dest.path(),
        None,
    )
    .await
    .unwrap();
    let requests = host.fake.requests();
    assert!(!requests.is_empty());
    for request in &requests {
        assert_eq!(request.token.as_deref(), Some(TOKEN), "{request:?}");
        assert_eq!(request.status, 200, "{request:?}");
    }

    let b64 = base64::engine::general_purpose::STANDARD;
    let forms = [
        TOKEN.to_string(),
        b64.encode(format!("x-access-token:{TOKEN}")),
        b64.encode(TOKEN),
    ];
    let mut files = 0;
    let mut stack = vec![dest.path().to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                stack.push(entry.path());
                continue;
            }
            let bytes = if kind.is_symlink() {
                std::fs::read_link(entry.path())
                    .unwrap()
                    .into_os_string()
                    .into_encoded_bytes()
            } else {
                std::fs::read(entry.path()).unwrap()
            };
            files += 1;
            for form in &forms {
                let found = bytes.windows(form.len()).any(|w| w == form.as_bytes());
                assert!(!found, "{form} is in {}", entry.path().display());
            }
        }
    }
    assert!(
        files > 10,
        "the scan read the checkout and its .git ({files} files)"
    );
    let remote = git(dest.path(), &["config", "--get", "remote.origin.url"]);
    assert_eq!(remote, format!("{}{REPO}.git", host.base));
    let config = std::fs::read_to_string(dest.path().join(".git/config")).unwrap();
    assert!(
        !config.to_ascii_lowercase().contains("extraheader"),
        "{config}"
    );
}

#[tokio::test]
async fn a_refused_or_missing_token_is_a_credentials_error_changing_nothing() {
    let host = host().await;
    for token in [Some("ghs_notOneTheHostKnows"), None] {
        let dest = tempfile::tempdir().unwrap();
        let error = run(&host, &spec(REPO, "main", None), token, dest.path(), None)
            .await
            .unwrap_err();
        match &error {
            CheckoutError::AuthRefused { had_token, .. } => {
                assert_eq!(*had_token, token.is_some(), "{error}");
            }
            other => panic!("expected AuthRefused, got {other:?}"),
        }
        assert_eq!(entries(dest.path()), Vec::<String>::new(), "{token:?}");
    }

    // A token that worked, then expired.
    let dest = tempfile::tempdir().unwrap();
    run(
        &host,
        &spec(REPO, "feature", None),
        Some(TOKEN),
        dest.path(),
        None,
    )
    .await
    .unwrap();
    host.fake.revoke(TOKEN);
    let error = run(
        &host,
        &spec(REPO, "main", None),
        Some(TOKEN),
        dest.path(),
        None,
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            error,
            CheckoutError::AuthRefused {
                had_token: true,
                ..
            }
        ),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains("expired") && !message.contains(TOKEN),
        "{message}"
    );
    // The fetch failed in the staging directory: the workspace still holds what it held.
    assert_eq!(entries(dest.path()), [".git", "README.md"]);
    assert_eq!(
        git(dest.path(), &["rev-parse", "HEAD"]).trim(),
        host.shas[0].as_str(),
        "the earlier checkout is untouched"
    );
    assert!(!dest.path().with_extension("staging").exists());
    assert_eq!(host.fake.requests().last().unwrap().status, 401);
}

#[tokio::test]
async fn a_missing_repository_is_not_found() {
    let host = host().await;
    let dest = tempfile::tempdir().unwrap();
    let error = run(
        &host,
        &spec("octo-org/nope", "main", None),
        Some(TOKEN),
        dest.path(),
        None,
    )
    .await
    .unwrap_err();
    assert!(
        matches!(error, CheckoutError::RepoNotFound { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("octo-org/nope"), "{error}");
    assert_eq!(entries(dest.path()), Vec::<String>::new());
}

#[tokio::test]
async fn a_missing_ref_or_commit_is_ref_missing() {
    let host = host().await;
    let gone = "0123456789abcdef0123456789abcdef01234567";
    for (git_ref, pinned) in [("deleted-branch", None), ("main", Some(gone)), (gone, None)] {
        let dest = tempfile::tempdir().unwrap();
        let error = run(
            &host,
            &spec(REPO, git_ref, Some(1)),
            Some(TOKEN),
            dest.path(),
            pinned,
        )
        .await
        .unwrap_err();
        match &error {
            CheckoutError::RefMissing { git_ref: named, .. } => {
                assert_eq!(named, pinned.unwrap_or(git_ref));
                assert!(
                    error
                        .to_string()
                        .contains("does not exist in octo-org/hello-world")
                );
            }
            other => panic!("expected RefMissing for {git_ref} {pinned:?}, got {other:?}"),
        }
        assert_eq!(entries(dest.path()), Vec::<String>::new());
    }
}

#[tokio::test]
async fn files_that_are_not_a_checkout_are_kept_and_cancelling_stops_it() {
    let host = host().await;
    let dest = tempfile::tempdir().unwrap();
    std::fs::write(dest.path().join("precious.txt"), "keep me\n").unwrap();
    let error = run(
        &host,
        &spec(REPO, "main", None),
        Some(TOKEN),
        dest.path(),
        None,
    )
    .await
    .unwrap_err();
    assert!(
        matches!(error, CheckoutError::Workspace { .. }),
        "{error:?}"
    );
    assert_eq!(entries(dest.path()), vec!["precious.txt".to_string()]);
    assert!(host.fake.requests().is_empty());

    let empty = tempfile::tempdir().unwrap();
    let cancel = CancellationToken::new();
    cancel.cancel();
    let token = Secret::new(TOKEN);
    let error = checkout(
        &host.base,
        &spec(REPO, "main", None),
        Some(&token),
        empty.path(),
        &empty.path().with_extension("staging"),
        None,
        Duration::from_secs(120),
        &cancel,
    )
    .await
    .unwrap_err();
    assert!(
        matches!(error, CheckoutError::Cancelled { .. }),
        "{error:?}"
    );
    assert!(host.fake.requests().is_empty());

    // A resumed run cancelled at once keeps the checkout it had, with its own files.
    let kept = tempfile::tempdir().unwrap();
    let first = run(
        &host,
        &spec(REPO, "main", None),
        Some(TOKEN),
        kept.path(),
        None,
    )
    .await
    .unwrap();
    std::fs::write(kept.path().join("NOTES.md"), "the run's own work\n").unwrap();
    let error = checkout(
        &host.base,
        &spec(REPO, "main", None),
        Some(&token),
        kept.path(),
        &kept.path().with_extension("staging"),
        Some(&host.shas[0]),
        Duration::from_secs(120),
        &cancel,
    )
    .await
    .unwrap_err();
    assert!(
        matches!(error, CheckoutError::Cancelled { .. }),
        "{error:?}"
    );
    assert!(kept.path().join("NOTES.md").is_file());
    assert_eq!(git(kept.path(), &["rev-parse", "HEAD"]), first.commit);
}

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

/// `holds_commit` answers from the daemon's record alone: true for the commit the daemon
/// checked out into that very directory (also after the run moved on from it), false for
/// any other commit, for a SHA that is not one, for a directory with no record, and for the
/// workspace deleted and made again — and it asks the host nothing.
#[tokio::test]
async fn a_workspace_holding_the_commit_is_known_from_the_daemons_record() {
    let host = host().await;
    let root = tempfile::tempdir().unwrap();
    let dest = root.path().join("ws");
    let staging = dest.with_extension("staging");
    let done = run(&host, &spec(REPO, "main", None), Some(TOKEN), &dest, None)
        .await
        .unwrap();
    let asked = host.fake.requests().len();
    git(&dest, &["checkout", "--quiet", "--detach", &host.shas[0]]);
    let holds = |dest: &Path, commit: &str| nightshift_github::holds_commit(dest, &staging, commit);
    assert!(holds(&dest, &done.commit));
    assert!(
        !holds(&dest, &host.shas[0]),
        "not what the daemon checked out"
    );
    assert!(!holds(&dest, &"0".repeat(40)));
    assert!(!holds(&dest, "main"));
    let elsewhere = tempfile::tempdir().unwrap();
    assert!(!holds(elsewhere.path(), &done.commit));
    std::fs::rename(&dest, root.path().join("old")).unwrap();
    std::fs::create_dir(&dest).unwrap();
    assert!(!holds(&dest, &done.commit), "made again");
    assert_eq!(host.fake.requests().len(), asked, "the host was not asked");
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
