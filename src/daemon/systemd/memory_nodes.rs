//! How a job's memory is kept on its NUMA nodes (`xlurmd --memory-nodes`).

/// How a job's memory is kept on the NUMA nodes it was given (`xlurmd
/// --memory-nodes`; the admin guide weighs the two).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryNodes {
    /// `AllowedMemoryNodes`: the kernel's cpuset fence, which no process of
    /// the job can leave. systemd before 255 forks the job's process from
    /// PID 1 and moves it into the unit's cgroup before it execs; the move
    /// migrates the pages the child still shares with PID 1 to the job's
    /// nodes, so jobs started on alternating nodes bounce PID 1's memory
    /// between them (VM probe `95-memory-nodes`: 30 starts took 25.7 s instead of
    /// 10.8 s). Later systemd spawns straight into the cgroup.
    Fence,
    /// `NUMAPolicy=local`: memory comes from the node of the CPU that touches
    /// it, and `AllowedCPUs` keeps the job on its nodes' CPUs, so its pages
    /// land on its nodes without moving PID 1's. Nothing fences them: a job
    /// may ask for other nodes (`mbind`, `numactl`), or spill there when its
    /// own are full, and its neighbours' memory then spills in turn (slower,
    /// never killed: nobody is bound). `MemoryMax` still caps its total.
    Local,
}

/// `--memory-nodes`: a mode, or `auto` (decided by systemd's version).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryNodesChoice {
    Auto,
    Is(MemoryNodes),
}

impl std::str::FromStr for MemoryNodesChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(MemoryNodesChoice::Auto),
            "fence" => Ok(MemoryNodesChoice::Is(MemoryNodes::Fence)),
            "local" => Ok(MemoryNodesChoice::Is(MemoryNodes::Local)),
            _ => Err(format!("unknown mode {s:?} (use auto, fence or local)")),
        }
    }
}

impl MemoryNodesChoice {
    /// The mode for the manager of `version` (its `Version` property,
    /// `252.39-1~deb12u1`): `auto` fences where systemd spawns units straight
    /// into their cgroup (255 and later, or a version it cannot read).
    pub fn resolve(self, version: &str) -> MemoryNodes {
        match self {
            MemoryNodesChoice::Is(m) => m,
            MemoryNodesChoice::Auto => match crate::daemon::systemd::major_version(version) {
                Some(v) if v < 255 => MemoryNodes::Local,
                _ => MemoryNodes::Fence,
            },
        }
    }
}

/// `MPOL_LOCAL` of set_mempolicy(2), the D-Bus value of `NUMAPolicy=local`.
pub(crate) const MPOL_LOCAL: i32 = 4;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_nodes_auto_follows_systemd() {
        use MemoryNodes::*;
        let auto: MemoryNodesChoice = "auto".parse().unwrap();
        assert_eq!(auto.resolve("252.39-1~deb12u1"), Local);
        assert_eq!(auto.resolve("254"), Local);
        assert_eq!(auto.resolve("255.4-1ubuntu8"), Fence);
        assert_eq!(auto.resolve("257"), Fence);
        assert_eq!(auto.resolve("fake"), Fence, "when it cannot tell, fence");
        let fence: MemoryNodesChoice = "fence".parse().unwrap();
        assert_eq!(fence.resolve("252"), Fence);
        let local: MemoryNodesChoice = "local".parse().unwrap();
        assert_eq!(local.resolve("257"), Local);
        let bad = "bind".parse::<MemoryNodesChoice>().unwrap_err();
        assert!(bad.contains("auto, fence or local"), "{bad}");
    }
}
