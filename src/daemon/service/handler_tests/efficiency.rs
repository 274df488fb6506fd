//! A job's use of its accelerators, from the device polls: its figures while
//! it runs and with its end (kept across a restart), and IdleGPU.

use super::*;
use crate::accel::DiscoveredDevice;
use crate::core::{IdleChange, IdleRule, Load, Vendor};

/// A backend that found two GPUs (never polled here: the test hands the
/// loads over itself).
struct TwoGpus;

impl crate::accel::Backend for TwoGpus {
    fn vendor(&self) -> Vendor {
        Vendor::Nv
    }
    fn library(&self) -> &std::path::Path {
        std::path::Path::new("none")
    }
    fn api(&self) -> &'static str {
        "none"
    }
    fn discover(&self) -> Result<Vec<DiscoveredDevice>, crate::accel::AccelError> {
        Ok(found())
    }
    fn poll(
        &self,
        _: &[DiscoveredDevice],
    ) -> Result<Vec<crate::accel::DevicePoll>, crate::accel::QueryError> {
        Ok(vec![])
    }
}

fn found() -> Vec<DiscoveredDevice> {
    (0..2)
        .map(|i| DiscoveredDevice {
            vendor: Vendor::Nv,
            index: i,
            uuid: format!("GPU-{i}"),
            pci_bdf: None,
            numa_node: Some(i),
            device_nodes: vec![format!("/dev/nvidia{i}").into()],
        })
        .collect()
}

pub(super) fn two_gpus() -> (Machine, Vec<crate::accel::Active>) {
    let machine = Machine::new(
        Topology::uniform(2, 2, 1 << 30),
        found().iter().map(DiscoveredDevice::to_device).collect(),
    );
    let accel = vec![crate::accel::Active {
        backend: std::sync::Arc::new(TwoGpus),
        devices: found(),
    }];
    (machine, accel)
}

fn load(util: u8, mem: u64) -> Load {
    Load {
        util_pct: Some(util),
        mem_used: Some(mem),
        mem_total: Some(80 << 30),
    }
}

const RULE: IdleRule = IdleRule {
    below_pct: 5,
    after_secs: Some(600),
    action: crate::core::IdleAction::Flag,
};

#[tokio::test]
async fn polls_give_a_running_job_its_figures_idle_gpu_and_its_end_keeps_them() {
    let dir = tempfile::tempdir().unwrap();
    let (d, _c) = daemon_of(
        dir.path(),
        MemoryUnits::default(),
        two_gpus(),
        |s| s.idle = RULE,
        |_| {},
    )
    .await;
    let s = spec(vec![
        entry("argv", vec!["/bin/sleep".to_string(), "100".into()]),
        entry("cwd", "/"),
        entry("gpus", 1u32),
    ]);
    let id = d.submit(1000, vec![s]).await.unwrap()[0].id;
    d.schedule().await;
    until_runs(&d, id).await;
    let mut st = d.state.lock().await;
    let slot = |st: &State, i: u32| st.sched.machine().slot(Vendor::Nv, i).unwrap();
    let (mine, other) = {
        let a = st.jobs[&id].alloc().unwrap();
        let i = a.devices[0].index;
        (slot(&st, i), slot(&st, 1 - i))
    };
    let my_index = st.jobs[&id].alloc().unwrap().devices[0].index;
    // The other device is nobody's: its load goes to no job.
    assert_eq!(
        st.observe_load(other, Vendor::Nv, 1 - my_index, &load(0, 0), 0, RULE),
        None
    );
    // Busy, then idle from t=100: flagged at 700, once.
    assert_eq!(
        st.observe_load(mine, Vendor::Nv, my_index, &load(90, 4 << 30), 0, RULE),
        None
    );
    assert_eq!(
        st.observe_load(mine, Vendor::Nv, my_index, &load(2, 6 << 30), 100, RULE),
        None
    );
    let (who, _, change) = st
        .observe_load(mine, Vendor::Nv, my_index, &load(0, 1 << 30), 700, RULE)
        .expect("flagged");
    assert_eq!(who, id);
    assert_eq!(
        change,
        IdleChange::First {
            slot: mine,
            idle_secs: 600
        }
    );
    assert_eq!(
        st.observe_load(mine, Vendor::Nv, my_index, &load(0, 1 << 30), 710, RULE),
        None,
        "reported once"
    );
    let j = &st.jobs[&id];
    assert_eq!(j.flag(), Some("IdleGPU"));
    let g = j.gpu_use().unwrap();
    assert_eq!(
        (g.util_reads, g.util_peak, g.mem_peak),
        (4, 90, Some(6 << 30))
    );
    // GetJob's dict (xqueue ID, --json) says so.
    let m = crate::daemon::bus::wire_job::job_dict(j, None, true);
    assert_eq!(
        f64::try_from(&*m["gpu_util_mean"]).unwrap(),
        (90.0 + 2.0 + 0.0 + 0.0) / 4.0
    );
    assert_eq!(u64::try_from(&*m["gpu_mem_peak"]).unwrap(), 6 << 30);
    assert_eq!(<&str>::try_from(&*m["flag"]).unwrap(), "IdleGPU");
    let unit = j.unit();
    drop(st);

    // Its end keeps the figures (not the flag, which is of a running job),
    // on disk too, and gives its CPU efficiency.
    d.systemd.end(&unit, "success", 1, 0);
    d.reconcile(id).await;
    let j = wait_state(&d, id, JobState::Completed).await;
    assert_eq!(j.flag(), None);
    assert_eq!(j.gpu_use().unwrap().util_peak, 90);
    assert!(j.cpu_efficiency().is_some());
    drop(d);
    let (d, _c) = daemon_of(
        dir.path(),
        MemoryUnits::default(),
        two_gpus(),
        |_| {},
        |_| {},
    )
    .await;
    let again = job(&d, id).await;
    let g = again.gpu_use().expect("kept with the job's end");
    assert_eq!(
        (g.util_reads, g.util_peak, g.mem_peak),
        (4, 90, Some(6 << 30))
    );
}
