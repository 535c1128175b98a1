//! A schedule as users write it (`[[schedules]]` in `nightshift.toml`, or the API's JSON), and
//! its checked, compiled form.
//!
//! What it guarantees: a [`Schedule`] has a cron expression that fires, a real IANA zone, a
//! configured agent (when the caller knows the agents) and a prompt template that renders with
//! strict undefined variables. Every refusal names the schedule and the key and says what is
//! allowed (a [`SpecError`]), and nothing is stored until the whole schedule is valid.
//!
//! The prompt template is [MiniJinja](https://docs.rs/minijinja) with these variables:
//! `fire_time` (RFC 3339 in the schedule's zone), `fire_time_utc`, `date` (`YYYY-MM-DD`,
//! local), `time` (`HH:MM`, local), `weekday` (`Monday`…), `schedule` (its name), `timezone`
//! and `manual` (true when fired through the API's trigger). Any other name is an error when the
//! schedule is loaded.

use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::Tz;
use minijinja::{Environment, UndefinedBehavior, context};
use nightshift_store::{Millis, ScheduleDef, ScheduleRow, ScheduleSource};
pub use nightshift_store::{Missed, Overlap};
use serde::{Deserialize, Serialize};

use super::expr::{CronExpr, ExprError};

/// A schedule as written in config or sent to the API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleSpec {
    /// Unique; 1-64 letters, digits, `-`, `_` or `.`.
    pub name: String,
    /// Five fields (`minute hour day-of-month month day-of-week`), six (with seconds first),
    /// or `@daily` and friends.
    pub cron: String,
    /// The IANA zone the expression is read in. Default `UTC`.
    #[serde(default = "default_timezone", deserialize_with = "timezone_or_utc")]
    pub timezone: String,
    /// The agent each fire starts a run of.
    pub agent: String,
    /// The prompt template (MiniJinja; see the module docs for the variables).
    pub prompt: String,
    #[serde(default, deserialize_with = "null_is_default")]
    pub overlap: Overlap,
    #[serde(default, deserialize_with = "null_is_default")]
    pub missed: Missed,
    #[serde(default = "default_enabled", deserialize_with = "enabled_or_true")]
    pub enabled: bool,
}

fn default_timezone() -> String {
    "UTC".into()
}

fn default_enabled() -> bool {
    true
}

// A `null` in an API body reads as the key left out: the API documents these keys as
// optional and nullable, and a client that sends every key (`"overlap": null`) means the
// default. (TOML has no null; there a key is given or not.)

fn null_is_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

fn timezone_or_utc<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(d)?.unwrap_or_else(default_timezone))
}

fn enabled_or_true<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    Ok(Option::<bool>::deserialize(d)?.unwrap_or_else(default_enabled))
}

/// A schedule [`Schedule::compile`] refuses, or a prompt that does not render. `Display` names
/// the schedule and the key and says what is allowed.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("schedule name '{name}' is not allowed; use 1-64 letters, digits, '-', '_' or '.'")]
    BadName { name: String },
    /// The cron expression is refused.
    #[error("schedules.{schedule}.cron: {source}")]
    Cron {
        schedule: String,
        #[source]
        source: ExprError,
    },
    /// The value of `key` is refused; `problem` says why and what is allowed.
    #[error("schedules.{schedule}.{key}: {problem}")]
    Key {
        schedule: String,
        key: &'static str,
        problem: String,
    },
    /// The prompt template does not render. `undefined` lists the names it reads that are not
    /// variables (sorted), when that is why.
    #[error("{}", template_problem(source, undefined))]
    Template {
        #[source]
        source: minijinja::Error,
        undefined: Vec<String>,
    },
}

/// The variables a prompt template can read.
const VARIABLES: [&str; 8] = [
    "fire_time",
    "fire_time_utc",
    "date",
    "time",
    "weekday",
    "schedule",
    "timezone",
    "manual",
];

/// The message of [`SpecError::Template`]: the names that are not variables and the list of
/// those that are, or minijinja's own words when the failure is something else.
fn template_problem(source: &minijinja::Error, undefined: &[String]) -> String {
    let variables = VARIABLES.join(", ");
    match undefined {
        [] if matches!(source.kind(), minijinja::ErrorKind::UndefinedError) => {
            format!("the template does not render: {source}; the variables are {variables}")
        }
        [] => format!("the template does not render: {source}"),
        names => not_defined(names),
    }
}

/// "{{ a }} is not defined; the variables are …" for the names in `undefined` (not empty).
fn not_defined(undefined: &[String]) -> String {
    let variables = VARIABLES.join(", ");
    match undefined {
        [one] => format!("{{{{ {one} }}}} is not defined; the variables are {variables}"),
        many => format!(
            "{} are not defined; the variables are {variables}",
            many.iter()
                .map(|n| format!("{{{{ {n} }}}}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The names `prompt` reads that are neither variables nor minijinja's global functions
/// (`range`, `namespace` …), sorted. Empty when the template does not parse.
fn undefined_names(env: &Environment, prompt: &str) -> Vec<String> {
    let Ok(template) = env.template_from_str(prompt) else {
        return Vec::new();
    };
    let mut names: Vec<String> = template
        .undeclared_variables(false)
        .into_iter()
        .filter(|n| !VARIABLES.contains(&n.as_str()))
        .filter(|n| !env.globals().any(|(g, _)| g == n))
        .collect();
    names.sort();
    names
}

/// A checked schedule, ready to compute fires and render prompts.
#[derive(Debug, Clone)]
pub struct Schedule {
    pub spec: ScheduleSpec,
    pub expr: CronExpr,
    pub tz: Tz,
}

impl Schedule {
    /// Checks `spec`; with `agents`, its agent must be one of them.
    pub fn compile(spec: ScheduleSpec, agents: Option<&[String]>) -> Result<Schedule, SpecError> {
        let name = spec.name.clone();
        let err = |key: &'static str, problem: String| SpecError::Key {
            schedule: name.clone(),
            key,
            problem,
        };
        let name_ok = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
        if !name_ok {
            return Err(SpecError::BadName { name });
        }
        if spec.prompt.len() > crate::intake::MAX_PROMPT_BYTES {
            return Err(err(
                "prompt",
                format!(
                    "is {} bytes; the limit is {} — put large inputs in a file the agent can read",
                    spec.prompt.len(),
                    crate::intake::MAX_PROMPT_BYTES
                ),
            ));
        }
        let expr = CronExpr::parse(&spec.cron).map_err(|source| SpecError::Cron {
            schedule: name.clone(),
            source,
        })?;
        let tz: Tz = spec.timezone.parse().map_err(|_| {
            err(
                "timezone",
                format!(
                    "'{}' is not an IANA time zone; use a name like Europe/Berlin, \
                     America/New_York or UTC",
                    spec.timezone
                ),
            )
        })?;
        if let Some(agents) = agents {
            crate::intake::check_agent(agents, &spec.agent)
                .map_err(|e| err("agent", e.to_string()))?;
        }
        // Every name the prompt reads must be a variable, also inside a branch the sample fire
        // below does not take (`{% if manual %}`).
        let undefined = undefined_names(&Environment::new(), &spec.prompt);
        if !undefined.is_empty() {
            return Err(err("prompt", not_defined(&undefined)));
        }
        let schedule = Schedule { spec, expr, tz };
        let sample = Utc.with_ymd_and_hms(2026, 1, 5, 7, 0, 0).unwrap();
        let rendered = schedule
            .render_at(sample, false)
            .map_err(|e| err("prompt", e.to_string()))?;
        if rendered.trim().is_empty() {
            return Err(err(
                "prompt",
                "renders empty; say what the agent should do".into(),
            ));
        }
        Ok(schedule)
    }

    /// The schedule a stored row describes (rows were checked when written).
    pub fn from_row(row: &ScheduleRow) -> Result<Schedule, SpecError> {
        let spec = ScheduleSpec {
            name: row.name.clone(),
            cron: row.cron.clone(),
            timezone: row.timezone.clone(),
            agent: row.agent.clone(),
            prompt: row.prompt.clone(),
            overlap: row.overlap,
            missed: row.missed,
            enabled: row.enabled,
        };
        Schedule::compile(spec, None)
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The first fire strictly after `after`.
    pub fn next_after(&self, after: Millis) -> Option<Millis> {
        self.expr
            .next_after(&self.tz, to_utc(after))
            .map(|t| t.timestamp_millis())
    }

    /// The prompt for the fire at `fire_at`.
    pub fn render(&self, fire_at: Millis, manual: bool) -> Result<String, SpecError> {
        self.render_at(to_utc(fire_at), manual)
    }

    fn render_at(&self, fire: DateTime<Utc>, manual: bool) -> Result<String, SpecError> {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        let local = fire.with_timezone(&self.tz);
        let ctx = context! {
            fire_time => local.to_rfc3339(),
            fire_time_utc => fire.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            date => local.format("%Y-%m-%d").to_string(),
            time => local.format("%H:%M").to_string(),
            weekday => local.format("%A").to_string(),
            schedule => self.spec.name.clone(),
            timezone => self.spec.timezone.clone(),
            manual => manual,
        };
        env.render_str(&self.spec.prompt, ctx)
            .map_err(|source| SpecError::Template {
                undefined: if matches!(source.kind(), minijinja::ErrorKind::UndefinedError) {
                    undefined_names(&env, &self.spec.prompt)
                } else {
                    Vec::new()
                },
                source,
            })
    }

    /// The row to store for this schedule, armed for `next_fire_at`.
    pub fn to_def(&self, source: ScheduleSource, next_fire_at: Option<Millis>) -> ScheduleDef {
        ScheduleDef {
            name: self.spec.name.clone(),
            source,
            cron: self.expr.as_str().to_string(),
            timezone: self.spec.timezone.clone(),
            agent: self.spec.agent.clone(),
            prompt: self.spec.prompt.clone(),
            overlap: self.spec.overlap,
            missed: self.spec.missed,
            enabled: self.spec.enabled,
            next_fire_at: if self.spec.enabled {
                next_fire_at
            } else {
                None
            },
        }
    }

    /// A time in the schedule's zone, as RFC 3339.
    pub fn local_rfc3339(&self, at: Millis) -> String {
        to_utc(at).with_timezone(&self.tz).to_rfc3339()
    }
}

/// Milliseconds since the epoch as a UTC time (clamped to the representable range).
pub fn to_utc(ms: Millis) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms)
        .single()
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ScheduleSpec {
        ScheduleSpec {
            name: "digest".into(),
            cron: "0 7 * * 1-5".into(),
            timezone: "Europe/Berlin".into(),
            agent: "reporter".into(),
            prompt: "Digest for {{ date }} ({{ weekday }}, fired {{ fire_time }})".into(),
            overlap: Overlap::Skip,
            missed: Missed::RunOnce,
            enabled: true,
        }
    }

    #[test]
    fn renders_the_fire_time_in_the_schedules_zone() {
        let s = Schedule::compile(spec(), Some(&["reporter".into()])).unwrap();
        // 2026-07-06 05:00 UTC is 07:00 CEST on a Monday.
        let at = Utc
            .with_ymd_and_hms(2026, 7, 6, 5, 0, 0)
            .unwrap()
            .timestamp_millis();
        assert_eq!(
            s.render(at, false).unwrap(),
            "Digest for 2026-07-06 (Monday, fired 2026-07-06T07:00:00+02:00)"
        );
        assert_eq!(s.next_after(at), Some(at + 24 * 3600 * 1000));
    }

    #[test]
    fn bad_schedules_name_the_schedule_and_key() {
        let agents = ["reporter".to_string()];
        let cases: Vec<(ScheduleSpec, &str)> = vec![
            (
                ScheduleSpec {
                    timezone: "Europe/Berln".into(),
                    ..spec()
                },
                "schedules.digest.timezone: 'Europe/Berln' is not an IANA time zone",
            ),
            (
                ScheduleSpec {
                    cron: "0 7 * *".into(),
                    ..spec()
                },
                "schedules.digest.cron: '0 7 * *' has 4 fields",
            ),
            (
                ScheduleSpec {
                    agent: "nobody".into(),
                    ..spec()
                },
                "schedules.digest.agent: agent 'nobody' is not configured (configured: reporter)",
            ),
            (
                ScheduleSpec {
                    prompt: "Report for {{ dat }}".into(),
                    ..spec()
                },
                "schedules.digest.prompt: {{ dat }} is not defined; the variables are \
                 fire_time, fire_time_utc, date, time, weekday, schedule, timezone, manual",
            ),
            (
                ScheduleSpec {
                    prompt: "Report {% if %}".into(),
                    ..spec()
                },
                "schedules.digest.prompt: the template does not render",
            ),
            (
                ScheduleSpec {
                    prompt: "{{ '' }} ".into(),
                    ..spec()
                },
                "renders empty",
            ),
            (
                ScheduleSpec {
                    name: "has space".into(),
                    ..spec()
                },
                "schedule name 'has space' is not allowed",
            ),
        ];
        for (s, expect) in cases {
            let err = Schedule::compile(s, Some(&agents)).unwrap_err().to_string();
            assert!(err.contains(expect), "expected '{expect}' in: {err}");
        }
        let err = Schedule::compile(
            ScheduleSpec {
                prompt: "{{ nope }}".into(),
                ..spec()
            },
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("the variables are fire_time"), "{err}");
    }

    #[test]
    fn an_undefined_prompt_variable_is_named_at_load() {
        let compile = |prompt: &str| {
            Schedule::compile(
                ScheduleSpec {
                    prompt: prompt.into(),
                    ..spec()
                },
                None,
            )
            .map(|_| ())
            .map_err(|e| e.to_string())
        };
        assert_eq!(
            compile("Digest for {{ fire_date }} ({{ weekday }})").unwrap_err(),
            "schedules.digest.prompt: {{ fire_date }} is not defined; the variables are \
             fire_time, fire_time_utc, date, time, weekday, schedule, timezone, manual"
        );
        // Names inside blocks and several at once; loop variables and globals are not names
        // the prompt lacks.
        let err = compile(
            "{% for i in range(2) %}{{ i }}{% endfor %}{% if manual %}{{ zone }}{% endif %}\
             {{ dat | upper }}",
        )
        .unwrap_err();
        assert!(
            err.starts_with("schedules.digest.prompt: {{ dat }}, {{ zone }} are not defined;"),
            "{err}"
        );
        // A name behind a branch the sample fire does not take is refused all the same.
        assert!(
            compile("{% if manual %}{{ nope }}{% endif %}Digest for {{ date }}")
                .unwrap_err()
                .starts_with("schedules.digest.prompt: {{ nope }} is not defined;")
        );
        compile("{% if manual %}Run now:{% endif %} Digest for {{ date }}").unwrap();
        // A failure that is not an undefined name keeps minijinja's words.
        let err = compile("{{ date | no_such_filter }}").unwrap_err();
        assert!(
            err.contains("the template does not render") && err.contains("no_such_filter"),
            "{err}"
        );
    }

    #[test]
    fn config_keys_are_checked() {
        let err = serde_json::from_str::<ScheduleSpec>(
            r#"{"name":"a","cron":"@daily","agent":"x","prompt":"p","overlap":"sometimes"}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("sometimes") && err.contains("`skip`"), "{err}");
        let s: ScheduleSpec = serde_json::from_str(
            r#"{"name":"a","cron":"@daily","agent":"x","prompt":"p","missed":"run_once"}"#,
        )
        .unwrap();
        assert_eq!(
            (s.timezone.as_str(), s.overlap, s.missed, s.enabled),
            ("UTC", Overlap::Skip, Missed::RunOnce, true)
        );
        // An API client that sends every key, the optional ones as null, gets the defaults.
        let nulls: ScheduleSpec = serde_json::from_str(
            r#"{"name":"a","cron":"@daily","agent":"x","prompt":"p","timezone":null,
                "overlap":null,"missed":null,"enabled":null}"#,
        )
        .unwrap();
        assert_eq!(
            (
                nulls.timezone.as_str(),
                nulls.overlap,
                nulls.missed,
                nulls.enabled
            ),
            ("UTC", Overlap::Skip, Missed::Skip, true)
        );
        let toml: ScheduleSpec = toml::from_str(
            "name = \"a\"\ncron = \"@daily\"\nagent = \"x\"\nprompt = \"p\"\n\
             timezone = \"Europe/Paris\"\noverlap = \"queue\"\nenabled = false\n",
        )
        .unwrap();
        assert_eq!(
            (toml.timezone.as_str(), toml.overlap, toml.enabled),
            ("Europe/Paris", Overlap::Queue, false)
        );
    }
}
