//! What the scheduler keeps per user: jobs pending, resources held, the
//! resolved limits and what is left under them, and the fair-share term of
//! the priority.
//!
//! Users get a dense index on first sight, so that the record a pass reads
//! per queued job holds a `u32` and the per-user test is an array lookup.
//! A box has few users; entries are never removed.

use super::limits::{Gid, Headroom, Held, Resolved, Uid, UserLimits};
use super::machine::Machine;
use std::collections::HashMap;

#[derive(Debug, Clone)]
pub struct UserState {
    pub uid: Uid,
    /// The primary group of the user's latest submission; group limits
    /// follow it.
    pub gid: Gid,
    pub pending: u32,
    pub held: Held,
    pub limits: Resolved,
    pub room: Headroom,
    /// The fair-share factor, as of the last re-keying.
    pub factor: f64,
    /// `weight_fairshare * factor`, rounded: the term in the queue keys.
    pub fair_points: i64,
}

#[derive(Debug, Clone, Default)]
pub struct Users {
    pub states: Vec<UserState>,
    index: HashMap<Uid, u32>,
}

impl Users {
    pub fn get(&self, uid: Uid) -> Option<u32> {
        self.index.get(&uid).copied()
    }

    /// The index of `uid`, added with `gid` (and factor `factor`, fair-share
    /// term `points`) when new; a known user's group follows `gid`.
    pub fn entry(
        &mut self,
        uid: Uid,
        gid: Gid,
        limits: &UserLimits,
        machine: &Machine,
        fresh: (f64, i64),
    ) -> u32 {
        if let Some(&i) = self.index.get(&uid) {
            let s = &mut self.states[i as usize];
            if s.gid != gid && !limits.is_empty() {
                s.gid = gid;
                s.limits = limits.resolve(uid, gid);
                s.room = s.limits.headroom(&s.held, machine);
            }
            s.gid = gid;
            return i;
        }
        let i = self.states.len() as u32;
        let resolved = limits.resolve(uid, gid);
        self.states.push(UserState {
            uid,
            gid,
            pending: 0,
            held: Held::default(),
            room: resolved.headroom(&Held::default(), machine),
            limits: resolved,
            factor: fresh.0,
            fair_points: fresh.1,
        });
        self.index.insert(uid, i);
        i
    }

    pub fn take(&mut self, user: u32, held: &Held, machine: &Machine) {
        let s = &mut self.states[user as usize];
        s.held.add(held);
        if s.room.limited {
            s.room = s.limits.headroom(&s.held, machine);
        }
    }

    pub fn give(&mut self, user: u32, held: &Held, machine: &Machine) {
        let s = &mut self.states[user as usize];
        s.held.sub(held);
        if s.room.limited {
            s.room = s.limits.headroom(&s.held, machine);
        }
    }

    /// Resolves every user's limits again (after the admin changed them, or
    /// the machine's devices).
    pub fn relimit(&mut self, limits: &UserLimits, machine: &Machine) {
        for s in &mut self.states {
            s.limits = limits.resolve(s.uid, s.gid);
            s.room = s.limits.headroom(&s.held, machine);
        }
    }
}
