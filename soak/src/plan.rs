//! The kill schedule, decided up front from the seed (pure): for each of the N kills, how many
//! runs to enqueue first, how long to let the daemons work, and which daemons to SIGKILL.
//!
//! The same seed, kill count, run count and daemon count always give the same plan, so a soak
//! that found something can be repeated with the same kill times (what the daemons were doing
//! at those times still depends on the machine).

/// SplitMix64: small, fast, and enough to spread kill times; no crate needed for that.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
}

/// One step of the soak: enqueue `enqueue` runs, let the daemons work `work_ms`, then
/// SIGKILL the daemons numbered in `targets`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cycle {
    pub enqueue: usize,
    pub work_ms: u64,
    pub targets: Vec<usize>,
}

/// The plan: `kills` cycles enqueueing `runs` runs in all, spread evenly (all of them in the
/// first cycle when there are no kills, see [`Plan::runs_after_kills`]). With two daemons a
/// kill takes one of them (40% each) or both (20%).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub cycles: Vec<Cycle>,
    /// Runs enqueued after the last kill (only when `kills` is 0).
    pub runs_after_kills: usize,
}

impl Plan {
    pub fn new(seed: u64, kills: usize, runs: usize, daemons: usize, work_ms: (u64, u64)) -> Plan {
        let mut rng = Rng::new(seed);
        let mut cycles = Vec::with_capacity(kills);
        let mut enqueued = 0;
        for k in 0..kills {
            let due = (runs * (k + 1)).div_ceil(kills);
            let enqueue = due - enqueued;
            enqueued = due;
            let work_ms = rng.range(work_ms.0, work_ms.1);
            let targets = match daemons {
                1 => vec![0],
                _ => match rng.range(0, 9) {
                    0..=3 => vec![0],
                    4..=7 => vec![1],
                    _ => vec![0, 1],
                },
            };
            cycles.push(Cycle {
                enqueue,
                work_ms,
                targets,
            });
        }
        Plan {
            cycles,
            runs_after_kills: runs - enqueued,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_plan_and_every_run_is_enqueued() {
        let a = Plan::new(7, 13, 40, 2, (50, 900));
        assert_eq!(a, Plan::new(7, 13, 40, 2, (50, 900)));
        assert_ne!(a, Plan::new(8, 13, 40, 2, (50, 900)));
        assert_eq!(a.cycles.len(), 13);
        let total: usize = a.cycles.iter().map(|c| c.enqueue).sum();
        assert_eq!(total + a.runs_after_kills, 40);
        assert!(a.cycles.iter().all(|c| (50..=900).contains(&c.work_ms)));
        assert!(a.cycles.iter().any(|c| c.targets == vec![0, 1]));
        assert!(a.cycles.iter().any(|c| c.targets == vec![1]));
    }

    #[test]
    fn fewer_runs_than_kills_and_no_kills_at_all() {
        let p = Plan::new(1, 10, 3, 1, (1, 2));
        assert_eq!(p.cycles.iter().map(|c| c.enqueue).sum::<usize>(), 3);
        assert!(p.cycles.iter().all(|c| c.targets == vec![0]));
        let none = Plan::new(1, 0, 5, 1, (1, 2));
        assert!(none.cycles.is_empty());
        assert_eq!(none.runs_after_kills, 5);
    }
}
