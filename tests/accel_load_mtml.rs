//! Each Moore Threads device's load from MTML (the GPU sub-object's utilization, the
//! memory sub-object's total and used bytes), against the simulated library.

mod accel_rig;
use accel_rig::{loads, polls, Rig};
use xlurm::accel::{Backend, DiscoveredDevice, Load};
use xlurm::core::Vendor;

const STATE: &str = "\
device uuid=MTT-0 bdf=0000:1a:00.0 util=73 mem_used=4294967296 mem_total=51539607552
device uuid=MTT-1 bdf=0000:1b:00.0 util=250 mem_used=1000
";

/// Two devices with their PCI, DRM and /dev nodes, and the library built with `defines`.
fn machine(rig: &Rig, defines: &[&str]) -> (std::sync::Arc<dyn Backend>, Vec<DiscoveredDevice>) {
    rig.pci("0000:1a:00.0", 0, &["renderD128", "card0"]);
    rig.pci("0000:1b:00.0", 1, &["renderD129", "card1"]);
    rig.dev_nodes(&["mtgpu.0", "mtgpu.1"]);
    rig.state(STATE);
    let lib = rig.lib("fake_mtml.c", "libmtml.so", defines);
    rig.one(Vendor::Mtt, &lib)
}

const FIRST: Load = Load {
    util_pct: Some(73),
    mem_used: Some(4 << 30),
    mem_total: Some(48 << 30),
};

#[test]
fn mtml_reports_gpu_utilization_and_memory_and_frees_what_it_opens() {
    let rig = Rig::new();
    let (backend, devices) = machine(&rig, &[]);
    let second = Load {
        util_pct: Some(100), // 250 kept to 100
        mem_used: Some(1000),
        mem_total: Some(16 << 30),
    };
    assert_eq!(loads(&*backend, &devices), [FIRST, second]);
    // The fake refuses a GPU or memory object that was not freed: the same again.
    assert_eq!(loads(&*backend, &devices), [FIRST, second]);

    // A failing query is None and the rest stays; the devices stay known.
    rig.process(50, "/user.slice", &["/dev/mtgpu.0"]);
    rig.state(
        &STATE
            .replace("util=73", "util=73 fail=util:999")
            .replace("util=250", "util=5 fail=mem:2"),
    );
    let got = polls(&*backend, &devices);
    assert_eq!(
        got[0].load,
        Load {
            util_pct: None,
            ..FIRST
        }
    );
    assert_eq!(
        got[1].load,
        Load {
            util_pct: Some(5),
            mem_used: None,
            mem_total: None,
        }
    );
    assert_eq!(got[0].uuid.as_deref(), Ok("MTT-0"));
    assert_eq!(got[1].uuid.as_deref(), Ok("MTT-1"));
    assert_eq!(got[0].processes, Ok(vec![50]));
    assert_eq!(got[1].processes, Ok(vec![]));

    // Sub-objects that cannot be opened: no load, device still known.
    rig.state(
        &STATE
            .replace("util=73", "util=73 fail=gpu:4,memory:4")
            .replace("util=250", "util=250 fail=memory:2"),
    );
    let got = polls(&*backend, &devices);
    assert_eq!(got[0].load, Load::default());
    assert_eq!(
        got[1].load,
        Load {
            util_pct: Some(100),
            mem_used: None,
            mem_total: None,
        }
    );
    assert_eq!(got[0].uuid.as_deref(), Ok("MTT-0"));

    // And after failures, everything was freed: all of it comes back.
    rig.state(STATE);
    assert_eq!(loads(&*backend, &devices), [FIRST, second]);
}

#[test]
fn an_mtml_without_the_load_functions_still_works_with_no_load() {
    let rig = Rig::new();
    let (backend, devices) = machine(
        &rig,
        &[
            "OMIT_mtmlDeviceInitGpu",
            "OMIT_mtmlDeviceFreeGpu",
            "OMIT_mtmlGpuGetUtilization",
            "OMIT_mtmlDeviceInitMemory",
            "OMIT_mtmlDeviceFreeMemory",
            "OMIT_mtmlMemoryGetTotal",
            "OMIT_mtmlMemoryGetUsed",
        ],
    );
    let got = polls(&*backend, &devices);
    assert_eq!(got[0].load, Load::default());
    assert_eq!(got[1].load, Load::default());
    assert_eq!(got[0].uuid.as_deref(), Ok("MTT-0"));
}

#[test]
fn an_mtml_sub_object_is_used_only_with_all_its_functions() {
    // Without mtmlDeviceFreeGpu a GPU object would leak at every poll: not used.
    let rig = Rig::new();
    let (backend, devices) = machine(&rig, &["OMIT_mtmlDeviceFreeGpu"]);
    assert_eq!(
        loads(&*backend, &devices)[0],
        Load {
            util_pct: None,
            ..FIRST
        }
    );

    // Without mtmlMemoryGetUsed there is no memory load, the GPU's stays.
    let rig = Rig::new();
    let (backend, devices) = machine(&rig, &["OMIT_mtmlMemoryGetUsed"]);
    assert_eq!(
        loads(&*backend, &devices)[0],
        Load {
            util_pct: Some(73),
            mem_used: None,
            mem_total: None,
        }
    );
}
