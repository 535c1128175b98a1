//! The names GitHub gives things, checked before they go into an API path, a git URL or a
//! git command: a repository's `owner/name` and a commit's full SHA. Pure.

/// Whether `repo` is `owner/name` as GitHub allows them: two parts of letters, digits, `-`,
/// `_` and `.`, neither empty nor `.` or `..`.
pub fn is_repo_name(repo: &str) -> bool {
    let ok = |part: &str| {
        !part.is_empty()
            && part != "."
            && part != ".."
            && part
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    };
    repo.split_once('/')
        .is_some_and(|(owner, name)| ok(owner) && ok(name))
}

/// Whether `sha` is a full commit SHA: 40 (SHA-1) or 64 (SHA-256) hexadecimal digits.
pub fn is_commit_sha(sha: &str) -> bool {
    matches!(sha.len(), 40 | 64) && sha.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_as_github_allows_them() {
        assert!(is_repo_name("octocat/hello-world") && is_repo_name("o.o/r_r-1"));
        for bad in [
            "octocat", "a/b/c", "../x", "a/..", "a b/c", "a/b?x=1", "/a", "a/",
        ] {
            assert!(!is_repo_name(bad), "{bad}");
        }
        assert!(is_commit_sha(&"a".repeat(40)) && is_commit_sha(&"F".repeat(64)));
        for bad in ["abc", "main", &"g".repeat(40), &"a".repeat(41)] {
            assert!(!is_commit_sha(bad), "{bad}");
        }
    }
}
