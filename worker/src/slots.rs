//! Slot accounting with per-lane reservations.
//!
//! A pool of `slots` has `lanes[l]` slots kept for lane `l` and the rest shared. A job takes a
//! reserved slot of its lane when one is free, else a shared slot. So a burst of 500 batch
//! jobs fills the shared slots only, and an interactive job still finds its reserved slot.

use std::collections::BTreeMap;

/// Which slot a running job holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Slot {
    Reserved(String),
    Shared,
}

/// What may be claimed right now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    /// Per reserved lane: how many jobs of that lane to claim.
    pub reserved: Vec<(String, usize)>,
    /// How many jobs of any lane to claim into shared slots.
    pub shared: usize,
}

/// Free and used slots of one pool.
#[derive(Debug, Clone)]
pub struct Slots {
    reserved_total: BTreeMap<String, usize>,
    reserved_used: BTreeMap<String, usize>,
    shared_total: usize,
    shared_used: usize,
}

impl Slots {
    /// `slots` in all, of which `lanes[l]` are kept for lane `l` (the sum must not exceed
    /// `slots`; `PoolConfig::validate` checks this).
    pub fn new(slots: usize, lanes: &BTreeMap<String, usize>) -> Self {
        let reserved: usize = lanes.values().sum();
        Self {
            reserved_total: lanes.clone(),
            reserved_used: lanes.keys().map(|l| (l.clone(), 0)).collect(),
            shared_total: slots.saturating_sub(reserved),
            shared_used: 0,
        }
    }

    /// How many jobs to claim, and from where.
    pub fn wanted(&self) -> Wanted {
        let reserved = self
            .reserved_total
            .iter()
            .map(|(lane, total)| (lane.clone(), total - self.reserved_used[lane]))
            .filter(|(_, free)| *free > 0)
            .collect();
        Wanted {
            reserved,
            shared: self.shared_total - self.shared_used,
        }
    }

    /// Takes a slot for a job of `lane`: its lane's reserved slot if one is free, else a
    /// shared one. `None` when neither is free (the caller claimed more than `wanted`).
    pub fn take(&mut self, lane: &str) -> Option<Slot> {
        if let (Some(total), Some(used)) = (
            self.reserved_total.get(lane),
            self.reserved_used.get_mut(lane),
        ) && *used < *total
        {
            *used += 1;
            return Some(Slot::Reserved(lane.to_string()));
        }
        if self.shared_used < self.shared_total {
            self.shared_used += 1;
            return Some(Slot::Shared);
        }
        None
    }

    /// Frees a slot taken by [`take`](Self::take).
    pub fn free(&mut self, slot: &Slot) {
        match slot {
            Slot::Reserved(lane) => {
                if let Some(used) = self.reserved_used.get_mut(lane) {
                    *used = used.saturating_sub(1);
                }
            }
            Slot::Shared => self.shared_used = self.shared_used.saturating_sub(1),
        }
    }

    /// How many slots are in use.
    pub fn busy(&self) -> usize {
        self.shared_used + self.reserved_used.values().sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_in_one_lane_leaves_the_reserved_slot_free() {
        let lanes = BTreeMap::from([("interactive".to_string(), 1)]);
        let mut slots = Slots::new(4, &lanes);
        for _ in 0..3 {
            assert_eq!(slots.take("batch"), Some(Slot::Shared));
        }
        assert_eq!(
            slots.take("batch"),
            None,
            "batch may not take the reserved slot"
        );
        assert_eq!(
            slots.wanted(),
            Wanted {
                reserved: vec![("interactive".into(), 1)],
                shared: 0
            }
        );
        let s = slots.take("interactive").unwrap();
        assert_eq!(s, Slot::Reserved("interactive".into()));
        assert_eq!(slots.busy(), 4);
        slots.free(&s);
        assert_eq!(slots.wanted().reserved, vec![("interactive".into(), 1)]);
    }
}
