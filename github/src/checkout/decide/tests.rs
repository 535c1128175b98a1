//! Unit tests of the checkout's decisions: the git base, the plan, refused inputs, git's
//! environment and the reading of git's errors.

use super::*;

fn url(s: &str) -> Url {
    Url::parse(s).unwrap()
}

fn spec(git_ref: &str) -> CheckoutSpec {
    CheckoutSpec {
        repo: "octo-org/hello-world".into(),
        git_ref: git_ref.into(),
        depth: Some(1),
    }
}

const SHA: &str = "6dcb09b5b57875f334f61aebed695e2e4193db5e";

#[test]
fn the_git_host_of_an_api_base() {
    let cases = [
        ("https://api.github.com/", "https://github.com/"),
        ("https://api.github.com", "https://github.com/"),
        (
            "https://ghe.example.com/api/v3/",
            "https://ghe.example.com/",
        ),
        ("https://ghe.example.com/api/v3", "https://ghe.example.com/"),
        (
            "https://ghe.example.com/github/api/v3/",
            "https://ghe.example.com/github/",
        ),
        ("http://127.0.0.1:4567/", "http://127.0.0.1:4567/"),
        (
            "http://user:pw@127.0.0.1:4567/x?q=1#f",
            "http://127.0.0.1:4567/x/",
        ),
    ];
    for (api, git) in cases {
        assert_eq!(git_base(&url(api)).as_str(), git, "{api}");
    }
}

#[test]
fn a_plan_fetches_the_pinned_commit_else_the_ref() {
    let base = url("https://github.com/");
    let by_ref = plan(&base, &spec("main"), None).unwrap();
    assert_eq!(
        by_ref.remote.as_str(),
        "https://github.com/octo-org/hello-world.git"
    );
    assert_eq!(
        (by_ref.want.as_str(), by_ref.expect.as_deref()),
        ("main", None)
    );

    let pinned = plan(&base, &spec("main"), Some(&SHA.to_uppercase())).unwrap();
    assert_eq!(
        (pinned.want.as_str(), pinned.expect.as_deref()),
        (SHA, Some(SHA))
    );

    let by_sha = plan(&base, &spec(SHA), None).unwrap();
    assert_eq!(
        (by_sha.want.as_str(), by_sha.expect.as_deref()),
        (SHA, Some(SHA))
    );
    assert_eq!(
        fetch_args(&by_sha),
        [
            "fetch",
            "--quiet",
            "--no-tags",
            "--no-recurse-submodules",
            "--depth=1",
            "origin",
            SHA
        ]
    );
}

#[test]
fn bad_specs_and_hosts_are_refused_before_git_runs() {
    let base = url("https://github.com/");
    for git_ref in [
        "",
        "--upload-pack=touch /tmp/x",
        "-b",
        "+main",
        "main:refs/heads/x",
        "a..b",
        "main ",
        "ma\nin",
        "HEAD@{1}",
        "main^",
        "x.lock",
        "/main",
        "main/",
    ] {
        assert!(plan(&base, &spec(git_ref), None).is_err(), "{git_ref:?}");
    }
    for repo in [
        "octo-org",
        "a/b/c",
        "../x",
        "octo-org/..",
        "o/n?x",
        "o/-n x",
        "/n",
    ] {
        let s = CheckoutSpec {
            repo: repo.into(),
            ..spec("main")
        };
        assert!(plan(&base, &s, None).is_err(), "{repo:?}");
    }
    for pinned in ["abc123", "main", &format!("{SHA}0")] {
        assert!(
            plan(&base, &spec("main"), Some(pinned)).is_err(),
            "{pinned:?}"
        );
    }
    let zero = CheckoutSpec {
        depth: Some(0),
        ..spec("main")
    };
    assert!(plan(&base, &zero, None).is_err());
    for host in [
        "http://github.com/",
        "ssh://github.com/",
        "file:///srv/git/",
    ] {
        let error = plan(&url(host), &spec("main"), None).unwrap_err();
        assert!(matches!(error, CheckoutError::Invalid { .. }), "{host}");
    }
    assert!(plan(&url("http://127.0.0.1:9/"), &spec("refs/pull/7/head"), None).is_ok());
    assert!(plan(&url("http://[::1]:9/"), &spec("v1.2.3"), None).is_ok());
}

fn config(env: &[(String, String)]) -> Vec<(String, String)> {
    let get = |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let count: usize = get("GIT_CONFIG_COUNT").unwrap().parse().unwrap();
    (0..count)
        .map(|i| {
            let key = get(&format!("GIT_CONFIG_KEY_{i}")).unwrap();
            (key, get(&format!("GIT_CONFIG_VALUE_{i}")).unwrap())
        })
        .collect()
}

#[test]
fn the_token_is_a_basic_header_scoped_to_the_git_host_in_the_environment_only() {
    let token = Secret::new("ghs_16C7e42F292c6912E7710c838347Ae178B4a");
    let base = url("https://github.com/");
    let inherited = |name: &str| match name {
        "PATH" => Some("/usr/bin".to_string()),
        "HTTPS_PROXY" => Some("http://proxy:3128".to_string()),
        "GIT_ASKPASS" | "GIT_TRACE_CURL" | "HOME" => Some("leaked".to_string()),
        _ => None,
    };
    let env = git_env(&base, Some(&token), &inherited);
    let config = config(&env);
    let header = config
        .iter()
        .find(|(k, _)| k == "http.https://github.com/.extraHeader")
        .map(|(_, v)| v.as_str());
    // base64("x-access-token:ghs_16C7e42F292c6912E7710c838347Ae178B4a")
    assert_eq!(
        header,
        Some(
            "Authorization: Basic \
             eC1hY2Nlc3MtdG9rZW46Z2hzXzE2QzdlNDJGMjkyYzY5MTJFNzcxMGM4MzgzNDdBZTE3OEI0YQ=="
        )
    );
    for (key, value) in [
        ("protocol.allow", "never"),
        ("protocol.https.allow", "always"),
        ("http.followRedirects", "false"),
        ("core.hooksPath", "/dev/null"),
        ("credential.helper", ""),
    ] {
        assert!(config.contains(&(key.into(), value.into())), "{key}");
    }
    for (name, value) in [
        ("LC_ALL", "C"),
        ("GIT_TERMINAL_PROMPT", "0"),
        ("GIT_CONFIG_NOSYSTEM", "1"),
        ("GIT_CONFIG_GLOBAL", "/dev/null"),
        ("PATH", "/usr/bin"),
        ("HTTPS_PROXY", "http://proxy:3128"),
        ("HOME", "/nonexistent"),
    ] {
        assert!(env.contains(&(name.into(), value.into())), "{name}");
    }
    assert!(!env.iter().any(|(_, v)| v == "leaked"), "{env:?}");

    let plain = git_env(&base, None, &inherited);
    assert!(!format!("{plain:?}").contains("Authorization"));
    let plan = plan(&base, &spec("main"), None).unwrap();
    assert!(!fetch_args(&plan).concat().contains(token.expose()));
    assert!(!plan.remote.as_str().contains('@'));

    let loopback = git_env(&url("http://127.0.0.1:9/"), Some(&token), &inherited);
    assert!(!loopback.iter().any(|(k, _)| k == "HTTPS_PROXY"));
    let config = self::config(&loopback);
    assert!(config.contains(&("protocol.http.allow".into(), "always".into())));
    assert!(
        config
            .iter()
            .any(|(k, _)| k == "http.http://127.0.0.1:9/.extraHeader")
    );
}

#[test]
fn gits_errors_are_read_as_what_went_wrong() {
    let token = Secret::new("ghs_secret");
    let plan = plan(&url("https://github.com/"), &spec("main"), None).unwrap();
    let read = |stderr: &str| {
        classify(
            &plan,
            "fetch",
            "exit status: 128".into(),
            stderr,
            Some(&token),
        )
    };
    type Expect = fn(&CheckoutError) -> bool;
    let cases: [(&str, Expect); 9] = [
        (
            "remote: Repository not found.\nfatal: repository 'https://github.com/o/n.git/' not found",
            |e| matches!(e, CheckoutError::RepoNotFound { .. }),
        ),
        ("fatal: couldn't find remote ref main", |e| {
            matches!(e, CheckoutError::RefMissing { .. })
        }),
        (
            "fatal: remote error: upload-pack: not our ref 0123456789abcdef0123456789abcdef01234567",
            |e| matches!(e, CheckoutError::RefMissing { .. }),
        ),
        (
            "fatal: could not read Username for 'https://github.com': terminal prompts disabled",
            |e| {
                matches!(
                    e,
                    CheckoutError::AuthRefused {
                        had_token: true,
                        ..
                    }
                )
            },
        ),
        (
            "remote: Invalid username or token.\nfatal: Authentication failed for 'https://github.com/o/n.git/'",
            |e| matches!(e, CheckoutError::AuthRefused { .. }),
        ),
        (
            "fatal: unable to access 'https://github.com/o/n.git/': The requested URL returned error: 403",
            |e| matches!(e, CheckoutError::AuthRefused { detail, .. } if detail == "HTTP 403"),
        ),
        (
            "fatal: unable to access 'https://github.com/o/n.git/': Could not resolve host: github.com",
            |e| matches!(e, CheckoutError::Unreachable { .. }) && e.is_transient(),
        ),
        (
            "fatal: unable to access 'https://github.com/o/n.git/': The requested URL returned error: 502",
            |e| matches!(e, CheckoutError::Unreachable { .. }),
        ),
        (
            "fatal: bad object; header Authorization: Basic eC1hY2Nlc3MtdG9rZW46Z2hzX3NlY3JldA== ghs_secret",
            |e| {
                matches!(e, CheckoutError::Git { stderr, .. }
                if !stderr.contains("ghs_secret") && !stderr.contains("eC1hY2Nlc3MtdG9rZW46Z2hzX3NlY3JldA"))
            },
        ),
    ];
    for (stderr, expected) in cases {
        let error = read(stderr);
        assert!(expected(&error), "{stderr} → {error:?}");
        assert!(!error.to_string().contains("ghs_secret"), "{error}");
    }
    let long = "x".repeat(5000);
    let CheckoutError::Git { stderr, .. } = read(&long) else {
        panic!()
    };
    assert_eq!(stderr.chars().count(), 2001);
}
