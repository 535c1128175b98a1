//! Files: what a command needs still works (its workspace, its temp dir, the system read
//! only), everything outside is closed, granted paths are reachable and nothing more, and
//! `/etc` is readable only where programs need it.

use std::path::{Path, PathBuf};

use nightshift_sandbox::Network;

use super::{
    assert_denied, layout, nix_is_root, run_in, sandbox, sandboxed, shared_pids, text, unsandboxed,
};

#[test]
fn what_a_command_needs_still_works() {
    let l = layout();
    let out = sandboxed(
        &l,
        "set -e; echo made > made.txt; cat made.txt; mkdir -p sub && mv made.txt sub/; \
         ls /usr/bin >/dev/null; cat /etc/passwd >/dev/null; echo t > \"$TMPDIR/t\"; \
         cat \"$TMPDIR/t\"; test \"$HOME\" = \"$TMPDIR\"; head -c 4 /dev/urandom | wc -c; \
         read -r status < /proc/self/status; cat /proc/cpuinfo /proc/sys/kernel/osrelease >/dev/null; \
         sh -c 'echo child-ok'; kill -0 $$ && echo self-ok",
    );
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    for expect in ["made", "t\n", "4", "child-ok", "self-ok"] {
        assert!(t.contains(expect), "{expect}: {t}");
    }
    assert!(l.workspace.join("sub/made.txt").exists());
    assert!(l.temp.join("t").exists());
}

#[test]
fn files_outside_the_workspace_are_closed() {
    let l = layout();
    let outside = l.outside.join("file.txt");
    let cases = [
        (format!("cat {}", outside.display()), "read outside"),
        (
            "cat ../run-b/notes.txt".to_string(),
            "read a sibling workspace",
        ),
        ("cat ../../api-token".to_string(), "read the API token"),
        (
            format!("ls {}", l.data.display()),
            "list the data directory",
        ),
        ("ls /tmp".to_string(), "list /tmp"),
        ("ls /root".to_string(), "list /root"),
    ];
    for (script, what) in &cases {
        let control = unsandboxed(&l, script);
        assert!(
            control.status.success(),
            "control for {what}: {}",
            text(&control)
        );
        assert_denied(&sandboxed(&l, script), what);
    }
    let writes = [
        (l.outside.join("new.txt"), "write outside"),
        (l.sibling.join("planted.txt"), "write a sibling workspace"),
        (l.data.join("planted.txt"), "write the data directory"),
        (
            PathBuf::from("/etc/nightshift-sandbox-planted"),
            "write /etc",
        ),
    ];
    for (path, what) in &writes {
        let out = sandboxed(&l, &format!("echo x > {}", path.display()));
        assert_denied(&out, what);
        assert!(!path.exists(), "{what}: nothing was written");
    }
}

#[test]
fn granted_paths_are_reachable_and_nothing_more() {
    let l = layout();
    let extra = l.outside.join("cache");
    std::fs::create_dir_all(&extra).unwrap();
    let sb = sandbox(&l, Network::On, std::slice::from_ref(&extra));
    let ok = run_in(
        &sb,
        &l,
        "sh",
        &format!("echo c > {}/c && cat {0}/c", extra.display()),
    );
    assert!(ok.status.success(), "{}", text(&ok));
    let denied = run_in(
        &sb,
        &l,
        "sh",
        &format!("cat {}", l.outside.join("file.txt").display()),
    );
    assert_denied(&denied, "a sibling of the grant");
}

#[test]
fn etc_is_readable_only_where_programs_need_it() {
    let l = layout();
    for secret in ["/etc/shadow", "/etc/gshadow"] {
        if !Path::new(secret).exists() {
            continue;
        }
        let script = format!("cat {secret} >/dev/null && echo read");
        if nix_is_root() {
            let control = unsandboxed(&l, &script);
            assert!(control.status.success(), "control: {}", text(&control));
        }
        assert_denied(&sandboxed(&l, &script), secret);
        assert_denied(&run_in(&shared_pids(&l), &l, "sh", &script), secret);
    }
    assert_denied(&sandboxed(&l, "ls /etc"), "list /etc");
    let mut needs = vec![
        ("sh -c 'echo shell-ok'", "shell-ok"),
        ("ls -l /usr/bin >/dev/null && ls -la && echo ls-ok", "ls-ok"),
        ("id -un", ""),
        ("getent hosts localhost", "localhost"),
        ("date +%Y >/dev/null && echo date-ok", "date-ok"),
    ];
    if Path::new("/usr/bin/git").exists() {
        needs.push(("git --version", "git version"));
        needs.push((
            "git init -q repo && git -C repo -c user.name=t -c user.email=t@t commit -q --allow-empty -m m && git -C repo log --oneline | wc -l",
            "1",
        ));
    }
    if Path::new("/usr/bin/python3").exists() {
        needs.push((
            "python3 -c 'import ssl, json, socket, platform; ssl.create_default_context(); print(\"py-ok\")'",
            "py-ok",
        ));
    }
    for (script, expect) in needs {
        let out = sandboxed(&l, script);
        let t = text(&out);
        assert!(out.status.success() && t.contains(expect), "{script}: {t}");
    }
}
