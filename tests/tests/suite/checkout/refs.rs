//! What is checked out: a pull request's head SHA at depth 1 (that commit and one commit of
//! history), a branch at its tip, a pinned commit kept when the workspace holds it and
//! fetched by SHA otherwise, and which workspaces hold a commit, known from the daemon's
//! record alone.

use std::path::Path;

use nightshift_github::Checkout;
use nightshift_tests::git_http::{git, set_ref};

use super::{REPO, TOKEN, host, run, spec};

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
