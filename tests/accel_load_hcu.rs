//! Each Hygon HCU's load from its ROCm SMI (busy percent, VRAM used and total in
//! bytes), against the simulated library (health from the fake hy-smi).

mod accel_rig;
use accel_rig::{loads, polls, Rig};
use xlurm::accel::{Backend, Condition, DiscoveredDevice, Load};
use xlurm::core::Vendor;

const STATE: &str = "\
device uuid=0x1111aaaa bdf=0000:9a:00.0 procs=300 util=73 mem_used=4294967296 mem_total=68719476736
device uuid=0x2222bbbb bdf=0000:9b:00.0 util=250 mem_used=12345
";

fn machine(rig: &Rig, defines: &[&str]) -> (std::sync::Arc<dyn Backend>, Vec<DiscoveredDevice>) {
    rig.pci("0000:9a:00.0", 1, &["renderD128", "card0"]);
    rig.pci("0000:9b:00.0", 1, &["renderD129", "card1"]);
    rig.state(STATE);
    let lib = rig.lib("fake_rocm_smi.c", "librocm_smi64.so", defines);
    rig.compile("fake_hy_smi.c", "hy-smi", &[], true);
    rig.one(Vendor::Hcu, &lib)
}

const FIRST: Load = Load {
    util_pct: Some(73),
    mem_used: Some(4 << 30),
    mem_total: Some(64 << 30),
};

#[test]
fn hcu_reports_busy_percent_and_vram() {
    let rig = Rig::new();
    let (backend, devices) = machine(&rig, &[]);
    assert_eq!(
        loads(&*backend, &devices),
        [
            FIRST,
            Load {
                util_pct: Some(100), // 250 kept to 100
                mem_used: Some(12345),
                mem_total: Some(16 << 30),
            }
        ]
    );

    // A failing part is None and the rest stays; the devices stay known and healthy.
    rig.state(
        &STATE
            .replace("util=73", "util=73 fail=util:2")
            .replace("util=250", "util=8 fail=mem:2"),
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
            util_pct: Some(8),
            mem_used: None,
            mem_total: None,
        }
    );
    assert_eq!(got[0].uuid.as_deref(), Ok("0x1111aaaa"));
    assert_eq!(got[1].uuid.as_deref(), Ok("0x2222bbbb"));
    assert_eq!(got[0].processes, Ok(vec![300]));
    assert_eq!(got[1].processes, Ok(vec![]));
    assert!(got.iter().all(|p| p.condition == Ok(Condition::Healthy)));
}

#[test]
fn an_hcu_smi_without_the_load_functions_still_works_with_no_load() {
    let rig = Rig::new();
    let (backend, devices) = machine(
        &rig,
        &[
            "OMIT_rsmi_dev_busy_percent_get",
            "OMIT_rsmi_dev_memory_total_get",
            "OMIT_rsmi_dev_memory_usage_get",
        ],
    );
    let got = polls(&*backend, &devices);
    assert_eq!(got[0].load, Load::default());
    assert_eq!(got[1].load, Load::default());
    assert_eq!(got[0].uuid.as_deref(), Ok("0x1111aaaa"));
    assert_eq!(got[0].processes, Ok(vec![300]));

    // Without the usage query there is no memory load; the busy percent stays.
    let rig = Rig::new();
    let (backend, devices) = machine(&rig, &["OMIT_rsmi_dev_memory_usage_get"]);
    assert_eq!(
        loads(&*backend, &devices)[0],
        Load {
            util_pct: Some(73),
            mem_used: None,
            mem_total: None,
        }
    );
}
