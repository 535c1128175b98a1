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
//!
//! The cases are grouped in [`refs`], [`token`], [`failures`] and [`planted`]; the fake host and
//! the checkout call they share are here.

mod failures;
mod planted;
mod refs;
mod token;

use std::path::Path;
use std::time::Duration;

use nightshift_github::{Checkout, CheckoutError, CheckoutSpec, Secret, checkout};
use nightshift_tests::git_http::{GitHttp, make_repo, set_ref};
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
