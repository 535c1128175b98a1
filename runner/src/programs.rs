//! Command tools' programs checked when the tools are built (`serve`'s start and every
//! reload), so that a tool that could never run is refused then, naming the key and the fix,
//! instead of failing at its first call with "Permission denied".
//!
//! For each `[[command_tools]]` entry some agent enables, `command[0]` is checked, and so is
//! each stdio MCP server's `command` (`[[agents.mcp]]`):
//! - a path (it holds a `/`; a relative one is already anchored at the config's directory)
//!   must exist, be a file and be executable, and — under the sandbox — lie beneath what
//!   sandboxed commands may read: the system directories or a `[sandbox] read`/`write` grant;
//! - a bare name must be found, executable, in the PATH its commands get: `[sandbox] path` or
//!   the sandbox's default under the sandbox, the daemon's own PATH without it.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use nightshift_tools::CommandToolConfig;

use crate::config::{Config, Invalid};
use crate::sandbox::{SandboxMode, real};

/// Every enabled command tool's program, checked; the first problem, naming its key.
pub(crate) fn check(config: &Config) -> Result<(), Invalid> {
    let sandboxed = config.sandbox.mode == SandboxMode::Required;
    let readable: Vec<PathBuf> = nightshift_sandbox::policy::system_read()
        .into_iter()
        .chain(config.sandbox.read.iter().cloned())
        .chain(config.sandbox.write.iter().cloned())
        .map(|p| real(&p))
        .collect();
    let search: Vec<PathBuf> = if sandboxed {
        crate::sandbox_path::command_path(config.sandbox.path.as_deref())
            .split(':')
            .map(PathBuf::from)
            .collect()
    } else {
        std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).collect())
            .unwrap_or_default()
    };
    let enabled = config
        .command_tools
        .iter()
        .filter(|t| config.agents.iter().any(|a| a.tools.contains(&t.name)));
    for tool in enabled {
        check_tool(config, tool, sandboxed.then_some(&readable[..]), &search)?;
    }
    for agent in &config.agents {
        for server in &agent.mcp {
            if let Some(program) = &server.command {
                let key = format!("agents.{}.mcp.{}.command", agent.name, server.name);
                check_program(
                    config,
                    key,
                    program,
                    sandboxed.then_some(&readable[..]),
                    &search,
                )?;
            }
        }
    }
    Ok(())
}

fn check_tool(
    config: &Config,
    tool: &CommandToolConfig,
    readable: Option<&[PathBuf]>,
    search: &[PathBuf],
) -> Result<(), Invalid> {
    let Some(program) = tool.command.first() else {
        return Ok(()); // refused by the tool's own validation
    };
    let key = format!("command_tools.{}.command", tool.name);
    check_program(config, key, program, readable, search)
}

/// `program`, the program at config key `key`: found and runnable where its commands run.
fn check_program(
    config: &Config,
    key: String,
    program: &str,
    readable: Option<&[PathBuf]>,
    search: &[PathBuf],
) -> Result<(), Invalid> {
    if !program.contains('/') {
        return match search.iter().map(|d| d.join(program)).find(|p| runnable(p)) {
            Some(_) => Ok(()),
            None => Err(Invalid::table(
                key,
                format!(
                    "program `{program}` is not found in the PATH its commands get ({}); \
                     install it in one of those directories, write its absolute path, or set \
                     [sandbox] path",
                    search
                        .iter()
                        .map(|d| d.display().to_string())
                        .collect::<Vec<_>>()
                        .join(":")
                ),
            )),
        };
    }
    let path = config.resolve_path(Path::new(program));
    let shown = path.display();
    let meta = std::fs::metadata(&path).map_err(|e| {
        let problem = format!("program `{shown}` cannot be used ({e}); fix the path or create it");
        Invalid::table(&key, problem)
    })?;
    if !meta.is_file() {
        return Err(Invalid::table(
            key,
            format!("program `{shown}` is not a file"),
        ));
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Err(Invalid::table(
            key,
            format!("program `{shown}` is not executable; make it so (chmod +x {shown})"),
        ));
    }
    if let Some(readable) = readable {
        let real_path = real(&path);
        if !readable.iter().any(|r| real_path.starts_with(r)) {
            let dir = real_path.parent().map_or_else(
                || real_path.display().to_string(),
                |d| d.display().to_string(),
            );
            return Err(Invalid::table(
                key,
                format!(
                    "program `{shown}` is outside what sandboxed commands may read, so its \
                     first call would fail with \"Permission denied\"; add \"{dir}\" to \
                     [sandbox] read, or install the program under /usr/local/bin"
                ),
            ));
        }
    }
    Ok(())
}

/// A file with an execute bit.
fn runnable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(dir: &Path, program: &str, extra: &str) -> Config {
        let text = format!(
            "[runtime]\ndata_dir = \"data\"\n{extra}\n\
             [providers.p]\nkind = \"scripted\"\nscript = \"s.json\"\n\
             [[agents]]\nname = \"a\"\nprovider = \"p\"\nmodel = \"m\"\ntools = [\"lint\"]\n\
             [[command_tools]]\nname = \"lint\"\ndescription = \"d\"\n\
             command = [{program:?}]\n"
        );
        let file = dir.join("nightshift.toml");
        std::fs::write(&file, text).unwrap();
        Config::load(Some(&file), &crate::config::Overrides::default()).unwrap()
    }

    fn script(path: &Path, mode: u32) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, "#!/bin/sh\necho ok\n").unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn a_program_next_to_the_config_needs_a_read_grant_under_the_sandbox() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        script(&d.join("scripts/lint.sh"), 0o755);
        let err = check(&config(d, "scripts/lint.sh", ""))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("command_tools.lint.command: program `")
                && err.contains("outside what sandboxed commands may read")
                && err.contains("to [sandbox] read"),
            "{err}"
        );
        let granted = format!("[sandbox]\nread = [{:?}]\n", real(&d.join("scripts")));
        check(&config(d, "scripts/lint.sh", &granted)).unwrap();
        check(&config(d, "scripts/lint.sh", "[sandbox]\nmode = \"off\"\n")).unwrap();
    }

    #[test]
    fn a_missing_or_unexecutable_program_is_refused_naming_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let off = "[sandbox]\nmode = \"off\"\n";
        let err = check(&config(d, "scripts/missing.sh", off))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("cannot be used") && err.contains("fix the path"),
            "{err}"
        );
        script(&d.join("scripts/plain.sh"), 0o644);
        let err = check(&config(d, "scripts/plain.sh", off))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("is not executable; make it so (chmod +x"),
            "{err}"
        );
        // Bare names are looked up in the sandbox's PATH.
        check(&config(d, "sh", "")).unwrap();
        let err = check(&config(d, "no-such-program-here", ""))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`no-such-program-here` is not found in the PATH its commands get (")
                && err.contains("/usr/bin"),
            "{err}"
        );
    }
}
