//! Each Ascend chip's load from DCMI (the AI Core busy percent and the on-chip memory,
//! which DCMI reports in MB), through the v2 API and the v1 fallback, against the
//! simulated library.

mod accel_rig;
use accel_rig::{loads, polls, Rig};
use xlurm::accel::{Condition, Load};
use xlurm::core::Vendor;

const MIB: u64 = 1 << 20;

const TWO_CHIPS: &str = "\
device uuid=11111111-22222222-33333333-44444444-00000001 bdf=0000:c1:00.0 minor=4 procs=900 util=73 mem_used=4294967296 mem_total=68719476736
device uuid=11111111-22222222-33333333-44444444-00000002 bdf=0000:c2:00.0 minor=5 util=250 mem_used=3145729
";

#[test]
fn dcmi_v2_reports_the_ai_core_rate_and_hbm_converted_from_mib() {
    let rig = Rig::new();
    rig.state(TWO_CHIPS);
    let lib = rig.lib("fake_dcmi.c", "libdcmi.so", &[]);
    let (backend, devices) = rig.one(Vendor::Asc, &lib);
    assert_eq!(backend.api(), "DCMI v2 (dcmiv2_*)");
    let got = loads(&*backend, &devices);
    assert_eq!(
        got[0],
        Load {
            util_pct: Some(73),
            mem_used: Some(4 << 30),
            mem_total: Some(64 << 30),
        }
    );
    // Over 100 is kept to 100; DCMI's whole MB (3 MiB + 1 byte is 3 MB), and the
    // default 16 GiB in all.
    assert_eq!(
        got[1],
        Load {
            util_pct: Some(100),
            mem_used: Some(3 * MIB),
            mem_total: Some(16 << 30),
        }
    );

    // A failing part is None and the rest stays; the chips stay known and healthy.
    rig.state(
        &TWO_CHIPS
            .replace("util=73", "util=73 fail=util:-8255")
            .replace("util=250", "util=40 fail=mem:-8005"),
    );
    let polls = polls(&*backend, &devices);
    assert_eq!(
        polls[0].load,
        Load {
            util_pct: None,
            mem_used: Some(4 << 30),
            mem_total: Some(64 << 30),
        }
    );
    assert_eq!(
        polls[1].load,
        Load {
            util_pct: Some(40),
            mem_used: None,
            mem_total: None,
        }
    );
    assert_eq!(
        polls[0].uuid.as_deref(),
        Ok("11111111-22222222-33333333-44444444-00000001")
    );
    assert_eq!(polls[0].processes, Ok(vec![900]));
    assert_eq!(
        polls[1].uuid.as_deref(),
        Ok("11111111-22222222-33333333-44444444-00000002")
    );
    assert_eq!(polls[1].processes, Ok(vec![]));
    assert!(polls.iter().all(|p| p.condition == Ok(Condition::Healthy)));
}

#[test]
fn dcmi_v1_asks_each_chip_by_its_card_and_chip() {
    let rig = Rig::new();
    // Logical ids 0, 1, 2 are card 3 chip 0, card 3 chip 1 and card 6 chip 0.
    rig.state(
        "device uuid=A-1 card=3 chip=0 minor=0 bdf=0000:81:00.0 util=10 mem_used=1048576 mem_total=33554432\n\
         device uuid=A-2 card=3 chip=1 minor=1 bdf=0000:82:00.0 util=20 mem_used=2097152 mem_total=33554432\n\
         device uuid=A-3 card=6 chip=0 minor=4 bdf=0000:83:00.0 util=30 mem_used=0 mem_total=67108864\n",
    );
    let lib = rig.lib("fake_dcmi.c", "libdcmi-v1.so", &["NO_DCMIV2"]);
    let (backend, devices) = rig.one(Vendor::Asc, &lib);
    assert_eq!(backend.api(), "DCMI v1 (dcmi_*)");
    assert_eq!(
        loads(&*backend, &devices),
        [
            Load {
                util_pct: Some(10),
                mem_used: Some(MIB),
                mem_total: Some(32 * MIB),
            },
            Load {
                util_pct: Some(20),
                mem_used: Some(2 * MIB),
                mem_total: Some(32 * MIB),
            },
            Load {
                util_pct: Some(30),
                mem_used: Some(0),
                mem_total: Some(64 * MIB),
            },
        ]
    );
}

#[test]
fn a_dcmi_without_the_load_functions_keeps_its_api_and_reports_no_load() {
    let rig = Rig::new();
    rig.state(TWO_CHIPS);
    let v2 = rig.lib(
        "fake_dcmi.c",
        "libdcmi-noload.so",
        &[
            "OMIT_dcmiv2_get_device_utilization_rate",
            "OMIT_dcmiv2_get_device_hbm_info",
            "OMIT_dcmi_get_device_utilization_rate",
            "OMIT_dcmi_get_device_hbm_info",
        ],
    );
    let (backend, devices) = rig.one(Vendor::Asc, &v2);
    assert_eq!(backend.api(), "DCMI v2 (dcmiv2_*)");
    let polls = polls(&*backend, &devices);
    assert!(polls.iter().all(|p| p.load == Load::default()));
    assert_eq!(polls[0].processes, Ok(vec![900]));

    // Only the HBM query missing: the busy percent still comes.
    let no_hbm = rig.lib(
        "fake_dcmi.c",
        "libdcmi-nohbm.so",
        &["OMIT_dcmiv2_get_device_hbm_info"],
    );
    let (backend, devices) = rig.one(Vendor::Asc, &no_hbm);
    assert_eq!(
        loads(&*backend, &devices)[0],
        Load {
            util_pct: Some(73),
            mem_used: None,
            mem_total: None,
        }
    );

    // The v1 fallback without them.
    let v1 = rig.lib(
        "fake_dcmi.c",
        "libdcmi-v1-noload.so",
        &[
            "NO_DCMIV2",
            "OMIT_dcmi_get_device_utilization_rate",
            "OMIT_dcmi_get_device_hbm_info",
        ],
    );
    let (backend, devices) = rig.one(Vendor::Asc, &v1);
    assert_eq!(backend.api(), "DCMI v1 (dcmi_*)");
    assert_eq!(loads(&*backend, &devices), [Load::default(); 2]);
}
