//! Preparing a run's workspace (`[agents.workspace]`) before the job works on it.
//!
//! What it guarantees:
//! - **The commit is the run's, whatever crashed.** The first job checks the repository out
//!   at what the checkout's `ref` names (rendered at delivery, see
//!   `nightshift_scheduler::hooks::checkout`) and the loop logs the commit
//!   (`workspace_prepared`); every later job — on this daemon or another, after a crash or a
//!   long sleep — asks for that commit again: kept when the workspace already holds it (with
//!   the agent's changes), fetched by SHA into an empty one otherwise. Whether it holds it is
//!   the daemon's own record of what it moved there (beside its staging directory): the
//!   daemon's git never runs in a workspace, whose `.git` the run's commands can write.
//! - **The token never reaches the model or the disk.** The clone uses the installation token
//!   of the repository (or the personal token) only in the environment of the `git fetch`
//!   process (`nightshift_github::checkout`); the workspace's `.git/config` holds the plain
//!   URL. Without `[github]`, public repositories are fetched from github.com anonymously.
//! - **Setup runs in the sandbox.** After each fresh checkout the `setup` commands run one by
//!   one in the workspace exactly as `run_command` runs a command (the agent's sandbox, its
//!   network setting, the minimal environment); the first that fails fails the run.
//! - **Failures are clear and early.** A repository that is gone, a ref that is missing, a
//!   template that does not render or credentials GitHub refuses (once more with a fresh
//!   token) fail the run before any model call, saying which; a network failure or timeout
//!   has the job tried again.

use std::time::Duration;

use nightshift_agent::{AgentDef, PrepareError, PreparedWorkspace, RunStart, ToolCall};
use nightshift_github::{CheckoutError, CheckoutSpec, GithubAccess, Secret};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::toolbox::Tools;

/// How long one checkout may take.
const CHECKOUT_TIMEOUT: Duration = Duration::from_secs(600);

/// Where repositories come from without `[github]`.
const PUBLIC_GIT: &str = "https://github.com/";

/// Why a run's checkout cannot be known.
#[derive(Debug, thiserror::Error)]
enum SpecError {
    /// The agent's checkout templates do not render over the run's context.
    #[error("agents.{agent}.workspace.checkout: {error}")]
    Template {
        agent: String,
        error: nightshift_scheduler::hooks::CheckoutTemplateError,
    },
    /// What was rendered lacks the repository or the ref.
    #[error("the run's workspace checkout {rendered} names no repository and ref")]
    Incomplete { rendered: Value },
}

/// A checkout the run cannot know fails the run: trying again would not change it.
impl From<SpecError> for PrepareError {
    fn from(e: SpecError) -> Self {
        PrepareError::Fatal(e.to_string())
    }
}

/// Makes the run's workspace directory (a failure, such as a full disk, may pass).
fn make_dir(dest: &std::path::Path) -> Result<(), PrepareError> {
    std::fs::create_dir_all(dest).map_err(|e| {
        PrepareError::Transient(format!(
            "cannot create the workspace {}: {e}",
            dest.display()
        ))
    })
}

/// The checkout a run asks for: the `workspace` its delivery rendered into its context, else
/// the agent's templates rendered over the context now.
fn spec_for(agent: &AgentDef, context: Option<&Value>) -> Result<Option<CheckoutSpec>, SpecError> {
    let Some(templates) = &agent.config.workspace.checkout else {
        return Ok(None);
    };
    let rendered = match context.and_then(|c| c.get("workspace")) {
        Some(w) => w.clone(),
        None => crate::hooks::templates_of(templates)
            .render_over(context.unwrap_or(&json!({})))
            .map_err(|error| SpecError::Template {
                agent: agent.config.name.clone(),
                error,
            })?,
    };
    let field = |name: &str| rendered[name].as_str().map(str::to_string);
    match (field("repo"), field("ref")) {
        (Some(repo), Some(git_ref)) => Ok(Some(CheckoutSpec {
            repo,
            git_ref,
            depth: rendered["depth"]
                .as_u64()
                .and_then(|d| u32::try_from(d).ok()),
        })),
        _ => Err(SpecError::Incomplete { rendered }),
    }
}

/// Whether a checkout failure may pass by itself (the job is tried again) or not.
fn refusal(e: &CheckoutError) -> PrepareError {
    let message = format!("checking out the workspace failed: {e}");
    if e.is_transient() {
        PrepareError::Transient(message)
    } else {
        PrepareError::Fatal(message)
    }
}

/// The token for `repo`: the App installation's or the personal token; `None` (anonymous)
/// when no credential reaches it. GitHub being unreachable is transient.
async fn token_for(
    gh: &GithubAccess,
    repo: &str,
    installation: Option<u64>,
) -> Result<Option<Secret>, PrepareError> {
    match gh.token_for_delivery(repo, installation).await {
        Ok(token) => Ok(Some(token)),
        Err(nightshift_github::GithubError::NoCredential { .. }) => Ok(None),
        // GitHub unreachable, overloaded or rate-limiting, or the token exchange's answer
        // lost (minting a token twice is harmless): it passes.
        Err(
            e @ (nightshift_github::GithubError::Transport { .. }
            | nightshift_github::GithubError::Ambiguous { .. }
            | nightshift_github::GithubError::RateLimited { .. }
            | nightshift_github::GithubError::Status { status: 500.., .. }),
        ) => Err(PrepareError::Transient(format!(
            "cannot get a token to check out {repo}: {e}"
        ))),
        Err(e) => Err(PrepareError::Fatal(format!(
            "cannot get a token to check out {repo}: {e}"
        ))),
    }
}

/// Prepares `run`'s workspace as its agent says; `None` when the agent checks nothing out.
pub(crate) async fn prepare(
    tools: &Tools,
    agent: &AgentDef,
    run: RunStart<'_>,
    cancel: &CancellationToken,
) -> Result<Option<PreparedWorkspace>, PrepareError> {
    let Some(spec) = spec_for(agent, run.context)? else {
        return Ok(None);
    };
    let dest = tools.workspace(run.run_id);
    make_dir(&dest)?;
    let installation = run
        .context
        .and_then(|c| c.pointer("/github/installation_id"))
        .and_then(Value::as_u64);
    let git_base = match &tools.github {
        Some(gh) => nightshift_github::git_base(gh.api().base()),
        None => url::Url::parse(PUBLIC_GIT).expect("a URL"),
    };
    // The daemon's own directory (not the workspace, which the run's commands can write).
    let staging = tools.staging(run.run_id);
    // The usual resume: the workspace still holds the run's commit, by the daemon's record
    // (no git runs in the workspace). Kept, without asking GitHub anything (a GitHub outage
    // does not stop a run that needs nothing from it).
    if let Some(pinned) = run.workspace_commit
        && nightshift_github::holds_commit(&dest, &staging, pinned)
    {
        return Ok(Some(PreparedWorkspace {
            repo: spec.repo.clone(),
            git_ref: spec.git_ref.clone(),
            commit: pinned.to_string(),
            setup: agent.config.workspace.setup.clone(),
        }));
    }
    let token = match &tools.github {
        Some(gh) => token_for(gh, &spec.repo, installation).await?,
        None => None,
    };
    let fetch = |token: Option<Secret>| {
        let (git_base, spec, dest, staging) = (&git_base, &spec, &dest, &staging);
        async move {
            nightshift_github::checkout(
                git_base,
                spec,
                token.as_ref(),
                dest,
                staging,
                run.workspace_commit,
                CHECKOUT_TIMEOUT,
                cancel,
            )
            .await
        }
    };
    let done = match fetch(token.clone()).await {
        // A token GitHub refused (revoked, expired early): once more with a fresh one.
        Err(CheckoutError::AuthRefused {
            had_token: true, ..
        }) if tools.github.is_some() => {
            let gh = tools.github.as_ref().expect("checked");
            gh.forget(&spec.repo).await;
            let fresh = token_for(gh, &spec.repo, installation).await?;
            fetch(fresh).await
        }
        done => done,
    }
    .map_err(|e| refusal(&e))?;
    tracing::info!(run_id = run.run_id, repo = %spec.repo, commit = %done.commit,
        reused = done.reused, "workspace checked out");
    if !done.reused {
        run_setup(tools, agent, &run, cancel).await?;
    }
    Ok(Some(PreparedWorkspace {
        repo: spec.repo.clone(),
        git_ref: spec.git_ref.clone(),
        commit: done.commit,
        setup: agent.config.workspace.setup.clone(),
    }))
}

/// Runs the agent's setup commands in the sandbox, in the workspace, one by one.
async fn run_setup(
    tools: &Tools,
    agent: &AgentDef,
    run: &RunStart<'_>,
    cancel: &CancellationToken,
) -> Result<(), PrepareError> {
    let ws = &agent.config.workspace;
    for (i, command) in ws.setup.iter().enumerate() {
        let call_id = format!("setup-{i}");
        let key = format!("{}:setup:{i}", run.run_id);
        let input = json!({"command": command, "timeout_seconds": ws.setup_timeout_seconds});
        let call = ToolCall {
            run_id: run.run_id,
            call_id: &call_id,
            name: "run_command",
            input: &input,
            idempotency_key: &key,
            context: run.context,
            store: run.store,
        };
        let ctx = tools
            .context_for(agent, &call, run.context.cloned(), cancel)
            .map_err(|e| PrepareError::Transient(format!("the workspace is not usable: {e}")))?;
        let out = nightshift_tools::Tool::call(&nightshift_tools::RunCommand, &ctx, input).await;
        if cancel.is_cancelled() {
            return Err(PrepareError::Transient("cancelled during setup".into()));
        }
        if out.is_error {
            return Err(PrepareError::Fatal(format!(
                "the workspace's setup command {command:?} failed: {}",
                tail(&out.content, 2000)
            )));
        }
        tracing::info!(run_id = run.run_id, command = %command, "workspace setup command done");
    }
    Ok(())
}

/// The last `max` bytes of `text` (at a character boundary).
fn tail(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(workspace: &str) -> AgentDef {
        let text =
            format!("name = \"a\"\nprovider = \"p\"\nmodel = \"m\"\n[workspace]\n{workspace}");
        let config: nightshift_agent::AgentConfig = toml::from_str(&text).unwrap();
        config.resolve(std::path::Path::new(".")).unwrap()
    }

    #[test]
    fn the_delivery_rendered_checkout_wins_else_the_templates_render_over_the_context() {
        let a = agent("checkout = { repo = \"{{ github.repo }}\", ref = \"main\", depth = 1 }\n");
        let rendered = json!({"workspace": {"repo": "o/from-delivery", "ref": "abc", "depth": 2},
                              "github": {"repo": "o/ctx"}});
        let spec = spec_for(&a, Some(&rendered)).unwrap().unwrap();
        assert_eq!(
            (spec.repo.as_str(), spec.git_ref.as_str(), spec.depth),
            ("o/from-delivery", "abc", Some(2))
        );
        let spec = spec_for(&a, Some(&json!({"github": {"repo": "o/ctx"}})))
            .unwrap()
            .unwrap();
        assert_eq!(
            (spec.repo.as_str(), spec.git_ref.as_str()),
            ("o/ctx", "main")
        );
        let e = spec_for(&a, None).unwrap_err().to_string();
        assert!(e.contains("agents.a.workspace.checkout"), "{e}");
        assert!(spec_for(&agent(""), None).unwrap().is_none());
    }

    #[test]
    fn a_setup_failure_shows_the_end_of_its_output() {
        let long = format!("{}END", "é".repeat(3000));
        let t = tail(&long, 2000);
        assert!(t.ends_with("END") && t.len() <= 2000);
    }
}
