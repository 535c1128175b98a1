//! Schedules follow edits at once and one clock, with the real daemon: an edit by SIGHUP
//! reload or by `PATCH` that moves the next fire earlier fires on time and loses no fire of a
//! 2-second schedule; fires owed after 30 s of downtime run, after 3 minutes are missed as the
//! README says; and two PostgreSQL daemons whose clocks differ by 4 s (libfaketime) fire each
//! fire once, on time by the database's clock, across a leadership handover by SIGKILL.
//!
//! Lateness is judged from stored state: the fire time is in each run's idempotency key, and
//! a run's `created_at` is the enqueuing daemon's clock (the real one, where no clock is
//! faked). Where a daemon's clock is faked, the test records when it first sees each run in
//! the database, by its own clock — the database's, on this machine.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nightshift_scheduler::cron::{self, Missed, Overlap, ScheduleSpec};
use nightshift_store::{Clock, ManualClock, Millis, Run, Store, SystemClock, Trigger};
use nightshift_tests::process::Serve;
use nightshift_tests::{TestDb, eventually, on_both_backends};
use serde_json::json;

use crate::process::{API_TOKEN, Proc, config_file, wait_for_api};

on_both_backends! {
    a_reload_that_moves_the_next_fire_earlier_fires_on_time => reload_edit_fires_on_time;
    a_patch_that_moves_the_next_fire_earlier_fires_on_time => patch_edit_fires_on_time;
    fires_owed_after_downtime_run_within_a_minute_and_are_missed_after =>
        fires_after_downtime;
}

/// How late a fire may be taken up while a daemon leads (a loaded 2-core machine included);
/// a timer that slept through an edit is 3 s late or more, and loses fires.
const ON_TIME_MS: i64 = 1_500;
/// The preloaded library that fakes a daemon's clock.
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// The fire time of a scheduled run (its idempotency key is `schedule:{id}:{fire ms}`).
fn fire_time(run: &Run) -> Option<Millis> {
    run.idempotency_key
        .as_deref()?
        .rsplit(':')
        .next()?
        .parse()
        .ok()
}

/// The runs of schedule `id`, by fire time (a fire with two runs fails the test).
async fn runs_by_fire(store: &Store, id: &str) -> BTreeMap<Millis, Run> {
    let prefix = format!("schedule:{id}:");
    let mut by_fire = BTreeMap::new();
    for run in store.list_runs(None, 1000).await.unwrap() {
        if run.trigger_kind != Trigger::Schedule
            || !run
                .idempotency_key
                .as_deref()
                .unwrap_or("")
                .starts_with(&prefix)
        {
            continue;
        }
        let at = fire_time(&run).unwrap();
        if let Some(other) = by_fire.insert(at, run) {
            panic!("two runs for the fire at {at}: {} and another", other.id);
        }
    }
    by_fire
}

/// `nightshift serve` with `cfg`; with `offset`, its clock is faked that far off the real one
/// (libfaketime; timers keep the real monotonic clock).
fn serve(cfg: &std::path::Path, offset: Option<&str>) -> Proc {
    let daemon = Serve::new(cfg).env("NIGHTSHIFT_API_TOKEN", API_TOKEN);
    match offset {
        Some(offset) => daemon
            .env("LD_PRELOAD", LIBFAKETIME)
            .env("FAKETIME", offset)
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
            .spawn(),
        None => daemon.spawn(),
    }
}

/// A daemon config with agent `echo` and the given `[[schedules]]` text; path and API URL.
fn config_with(
    db: &TestDb,
    dir: &std::path::Path,
    schedules: &str,
) -> (std::path::PathBuf, String) {
    let (cfg, api) = config_file(db, dir);
    let mut text = std::fs::read_to_string(&cfg).unwrap();
    text.push_str(schedules);
    std::fs::write(&cfg, text).unwrap();
    (cfg, api)
}

fn schedule_toml(name: &str, cron: &str) -> String {
    format!(
        "[[schedules]]\nname = \"{name}\"\ncron = \"{cron}\"\nagent = \"echo\"\n\
         prompt = \"fire {{{{ fire_time_utc }}}}\"\noverlap = \"allow\"\n"
    )
}

/// Waits until the schedule timer has just ticked: its lease was renewed. The leader then
/// sleeps until its next fire, at most 5 s — through an edit, unless the edit wakes it.
async fn just_ticked(store: &Store) {
    let before = eventually(Duration::from_secs(30), "a timer leader", || async {
        store.leader(cron::LEADER_LEASE).await.ok().flatten()
    })
    .await;
    eventually(
        Duration::from_secs(15),
        "the leader's next tick",
        || async {
            let now = store.leader(cron::LEADER_LEASE).await.ok().flatten()?;
            (now.expires_at != before.expires_at).then_some(())
        },
    )
    .await;
}

/// Checks the 2-second schedule `name`, armed for `armed` by an edit: its next `count` fires
/// each made one run, at most [`ON_TIME_MS`] late by its stored creation time, none missed.
async fn every_fire_on_time(store: &Store, name: &str, armed: Millis, count: i64) {
    let last = armed + (count - 1) * 2_000;
    let row = eventually(
        Duration::from_secs(30),
        "the fires after the edit",
        || async {
            let row = store.schedule(name).await.ok().flatten()?;
            (row.next_fire_at? > last).then_some(row)
        },
    )
    .await;
    let runs = runs_by_fire(store, &row.id).await;
    for k in 0..count {
        let at = armed + k * 2_000;
        let run = runs
            .get(&at)
            .unwrap_or_else(|| panic!("fire {k} ({at}) after the edit has no run: {runs:?}"));
        let late = run.created_at - at;
        assert!(
            (0..=ON_TIME_MS).contains(&late),
            "fire {k} after the edit ran {late} ms after its time"
        );
    }
    assert_eq!(row.missed_count, 0, "no fire is missed");
}

async fn reload_edit_fires_on_time(db: &TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, _) = config_with(db, dir.path(), &schedule_toml("edited", "0 0 0 1 1 *"));
    let mut daemon = serve(&cfg, None);
    let store = db.store().await;
    just_ticked(&store).await;
    let far = store.schedule("edited").await.unwrap().unwrap();
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, text.replace("0 0 0 1 1 *", "*/2 * * * * *")).unwrap();
    daemon.signal("HUP");
    let row = eventually(Duration::from_secs(30), "the reload to apply", || async {
        let row = store.schedule("edited").await.ok().flatten()?;
        (row.cron == "*/2 * * * * *").then_some(row)
    })
    .await;
    // The first fire after the edit: armed still, or already run (the old time never fired).
    let runs = runs_by_fire(&store, &row.id).await;
    let armed = runs.keys().copied().chain(row.next_fire_at).min().unwrap();
    assert!(
        armed < far.next_fire_at.unwrap(),
        "the edit moved the fire earlier"
    );
    every_fire_on_time(&store, "edited", armed, 5).await;
    daemon.signal("TERM");
    assert!(daemon.wait_exit(Duration::from_secs(30)).await.success());
}

async fn patch_edit_fires_on_time(db: &TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, api) = config_with(db, dir.path(), "");
    let mut daemon = serve(&cfg, None);
    let http = nightshift_llm::http::build_client(nightshift_llm::HttpTimeouts::default()).unwrap();
    wait_for_api(&http, &api).await;
    let created = http
        .post(format!("{api}/v1/schedules"))
        .bearer_auth(API_TOKEN)
        .json(
            &json!({"name": "patched", "cron": "0 0 0 1 1 *", "agent": "echo",
                      "prompt": "fire {{ fire_time_utc }}", "overlap": "allow"}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), reqwest::StatusCode::CREATED);
    let store = db.store().await;
    just_ticked(&store).await;
    let patched = http
        .patch(format!("{api}/v1/schedules/patched"))
        .bearer_auth(API_TOKEN)
        .json(&json!({"cron": "*/2 * * * * *"}))
        .send()
        .await
        .unwrap();
    assert_eq!(patched.status(), reqwest::StatusCode::OK);
    let body: serde_json::Value = patched.json().await.unwrap();
    let armed = body["next_fire_at"].as_i64().unwrap();
    every_fire_on_time(&store, "patched", armed, 5).await;
    daemon.signal("TERM");
    assert!(daemon.wait_exit(Duration::from_secs(30)).await.success());
}

/// A schedule that fires once a year, at `at` (whole seconds, UTC).
fn yearly_at(name: &str, at: Millis, missed: Missed) -> ScheduleSpec {
    let t = chrono::DateTime::from_timestamp_millis(at).unwrap();
    let cron = t.format("%-S %-M %-H %-d %-m *").to_string();
    ScheduleSpec {
        name: name.into(),
        cron,
        timezone: "UTC".into(),
        agent: "echo".into(),
        prompt: "fire {{ fire_time_utc }}".into(),
        overlap: Overlap::Allow,
        missed,
        enabled: true,
    }
}

/// Schedules armed as a daemon that stopped in the past left them (made through the store
/// with a clock set back to then), taken up by a daemon started now.
async fn fires_after_downtime(db: &TestDb) {
    let now = SystemClock.now() / 1000 * 1000;
    let agents = ["echo".to_string()];
    let past = ManualClock::new(0);
    let then = db.store_with(Arc::new(past.clone())).await;
    let armed_at = |at: Millis| {
        past.set(at - 1_000);
        at
    };
    let late_30s = armed_at(now - 30_000);
    let row_30s = cron::create(
        then.as_operator("cli:test"),
        yearly_at("late-30s", late_30s, Missed::Skip),
        &agents,
    )
    .await
    .unwrap();
    let late_3m = armed_at(now - 180_000);
    let row_skip = cron::create(
        then.as_operator("cli:test"),
        yearly_at("late-3m-skip", late_3m, Missed::Skip),
        &agents,
    )
    .await
    .unwrap();
    let row_once = cron::create(
        then.as_operator("cli:test"),
        yearly_at("late-3m-once", late_3m, Missed::RunOnce),
        &agents,
    )
    .await
    .unwrap();
    // Every 10 s, armed 35-45 s ago: four or five fires owed, none a minute late.
    let first_10s = armed_at((now - 35_000) / 10_000 * 10_000);
    let every_10s = ScheduleSpec {
        name: "every-10s".into(),
        cron: "*/10 * * * * *".into(),
        ..yearly_at("every-10s", now, Missed::Skip)
    };
    let row_10s = cron::create(then.as_operator("cli:test"), every_10s, &agents)
        .await
        .unwrap();
    assert_eq!(row_10s.next_fire_at, Some(first_10s));
    assert_eq!(row_30s.next_fire_at, Some(late_30s));
    assert_eq!(row_skip.next_fire_at, Some(late_3m));
    assert_eq!(row_once.next_fire_at, Some(late_3m));

    let dir = tempfile::tempdir().unwrap();
    let (cfg, _) = config_with(db, dir.path(), "");
    let mut daemon = serve(&cfg, None);
    let store = db.store().await;
    let started = SystemClock.now();
    let taken_up = |name: &'static str, past: Millis| {
        let store = store.clone();
        async move {
            eventually(Duration::from_secs(30), name, || async {
                let row = store.schedule(name).await.ok().flatten()?;
                (row.next_fire_at? > past).then_some(row)
            })
            .await
        }
    };
    let row_30s = taken_up("late-30s", late_30s).await;
    let row_skip = taken_up("late-3m-skip", late_3m).await;
    let row_once = taken_up("late-3m-once", late_3m).await;
    let row_10s = taken_up("every-10s", started).await;

    let runs = runs_by_fire(&store, &row_30s.id).await;
    assert_eq!(runs.keys().copied().collect::<Vec<_>>(), [late_30s]);
    assert_eq!((row_30s.fired_count, row_30s.missed_count), (1, 0));
    let late = runs[&late_30s].created_at - late_30s;
    assert!(
        (30_000..60_000).contains(&late),
        "30 s late runs: {late} ms"
    );

    assert!(runs_by_fire(&store, &row_skip.id).await.is_empty());
    assert_eq!(
        (row_skip.fired_count, row_skip.missed_count),
        (0, 1),
        "3 minutes late is missed and `skip` drops it"
    );
    let runs = runs_by_fire(&store, &row_once.id).await;
    assert_eq!(
        runs.keys().copied().collect::<Vec<_>>(),
        [late_3m],
        "`run_once` runs the missed fire once"
    );
    assert_eq!((row_once.fired_count, row_once.missed_count), (1, 0));

    // The fires owed at the take-up (it goes on firing every 10 s after).
    let next = row_10s.next_fire_at.unwrap();
    let runs = runs_by_fire(&store, &row_10s.id).await;
    let owed: Vec<Millis> = (0..)
        .map(|k| first_10s + k * 10_000)
        .take_while(|t| *t < next)
        .collect();
    assert!(owed.len() >= 4, "{owed:?}");
    assert_eq!(
        runs.range(..next).map(|(t, _)| *t).collect::<Vec<_>>(),
        owed,
        "every fire less than a minute late runs"
    );
    assert_eq!(row_10s.missed_count, 0);
    daemon.signal("TERM");
    assert!(daemon.wait_exit(Duration::from_secs(30)).await.success());
}

/// When the test first saw each run of a schedule in the database, by fire time, by its own
/// clock; polled until dropped.
#[derive(Clone, Default)]
struct Sightings(Arc<Mutex<BTreeMap<Millis, Millis>>>);

impl Sightings {
    fn watch(&self, store: Store, prefix: String) -> tokio::task::JoinHandle<()> {
        let seen = self.0.clone();
        tokio::spawn(async move {
            loop {
                if let Ok(runs) = store.list_runs(None, 1000).await {
                    let now = SystemClock.now();
                    let mut seen = seen.lock().unwrap();
                    for run in runs {
                        let ours = run
                            .idempotency_key
                            .as_deref()
                            .unwrap_or("")
                            .starts_with(&prefix);
                        if let Some(at) = fire_time(&run).filter(|_| ours) {
                            seen.entry(at).or_insert(now);
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    }

    fn get(&self) -> BTreeMap<Millis, Millis> {
        self.0.lock().unwrap().clone()
    }
}

/// The pid in a timer lease's holder (`host:pid:uuid`).
fn holder_pid(holder: &str) -> u32 {
    holder.split(':').nth(1).unwrap().parse().unwrap()
}

/// Two daemons on one PostgreSQL schema, one with its clock 4 s ahead and leading first: a
/// schedule made through the other (whose timer must be woken across daemons) fires every
/// 2 s once, never early and at most [`ON_TIME_MS`] late by the database's clock; the leader
/// is SIGKILLed and the fires of the handover run late but none is lost or missed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn daemons_with_skewed_clocks_fire_once_on_time_by_the_database_clock() {
    if !std::path::Path::new(LIBFAKETIME).exists() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "libfaketime is missing: apt-get install faketime (.ci/run does)"
        );
        eprintln!("SKIPPED: no {LIBFAKETIME} (apt-get install faketime)");
        return;
    }
    let Some(db) = TestDb::new(nightshift_tests::Backend::Postgres, "skewed_clocks").await else {
        return;
    };
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (cfg_b, _) = config_with(&db, dir_b.path(), "");
    let mut ahead = serve(&cfg_b, Some("+4s"));
    let store = db.store().await;
    let lease = eventually(Duration::from_secs(30), "a timer leader", || async {
        store.leader(cron::LEADER_LEASE).await.ok().flatten()
    })
    .await;
    assert_eq!(
        holder_pid(&lease.holder),
        ahead.pid(),
        "the skewed daemon leads"
    );
    let (cfg_a, api_a) = config_with(&db, dir_a.path(), "");
    let mut honest = serve(&cfg_a, None);
    let http = nightshift_llm::http::build_client(nightshift_llm::HttpTimeouts::default()).unwrap();
    wait_for_api(&http, &api_a).await;
    just_ticked(&store).await;
    let created = http
        .post(format!("{api_a}/v1/schedules"))
        .bearer_auth(API_TOKEN)
        .json(
            &json!({"name": "skewed", "cron": "*/2 * * * * *", "agent": "echo",
                      "prompt": "fire {{ fire_time_utc }}", "overlap": "allow"}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), reqwest::StatusCode::CREATED);
    let body: serde_json::Value = created.json().await.unwrap();
    let first = body["next_fire_at"].as_i64().unwrap();
    let id = body["id"].as_str().unwrap().to_string();
    let sightings = Sightings::default();
    let watcher = sightings.watch(store.clone(), format!("schedule:{id}:"));
    let seen_up_to = |t: Millis| {
        let sightings = sightings.clone();
        async move {
            eventually(Duration::from_secs(60), "fires to be seen", || async {
                (sightings.get().range(t..).next().is_some()).then_some(())
            })
            .await
        }
    };
    // Four fires led by the skewed daemon, then it dies without releasing its lease.
    seen_up_to(first + 6_000).await;
    ahead.signal("KILL");
    ahead.wait_exit(Duration::from_secs(10)).await;
    let killed_at = SystemClock.now();
    let lease = eventually(
        Duration::from_secs(40),
        "the other daemon to lead",
        || async {
            let l = store.leader(cron::LEADER_LEASE).await.ok().flatten()?;
            (holder_pid(&l.holder) == honest.pid()).then_some(l)
        },
    )
    .await;
    let last = lease.acquired_at + 6_000;
    seen_up_to(last).await;
    honest.signal("TERM");
    assert!(honest.wait_exit(Duration::from_secs(30)).await.success());
    watcher.abort();

    let seen = sightings.get();
    let runs = runs_by_fire(&store, &id).await;
    let handover = (killed_at - 2_000)..=(lease.acquired_at + 500);
    let mut fire = first;
    while fire <= last {
        assert!(
            runs.contains_key(&fire),
            "the fire at {fire} has no run (lost)"
        );
        let at = *seen
            .get(&fire)
            .unwrap_or_else(|| panic!("the fire at {fire} was not seen: {seen:?}"));
        let late = at - fire;
        assert!(late >= 0, "the fire at {fire} ran {} ms early", -late);
        if !handover.contains(&fire) {
            assert!(
                late <= ON_TIME_MS,
                "the fire at {fire} ran {late} ms late with a leader"
            );
        }
        fire += 2_000;
    }
    let row = store.schedule("skewed").await.unwrap().unwrap();
    assert_eq!(
        row.missed_count, 0,
        "a handover under a minute misses nothing"
    );
    drop((ahead, honest));
    db.cleanup().await;
}
