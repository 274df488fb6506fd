//! The other vendors: Ascend (DCMI v2 and v1), Moore Threads (MTML), MetaX
//! (MXSML), T-Head PPU (HGML), Hygon HCU (with its health tool).

use super::*;

const ASC_V2: &str = "\
device uuid=11111111-22222222-33333333-44444444-00000001 bdf=0000:c1:00.0 minor=4
device uuid=11111111-22222222-33333333-44444444-00000002 bdf=0000:c2:00.0 minor=5
";

#[test]
fn dcmi_v2_discovery_poll_and_env() {
    let rig = Rig::new();
    rig.pci("0000:c1:00.0", 2, &[]);
    rig.state(ASC_V2);
    let lib = rig.lib("fake_dcmi.c", "libdcmi.so", &[]);
    let (backend, devices) = rig.one(Vendor::Asc, &lib);
    assert_eq!(backend.api(), "DCMI v2 (dcmiv2_*)");
    assert_eq!(devices.len(), 2);
    assert_eq!(
        devices[0].uuid,
        "11111111-22222222-33333333-44444444-00000001"
    );
    assert_eq!(devices[0].pci_bdf.as_deref(), Some("0000:c1:00.0"));
    assert_eq!(devices[0].numa_node, Some(2));
    assert_eq!(devices[1].numa_node, None);
    assert_eq!(
        devices[1].device_nodes,
        paths(&[
            "/dev/davinci5",
            "/dev/davinci_manager",
            "/dev/devmm_svm",
            "/dev/hisi_hdc"
        ])
    );
    let env = env_map(Some(Vendor::Asc), &[&devices[1], &devices[0]]);
    assert_eq!(env["ASCEND_RT_VISIBLE_DEVICES"], "0,1");
    assert_eq!(env["CUDA_VISIBLE_DEVICES"], NONE_VISIBLE);
    assert!(!env.contains_key("CUDA_DEVICE_ORDER"));

    assert_eq!(
        rig.health(&*backend, &devices, &[]),
        vec![Health::Ok, Health::Ok]
    );
    rig.process(900, "/xlurm.slice/xlurm-job-3.service", &[]);
    rig.state(&ASC_V2.replace("minor=4", "minor=4 procs=900,901"));
    assert_eq!(
        rig.health(&*backend, &devices, &[(0, 3)])[0],
        Health::Busy { processes: 1 }
    );
    rig.state(&ASC_V2.replace("minor=4", "minor=4 procs=900"));
    assert_eq!(rig.health(&*backend, &devices, &[(0, 3)])[0], Health::Ok);

    rig.state(&ASC_V2.replace("minor=5", "minor=5 health=2 fail=procs:-8001"));
    let h = rig.health(&*backend, &devices, &[]);
    let e = unhealthy(&h[1]);
    assert!(
        e.contains("dcmiv2_get_device_health(1)") && e.contains("health code 2"),
        "{e}"
    );

    rig.state(&ASC_V2.replace("minor=4", "minor=4 fail=procs:-8001"));
    let e = unknown(&rig.health(&*backend, &devices, &[])[0]).to_string();
    assert!(
        e.contains("dcmiv2_get_device_proc_mem_info(0)") && e.contains("-8001"),
        "{e}"
    );

    rig.state(&ASC_V2.replace("00000002", "00000009"));
    let e = unknown(&rig.health(&*backend, &devices, &[])[1]).to_string();
    assert!(e.contains("changed") && e.contains("00000009"), "{e}");
}

#[test]
fn dcmi_falls_back_to_v1_with_multi_chip_cards() {
    let rig = Rig::new();
    let state = "\
device uuid=A-1 card=3 chip=0 minor=0 bdf=0000:81:00.0
device uuid=A-2 card=3 chip=1 minor=1 bdf=0000:82:00.0 procs=12
device uuid=A-3 card=6 chip=0 minor=4 bdf=0000:83:00.0 health=1
";
    rig.state(state);
    let v1 = rig.lib("fake_dcmi.c", "libdcmi-v1.so", &["NO_DCMIV2"]);
    let (backend, devices) = rig.one(Vendor::Asc, &v1);
    assert_eq!(backend.api(), "DCMI v1 (dcmi_*)");
    let summary: Vec<(u32, &str)> = devices.iter().map(|d| (d.index, d.uuid.as_str())).collect();
    assert_eq!(
        summary,
        vec![
            (0, "0000000A-00000001-00000000-00000000-00000000"),
            (1, "0000000A-00000002-00000000-00000000-00000000"),
            (2, "0000000A-00000003-00000000-00000000-00000000")
        ]
    );
    assert_eq!(devices[2].device_nodes[0], PathBuf::from("/dev/davinci4"));
    let h = rig.health(&*backend, &devices, &[]);
    assert_eq!(h[0], Health::Ok);
    assert_eq!(h[1], Health::Busy { processes: 1 });
    assert!(unhealthy(&h[2]).contains("dcmi_get_device_health(6, 0)"));
    let env = env_map(Some(Vendor::Asc), &[&devices[1], &devices[2]]);
    assert_eq!(env["ASCEND_RT_VISIBLE_DEVICES"], "1,2");

    // A v2 API missing one function also falls back to v1.
    let partial = rig.lib(
        "fake_dcmi.c",
        "libdcmi-partial.so",
        &["OMIT_dcmiv2_get_device_health"],
    );
    let (backend, _) = rig.one(Vendor::Asc, &partial);
    assert_eq!(backend.api(), "DCMI v1 (dcmi_*)");

    // Neither API complete: the error names what each lacks.
    let broken = rig.lib(
        "fake_dcmi.c",
        "libdcmi-broken.so",
        &["NO_DCMIV2", "OMIT_dcmi_get_device_resource_info"],
    );
    let config = rig.config(BackendChoice::Only(Vendor::Asc), &[(Vendor::Asc, &broken)]);
    let text = select(&config).unwrap_err().to_string();
    assert!(
        text.contains("dcmiv2_init")
            && text.contains("dcmi_get_device_resource_info")
            && text.contains("libdcmi-broken.so"),
        "{text}"
    );
}

#[test]
fn mtml_discovery_processes_from_proc_and_errors() {
    let rig = Rig::new();
    rig.pci("0000:1a:00.0", 0, &["renderD128", "card0"]);
    rig.pci("0000:1b:00.0", 1, &["renderD129", "card1"]);
    let state = "device uuid=MTT-0 bdf=0000:1a:00.0\ndevice uuid=MTT-1 bdf=0000:1b:00.0\n";
    rig.state(state);
    rig.dev_nodes(&["mtgpu.0", "mtgpu.1"]);
    let lib = rig.lib("fake_mtml.c", "libmtml.so", &[]);
    let (backend, devices) = rig.one(Vendor::Mtt, &lib);
    assert_eq!(devices.len(), 2);
    assert_eq!(devices[1].numa_node, Some(1));
    assert_eq!(
        devices[1].device_nodes,
        paths(&["/dev/mtgpu.1", "/dev/dri/renderD129", "/dev/dri/card1"])
    );
    let env = env_map(Some(Vendor::Mtt), &[&devices[1], &devices[0]]);
    assert_eq!(env["MTHREADS_VISIBLE_DEVICES"], "MTT-0,MTT-1");
    assert_eq!(env["MUSA_VISIBLE_DEVICES"], "0,1");
    assert_eq!(env["CUDA_VISIBLE_DEVICES"], NONE_VISIBLE);
    assert_eq!(
        device_allow(&devices, &[devices[0].device_ref()]).unwrap(),
        paths(&["/dev/dri/card0", "/dev/dri/renderD128", "/dev/mtgpu.0"])
    );

    assert_eq!(
        rig.health(&*backend, &devices, &[]),
        vec![Health::Ok, Health::Ok]
    );
    rig.process(
        50,
        "/xlurm.slice/xlurm-job-1.service",
        &["/dev/null", "/dev/dri/renderD129"],
    );
    rig.process(51, "/user.slice", &["/dev/mtgpu.1"]);
    rig.process(52, "/user.slice", &["/dev/dri/renderD130"]);
    // A process whose descriptors cannot be listed is skipped, not a failed query.
    std::fs::create_dir_all(rig.proc().join("53")).unwrap();
    std::fs::write(rig.proc().join("53/fd"), "unreadable").unwrap();
    assert_eq!(
        rig.health(&*backend, &devices, &[(1, 1)]),
        vec![Health::Ok, Health::Busy { processes: 1 }]
    );
    assert_eq!(
        rig.health(&*backend, &devices, &[]),
        vec![Health::Ok, Health::Busy { processes: 2 }]
    );

    rig.state(&state.replace("MTT-0", "MTT-9"));
    assert!(unknown(&rig.health(&*backend, &devices, &[])[0]).contains("MTT-9"));
    rig.state(&state.replace("bdf=0000:1a:00.0", "bdf=0000:1a:00.0 fail=uuid:2"));
    let e = unknown(&rig.health(&*backend, &devices, &[])[0]).to_string();
    assert!(
        e.contains("mtmlDeviceGetUUID(0)") && e.contains("MTML_ERROR_DRIVER_FAILURE (2)"),
        "{e}"
    );

    // No /proc at all: the process query fails, the devices are unknown.
    rig.state(state);
    let mut config = rig.config(BackendChoice::Only(Vendor::Mtt), &[(Vendor::Mtt, &lib)]);
    config.proc_root = rig.path("no-proc");
    let active = select(&config).unwrap().active.remove(0);
    let poll = active.backend.poll(&active.devices);
    let h = assess_all(&active.devices, &poll, |_| None, |_| None);
    assert!(
        unknown(&h[0]).contains("open handles of mtt device 0")
            && unknown(&h[0]).contains("no-proc"),
        "{h:?}"
    );

    // The node mtmlDeviceGetGpuPath names is the device's node, and must exist.
    rig.state(&state.replace("bdf=0000:1b:00.0", "bdf=0000:1b:00.0 node=/dev/mtgpu_x1"));
    let config = rig.config(BackendChoice::Only(Vendor::Mtt), &[(Vendor::Mtt, &lib)]);
    let text = select(&config).unwrap_err().to_string();
    assert!(
        text.contains("device 1")
            && text.contains("/dev/mtgpu_x1")
            && text.contains("kernel driver"),
        "{text}"
    );
    rig.dev_nodes(&["mtgpu_x1"]);
    let (_, found) = rig.one(Vendor::Mtt, &lib);
    assert_eq!(found[1].device_nodes[0], PathBuf::from("/dev/mtgpu_x1"));
    rig.state(&state.replace("bdf=0000:1b:00.0", "bdf=0000:1b:00.0 node=mtgpu.1"));
    let text = select(&config).unwrap_err().to_string();
    assert!(text.contains("not a device node under /dev"), "{text}");
    // A device for which the call is not supported: /dev/mtgpu.<index>.
    rig.state(&state.replace("bdf=0000:1b:00.0", "bdf=0000:1b:00.0 fail=path:4"));
    let (_, found) = rig.one(Vendor::Mtt, &lib);
    assert_eq!(found[1].device_nodes[0], PathBuf::from("/dev/mtgpu.1"));
    // Any other failure of the call is an error naming it.
    rig.state(&state.replace("bdf=0000:1b:00.0", "bdf=0000:1b:00.0 fail=path:2"));
    let text = select(&config).unwrap_err().to_string();
    assert!(
        text.contains("mtmlDeviceGetGpuPath(1)") && text.contains("MTML_ERROR_DRIVER_FAILURE"),
        "{text}"
    );
    // Without mtmlDeviceGetGpuPath: /dev/mtgpu.<index>, which must exist too.
    let no_path = rig.lib(
        "fake_mtml.c",
        "libmtml-nopath.so",
        &["OMIT_mtmlDeviceGetGpuPath"],
    );
    rig.state(&format!("{state}device uuid=MTT-2 bdf=0000:1b:00.0\n"));
    let config = rig.config(BackendChoice::Only(Vendor::Mtt), &[(Vendor::Mtt, &no_path)]);
    let text = select(&config).unwrap_err().to_string();
    assert!(text.contains("/dev/mtgpu.2"), "{text}");
    rig.state(state);
    let (_, found) = rig.one(Vendor::Mtt, &no_path);
    assert_eq!(found[1].device_nodes[0], PathBuf::from("/dev/mtgpu.1"));

    // No render node in sysfs: the device could not be fenced in, so discovery fails.
    rig.state("device uuid=MTT-0 bdf=0000:77:00.0\n");
    let config = rig.config(BackendChoice::Only(Vendor::Mtt), &[(Vendor::Mtt, &lib)]);
    let text = select(&config).unwrap_err().to_string();
    assert!(
        text.contains("0000:77:00.0") && text.contains("mtt"),
        "{text}"
    );

    let lib = rig.lib(
        "fake_mtml.c",
        "libmtml-old.so",
        &["OMIT_mtmlLibraryFreeDevice"],
    );
    let config = rig.config(BackendChoice::Only(Vendor::Mtt), &[(Vendor::Mtt, &lib)]);
    let text = select(&config).unwrap_err().to_string();
    assert!(
        text.contains("mtmlLibraryFreeDevice") && text.contains("libmtml-old.so"),
        "{text}"
    );
}

#[test]
fn mxsml_discovery_unavailable_busy_and_errors() {
    let rig = Rig::new();
    rig.pci("0000:4a:00.0", 1, &["renderD131", "card3"]);
    rig.pci("0000:4b:00.0", 1, &["renderD132", "card4"]);
    let state = "device uuid=MX-A bdf=0000:4a:00.0\ndevice uuid=MX-B bdf=0000:4b:00.0\n";
    rig.state(state);
    let lib = rig.lib("fake_mxsml.c", "libmxsml.so", &[]);
    let (backend, devices) = rig.one(Vendor::Mx, &lib);
    assert_eq!(devices[0].numa_node, Some(1));
    assert_eq!(
        devices[0].device_nodes,
        paths(&["/dev/mxcd", "/dev/dri/renderD131", "/dev/dri/card3"])
    );
    let env = env_map(Some(Vendor::Mx), &[&devices[1]]);
    assert_eq!(env["CUDA_VISIBLE_DEVICES"], "1");
    assert_eq!(env["MACA_VISIBLE_DEVICES"], "1");
    assert_eq!(env["HIP_VISIBLE_DEVICES"], NONE_VISIBLE);

    assert_eq!(
        rig.health(&*backend, &devices, &[]),
        vec![Health::Ok, Health::Ok]
    );
    rig.state(&state.replace(
        "bdf=0000:4b:00.0",
        "bdf=0000:4b:00.0 health=3 reason=ECC_uncorrectable",
    ));
    let e = unhealthy(&rig.health(&*backend, &devices, &[])[1]).to_string();
    assert!(
        e.contains("code 3") && e.contains("ECC_uncorrectable"),
        "{e}"
    );

    rig.process(70, "/xlurm.slice/xlurm-job-2.service", &[]);
    rig.state(&state.replace("bdf=0000:4a:00.0", "bdf=0000:4a:00.0 procs=70,71"));
    assert_eq!(
        rig.health(&*backend, &devices, &[(0, 2)])[0],
        Health::Busy { processes: 1 }
    );
    rig.state(&state.replace("bdf=0000:4a:00.0", "bdf=0000:4a:00.0 fail=procs:15"));
    let e = unknown(&rig.health(&*backend, &devices, &[])[0]).to_string();
    assert!(
        e.contains("mxSmlExDeviceGetComputeRunningProcesses(0)") && e.contains("GPU is lost"),
        "{e}"
    );
    rig.state(&state.replace("bdf=0000:4a:00.0", "bdf=0000:4a:00.0 fail=health:6"));
    let e = unknown(&rig.health(&*backend, &devices, &[])[0]).to_string();
    assert!(
        e.contains("mxSmlGetDeviceUnavailableReason(0)") && e.contains("MXSML_InvalidDeviceId"),
        "{e}"
    );
    rig.state(&state.replace("MX-B", "MX-C"));
    assert!(unknown(&rig.health(&*backend, &devices, &[])[1]).contains("MX-C"));

    let lib = rig.lib(
        "fake_mxsml.c",
        "libmxsml-noreason.so",
        &["OMIT_mxSmlGetDeviceUnavailableReason"],
    );
    let config = rig.config(BackendChoice::Only(Vendor::Mx), &[(Vendor::Mx, &lib)]);
    let text = select(&config).unwrap_err().to_string();
    assert!(text.contains("mxSmlGetDeviceUnavailableReason"), "{text}");
}

#[test]
fn hgml_discovery_poll_and_process_api_fallback() {
    let rig = Rig::new();
    let state = "device uuid=PPU-0 bdf=0000:61:00.0 numa=0\ndevice uuid=PPU-1 bdf=0000:62:00.0\n";
    rig.state(state);
    let lib = rig.lib("fake_hgml.c", "libhgml.so", &[]);
    // A PPU whose node does not exist cannot be given to a job: discovery says which.
    rig.dev_nodes(&["alixpu_ppu0"]);
    let config = rig.config(BackendChoice::Only(Vendor::Ppu), &[(Vendor::Ppu, &lib)]);
    let text = select(&config).unwrap_err().to_string();
    assert!(
        text.contains("ppu") && text.contains("device 1") && text.contains("/dev/alixpu_ppu1"),
        "{text}"
    );
    rig.dev_nodes(&["alixpu_ppu1"]);
    let (backend, devices) = rig.one(Vendor::Ppu, &lib);
    assert_eq!(backend.api(), "HGML v2");
    assert_eq!(devices[0].numa_node, Some(0));
    assert_eq!(devices[1].pci_bdf.as_deref(), Some("0000:62:00.0"));
    assert_eq!(
        devices[1].device_nodes,
        paths(&["/dev/alixpu_ppu1", "/dev/alixpu", "/dev/alixpu_ctl"])
    );
    let env = env_map(Some(Vendor::Ppu), &[&devices[1], &devices[0]]);
    assert_eq!(env["CUDA_VISIBLE_DEVICES"], "PPU-0,PPU-1");
    assert_eq!(env["MACA_VISIBLE_DEVICES"], NONE_VISIBLE);

    rig.state(&state.replace("numa=0", "numa=0 procs=5"));
    assert_eq!(
        rig.health(&*backend, &devices, &[])[0],
        Health::Busy { processes: 1 }
    );
    rig.state(&state.replace("numa=0", "numa=0 fail=uuid:999"));
    let e = unknown(&rig.health(&*backend, &devices, &[])[0]).to_string();
    assert!(e.contains("hgmlDeviceGetUUID(0)"), "{e}");
    rig.state(&state.replace("PPU-1", "PPU-7"));
    assert!(unknown(&rig.health(&*backend, &devices, &[])[1]).contains("from PPU-1 to PPU-7"));
    // HGML_ERROR_GPU_IS_LOST from a device query: unhealthy, naming the call.
    rig.state(&state.replace("numa=0", "numa=0 fail=procs:15"));
    let h = rig.health(&*backend, &devices, &[]);
    let e = unhealthy(&h[0]);
    assert!(
        e.contains("hgmlDeviceGetComputeRunningProcesses_v3(0)") && e.contains("(15)"),
        "{e}"
    );
    assert_eq!(h[1], Health::Ok);

    // Only the v2 process query: still usable.
    let v2 = rig.lib(
        "fake_hgml.c",
        "libhgml-v2.so",
        &["OMIT_DeviceGetComputeRunningProcesses_v3"],
    );
    rig.state(&state.replace("numa=0", "numa=0 procs=5,6"));
    let (backend, devices) = rig.one(Vendor::Ppu, &v2);
    assert_eq!(
        rig.health(&*backend, &devices, &[])[0],
        Health::Busy { processes: 2 }
    );

    // Neither: a clear error.
    let none = rig.lib(
        "fake_hgml.c",
        "libhgml-none.so",
        &[
            "OMIT_DeviceGetComputeRunningProcesses_v3",
            "OMIT_DeviceGetComputeRunningProcesses_v2",
        ],
    );
    let config = rig.config(BackendChoice::Only(Vendor::Ppu), &[(Vendor::Ppu, &none)]);
    let text = select(&config).unwrap_err().to_string();
    assert!(
        text.contains("hgmlDeviceGetComputeRunningProcesses_v3")
            && text.contains("libhgml-none.so"),
        "{text}"
    );
}

#[test]
fn hcu_discovery_processes_and_health_tool() {
    let rig = Rig::new();
    rig.pci("0000:9a:00.0", 1, &["renderD128", "card0"]);
    rig.pci("0000:9b:00.0", 1, &["renderD129", "card1"]);
    rig.pci("0000:9c:00.0", 1, &["renderD130", "card2"]);
    let state = "\
device uuid=0x1111aaaa bdf=0000:9a:00.0
device uuid=0x2222bbbb bdf=0000:9b:00.0 numa=0
device uuid=0x3333cccc bdf=0000:9c:00.0
";
    rig.state(state);
    let lib = rig.lib("fake_rocm_smi.c", "librocm_smi64.so", &[]);
    rig.compile("fake_hy_smi.c", "hy-smi", &[], true);
    let (backend, devices) = rig.one(Vendor::Hcu, &lib);
    assert_eq!(devices.len(), 3);
    assert_eq!(devices[0].uuid, "0x1111aaaa");
    assert_eq!(devices[0].pci_bdf.as_deref(), Some("0000:9a:00.0"));
    assert_eq!(devices[0].numa_node, Some(1), "sysfs");
    assert_eq!(devices[1].numa_node, Some(0), "rocm_smi");
    assert_eq!(
        devices[2].device_nodes,
        paths(&["/dev/kfd", "/dev/mkfd", "/dev/dri/renderD130"])
    );
    let env = env_map(Some(Vendor::Hcu), &[&devices[2], &devices[1]]);
    assert_eq!(env["ROCR_VISIBLE_DEVICES"], "1,2");
    assert_eq!(env["HIP_VISIBLE_DEVICES"], "0,1");
    assert_eq!(env["CUDA_VISIBLE_DEVICES"], "0,1");
    assert_eq!(env["ASCEND_RT_VISIBLE_DEVICES"], NONE_VISIBLE);

    assert_eq!(rig.health(&*backend, &devices, &[]), vec![Health::Ok; 3]);

    // One process on two devices, one process of the holder.
    rig.process(300, "/xlurm.slice/xlurm-job-5.service", &[]);
    rig.state(
        &state
            .replace("0000:9a:00.0", "0000:9a:00.0 procs=300,301")
            .replace("numa=0", "numa=0 procs=301"),
    );
    assert_eq!(
        rig.health(&*backend, &devices, &[(0, 5)]),
        vec![
            Health::Busy { processes: 1 },
            Health::Busy { processes: 1 },
            Health::Ok
        ]
    );
    rig.state(&state.replace("0000:9a:00.0", "0000:9a:00.0 procs=300"));
    assert_eq!(rig.health(&*backend, &devices, &[(0, 5)])[0], Health::Ok);

    // hy-smi reports one unhealthy.
    rig.state(&state.replace("numa=0", "numa=0 health=1"));
    let h = rig.health(&*backend, &devices, &[]);
    assert!(unhealthy(&h[1]).contains("HCU[1]: Unhealthy"), "{:?}", h[1]);
    assert_eq!(h[0], Health::Ok);

    // The machine-wide process query fails: every device unknown.
    rig.state(&state.replace("numa=0", "numa=0 fail=procs:6"));
    for h in rig.health(&*backend, &devices, &[]) {
        assert!(
            unknown(&h).contains("rsmi_compute_process_info_get"),
            "{h:?}"
        );
    }
    rig.state(&state.replace("0x2222bbbb", "0x2222bbbc"));
    assert!(unknown(&rig.health(&*backend, &devices, &[])[1]).contains("0x2222bbbc"));

    // hy-smi failing (DTK environment missing) or hanging: unknown.
    rig.state(&format!("init 1\n{state}"));
    let e = unknown(&rig.health(&*backend, &devices, &[])[0]).to_string();
    assert!(
        e.contains("--healthcheck") && e.contains("librocm_smi64.so.2"),
        "{e}"
    );

    // A library without the per-process device query is refused, naming both.
    rig.state(state);
    let lib = rig.lib(
        "fake_rocm_smi.c",
        "librocm_smi64-old.so",
        &["OMIT_rsmi_compute_process_gpus_get"],
    );
    let config = rig.config(BackendChoice::Only(Vendor::Hcu), &[(Vendor::Hcu, &lib)]);
    let err = select(&config).unwrap_err();
    assert!(matches!(err, AccelError::MissingSymbol { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("rsmi_compute_process_gpus_get") && text.contains("librocm_smi64-old.so"),
        "{text}"
    );
}

#[test]
fn hcu_health_tool_missing_or_slow_leaves_devices_unknown() {
    let rig = Rig::new();
    rig.pci("0000:9a:00.0", 1, &["renderD128"]);
    let state = "device uuid=0x1111aaaa bdf=0000:9a:00.0\n";
    rig.state(state);
    let lib = rig.lib("fake_rocm_smi.c", "librocm_smi64.so", &[]);
    // No hy-smi built: the configured tool does not exist.
    let (backend, devices) = rig.one(Vendor::Hcu, &lib);
    let e = unknown(&rig.health(&*backend, &devices, &[])[0]).to_string();
    assert!(e.contains("cannot run") && e.contains("hy-smi"), "{e}");

    // Without an override and nothing on PATH or the fixed paths, it says where it looked.
    let mut config = rig.config(BackendChoice::Only(Vendor::Hcu), &[(Vendor::Hcu, &lib)]);
    config.hcu_health_tool = None;
    if !Path::new("/opt/dtk/.hyhal/bin/hy-smi").exists()
        && !Path::new("/opt/hyhal/bin/hy-smi").exists()
    {
        let backend = open_backend(Vendor::Hcu, &config).unwrap();
        let poll = backend.poll(&devices).unwrap();
        let e = poll[0].condition.clone().unwrap_err().to_string();
        assert!(
            e.contains("hy-smi not found") && e.contains("XLURM_HCU_HEALTH_TOOL"),
            "{e}"
        );
    }

    // A hanging tool is killed after the timeout.
    rig.compile("fake_hy_smi.c", "hy-smi", &[], true);
    let mut config = rig.config(BackendChoice::Only(Vendor::Hcu), &[(Vendor::Hcu, &lib)]);
    config.tool_timeout = Duration::from_millis(300);
    let backend = open_backend(Vendor::Hcu, &config).unwrap();
    assert_eq!(
        backend.poll(&devices).unwrap()[0].condition,
        Ok(xlurm::accel::Condition::Healthy)
    );
    rig.state(&format!("tool_sleep_ms 3000\n{state}"));
    let started = std::time::Instant::now();
    let poll = backend.poll(&devices).unwrap();
    assert!(started.elapsed() < Duration::from_secs(2));
    let e = poll[0].condition.clone().unwrap_err().to_string();
    assert!(e.contains("no answer within 300 ms"), "{e}");

    // A relative tool override is refused.
    config.hcu_health_tool = Some(PathBuf::from("hy-smi"));
    let err = open_backend(Vendor::Hcu, &config).err().expect("refused");
    assert!(err.to_string().contains("XLURM_HCU_HEALTH_TOOL"), "{err}");
}
