//! Failures, each its own error and leaving no checkout: a missing repository, a missing ref
//! or commit; files that are not a checkout are kept, and a cancelled checkout stops.

use std::time::Duration;

use nightshift_github::{CheckoutError, Secret, checkout};
use nightshift_tests::git_http::git;
use tokio_util::sync::CancellationToken;

use super::{REPO, TOKEN, entries, host, run, spec};

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
