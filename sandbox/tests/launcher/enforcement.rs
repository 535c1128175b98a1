//! Where the sandbox cannot be enforced nothing runs (a launch exits 126 and runs nothing),
//! and the probe reports this kernel's Landlock ABI and namespaces.

use std::path::Path;
use std::process::Command;

use nightshift_sandbox::probe::probe;
use nightshift_sandbox::{Network, Policy};

use super::{LAUNCHER, abi, layout, text};

#[test]
fn a_launch_that_cannot_be_enforced_runs_nothing() {
    let l = layout();
    let marker = l.workspace.join("ran");
    let script = format!("touch {}", marker.display());
    let launch = |policy: &str| {
        Command::new(LAUNCHER)
            .args(["sandbox-exec", policy, "--", "sh", "-c", &script])
            .output()
            .unwrap()
    };
    let good = Policy::standard(&l.workspace, &l.temp, &[], &[], Network::On, abi());
    let json = |p: &Policy| serde_json::to_string(p).unwrap();
    let missing = Policy {
        write: vec![l.outside.join("no-such-dir")],
        ..good.clone()
    };
    let old = Policy {
        abi: 5,
        ..good.clone()
    };
    let wide = Policy {
        read: vec!["/".into()],
        ..good.clone()
    };
    let missing_in_pid_namespace = missing.clone().in_pid_namespace();
    for (policy, expect) in [
        ("{not json".to_string(), "the policy is malformed"),
        (json(&missing), "cannot open"),
        (json(&missing_in_pid_namespace), "cannot open"),
        (json(&old), "ABI 5"),
        (json(&wide), "whole filesystem"),
    ] {
        let out = launch(&policy);
        let t = text(&out);
        assert_eq!(out.status.code(), Some(126), "{t}");
        assert!(
            t.contains("nightshift sandbox: ") && t.contains(expect),
            "{expect}: {t}"
        );
        assert!(!marker.exists(), "{expect}: nothing ran");
    }
    let out = Command::new(LAUNCHER)
        .args(["sandbox-exec", &json(&good), "--", "/no/such/program"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127), "{}", text(&out));
    assert!(text(&out).contains("cannot run `/no/such/program`"));
    let out = Command::new(LAUNCHER)
        .args(["sandbox-exec", &json(&good)])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(126));
    assert!(text(&out).contains("usage: nightshift sandbox-exec"));
}

#[test]
fn the_probe_reports_this_kernel() {
    let support = probe(Path::new(LAUNCHER)).unwrap();
    assert!(support.landlock_abi >= 6, "{support:?}");
    assert!(support.netns, "{support:?}");
    assert!(support.pidns, "{support:?}");
    let err = probe(Path::new("/bin/true")).unwrap_err().to_string();
    assert!(
        err.contains("did not answer the probe") && err.contains("[sandbox] launcher"),
        "{err}"
    );
}
