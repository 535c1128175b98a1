//! The config's unit tests: parse errors name the key and the line, each table's checks say
//! what to write instead, and the file's relative paths resolve against its directory.

use super::*;
use nightshift_tools::SecretSpec;

#[test]
fn named_tokens_are_refused_with_what_to_write_instead() {
    let with = |entries: &str| Config::parse(entries, "x").and_then(|c| c.validate());
    let token = |name: &str, role: &str| {
        format!(
            "[[server.tokens]]\nname = \"{name}\"\ntoken_env = \"T_{role}\"\nrole = \"{role}\"\n"
        )
    };
    assert!(with(&(token("ci", "operator") + &token("grafana", "read_only"))).is_ok());
    let refused = |text: String, want: &[&str]| {
        let err = format!("{:#}", with(&text).unwrap_err());
        for w in want {
            assert!(err.contains(w), "{w} in: {err}");
        }
    };
    refused(token("admin", "operator"), &["'admin'", "another name"]);
    refused(
        token("has space", "operator"),
        &["'has space'", "letters, digits"],
    );
    refused(
        token("ci", "operator") + &token("ci", "read_only"),
        &["two tokens are named 'ci'"],
    );
    refused(
        token("ci", "writer"),
        &["writer", "`operator`", "`read_only`"],
    );
    refused(
        "[[server.tokens]]\nname = \"ci\"\ntoken_env = \"T\"\n".to_string(),
        &["role"],
    );
}

#[test]
fn unknown_keys_and_bad_values_name_the_key() {
    let err = Config::parse("[worker]\nslot = 3\n", "x.toml")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("x.toml (line 2)") && err.contains("unknown field `slot`"),
        "{err}"
    );
    assert!(err.contains("`slots`"), "lists the allowed keys: {err}");
    let err = Config::parse("[worker]\nslots = -1\n", "x.toml")
        .unwrap_err()
        .to_string();
    assert!(err.contains("line 2") && err.contains("-1"), "{err}");
    let err = Config::parse("[database]\nsynchronous = \"off\"\n", "x.toml")
        .unwrap_err()
        .to_string();
    assert!(err.contains("`full`") && err.contains("off"), "{err}");
    let c = Config::parse("[worker]\nslots = 0\n", "x.toml").unwrap();
    assert!(
        c.validate()
            .unwrap_err()
            .to_string()
            .contains("worker.slots")
    );
    for limit in [0, 10_001] {
        let c = Config::parse(&format!("[server]\nmax_batch_runs = {limit}\n"), "x").unwrap();
        let err = c.validate().unwrap_err().to_string();
        assert!(
            err.contains("server.max_batch_runs") && err.contains("1 to 10000"),
            "{err}"
        );
    }
    let c = Config::parse("[server]\nmax_batch_runs = 10000\n", "x").unwrap();
    c.validate().unwrap();
    assert_eq!(Config::parse("", "x").unwrap(), Config::default());
    for (body, key) in [
        (
            "lost_after_seconds = 1",
            "runtime.background.lost_after_seconds",
        ),
        ("max_per_run = 0", "runtime.background.max_per_run"),
        (
            "timeout_seconds = 90000",
            "runtime.background.timeout_seconds (90000)",
        ),
    ] {
        let c = Config::parse(&format!("[runtime.background]\n{body}\n"), "x").unwrap();
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains(key), "{body}: {err}");
    }
    let err = Config::parse("[runtime.background]\nlost_after = 5\n", "x")
        .unwrap_err()
        .to_string();
    assert!(err.contains("lost_after_seconds"), "lists the keys: {err}");
}

#[test]
fn secrets_are_names_or_tables_bound_to_hosts_and_a_bad_form_says_both() {
    let c = Config::parse(
        "[runtime]\nsecrets = [\"PLAIN\", { name = \"GITHUB_TOKEN\", hosts = [\"api.github.com\"] }]\n",
        "x.toml",
    )
    .unwrap();
    c.validate().unwrap();
    assert_eq!(
        c.runtime.secrets,
        [
            SecretSpec::unbound("PLAIN"),
            SecretSpec::bound("GITHUB_TOKEN", ["api.github.com"]),
        ]
    );
    assert_eq!(c.runtime.secret_names(), ["PLAIN", "GITHUB_TOKEN"]);

    let err = Config::parse("[runtime]\nsecrets = [42]\n", "x.toml")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("x.toml (line 2)")
            && err.contains("the name of an environment variable")
            && err.contains("hosts = [\"api.github.com\"]"),
        "{err}"
    );
    let err = Config::parse(
        "[runtime]\nsecrets = [{ name = \"T\", host = \"api.github.com\" }]\n",
        "x.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("unknown field `host`") && err.contains("`hosts`"),
        "{err}"
    );
    for (secrets, expected) in [
        (
            "[{ name = \"T\", hosts = [] }]",
            "runtime.secrets: secret `T` has an empty `hosts` list",
        ),
        (
            "[{ name = \"T\", hosts = [\"https://api.github.com\"] }]",
            "without scheme or path",
        ),
        ("[\"T\", \"T\"]", "`T` is listed twice"),
    ] {
        let c = Config::parse(&format!("[runtime]\nsecrets = {secrets}\n"), "x").unwrap();
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains(expected), "{secrets}: {err}");
    }
}

#[test]
fn the_example_config_is_the_defaults_and_its_samples_are_valid() {
    let example = include_str!("../../../ops/nightshift.example.toml");
    let parsed = Config::parse(example, "example").unwrap();
    assert_eq!(parsed, Config::default(), "the example shows the defaults");
    // Uncomment the sample provider, agent and command tool: they must parse and validate.
    let start = example.find("# [providers.anthropic]").unwrap();
    let samples: String = example[start..]
        .lines()
        .map(|l| l.strip_prefix("# ").or(l.strip_prefix("#")).unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n");
    let full = format!("{}\n{samples}", &example[..start]);
    let config = Config::parse(&full, "example with samples").unwrap();
    config.validate().unwrap();
    assert_eq!(config.agents[0].budgets.max_turns, 50);
    assert_eq!(config.command_tools[0].name, "lint");
    assert_eq!(config.compiled_schedules().unwrap()[0].name(), "digest");
    assert_eq!(config.hooks[0].routes[1].name, "comment");
    assert_eq!(
        config.agents[0].notify[0].secret_env,
        "REVIEWER_NOTIFY_SECRET"
    );
    assert_eq!(config.github.apps[0].name, "review-bot");
    assert_eq!(config.github.timeout_seconds, 60);
    assert_eq!(
        config.agents[0].github.check_run.as_deref(),
        Some("Nightshift review")
    );
    assert_eq!(config.agents[0].workspace.setup, ["cargo fetch"]);
}

#[test]
fn wrong_types_and_bad_enum_values_name_the_whole_key() {
    for (text, expect) in [
        (
            "[worker]\nslots = \"many\"\n",
            "x.toml (line 2): worker.slots: invalid type: string \"many\", expected usize",
        ),
        (
            "[[agents]]\nname = \"a\"\nprovider = \"p\"\nmodel = \"m\"\n\
             budgets = { max_turns = \"x\" }\n",
            "x.toml (line 5): agents[0].budgets.max_turns: invalid type: string \"x\"",
        ),
        (
            "[log]\nformat = \"xml\"\n",
            "x.toml (line 2): log.format: unknown variant `xml`, expected `text` or `json`",
        ),
    ] {
        let err = Config::parse(text, "x.toml").unwrap_err().to_string();
        assert!(err.starts_with(expect), "{text}: {err}");
    }
}

#[test]
fn a_cost_budget_that_is_not_a_positive_number_is_refused_naming_the_key() {
    let agent = |budget: &str| {
        format!(
            "[providers.p]\nkind = \"scripted\"\nscript = \"s.json\"\n\
             [[agents]]\nname = \"a\"\nprovider = \"p\"\nmodel = \"m\"\n\
             pricing = {{ input = 1.0, output = 2.0 }}\n\
             budgets = {{ max_cost_usd = {budget} }}\n"
        )
    };
    for bad in ["-1.0", "0.0", "nan", "inf"] {
        let err = Config::parse(&agent(bad), "x.toml")
            .unwrap()
            .validate()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("agents.a.budgets.max_cost_usd"),
            "{bad}: {err}"
        );
        assert!(
            err.contains("positive number of US dollars"),
            "{bad}: {err}"
        );
    }
    Config::parse(&agent("2.5"), "x.toml")
        .unwrap()
        .validate()
        .unwrap();
}

#[test]
fn command_tool_schemas_must_be_valid_json_schema() {
    let tool = |schema: &str| {
        format!(
            "[[command_tools]]\nname = \"pay\"\ndescription = \"Pay\"\n\
             command = [\"/bin/true\"]\ninput_schema = {schema}\n"
        )
    };
    let valid = tool(
        "{ type = \"object\", required = [\"amount\"], additionalProperties = false, \
         properties = { amount = { type = \"integer\" }, memo = { type = \"string\", \
         maxLength = 40 } } }",
    );
    let config = Config::parse(&valid, "x.toml").unwrap();
    config.validate().unwrap();
    assert_eq!(
        config.command_tools[0].input_schema["required"][0],
        "amount"
    );

    for (schema, expect) in [
        (
            "{ type = \"object\", properties = { amount = { type = \"integr\" } } }",
            "at /properties/amount/type: \"integr\" is not valid",
        ),
        (
            "{ type = \"object\", required = \"amount\" }",
            "at /required: \"amount\" is not of type \"array\"",
        ),
        (
            "{ type = \"object\", properties = { x = { \"$ref\" = \"https://example.invalid/s\" } } }",
            "is never fetched",
        ),
    ] {
        let err = Config::parse(&tool(schema), "x.toml")
            .unwrap()
            .validate()
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(
                "invalid config: command tool `pay`: input_schema is not a valid JSON Schema: "
            ),
            "{err}"
        );
        assert!(err.contains(expect), "{expect}: {err}");
        assert!(
            err.ends_with("fix `command_tools.pay.input_schema`"),
            "{err}"
        );
    }
    let err = Config::parse(&tool("{ type = \"array\" }"), "x.toml")
        .unwrap()
        .validate()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("must be a JSON object schema")
            && err.contains("command_tools.pay.input_schema"),
        "{err}"
    );
}

#[test]
fn bad_schedules_name_the_schedule_and_key() {
    let base = "[providers.p]\nkind = \"scripted\"\nscript = \"s.json\"\n[[agents]]\nname = \"reporter\"\n\
                provider = \"p\"\nmodel = \"m\"\nsystem = \"s\"\n";
    let with = |schedule: &str| {
        Config::parse(&format!("{base}[[schedules]]\n{schedule}"), "x.toml")
            .and_then(|c| c.validate())
            .unwrap_err()
            .to_string()
    };
    let err = with(
        "name = \"d\"\ncron = \"0 7 * * 1-5\"\nagent = \"reporter\"\nprompt = \"p\"\ntimezone = \"Mars/Base\"\n",
    );
    assert!(err.contains("schedules.d.timezone: 'Mars/Base'"), "{err}");
    let err = with("name = \"d\"\ncron = \"0 7 * * 1-5\"\nagent = \"nobody\"\nprompt = \"p\"\n");
    assert!(err.contains("schedules.d.agent: agent 'nobody'"), "{err}");
    let err = with(
        "name = \"d\"\ncron = \"0 7 * * 1-5\"\nagent = \"reporter\"\nprompt = \"p\"\novrlap = \"skip\"\n",
    );
    assert!(
        err.contains("unknown field `ovrlap`") && err.contains("line"),
        "{err}"
    );
    let twice = "name = \"d\"\ncron = \"@daily\"\nagent = \"reporter\"\nprompt = \"p\"\n";
    let err = with(&format!("{twice}[[schedules]]\n{twice}"));
    assert!(err.contains("'d' is defined twice"), "{err}");
}

#[test]
fn hooks_are_validated_at_load_naming_the_key() {
    let agent = "[providers.p]\nkind = \"scripted\"\nscript = \"s.json\"\n[[agents]]\nname = \"reviewer\"\n\
                 provider = \"p\"\nmodel = \"m\"\nsystem = \"s\"\n";
    let hook = |extra: &str, route: &str| {
        format!(
            "{agent}[[hooks]]\nname = \"gh\"\n{extra}\n[[hooks.routes]]\nname = \"r\"\n\
             event = \"push\"\nprompt = \"p {{{{ ref }}}}\"\n{route}\n"
        )
    };
    let ok = hook(
        "signature = \"github\"\nsecret_env = \"S\"",
        "agent = \"reviewer\"",
    );
    Config::parse(&ok, "x").unwrap().validate().unwrap();
    let cases = [
        (
            "secret_env = \"S\"",
            "agent = \"reviewer\"",
            "missing field `signature`",
        ),
        (
            "signature = \"github\"",
            "agent = \"reviewer\"",
            "hooks.gh.secret_env is missing",
        ),
        (
            "signature = \"github\"\nsecret_env = \"S\"",
            "agent = \"nobody\"",
            "hooks.gh.routes.r.agent: agent 'nobody' is not configured",
        ),
        (
            "signature = \"github\"\nsecret_env = \"S\"",
            "agent = \"reviewer\"\nconcurrency_key = \"{{ x\"",
            "hooks.gh.routes.r.concurrency_key is not a valid template",
        ),
        (
            "signature = \"hmac\"\nsecret_env = \"S\"",
            "agent = \"reviewer\"",
            "[hooks.hmac]",
        ),
        (
            "signature = \"none\"",
            "agent = \"reviewer\"",
            "hooks.gh.delivery_id is missing",
        ),
        (
            "signature = \"github\"\nsecret_env = \"S\"\nmax_body_bytes = 0",
            "agent = \"reviewer\"",
            "max_body_bytes = 0",
        ),
        (
            "signature = \"github\"\nsecret_env = \"S\"\nsecret = \"x\"",
            "agent = \"reviewer\"",
            "unknown field `secret`",
        ),
    ];
    for (extra, route, expect) in cases {
        let err = match Config::parse(&hook(extra, route), "x") {
            Err(e) => e.to_string(),
            Ok(c) => c.validate().unwrap_err().to_string(),
        };
        assert!(err.contains(expect), "{expect}: {err}");
    }
}

#[test]
fn relative_paths_in_the_file_resolve_against_its_directory_whatever_the_cwd() {
    let dir = tempfile::tempdir().unwrap();
    let etc = dir.path().join("etc");
    std::fs::create_dir(&etc).unwrap();
    let file = etc.join("nightshift.toml");
    std::fs::write(
        &file,
        "[database]\nurl = \"sqlite://state/ns.db?mode=rwc\"\n\
         [runtime]\ndata_dir = \"data\"\n\
         [[command_tools]]\nname = \"lint\"\ndescription = \"d\"\n\
         command = [\"scripts/lint.sh\", \"--fix\"]\n\
         [[command_tools]]\nname = \"jq\"\ndescription = \"d\"\ncommand = [\"jq\"]\n",
    )
    .unwrap();
    let c = Config::load(Some(&file), &Overrides::default()).unwrap();
    assert_eq!(
        c.database.url,
        format!("sqlite://{}?mode=rwc", etc.join("state/ns.db").display())
    );
    assert_eq!(c.runtime.data_dir, etc.join("data"));
    assert_eq!(c.base_dir, etc);
    assert_eq!(
        c.command_tools[0].command,
        [
            etc.join("scripts/lint.sh").display().to_string(),
            "--fix".into()
        ]
    );
    assert_eq!(
        c.command_tools[1].command,
        ["jq"],
        "a bare name stays a PATH lookup"
    );
    // Absolute paths and PostgreSQL URLs are kept; a URL given as an override is not
    // moved (it is the command line's, relative to the working directory).
    assert_eq!(
        anchor_sqlite_url("sqlite:///var/lib/ns.db", &etc),
        "sqlite:///var/lib/ns.db"
    );
    assert_eq!(
        anchor_sqlite_url("postgres://u@h/db", &etc),
        "postgres://u@h/db"
    );
    assert_eq!(
        anchor_sqlite_url("sqlite::memory:", &etc),
        "sqlite::memory:"
    );
    let o = Overrides {
        database_url: Some("sqlite://here.db".into()),
        slots: None,
    };
    let c = Config::load(Some(&file), &o).unwrap();
    assert_eq!(c.database.url, "sqlite://here.db");
}

#[test]
fn a_cost_budget_over_a_model_without_a_price_is_refused_at_load() {
    let agent = |model: &str| {
        format!(
            "[providers.p]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1/v1\"\n\
             [[agents]]\nname = \"a\"\nprovider = \"p\"\nmodel = \"{model}\"\n\
             budgets = {{ max_cost_usd = 2.0 }}\n"
        )
    };
    Config::parse(&agent("gpt-4o-mini"), "x")
        .unwrap()
        .validate()
        .unwrap();
    let err = Config::parse(&agent("qwen2.5-coder"), "x")
        .unwrap()
        .validate()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("agents.a.budgets.max_cost_usd") && err.contains("'qwen2.5-coder'"),
        "{err}"
    );
    let priced = format!(
        "{}[prices.\"qwen2.5-coder\"]\ninput = 0.2\noutput = 0.6\n",
        agent("qwen2.5-coder")
    );
    Config::parse(&priced, "x").unwrap().validate().unwrap();
    let negative = format!("{}[prices.\"m\"]\ninput = -0.2\n", agent("gpt-4o"));
    let err = Config::parse(&negative, "x")
        .unwrap()
        .validate()
        .unwrap_err()
        .to_string();
    assert!(err.contains("prices.\"m\" has input = -0.2"), "{err}");
}

#[test]
fn mcp_servers_that_could_never_work_are_refused_at_load_naming_the_key() {
    let config = |runtime: &str, servers: &str| {
        format!(
            "[runtime]\n{runtime}\n[sandbox]\nmode = \"off\"\n\
             [providers.p]\nkind = \"scripted\"\nscript = \"s.json\"\n\
             [[agents]]\nname = \"a\"\nprovider = \"p\"\nmodel = \"m\"\n{servers}"
        )
    };
    let http = |headers: &str| {
        format!(
            "[[agents.mcp]]\nname = \"remote\"\ntype = \"http\"\n\
             url = \"https://mcp.example.com/mcp\"\nheaders = {{ {headers} }}\n"
        )
    };
    let cases = [
        (
            config("", &http("")),
            "agents.a.mcp.remote.url: https://mcp.example.com/mcp is not on runtime.http_allowlist",
        ),
        (
            config(
                "http_allowlist = [\"mcp.example.com\"]",
                &http("Authorization = \"Bearer {{secret:TOKEN}}\""),
            ),
            "agents.a.mcp.remote.headers: Authorization uses {{secret:TOKEN}}, which is not in runtime.secrets",
        ),
        (
            config(
                "http_allowlist = [\"mcp.example.com\"]\n\
                 secrets = [{ name = \"TOKEN\", hosts = [\"api.other.com\"] }]",
                &http("Authorization = \"Bearer {{secret:TOKEN}}\""),
            ),
            "agents.a.mcp.remote.headers",
        ),
        (
            config(
                "",
                "[[agents.mcp]]\nname = \"s\"\ncommand = \"/no/such/server\"\n",
            ),
            "agents.a.mcp.s.command: program `/no/such/server` cannot be used",
        ),
        (
            config(
                "",
                "[[agents.mcp]]\nname = \"s\"\ncommand = \"sh\"\n\
                 [[agents.mcp]]\nname = \"s\"\ncommand = \"sh\"\n",
            ),
            "'s' names two servers",
        ),
        (
            config(
                "",
                "[[agents.mcp]]\nname = \"s\"\ncommand = \"sh\"\nenv = { K = \"{{secret:NOPE}}\" }\n",
            ),
            "agents.a.mcp.s.env: K uses {{secret:NOPE}}",
        ),
        (
            config(
                "secrets = [{ name = \"GH\", hosts = [\"api.github.com\"] }]",
                "[[agents.mcp]]\nname = \"s\"\ncommand = \"sh\"\nenv = { K = \"{{secret:GH}}\" }\n",
            ),
            "agents.a.mcp.s.env: K uses {{secret:GH}}, which is bound to hosts",
        ),
    ];
    for (text, said) in cases {
        let err = Config::parse(&text, "x.toml")
            .and_then(|c| c.validate().map(|()| c))
            .and_then(|c| crate::toolbox::Tools::build(&c).map(|_| ()))
            .unwrap_err()
            .to_string();
        assert!(err.contains(said), "{said}\n got: {err}");
    }
    let fine = config(
        "http_allowlist = [\"mcp.example.com\"]\nsecrets = [\"TOKEN\"]",
        &format!(
            "{}[[agents.mcp]]\nname = \"local\"\ncommand = \"sh\"\nargs = [\"-c\", \"cat\"]\n",
            http("Authorization = \"Bearer {{secret:TOKEN}}\"")
        ),
    );
    let parsed = Config::parse(&fine, "x.toml").unwrap();
    parsed.validate().unwrap();
    crate::toolbox::Tools::build(&parsed).unwrap();
}

#[test]
fn a_command_tool_may_not_take_a_name_the_loop_gives_other_tools() {
    for (name, said) in [
        (
            "mcp__notes__add",
            "`mcp__` begins the names of MCP servers' tools",
        ),
        ("load_skill", "`load_skill` reads an agent's skills"),
    ] {
        let text = format!(
            "[[command_tools]]\nname = \"{name}\"\ndescription = \"d\"\ncommand = [\"sh\"]\n"
        );
        let err = Config::parse(&text, "x.toml")
            .and_then(|c| c.validate())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("the name is reserved") && err.contains(said),
            "{err}"
        );
    }
}
