//! Cron expressions and their fire times in an IANA time zone, with the daylight-saving rules
//! cron users expect.
//!
//! What it guarantees:
//! - **Unix field meanings.** Five fields (`minute hour day-of-month month day-of-week`) or six
//!   (a leading `second`), and the `@hourly`, `@daily`/`@midnight`, `@weekly`, `@monthly`,
//!   `@yearly`/`@annually` shorthands. Day of week counts like Vixie cron: `0` or `7` is Sunday,
//!   `1` Monday … `6` Saturday (the `cron` crate alone counts Sunday as 1, so `1-5` would mean
//!   Sunday to Thursday; we translate the field to day names before handing it over).
//! - **Each local time fires at most once.** A wall-clock time that occurs twice because the
//!   clocks go back (fall-back) fires once, at its first occurrence. (The `cron` crate alone
//!   fires it twice.)
//! - **A local time skipped by spring-forward fires once, right after the jump** (at the first
//!   valid local time, e.g. 03:00 when 02:00–03:00 does not exist). Several skipped times
//!   collapse into that one fire, and so does a schedule's own fire at that instant. (The
//!   `cron` crate alone drops them silently.) This is what Vixie cron does for fixed-time jobs.
//! - Fire times are strictly increasing, and `next_after` is exact to the millisecond.
//!
//! How it works: the expression is iterated in wall-clock time (as if the zone were UTC, where
//! every local time exists once), and each wall-clock match is mapped to an instant by the
//! rules above. That mapping never goes backwards, so the first match whose instant is after
//! the given one is the next fire.
//!
//! Expressions that restrict both day-of-month and day-of-week are refused: Vixie cron fires
//! when either matches, the `cron` crate only when both do, and silently picking one would
//! surprise someone. [`CronExpr::parse`] refuses an expression with an [`ExprError`].

use std::str::FromStr;

use chrono::{DateTime, Duration, LocalResult, NaiveDateTime, TimeZone, Timelike, Utc};
use chrono_tz::Tz;

/// How many wall-clock matches are looked at for one answer before giving up (a schedule
/// like `0 0 30 2 *` never matches).
const SEARCH_LIMIT: usize = 10_000;

/// The longest expression accepted.
const MAX_EXPR_BYTES: usize = 256;

/// A cron expression [`CronExpr::parse`] refuses; `Display` says what is allowed.
#[derive(Debug, thiserror::Error)]
pub enum ExprError {
    #[error("the expression is {bytes} bytes; cron expressions are at most {MAX_EXPR_BYTES}")]
    TooLong { bytes: usize },
    #[error(
        "'{shorthand}' is not a known shorthand; use @hourly, @daily, @weekly, @monthly or \
         @yearly, or five fields"
    )]
    UnknownShorthand { shorthand: String },
    #[error(
        "'{expr}' has {count} fields; use five (minute hour day-of-month month day-of-week, \
         e.g. '0 7 * * 1-5') or six (with a leading second)"
    )]
    FieldCount { expr: String, count: usize },
    /// The day-of-week field `field` is refused; `problem` says why ("has 8; use 0-7 …").
    #[error("'{expr}': day-of-week '{field}' {problem}")]
    DayOfWeek {
        expr: String,
        field: String,
        problem: String,
    },
    #[error(
        "'{expr}' restricts both day-of-month and day-of-week; cron implementations disagree \
         on whether a day must match one or both, so use '*' in one of them (or two schedules)"
    )]
    BothDays { expr: String },
    /// A numeric value (or step) in field `field` is outside what the field allows; `problem`
    /// says which value and the allowed range ("61 is out of range; minutes are 0-59").
    #[error("'{expr}': {field} {problem}")]
    FieldRange {
        expr: String,
        field: &'static str,
        problem: String,
    },
    /// The `cron` crate refuses the (translated) fields.
    #[error("'{expr}' is not a valid cron expression: {source}")]
    Invalid {
        expr: String,
        #[source]
        source: ::cron::error::Error,
    },
    /// No date matches (the 30th of February).
    #[error("'{expr}' never fires")]
    NeverFires { expr: String },
}

/// A parsed cron expression.
#[derive(Debug, Clone)]
pub struct CronExpr {
    source: String,
    schedule: ::cron::Schedule,
}

impl PartialEq for CronExpr {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl CronExpr {
    /// Parses a 5- or 6-field expression or an `@` shorthand; the error says what is allowed.
    pub fn parse(expr: &str) -> Result<CronExpr, ExprError> {
        let trimmed = expr.trim();
        if trimmed.len() > MAX_EXPR_BYTES {
            return Err(ExprError::TooLong {
                bytes: trimmed.len(),
            });
        }
        let expr = || trimmed.to_string();
        let expanded = match trimmed {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            s if s.starts_with('@') => {
                return Err(ExprError::UnknownShorthand {
                    shorthand: s.to_string(),
                });
            }
            s => s,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        let [second, minute, hour, dom, month, dow] = match fields.as_slice() {
            [mi, h, d, mo, w] => ["0", *mi, *h, *d, *mo, *w],
            [s, mi, h, d, mo, w] => [*s, *mi, *h, *d, *mo, *w],
            _ => {
                return Err(ExprError::FieldCount {
                    expr: expr(),
                    count: fields.len(),
                });
            }
        };
        let dom = if dom == "?" { "*" } else { dom };
        for (value, limits) in [second, minute, hour, dom, month].iter().zip(&FIELD_LIMITS) {
            check_field(value, limits).map_err(|problem| ExprError::FieldRange {
                expr: expr(),
                field: limits.name,
                problem,
            })?;
        }
        let dow_names = day_of_week_names(dow).map_err(|problem| ExprError::DayOfWeek {
            expr: expr(),
            field: dow.to_string(),
            problem,
        })?;
        if dom != "*" && dow_names != "*" {
            return Err(ExprError::BothDays { expr: expr() });
        }
        let full = format!("{second} {minute} {hour} {dom} {month} {dow_names}");
        let schedule = ::cron::Schedule::from_str(&full).map_err(|source| ExprError::Invalid {
            expr: expr(),
            source,
        })?;
        // Catch expressions that can never fire (the 30th of February) now, not at run time.
        let probe = CronExpr {
            source: trimmed.to_string(),
            schedule,
        };
        if probe
            .next_after(&Tz::UTC, Utc.timestamp_opt(0, 0).single().expect("epoch"))
            .is_none()
        {
            return Err(ExprError::NeverFires { expr: expr() });
        }
        Ok(probe)
    }

    /// The expression as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// The first fire strictly after `after`, in zone `tz`; `None` if there is none.
    pub fn next_after(&self, tz: &Tz, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let wall = Utc.from_utc_datetime(&after.with_timezone(tz).naive_local());
        self.schedule
            .after(&wall)
            .take(SEARCH_LIMIT)
            .filter_map(|m| instant_of(tz, m.naive_utc()))
            .find(|t| *t > after)
    }

    /// The last fire at or before `at`, in zone `tz`.
    pub fn last_at_or_before(&self, tz: &Tz, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        // Start one second past `at`'s wall-clock time so a fire exactly at `at` is included.
        let wall =
            Utc.from_utc_datetime(&at.with_timezone(tz).naive_local()) + Duration::seconds(1);
        self.schedule
            .after(&wall)
            .rev()
            .take(SEARCH_LIMIT)
            .filter_map(|m| instant_of(tz, m.naive_utc()))
            .find(|t| *t <= at)
    }

    /// The fires in `from..=to` (from inclusive): how many (counting at most `cap`) and the
    /// last one.
    pub fn fires_between(
        &self,
        tz: &Tz,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        cap: u64,
    ) -> (u64, Option<DateTime<Utc>>) {
        let mut count = 0;
        let mut t = from - Duration::milliseconds(1);
        while count < cap {
            match self.next_after(tz, t) {
                Some(next) if next <= to => {
                    count += 1;
                    t = next;
                }
                _ => break,
            }
        }
        let last = if count == 0 {
            None
        } else {
            self.last_at_or_before(tz, to)
        };
        (count, last)
    }
}

/// The instant a wall-clock time in `tz` fires at: itself; its first occurrence when the
/// clocks go back; the end of the gap when the clocks skip it.
fn instant_of(tz: &Tz, wall: NaiveDateTime) -> Option<DateTime<Utc>> {
    match tz.from_local_datetime(&wall) {
        LocalResult::Single(t) => Some(t.with_timezone(&Utc)),
        LocalResult::Ambiguous(first, _) => Some(first.with_timezone(&Utc)),
        LocalResult::None => {
            // Zone transitions fall on whole minutes: the first valid minute after the
            // skipped time is the moment of the jump.
            let mut probe = wall.with_second(0)?.with_nanosecond(0)?;
            for _ in 0..(26 * 60) {
                probe += Duration::minutes(1);
                if let Some(t) = tz.from_local_datetime(&probe).earliest() {
                    return Some(t.with_timezone(&Utc));
                }
            }
            None
        }
    }
}

/// The allowed values of one numeric field, for [`check_field`].
struct FieldLimits {
    /// The field's name in an error ("minute").
    name: &'static str,
    /// What the values are called in an error ("minutes").
    plural: &'static str,
    lo: u32,
    hi: u32,
    /// Names accepted in place of numbers (months), counted from `lo`.
    names: &'static [&'static str],
}

const MONTH_NAMES: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];

/// Second, minute, hour, day-of-month and month, in that order. (Day of week has its own
/// check, [`day_of_week_names`].)
const FIELD_LIMITS: [FieldLimits; 5] = [
    FieldLimits {
        name: "second",
        plural: "seconds",
        lo: 0,
        hi: 59,
        names: &[],
    },
    FieldLimits {
        name: "minute",
        plural: "minutes",
        lo: 0,
        hi: 59,
        names: &[],
    },
    FieldLimits {
        name: "hour",
        plural: "hours",
        lo: 0,
        hi: 23,
        names: &[],
    },
    FieldLimits {
        name: "day-of-month",
        plural: "days of the month",
        lo: 1,
        hi: 31,
        names: &[],
    },
    FieldLimits {
        name: "month",
        plural: "months",
        lo: 1,
        hi: 12,
        names: &MONTH_NAMES,
    },
];

/// Checks every number in one field (single values, ranges `a-b`, steps `*/n` and `a-b/n`,
/// lists) against the field's real limits and refuses a step of 0, so the error states the
/// limits correctly (the `cron` crate's own wording is off by one). Words other than the field's names are left for the
/// `cron` crate to judge. The error is worded to follow the field's name.
fn check_field(field: &str, limits: &FieldLimits) -> Result<(), String> {
    let range = || {
        let names = match limits.names.first().zip(limits.names.last()) {
            Some((a, z)) => format!(" or {}-{}", a.to_ascii_uppercase(), z.to_ascii_uppercase()),
            None => String::new(),
        };
        format!("{} are {}-{}{names}", limits.plural, limits.lo, limits.hi)
    };
    let check_value = |v: &str| -> Result<(), String> {
        let Ok(n) = v.parse::<u64>() else {
            return Ok(());
        };
        if n < u64::from(limits.lo) || n > u64::from(limits.hi) {
            return Err(format!("{n} is out of range; {}", range()));
        }
        Ok(())
    };
    for item in field.split(',') {
        let base = match item.split_once('/') {
            Some((base, step)) => {
                if step.parse::<u64>() == Ok(0) {
                    return Err("step 0 never advances; use a step of 1 or more".to_string());
                }
                base
            }
            None => item,
        };
        match base.split_once('-') {
            Some((a, z)) => {
                check_value(a)?;
                check_value(z)?;
            }
            None => check_value(base)?,
        }
    }
    Ok(())
}

const DAY_NAMES: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

/// Translates a Unix day-of-week field (0/7 = Sunday, names, ranges, lists, steps) into `*`
/// or a list of day names, which the `cron` crate reads unambiguously.
fn day_of_week_names(field: &str) -> Result<String, String> {
    if field == "*" || field == "?" {
        return Ok("*".into());
    }
    let value = |s: &str| -> Result<usize, String> {
        if let Ok(n) = s.parse::<usize>() {
            return match n {
                0..=6 => Ok(n),
                7 => Ok(0),
                _ => Err(format!("has {n}; use 0-7 (0 and 7 are Sunday) or mon-sun")),
            };
        }
        let lower = s.to_ascii_lowercase();
        DAY_NAMES
            .iter()
            .position(|d| lower.get(..3) == Some(*d) && is_day_name(&lower))
            .ok_or_else(|| format!("has '{s}'; use 0-7 (0 and 7 are Sunday) or mon-sun"))
    };
    let mut days = [false; 7];
    for item in field.split(',') {
        let (base, step) = match item.split_once('/') {
            Some((b, s)) => (
                b,
                s.parse::<usize>()
                    .ok()
                    .filter(|s| *s >= 1)
                    .ok_or_else(|| format!("has step '{s}'; use a whole number of days"))?,
            ),
            None => (item, 1),
        };
        let (lo, hi) = match base {
            "*" | "?" => (0, 6),
            b => match b.split_once('-') {
                Some((a, z)) => {
                    // 7 at the end of a range is Sunday after Saturday (`5-7` = Fri-Sun).
                    let hi = if z == "7" { 7 } else { value(z)? };
                    (value(a)?, hi)
                }
                None if step > 1 => (value(b)?, 6),
                None => {
                    let v = value(b)?;
                    (v, v)
                }
            },
        };
        if lo > hi {
            return Err(format!(
                "has the range '{base}', which runs backwards; write it as a list instead"
            ));
        }
        for d in (lo..=hi).step_by(step) {
            days[d % 7] = true;
        }
    }
    if days.iter().all(|d| *d) {
        return Ok("*".into());
    }
    Ok(DAY_NAMES
        .iter()
        .zip(days)
        .filter(|(_, on)| *on)
        .map(|(n, _)| *n)
        .collect::<Vec<_>>()
        .join(","))
}

fn is_day_name(lower: &str) -> bool {
    const FULL: [&str; 7] = [
        "sunday",
        "monday",
        "tuesday",
        "wednesday",
        "thursday",
        "friday",
        "saturday",
    ];
    lower.len() == 3 || FULL.contains(&lower) || matches!(lower, "tues" | "thurs")
}

#[cfg(test)]
#[path = "expr_tests.rs"]
mod tests;
