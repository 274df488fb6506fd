//! How well a job uses what it holds: its accelerators' utilization and
//! memory from the device polls, an accelerator left idle, and its CPU
//! efficiency (CPU time over CPUs times elapsed). Pure arithmetic: the
//! daemon feeds it each poll's loads and reads the figures.

use super::Load;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// When an allocated accelerator counts as idle (`--idle-gpu-below`,
/// `--idle-gpu-after`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdleRule {
    /// Busy percent under which a device is idle.
    pub below_pct: u8,
    /// How long it must stay so; `None`: never flagged.
    pub after_secs: Option<u64>,
    /// What happens to a job so flagged, besides the flag.
    pub action: IdleAction,
}

/// What xlurmd does to a job whose accelerator stays idle
/// (`--idle-gpu-action`): nothing unless the admin opts in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum IdleAction {
    /// Flag it (IdleGPU), log it, tell its owner.
    #[default]
    Flag,
    /// Also cancel it.
    Cancel,
}

impl Default for IdleRule {
    fn default() -> Self {
        IdleRule {
            below_pct: 5,
            after_secs: Some(30 * 60),
            action: IdleAction::Flag,
        }
    }
}

/// What a job's accelerators did while it ran, from every poll that read
/// them: kept while it runs and with its end.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuUse {
    /// Sum of the busy percents read, one per device and poll.
    pub util_sum: u64,
    /// How many busy percents were read.
    pub util_reads: u64,
    /// The highest busy percent read.
    pub util_peak: u8,
    /// The most memory one of its devices had in use, bytes (`None`: never
    /// read).
    pub mem_peak: Option<u64>,
    /// Whether an accelerator of it stays idle past the rule now (IdleGPU).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub idle: bool,
    /// Whether it was ever flagged idle (reported once).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub was_idle: bool,
    /// Since when (seconds) each idle device (by slot) has been idle.
    #[serde(skip)]
    pub idle_since: BTreeMap<usize, u64>,
}

/// What one poll changed about a job's idleness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdleChange {
    None,
    /// It became idle for the first time (log and tell its owner).
    First {
        slot: usize,
        idle_secs: u64,
    },
    /// It became idle again, or busy again.
    Changed,
}

impl GpuUse {
    /// Takes one poll's `load` of its device `slot`, at `now` (seconds).
    pub fn observe(&mut self, slot: usize, load: &Load, now: u64, rule: IdleRule) -> IdleChange {
        if let Some(mem) = load.mem_used {
            self.mem_peak = Some(self.mem_peak.map_or(mem, |p| p.max(mem)));
        }
        let Some(util) = load.util_pct else {
            return IdleChange::None;
        };
        self.util_sum += u64::from(util);
        self.util_reads += 1;
        self.util_peak = self.util_peak.max(util);
        if util >= rule.below_pct {
            self.idle_since.remove(&slot);
        } else {
            self.idle_since.entry(slot).or_insert(now);
        }
        let was = self.idle;
        let longest = self
            .idle_since
            .iter()
            .map(|(&s, &since)| (now.saturating_sub(since), s))
            .max();
        self.idle = match (rule.after_secs, longest) {
            (Some(after), Some((secs, _))) => secs >= after,
            _ => false,
        };
        match (was, self.idle, longest) {
            (false, true, Some((idle_secs, slot))) if !self.was_idle => {
                self.was_idle = true;
                IdleChange::First { slot, idle_secs }
            }
            (a, b, _) if a != b => IdleChange::Changed,
            _ => IdleChange::None,
        }
    }

    /// The mean busy percent read, when any was.
    pub fn util_mean(&self) -> Option<f64> {
        (self.util_reads > 0).then(|| self.util_sum as f64 / self.util_reads as f64)
    }

    /// Whether nothing was ever read.
    pub fn is_empty(&self) -> bool {
        self.util_reads == 0 && self.mem_peak.is_none()
    }
}

/// CPU efficiency: the CPU time used over what `cpus` CPUs could give in
/// `elapsed_usec`, from 0 (idle) to 1 (every CPU busy all along; a little
/// more is reported as read). `None` when it cannot be told.
pub fn cpu_efficiency(cpu_nsec: Option<u64>, cpus: u32, elapsed_usec: u64) -> Option<f64> {
    let cpu = cpu_nsec?;
    if cpus == 0 || elapsed_usec == 0 {
        return None;
    }
    Some(cpu as f64 / (f64::from(cpus) * elapsed_usec as f64 * 1000.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(util: Option<u8>, mem: Option<u64>) -> Load {
        Load {
            util_pct: util,
            mem_used: mem,
            mem_total: Some(100),
        }
    }

    const RULE: IdleRule = IdleRule {
        below_pct: 5,
        after_secs: Some(60),
        action: IdleAction::Flag,
    };

    #[test]
    fn mean_peak_and_memory_peak_over_devices_and_polls() {
        let mut u = GpuUse::default();
        assert_eq!(u.util_mean(), None);
        assert!(u.is_empty());
        u.observe(0, &load(Some(80), Some(30)), 0, RULE);
        u.observe(1, &load(Some(20), Some(50)), 0, RULE);
        u.observe(0, &load(Some(90), Some(40)), 10, RULE);
        // A poll that read nothing counts for nothing.
        u.observe(1, &load(None, None), 10, RULE);
        assert_eq!(u.util_reads, 3);
        assert_eq!(u.util_mean(), Some(190.0 / 3.0));
        assert_eq!(u.util_peak, 90);
        assert_eq!(u.mem_peak, Some(50));
        assert!(!u.is_empty());
        // Memory alone still counts.
        let mut m = GpuUse::default();
        m.observe(0, &load(None, Some(7)), 0, RULE);
        assert_eq!((m.util_mean(), m.mem_peak), (None, Some(7)));
    }

    #[test]
    fn a_device_idle_past_the_rule_flags_the_job_once_and_busy_again_clears_it() {
        let mut u = GpuUse::default();
        assert_eq!(
            u.observe(0, &load(Some(1), None), 100, RULE),
            IdleChange::None
        );
        assert_eq!(
            u.observe(0, &load(Some(4), None), 159, RULE),
            IdleChange::None
        );
        assert!(!u.idle);
        assert_eq!(
            u.observe(0, &load(Some(0), None), 160, RULE),
            IdleChange::First {
                slot: 0,
                idle_secs: 60
            }
        );
        assert!(u.idle && u.was_idle);
        assert_eq!(
            u.observe(0, &load(Some(0), None), 170, RULE),
            IdleChange::None
        );
        // At the threshold it is busy.
        assert_eq!(
            u.observe(0, &load(Some(5), None), 180, RULE),
            IdleChange::Changed
        );
        assert!(!u.idle);
        // Idle again: flagged, but not reported a second time.
        u.observe(0, &load(Some(0), None), 200, RULE);
        assert_eq!(
            u.observe(0, &load(Some(0), None), 260, RULE),
            IdleChange::Changed
        );
        assert!(u.idle);
        // An unknown reading changes nothing.
        assert_eq!(u.observe(0, &load(None, None), 999, RULE), IdleChange::None);
        assert!(u.idle);
    }

    #[test]
    fn one_busy_device_does_not_hide_an_idle_one_and_no_rule_never_flags() {
        let mut u = GpuUse::default();
        u.observe(0, &load(Some(99), None), 0, RULE);
        u.observe(1, &load(Some(0), None), 0, RULE);
        // Device 1 has been idle since 0: the next poll of either says so.
        assert_eq!(
            u.observe(0, &load(Some(99), None), 61, RULE),
            IdleChange::First {
                slot: 1,
                idle_secs: 61
            }
        );
        assert_eq!(
            u.observe(1, &load(Some(0), None), 61, RULE),
            IdleChange::None
        );
        let off = IdleRule {
            after_secs: None,
            ..RULE
        };
        let mut n = GpuUse::default();
        n.observe(0, &load(Some(0), None), 0, off);
        assert_eq!(
            n.observe(0, &load(Some(0), None), 1 << 40, off),
            IdleChange::None
        );
        assert!(!n.idle);
    }

    #[test]
    fn cpu_efficiency_is_cpu_time_over_cpus_times_elapsed() {
        // 2 CPUs for 10 s, 5 s of CPU time: 25 %.
        assert_eq!(
            cpu_efficiency(Some(5_000_000_000), 2, 10_000_000),
            Some(0.25)
        );
        assert_eq!(cpu_efficiency(None, 2, 10), None);
        assert_eq!(cpu_efficiency(Some(1), 0, 10), None);
        assert_eq!(cpu_efficiency(Some(1), 2, 0), None);
    }
}
