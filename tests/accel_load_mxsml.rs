//! Each MetaX device's load from MXSML: the extension API's utilization and memory
//! (bytes), else the base API's compute-core usage and VRAM (KB), against the simulated
//! library.

mod accel_rig;
use accel_rig::{loads, polls, Rig};
use xlurm::accel::{Backend, Condition, DiscoveredDevice, Load};
use xlurm::core::Vendor;

/// 1 GiB and 100 bytes used: exact from the extension API, 1 GiB in the base API's KB.
const STATE: &str = "\
device uuid=MX-A bdf=0000:4a:00.0 procs=70 util=73 mem_used=1073741924 mem_total=68719476736
device uuid=MX-B bdf=0000:4b:00.0 util=250
";

fn machine(rig: &Rig, defines: &[&str]) -> (std::sync::Arc<dyn Backend>, Vec<DiscoveredDevice>) {
    rig.pci("0000:4a:00.0", 1, &["renderD131", "card3"]);
    rig.pci("0000:4b:00.0", 1, &["renderD132", "card4"]);
    rig.state(STATE);
    let lib = rig.lib("fake_mxsml.c", "libmxsml.so", defines);
    rig.one(Vendor::Mx, &lib)
}

const SECOND: Load = Load {
    util_pct: Some(100), // 250 kept to 100
    mem_used: Some(0),
    mem_total: Some(16 << 30),
};

#[test]
fn mxsml_reports_the_extension_apis_utilization_and_memory() {
    let rig = Rig::new();
    let (backend, devices) = machine(&rig, &[]);
    let first = Load {
        util_pct: Some(73),
        mem_used: Some((1 << 30) + 100),
        mem_total: Some(64 << 30),
    };
    assert_eq!(loads(&*backend, &devices), [first, SECOND]);

    // A failing part is None and the rest stays; the devices stay known and healthy.
    rig.state(
        &STATE
            .replace("util=73", "util=73 fail=util:3")
            .replace("util=250", "util=9 fail=mem:3"),
    );
    let got = polls(&*backend, &devices);
    assert_eq!(
        got[0].load,
        Load {
            util_pct: None,
            ..first
        }
    );
    assert_eq!(
        got[1].load,
        Load {
            util_pct: Some(9),
            mem_used: None,
            mem_total: None,
        }
    );
    assert_eq!(got[0].uuid.as_deref(), Ok("MX-A"));
    assert_eq!(got[1].uuid.as_deref(), Ok("MX-B"));
    assert_eq!(got[0].processes, Ok(vec![70]));
    assert_eq!(got[1].processes, Ok(vec![]));
    assert!(got.iter().all(|p| p.condition == Ok(Condition::Healthy)));
}

#[test]
fn without_the_extension_load_functions_the_base_api_answers_in_kb() {
    let rig = Rig::new();
    let (backend, devices) = machine(
        &rig,
        &[
            "OMIT_mxSmlExDeviceGetUtilization",
            "OMIT_mxSmlExDeviceGetMemoryInfo",
        ],
    );
    assert_eq!(
        loads(&*backend, &devices),
        [
            Load {
                util_pct: Some(73),
                mem_used: Some(1 << 30),
                mem_total: Some(64 << 30),
            },
            SECOND
        ]
    );
    rig.state(&STATE.replace("util=73", "util=73 fail=util:1,mem:6"));
    let got = polls(&*backend, &devices);
    assert_eq!(got[0].load, Load::default());
    assert_eq!(got[0].uuid.as_deref(), Ok("MX-A"));
    assert_eq!(got[1].load, SECOND);

    // Only the extension's utilization missing: the base API's busy percent, the
    // extension API's exact memory.
    let rig = Rig::new();
    let (backend, devices) = machine(&rig, &["OMIT_mxSmlExDeviceGetUtilization"]);
    assert_eq!(
        loads(&*backend, &devices)[0],
        Load {
            util_pct: Some(73),
            mem_used: Some((1 << 30) + 100),
            mem_total: Some(64 << 30),
        }
    );
}

#[test]
fn an_mxsml_without_any_load_function_reports_no_load() {
    let rig = Rig::new();
    let (backend, devices) = machine(
        &rig,
        &[
            "OMIT_mxSmlExDeviceGetUtilization",
            "OMIT_mxSmlExDeviceGetMemoryInfo",
            "OMIT_mxSmlGetDeviceIpUsage",
            "OMIT_mxSmlGetMemoryInfo",
        ],
    );
    let got = polls(&*backend, &devices);
    assert_eq!(got[0].load, Load::default());
    assert_eq!(got[1].load, Load::default());
    assert_eq!(got[0].uuid.as_deref(), Ok("MX-A"));
    assert_eq!(got[0].processes, Ok(vec![70]));
}
