//! Each device's load (busy percent, memory used of total) from NVML and from
//! T-Head's HGML, which copies it, against the simulated libraries.

mod accel_rig;
use accel_rig::{loads, Rig};
use xlurm::accel::Load;
use xlurm::core::Vendor;

#[test]
fn nvml_reports_utilization_and_memory_and_a_failed_part_is_left_out() {
    let rig = Rig::new();
    rig.state(
        "device util=73 mem_used=4294967296 mem_total=85899345920\n\
         device util=250\n",
    );
    let lib = rig.lib("fake_nvml.c", "libnvidia-ml.so.1", &[]);
    let (backend, devices) = rig.one(Vendor::Nv, &lib);
    let got = loads(&*backend, &devices);
    assert_eq!(
        got[0],
        Load {
            util_pct: Some(73),
            mem_used: Some(4 << 30),
            mem_total: Some(80 << 30),
        }
    );
    // A percentage over 100 is kept to 100; the default memory is 0 of 16 GiB.
    assert_eq!(got[1].util_pct, Some(100));
    assert_eq!(
        (got[1].mem_used, got[1].mem_total),
        (Some(0), Some(16 << 30))
    );

    // The load changes between polls; a failing part is None, the rest stays.
    rig.state("device util=5 mem_used=1024 fail=util:999\ndevice fail=mem:999\n");
    let got = loads(&*backend, &devices);
    assert_eq!(got[0].util_pct, None);
    assert_eq!(got[0].mem_used, Some(1024));
    assert_eq!(got[1].util_pct, Some(0));
    assert_eq!((got[1].mem_used, got[1].mem_total), (None, None));
    // The device itself is still known: load never makes it unknown.
    let polls = backend.poll(&devices).unwrap();
    assert!(polls.iter().all(|p| p.uuid.is_ok() && p.processes.is_ok()));
}

#[test]
fn an_nvml_without_the_load_functions_still_works_with_no_load() {
    let rig = Rig::new();
    rig.state("device util=50 mem_used=10\n");
    let lib = rig.lib(
        "fake_nvml.c",
        "libnvidia-ml.so.1",
        &["OMIT_DeviceGetUtilizationRates", "OMIT_DeviceGetMemoryInfo"],
    );
    let (backend, devices) = rig.one(Vendor::Nv, &lib);
    assert_eq!(loads(&*backend, &devices), [Load::default()]);
}

#[test]
fn hgml_reports_the_same_under_its_names() {
    let rig = Rig::new();
    rig.state("device uuid=PPU-0 util=12 mem_used=2048 mem_total=4096\n");
    rig.dev_nodes(&["alixpu_ppu0"]);
    let lib = rig.lib("fake_hgml.c", "libhgml.so", &[]);
    let (backend, devices) = rig.one(Vendor::Ppu, &lib);
    assert_eq!(
        loads(&*backend, &devices),
        [Load {
            util_pct: Some(12),
            mem_used: Some(2048),
            mem_total: Some(4096),
        }]
    );
}
