//! The installation token: in no byte under the workspace and not in the remote URL though
//! every request carried it, and a refused or missing token a credentials error that changes
//! nothing.

use base64::Engine;
use nightshift_github::CheckoutError;
use nightshift_tests::git_http::git;

use super::{REPO, TOKEN, entries, host, run, spec};

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
