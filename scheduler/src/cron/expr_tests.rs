use super::*;

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s)
        .unwrap_or_else(|e| panic!("{s}: {e}"))
        .with_timezone(&Utc)
}

fn tz(name: &str) -> Tz {
    name.parse().unwrap()
}

/// The next `n` fires after `from`, as RFC 3339 UTC strings.
fn fires(expr: &str, zone: &str, from: &str, n: usize) -> Vec<String> {
    let e = CronExpr::parse(expr).unwrap();
    let z = tz(zone);
    let mut t = utc(from);
    let mut out = Vec::new();
    for _ in 0..n {
        t = e.next_after(&z, t).unwrap();
        out.push(t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    }
    out
}

#[test]
fn berlin_spring_forward_fires_a_skipped_time_once_right_after_the_jump() {
    // 2026-03-29: 02:00 CET jumps to 03:00 CEST (01:00 UTC); 02:30 does not exist.
    assert_eq!(
        fires("30 2 * * *", "Europe/Berlin", "2026-03-28T12:00:00Z", 3),
        [
            "2026-03-29T01:00:00Z", // 03:00 CEST, right after the jump
            "2026-03-30T00:30:00Z", // 02:30 CEST
            "2026-03-31T00:30:00Z",
        ]
    );
    // Every 15 minutes in the skipped hour, plus 03:00 itself: one fire at the jump.
    assert_eq!(
        fires(
            "0,15,30,45 2,3 * * *",
            "Europe/Berlin",
            "2026-03-29T00:50:00Z",
            3
        ),
        [
            "2026-03-29T01:00:00Z", // 02:00, 02:15, 02:30, 02:45 and 03:00 collapsed
            "2026-03-29T01:15:00Z", // 03:15 CEST
            "2026-03-29T01:30:00Z",
        ]
    );
}

#[test]
fn berlin_fall_back_fires_a_repeated_time_once() {
    // 2026-10-25: 03:00 CEST goes back to 02:00 CET (01:00 UTC); 02:30 happens twice.
    assert_eq!(
        fires("30 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00Z", 2),
        [
            "2026-10-25T00:30:00Z", // 02:30 CEST, the first occurrence
            "2026-10-26T01:30:00Z", // the next day, 02:30 CET; not 2026-10-25T01:30Z
        ]
    );
    // Hourly through the repeated hour: 02:00 once, then 03:00 two real hours later.
    assert_eq!(
        fires("0 * * * *", "Europe/Berlin", "2026-10-24T23:30:00Z", 3),
        [
            "2026-10-25T00:00:00Z", // 02:00 CEST
            "2026-10-25T02:00:00Z", // 03:00 CET (02:00 CET at 01:00Z is the repeat)
            "2026-10-25T03:00:00Z",
        ]
    );
}

#[test]
fn new_york_spring_forward_and_fall_back() {
    // 2026-03-08: 02:00 EST jumps to 03:00 EDT (07:00 UTC).
    assert_eq!(
        fires("30 2 * * *", "America/New_York", "2026-03-07T12:00:00Z", 2),
        ["2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"]
    );
    assert_eq!(
        fires(
            "*/15 2 * * *",
            "America/New_York",
            "2026-03-08T06:00:00Z",
            2
        ),
        ["2026-03-08T07:00:00Z", "2026-03-09T06:00:00Z"]
    );
    // 2026-11-01: 02:00 EDT goes back to 01:00 EST (06:00 UTC); 01:30 happens twice.
    assert_eq!(
        fires("30 1 * * *", "America/New_York", "2026-10-31T12:00:00Z", 2),
        ["2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"]
    );
    assert_eq!(
        fires("0 * * * *", "America/New_York", "2026-11-01T04:30:00Z", 3),
        [
            "2026-11-01T05:00:00Z", // 01:00 EDT
            "2026-11-01T07:00:00Z", // 02:00 EST; 01:00 EST (06:00Z) is the repeat
            "2026-11-01T08:00:00Z",
        ]
    );
}

#[test]
fn half_hour_shifts_and_midnight_transitions_follow_the_same_rules() {
    // Lord Howe moves by 30 minutes: 02:00 -> 02:30 on 2026-10-04 (15:30Z the day before),
    // and 02:00 -> 01:30 on 2026-04-05 (15:00Z the day before).
    assert_eq!(
        fires(
            "15 2 * * *",
            "Australia/Lord_Howe",
            "2026-10-03T12:00:00Z",
            2
        ),
        ["2026-10-03T15:30:00Z", "2026-10-04T15:15:00Z"]
    );
    assert_eq!(
        fires(
            "45 1 * * *",
            "Australia/Lord_Howe",
            "2026-04-04T12:00:00Z",
            2
        ),
        ["2026-04-04T14:45:00Z", "2026-04-05T15:15:00Z"]
    );
    // Santiago skips midnight: 00:00 -> 01:00 on 2026-09-06 (04:00Z).
    assert_eq!(
        fires("0 0 * * *", "America/Santiago", "2026-09-05T12:00:00Z", 2),
        ["2026-09-06T04:00:00Z", "2026-09-07T03:00:00Z"]
    );
}

#[test]
fn starting_inside_the_repeated_hour_does_not_fire_its_times_again() {
    // 01:20 EST, the second pass through 01:00-02:00 in New York.
    let e = CronExpr::parse("45 1 * * *").unwrap();
    let next = e
        .next_after(&tz("America/New_York"), utc("2026-11-01T06:20:00Z"))
        .unwrap();
    assert_eq!(next, utc("2026-11-02T06:45:00Z"));
}

#[test]
fn the_cron_crate_alone_gets_dst_wrong_which_is_why_we_map_wall_clock_times() {
    // If this starts failing, the crate changed its DST handling: re-check the rules above.
    let s = ::cron::Schedule::from_str("0 30 2 * * *").unwrap();
    let berlin = tz("Europe/Berlin");
    let start = utc("2026-10-24T12:00:00Z").with_timezone(&berlin);
    let got: Vec<_> = s
        .after(&start)
        .take(2)
        .map(|t| t.with_timezone(&Utc))
        .collect();
    assert_eq!(
        got,
        [utc("2026-10-25T00:30:00Z"), utc("2026-10-25T01:30:00Z")],
        "the crate fires the repeated 02:30 twice"
    );
    let start = utc("2026-03-28T12:00:00Z").with_timezone(&berlin);
    let next = s.after(&start).next().unwrap().with_timezone(&Utc);
    assert_eq!(
        next,
        utc("2026-03-30T00:30:00Z"),
        "the crate drops the skipped 02:30"
    );
}

#[test]
fn day_of_week_counts_like_unix_cron() {
    // 2026-12-05 is a Saturday; weekdays at 07:00 Berlin (CET, UTC+1).
    assert_eq!(
        fires("0 7 * * 1-5", "Europe/Berlin", "2026-12-05T00:00:00Z", 6),
        [
            "2026-12-07T06:00:00Z",
            "2026-12-08T06:00:00Z",
            "2026-12-09T06:00:00Z",
            "2026-12-10T06:00:00Z",
            "2026-12-11T06:00:00Z",
            "2026-12-14T06:00:00Z",
        ]
    );
    for (field, names) in [
        ("0", "sun"),
        ("7", "sun"),
        ("5-7", "sun,fri,sat"),
        ("mon-fri", "mon,tue,wed,thu,fri"),
        ("SAT,sunday", "sun,sat"),
        ("*/2", "sun,tue,thu,sat"),
        ("0-7", "*"),
        ("?", "*"),
    ] {
        assert_eq!(day_of_week_names(field).unwrap(), names, "{field}");
    }
    assert_eq!(
        fires("@weekly", "UTC", "2026-12-01T00:00:00Z", 1),
        ["2026-12-06T00:00:00Z"],
        "@weekly is Sunday midnight"
    );
}

#[test]
fn six_fields_have_seconds_and_next_after_is_exact() {
    let e = CronExpr::parse("*/10 * * * * *").unwrap();
    let z = tz("UTC");
    assert_eq!(
        e.next_after(&z, utc("2026-01-01T00:00:00Z")),
        Some(utc("2026-01-01T00:00:10Z"))
    );
    let just_after = utc("2026-01-01T00:00:10Z") + Duration::milliseconds(1);
    assert_eq!(
        e.next_after(&z, just_after),
        Some(utc("2026-01-01T00:00:20Z"))
    );
    assert_eq!(
        e.last_at_or_before(&z, utc("2026-01-01T00:00:20Z")),
        Some(utc("2026-01-01T00:00:20Z"))
    );
}

#[test]
fn fires_between_counts_an_outage() {
    let e = CronExpr::parse("0 * * * *").unwrap();
    let z = tz("Europe/Berlin");
    // Three days of hourly fires, from the first missed one inclusive.
    let (n, last) = e.fires_between(
        &z,
        utc("2026-06-01T00:00:00Z"),
        utc("2026-06-03T23:59:59Z"),
        1000,
    );
    assert_eq!(n, 72);
    assert_eq!(last, Some(utc("2026-06-03T23:00:00Z")));
    let (n, _) = e.fires_between(
        &z,
        utc("2026-06-01T00:00:00Z"),
        utc("2026-06-03T23:59:59Z"),
        10,
    );
    assert_eq!(n, 10, "counting stops at the cap");
    assert_eq!(
        e.fires_between(
            &z,
            utc("2026-06-01T00:00:01Z"),
            utc("2026-06-01T00:59:59Z"),
            10
        ),
        (0, None)
    );
}

#[test]
fn bad_expressions_say_what_is_allowed() {
    for (expr, expect) in [
        ("* * *", "has 3 fields; use five"),
        ("0 7 * * 8", "use 0-7"),
        ("0 7 * * mon-xyz", "'xyz'"),
        ("0 7 1 * 1", "restricts both day-of-month and day-of-week"),
        ("0 7 * * 5-1", "runs backwards"),
        ("@often", "not a known shorthand"),
        ("x * * * *", "not a valid cron expression"),
        ("61 * * * *", "minute 61 is out of range; minutes are 0-59"),
        ("0 0 30 2 *", "never fires"),
        ("0 7 * * saö", "'saö'"),
        ("0 7 * * tuesdayx", "'tuesdayx'"),
    ] {
        let err = CronExpr::parse(expr).unwrap_err().to_string();
        assert!(err.contains(expect), "{expr}: {err}");
    }
}

#[test]
fn out_of_range_values_name_the_field_and_its_real_limits() {
    let refused = [
        (
            "61 * * * *",
            "'61 * * * *': minute 61 is out of range; minutes are 0-59",
        ),
        (
            "60 * * * *",
            "'60 * * * *': minute 60 is out of range; minutes are 0-59",
        ),
        (
            "60 0 * * * *",
            "'60 0 * * * *': second 60 is out of range; seconds are 0-59",
        ),
        (
            "0 24 * * *",
            "'0 24 * * *': hour 24 is out of range; hours are 0-23",
        ),
        (
            "0 0 32 * *",
            "'0 0 32 * *': day-of-month 32 is out of range; days of the month are 1-31",
        ),
        (
            "0 0 0 * *",
            "'0 0 0 * *': day-of-month 0 is out of range; days of the month are 1-31",
        ),
        (
            "0 0 1 13 *",
            "'0 0 1 13 *': month 13 is out of range; months are 1-12 or JAN-DEC",
        ),
        (
            "0 0 1 0 *",
            "'0 0 1 0 *': month 0 is out of range; months are 1-12 or JAN-DEC",
        ),
        // Ranges, steps over ranges and lists are checked value by value.
        ("0 9-24 * * *", "hour 24 is out of range; hours are 0-23"),
        (
            "0 22-23,24 * * *",
            "hour 24 is out of range; hours are 0-23",
        ),
        (
            "0-60/5 * * * *",
            "minute 60 is out of range; minutes are 0-59",
        ),
        ("*/0 * * * *", "'*/0 * * * *': minute step 0 never advances"),
        ("0 0-23/0 * * *", "hour step 0 never advances"),
    ];
    for (expr, expect) in refused {
        let err = CronExpr::parse(expr).expect_err(expr);
        assert!(
            matches!(err, ExprError::FieldRange { .. }),
            "{expr}: {err:?}"
        );
        let msg = err.to_string();
        assert!(msg.contains(expect), "{expr}: {msg}");
        assert!(!msg.contains("must be less than"), "{expr}: {msg}");
    }
}

#[test]
fn the_edge_values_of_each_field_are_accepted() {
    for expr in [
        "59 23 31 12 *",
        "0 0 1 1 *",
        "59 59 23 * * *",
        "0-59/15 0-23 1-31 1-12 *",
        "*/59 */23 */31 */12 *",
        "0 0 1 JAN-DEC *",
        "0 0 1 dec *",
    ] {
        CronExpr::parse(expr).unwrap_or_else(|e| panic!("{expr}: {e}"));
    }
}
