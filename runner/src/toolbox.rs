//! The runtime's [`ToolBox`], made of the real tools: one [`Registry`] per agent, and per
//! call a [`ToolContext`] rooted in the run's own workspace directory
//! (`<data_dir>/workspaces/<run id>`), with its artifacts beside it, and, in the daemon, the
//! supervisor of background commands (logs in `<data_dir>/tasks/`) and, unless `[sandbox]
//! mode = "off"`, the sandbox its commands run in (the agent's network setting, the run's
//! private temp dir; see `sandbox`). [`ToolBox::check_input`]
//! checks a call's input against the tool's compiled JSON Schema (the agent's registry), and
//! [`ToolBox::call`] checks it again before anything runs. When a run ends (not when it
//! parks: HOME and TMPDIR are scratch a sleeping run may still use after it wakes),
//! [`ToolBox::run_ended`] removes its private temp dir.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use nightshift_agent::{
    AgentDef, McpListing, PrepareError, PreparedWorkspace, RunStart, ToolBox, ToolCall,
};
use nightshift_llm::ToolSpec;
use nightshift_notify::checks::{self, StoreClaims};
use nightshift_tools::{
    HttpAllowlist, Limits, ProcessRegistry, Registry, RegistryConfig, SecretBindings,
    SecretResolver, TaskSupervisor, ToolClass, ToolContext, ToolOutput,
};
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::mcp_hub::McpHub;
use crate::sandbox::Confinement;

/// Tool registries by agent name, and what every call shares.
pub struct Tools {
    registries: HashMap<String, Registry>,
    data_dir: PathBuf,
    secrets: SecretResolver,
    bindings: SecretBindings,
    allowlist: HttpAllowlist,
    limits: Limits,
    env_allow: Vec<String>,
    processes: ProcessRegistry,
    tasks: Option<TaskSupervisor>,
    /// Where a run's end is told to the daemon's sweep (see [`crate::retention::RunEnds`]).
    run_ends: Option<crate::retention::RunEnds>,
    confinement: Option<Confinement>,
    pub(crate) github: Option<std::sync::Arc<nightshift_github::GithubAccess>>,
    /// The runs' MCP sessions.
    mcp: Arc<McpHub>,
    /// The client HTTP MCP servers are reached with (no redirects, no proxy), built once.
    mcp_http: std::sync::OnceLock<Result<reqwest::Client, String>>,
}

impl std::fmt::Debug for Tools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tools")
            .field("agents", &self.registries.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Tools {
    /// Builds every agent's registry; an unknown tool name is an error naming the agent, and
    /// a command tool's program that could not run is one naming the key
    /// ([`crate::programs::check`]).
    /// Probes the kernel for the sandbox (see [`Confinement::start`]): where it cannot be
    /// enforced this is an error, unless `[sandbox] mode = "off"`. The secrets are
    /// [`crate::redaction::secrets`] of `config`.
    pub fn build(config: &Config) -> anyhow::Result<Tools> {
        Self::build_with(config, crate::redaction::secrets(config))
    }

    /// [`Tools::build`] with `secrets` already built (the daemon builds the set once).
    pub(crate) fn build_with(config: &Config, secrets: SecretResolver) -> anyhow::Result<Tools> {
        let registries = registries(config)?;
        crate::programs::check(config).map_err(|e| anyhow::anyhow!("invalid config: {e}"))?;
        let rt = &config.runtime;
        let confinement = Confinement::start(config)?;
        Ok(Tools {
            registries,
            data_dir: config.resolve_path(&rt.data_dir),
            secrets,
            bindings: SecretBindings::from_specs(&rt.secrets),
            allowlist: HttpAllowlist::new(rt.http_allowlist.iter()),
            limits: Limits {
                output_cap_bytes: rt.output_cap_bytes,
                command_timeout: Duration::from_secs(rt.command_timeout_seconds),
                background_timeout: Duration::from_secs(rt.background.timeout_seconds),
                max_background_timeout: Duration::from_secs(rt.background.max_timeout_seconds),
                ..Limits::default()
            },
            env_allow: rt.command_env.clone(),
            processes: ProcessRegistry::new(config.resolve_path(&rt.data_dir).join("procs")),
            tasks: None,
            run_ends: None,
            confinement,
            github: crate::github::access(config)?,
            mcp: Arc::default(),
            mcp_http: std::sync::OnceLock::new(),
        })
    }

    /// The tools of `config` as replay sees them: every agent's registry (its specs,
    /// classes and input checks), and nothing that runs — no sandbox probe, no GitHub access,
    /// no check of the command tools' programs. Only for replay, which answers every call
    /// from a recording and asks this only for specs, classes and checks: never give it to a
    /// runtime that calls tools (without the sandbox, a command would run unconfined).
    pub(crate) fn offline(config: &Config) -> anyhow::Result<Tools> {
        let rt = &config.runtime;
        Ok(Tools {
            registries: registries(config)?,
            data_dir: config.resolve_path(&rt.data_dir),
            secrets: SecretResolver::default(),
            bindings: SecretBindings::default(),
            allowlist: HttpAllowlist::default(),
            limits: Limits::default(),
            env_allow: Vec::new(),
            processes: ProcessRegistry::new(config.resolve_path(&rt.data_dir).join("procs")),
            tasks: None,
            run_ends: None,
            confinement: None,
            github: None,
            mcp: Arc::default(),
            mcp_http: std::sync::OnceLock::new(),
        })
    }

    /// Lets `run_command` start background commands under `supervisor`.
    pub fn with_tasks(mut self, supervisor: TaskSupervisor) -> Self {
        self.tasks = Some(supervisor);
        self
    }

    /// Tools whose MCP sessions are `hub`'s (the daemon's, kept across reloads).
    pub(crate) fn with_mcp_hub(mut self, hub: Arc<McpHub>) -> Self {
        self.mcp = hub;
        self
    }

    /// Tools that tell `ends` of each run that ends in the loop.
    pub(crate) fn with_run_ends(mut self, ends: crate::retention::RunEnds) -> Self {
        self.run_ends = Some(ends);
        self
    }

    /// The secrets every call shares: `runtime.secrets` to substitute, and the redactor for
    /// every secret the daemon holds.
    pub(crate) fn secrets(&self) -> &SecretResolver {
        &self.secrets
    }

    /// The client HTTP MCP servers are reached with: no redirects (a redirect could leave
    /// the allowlisted host), no proxy from the environment.
    pub(crate) fn mcp_http_client(&self) -> Result<reqwest::Client, String> {
        self.mcp_http
            .get_or_init(nightshift_mcp::http_client)
            .clone()
    }

    /// The workspace directory of a run.
    pub(crate) fn workspace(&self, run_id: &str) -> PathBuf {
        self.data_dir.join("workspaces").join(run_id)
    }

    /// Where a run's checkout is made before it is moved into its workspace: the daemon's,
    /// out of the sandbox's reach.
    pub(crate) fn staging(&self, run_id: &str) -> PathBuf {
        self.data_dir.join("checkouts").join(run_id)
    }

    fn context(
        &self,
        agent: &AgentDef,
        call: &ToolCall<'_>,
        cancel: &CancellationToken,
    ) -> std::io::Result<ToolContext> {
        self.context_for(agent, call, call.context.cloned(), cancel)
    }

    /// The context of a call of `agent` in run `call.run_id`, knowing `run_context`.
    pub(crate) fn context_for(
        &self,
        agent: &AgentDef,
        call: &ToolCall<'_>,
        run_context: Option<serde_json::Value>,
        cancel: &CancellationToken,
    ) -> std::io::Result<ToolContext> {
        let workspace = self.workspace(call.run_id);
        std::fs::create_dir_all(&workspace)?;
        let artifacts = self.data_dir.join("artifacts").join(call.run_id);
        let mut ctx = ToolContext::new(call.run_id, call.call_id, &workspace, artifacts)?;
        if let Some(confinement) = &self.confinement {
            let sandbox =
                confinement.for_run(call.run_id, ctx.workspace(), agent.config.sandbox.network)?;
            ctx = ctx
                .with_sandbox(sandbox)
                .with_sandboxed_path(confinement.command_path());
        }
        let ctx = ctx
            .with_cancel(cancel.clone())
            .with_secrets(self.secrets.clone())
            .with_secret_bindings(self.bindings.clone())
            .with_http_allowlist(self.allowlist.clone())
            .with_limits(self.limits.clone())
            .with_env_allow(self.env_allow.iter())
            .with_idempotency_key(call.idempotency_key)
            .with_run_context(run_context)
            .with_process_registry(self.processes.clone());
        let ctx = match &self.github {
            Some(github) => ctx
                .with_github(github.clone())
                .with_check_run_claims(Arc::new(StoreClaims(call.store.clone()))),
            None => ctx,
        }
        .with_github_agent(nightshift_tools::GithubAgent {
            check_run: agent.config.github.check_run.clone(),
            review_events: agent.config.github.review_events.clone(),
        });
        Ok(match &self.tasks {
            Some(tasks) => ctx.with_tasks(tasks.clone()),
            None => ctx,
        })
    }
}

/// Every agent's tool registry; an unknown tool name is an error naming the agent.
fn registries(config: &Config) -> anyhow::Result<HashMap<String, Registry>> {
    let mut registries = HashMap::new();
    for agent in &config.agents {
        let command_tools = config
            .command_tools
            .iter()
            .filter(|c| agent.tools.contains(&c.name))
            .cloned()
            .collect();
        let registry = Registry::build(&RegistryConfig {
            // Control tools (schedule_wakeup) are run by the loop, not the registry.
            tools: agent
                .tools
                .iter()
                .filter(|t| !nightshift_agent::is_control_tool(t))
                .cloned()
                .collect(),
            command_tools,
            overrides: agent.tool_overrides.clone(),
        })
        .map_err(|e| anyhow::anyhow!("invalid config: agents.{}.tools: {e}", agent.name))?;
        registries.insert(agent.name.clone(), registry);
    }
    Ok(registries)
}

impl ToolBox for Tools {
    /// Starts the run's check run when its agent keeps one (see [`checks`]); GitHub
    /// failing to make it is logged and the run goes on without it.
    fn prepare<'a>(
        &'a self,
        agent: &'a AgentDef,
        run: RunStart<'a>,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<Option<PreparedWorkspace>, PrepareError>> {
        Box::pin(async move {
            // Only for a run whose end reaches the outbox (enqueued while its agent kept a
            // check run): nothing else would ever complete it.
            let keeps = agent
                .config
                .github
                .check_run
                .as_ref()
                .filter(|_| run.notifies);
            if let (Some(name), Some(gh)) = (keeps, &self.github) {
                // A task of its own: a job cancelled while GitHub has not answered the create
                // stops waiting, and the start still records GitHub's id (or gives the claim
                // up) instead of leaving a claim that holds every other maker off until it
                // grows stale.
                let started = tokio::spawn(checks::start_then_complete_if_ended(
                    gh.clone(),
                    run.store.clone(),
                    name.clone(),
                    run.run_id.to_string(),
                    run.context.cloned(),
                ));
                tokio::select! {
                    () = cancel.cancelled() => return Ok(None),
                    _ = started => {}
                }
                if cancel.is_cancelled() {
                    return Ok(None);
                }
            }
            crate::workspace::prepare(self, agent, run, cancel).await
        })
    }

    fn mcp_listings<'a>(
        &'a self,
        agent: &'a AgentDef,
        run: RunStart<'a>,
        listed: Vec<String>,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<Vec<McpListing>, PrepareError>> {
        Box::pin(async move { self.mcp.listings(self, agent, run, &listed, cancel).await })
    }

    fn specs(&self, agent: &AgentDef) -> Vec<ToolSpec> {
        self.registries
            .get(&agent.config.name)
            .map(|r| {
                r.specs()
                    .into_iter()
                    .map(|d| ToolSpec {
                        name: d.name,
                        description: d.description,
                        input_schema: d.input_schema,
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    fn durability(&self, agent: &AgentDef, name: &str, input: &serde_json::Value) -> ToolClass {
        self.registries
            .get(&agent.config.name)
            .and_then(|r| r.class_for(name, input))
            .unwrap_or(ToolClass::SideEffect)
    }

    fn check_input(
        &self,
        agent: &AgentDef,
        name: &str,
        input: &serde_json::Value,
    ) -> Result<(), String> {
        match self.registries.get(&agent.config.name) {
            Some(registry) => registry.check_input(name, input).map_err(|e| e.to_string()),
            None => Ok(()), // `call` answers an agent without tools
        }
    }

    fn call<'a>(
        &'a self,
        agent: &'a AgentDef,
        call: ToolCall<'a>,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            if nightshift_mcp::split_name(call.name).is_some() {
                let ctx = match self.context(agent, &call, cancel) {
                    Ok(ctx) => ctx,
                    Err(e) => {
                        return ToolOutput::unresolved(format!(
                            "the run's workspace is not usable: {e}; the call was not made"
                        ));
                    }
                };
                return self.mcp.call(self, agent, call, &ctx, cancel).await;
            }
            let Some(registry) = self.registries.get(&agent.config.name) else {
                return ToolOutput::error(format!("agent {} has no tools", agent.config.name));
            };
            let ctx = match self.context(agent, &call, cancel) {
                Ok(ctx) => ctx,
                Err(e) => {
                    return ToolOutput::error(format!("the run's workspace is not usable: {e}"));
                }
            };
            registry.call(&ctx, call.name, call.input.clone()).await
        })
    }

    /// Removes the run's private temp dir (its commands' HOME and TMPDIR) and tells the
    /// daemon's sweep, which removes the workspace once the end is written and nothing runs
    /// in it (unless the agent keeps it).
    fn run_ended<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            self.mcp.run_ended(run_id).await;
            if let Some(ends) = &self.run_ends {
                ends.tell(run_id);
            }
            let Some(confinement) = &self.confinement else {
                return;
            };
            let temp = confinement.temp_dir(run_id);
            let removed = tokio::task::spawn_blocking({
                let temp = temp.clone();
                move || std::fs::remove_dir_all(&temp)
            })
            .await;
            match removed {
                Ok(Ok(())) => {}
                Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {}
                Ok(Err(e)) => tracing::warn!(
                    run_id,
                    dir = %temp.display(),
                    error = %e,
                    "cannot remove the ended run's temp dir"
                ),
                Err(e) => tracing::warn!(run_id, error = %e, "removing a temp dir panicked"),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nightshift_store::Store;
    use serde_json::json;

    /// A scratch directory, removed when dropped.
    struct Scratch(PathBuf);

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A config with agent `a` and a `side_effect` command tool `pay` that appends its input
    /// to `<dir>/ledger`. Unsandboxed: the ledger is outside the workspace, and this unit
    /// test's binary is no launcher (the sandboxed tools are tested in `tests/`).
    fn config(dir: &std::path::Path) -> Config {
        let text = format!(
            "[runtime]\ndata_dir = \"{data}\"\n\
             [sandbox]\nmode = \"off\"\n\
             [providers.p]\nkind = \"scripted\"\nscript = \"s.json\"\n\
             [[agents]]\nname = \"a\"\nprovider = \"p\"\nmodel = \"m\"\nsystem = \"s\"\n\
             tools = [\"pay\", \"read_file\"]\n\
             [[command_tools]]\nname = \"pay\"\ndescription = \"Pay\"\n\
             command = [\"sh\", \"-c\", \"cat >> {ledger}\"]\n\
             input_schema = {{ type = \"object\", required = [\"amount\"], \
             additionalProperties = false, properties = {{ amount = {{ type = \"integer\" }} }} }}\n",
            data = dir.join("data").display(),
            ledger = dir.join("ledger").display(),
        );
        let config = Config::parse(&text, "test").unwrap();
        config.validate().unwrap();
        config
    }

    fn pay<'a>(input: &'a serde_json::Value, store: &'a Store) -> ToolCall<'a> {
        ToolCall {
            run_id: "run-1",
            call_id: "call-1",
            name: "pay",
            input,
            idempotency_key: "run-1:call-1",
            context: None,
            store,
        }
    }

    /// A store in memory: what a call's context may ask of the daemon's records.
    async fn memory_store() -> Store {
        let config = nightshift_store::StoreConfig {
            url: "sqlite::memory:".into(),
            ..Default::default()
        };
        Store::connect(&config, std::sync::Arc::new(nightshift_store::SystemClock))
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn inputs_are_checked_against_the_tool_schema_before_anything_runs() {
        let dir = Scratch(
            std::env::temp_dir().join(format!("nightshift-toolbox-{}", uuid::Uuid::new_v4())),
        );
        std::fs::create_dir_all(&dir.0).unwrap();
        let ledger = dir.0.join("ledger");
        let config = config(&dir.0);
        let tools = Tools::build(&config).unwrap();
        let agent = config.agents[0].resolve(&dir.0).unwrap();

        let bad = json!({"amount": "5", "memo": "x"});
        let err = tools.check_input(&agent, "pay", &bad).unwrap_err();
        assert!(
            err.starts_with("input for `pay` does not match its schema: ")
                && err.contains(r#"at /amount: "5" is not of type "integer""#)
                && err.contains("'memo' was unexpected")
                && err.ends_with("Fix the input and call the tool again."),
            "{err}"
        );
        let err_builtin = tools
            .check_input(&agent, "read_file", &json!({"path": 1}))
            .unwrap_err();
        assert!(err_builtin.contains("at /path: "), "{err_builtin}");
        assert_eq!(tools.check_input(&agent, "nope", &json!([])), Ok(()));

        let cancel = CancellationToken::new();
        let store = memory_store().await;
        let reply = tools.call(&agent, pay(&bad, &store), &cancel).await;
        assert!(reply.is_error, "{}", reply.content);
        assert_eq!(reply.content, err, "call refuses it the same way");
        assert!(!ledger.exists(), "a refused input never runs");

        let good = json!({"amount": 5});
        assert_eq!(tools.check_input(&agent, "pay", &good), Ok(()));
        let reply = tools.call(&agent, pay(&good, &store), &cancel).await;
        assert!(!reply.is_error, "{}", reply.content);
        assert_eq!(std::fs::read_to_string(&ledger).unwrap(), r#"{"amount":5}"#);
    }

    /// A loopback HTTP server answering `200 ok` to every request; counts connections.
    async fn counting_server() -> (
        std::net::SocketAddr,
        std::sync::Arc<std::sync::atomic::AtomicUsize>,
    ) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = connections.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let mut buf = [0u8; 4096];
                let _ = socket.read(&mut buf).await;
                let _ = socket
                    .write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                    )
                    .await;
            }
        });
        (addr, connections)
    }

    #[tokio::test]
    async fn secrets_bound_in_the_config_reach_http_request() {
        let dir = Scratch(
            std::env::temp_dir().join(format!("nightshift-toolbox-{}", uuid::Uuid::new_v4())),
        );
        std::fs::create_dir_all(&dir.0).unwrap();
        let (addr, connections) = counting_server().await;
        let text = format!(
            "[runtime]\ndata_dir = \"{data}\"\nhttp_allowlist = [\"{addr}\"]\n\
             secrets = [{{ name = \"NIGHTSHIFT_TEST_BOUND\", hosts = [\"api.github.com\"] }}]\n\
             [sandbox]\nmode = \"off\"\n\
             [providers.p]\nkind = \"scripted\"\nscript = \"s.json\"\n\
             [[agents]]\nname = \"a\"\nprovider = \"p\"\nmodel = \"m\"\nsystem = \"s\"\n\
             tools = [\"http_request\"]\n",
            data = dir.0.join("data").display(),
        );
        let config = Config::parse(&text, "test").unwrap();
        config.validate().unwrap();
        let tools = Tools::build(&config).unwrap();
        let agent = config.agents[0].resolve(&dir.0).unwrap();
        let cancel = CancellationToken::new();
        let request = |headers: serde_json::Value| json!({"method": "GET", "url": format!("http://{addr}/"), "headers": headers});
        let store = memory_store().await;
        let call = |input| ToolCall {
            run_id: "run-1",
            call_id: "call-1",
            name: "http_request",
            input,
            idempotency_key: "run-1:call-1",
            context: None,
            store: &store,
        };

        let bound = request(json!({"Authorization": "{{secret:NIGHTSHIFT_TEST_BOUND}}"}));
        let reply = tools.call(&agent, call(&bound), &cancel).await;
        assert!(reply.is_error, "{}", reply.content);
        assert!(
            reply.content.starts_with(&format!(
                "secret `NIGHTSHIFT_TEST_BOUND` may only be sent to api.github.com, not to \
                 `{addr}`; the request was not sent"
            )),
            "{}",
            reply.content
        );
        // Positive control: a request without the secret reaches the server, and it is the
        // first connection the server ever saw.
        let plain = request(json!({}));
        let reply = tools.call(&agent, call(&plain), &cancel).await;
        assert!(!reply.is_error, "{}", reply.content);
        assert_eq!(connections.load(std::sync::atomic::Ordering::SeqCst), 1);
    }
}
