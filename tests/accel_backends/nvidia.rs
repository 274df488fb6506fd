//! NVIDIA (NVML): discovery, the unit's DeviceAllow and visibility
//! variables, polls (busy, holder, unknown, unhealthy, a changed UUID), a
//! missing symbol.

use super::*;

pub(crate) const NV_TWO: &str = "\
device uuid=GPU-aaaa bdf=0000:3b:00.0 minor=3 numa=1
device uuid=GPU-bbbb bdf=00000000:5E:00.0 minor=5
";

#[test]
fn nvml_discovery_env_and_device_allow() {
    let rig = Rig::new();
    rig.pci("0000:5e:00.0", 0, &[]);
    rig.state(NV_TWO);
    let lib = rig.lib("fake_nvml.c", "libnvidia-ml.so.1", &[]);
    let (backend, devices) = rig.one(Vendor::Nv, &lib);
    assert_eq!(backend.library(), lib);
    assert_eq!(backend.api(), "NVML");
    assert_eq!(devices.len(), 2);
    let (a, b) = (&devices[0], &devices[1]);
    assert_eq!((a.index, a.uuid.as_str()), (0, "GPU-aaaa"));
    assert_eq!(a.pci_bdf.as_deref(), Some("0000:3b:00.0"));
    assert_eq!(a.numa_node, Some(1), "from nvmlDeviceGetNumaNodeId");
    assert_eq!((b.index, b.uuid.as_str()), (1, "GPU-bbbb"));
    assert_eq!(b.pci_bdf.as_deref(), Some("0000:5e:00.0"));
    assert_eq!(b.numa_node, Some(0), "from sysfs when NVML does not know");
    assert_eq!(
        b.device_nodes,
        paths(&[
            "/dev/nvidia5",
            "/dev/nvidiactl",
            "/dev/nvidia-uvm",
            "/dev/nvidia-uvm-tools"
        ])
    );
    let core = b.to_device();
    assert_eq!(
        (core.vendor, core.index, core.numa_node),
        (Vendor::Nv, 1, Some(0))
    );

    let env = env_map(Some(Vendor::Nv), &[b, a]);
    assert_eq!(env["CUDA_VISIBLE_DEVICES"], "GPU-aaaa,GPU-bbbb");
    assert_eq!(env["CUDA_DEVICE_ORDER"], "PCI_BUS_ID");
    assert_eq!(env["ASCEND_RT_VISIBLE_DEVICES"], NONE_VISIBLE);
    assert_eq!(env["ROCR_VISIBLE_DEVICES"], NONE_VISIBLE);

    assert_eq!(
        device_allow(&devices, &[b.device_ref()]).unwrap(),
        paths(&[
            "/dev/nvidia-uvm",
            "/dev/nvidia-uvm-tools",
            "/dev/nvidia5",
            "/dev/nvidiactl"
        ])
    );
    let both = device_allow(&devices, &[a.device_ref(), b.device_ref()]).unwrap();
    assert!(both.contains(&PathBuf::from("/dev/nvidia3")));
    assert_eq!(both.len(), 5);
}

#[test]
fn nvml_poll_busy_holder_unknown_unhealthy_and_uuid_change() {
    let rig = Rig::new();
    rig.state(NV_TWO);
    let lib = rig.lib("fake_nvml.c", "libnvidia-ml.so.1", &[]);
    let (backend, devices) = rig.one(Vendor::Nv, &lib);
    assert_eq!(
        rig.health(&*backend, &devices, &[]),
        vec![Health::Ok, Health::Ok]
    );

    // A process xlurm did not start.
    rig.process(4242, "/user.slice/user-1000.slice/session-1.scope", &[]);
    rig.process(4300, "/xlurm.slice/xlurm-job-7.service", &[]);
    rig.process(4301, "/xlurm.slice/xlurm-job-7.service/child", &[]);
    rig.process(4400, "/xlurm.slice/xlurm-job-8.service", &[]);
    rig.state(&NV_TWO.replace("numa=1", "numa=1 procs=4242"));
    let h = rig.health(&*backend, &devices, &[]);
    assert_eq!(h, vec![Health::Busy { processes: 1 }, Health::Ok]);

    // The holder's own processes do not count; anyone else's do, other jobs included.
    rig.state(&NV_TWO.replace("numa=1", "numa=1 procs=4300,4301"));
    assert_eq!(rig.health(&*backend, &devices, &[(0, 7)])[0], Health::Ok);
    assert_eq!(
        rig.health(&*backend, &devices, &[(0, 8)])[0],
        Health::Busy { processes: 2 }
    );
    rig.state(&NV_TWO.replace("numa=1", "numa=1 procs=4300,4400,4242,99999"));
    assert_eq!(
        rig.health(&*backend, &devices, &[(0, 7)])[0],
        Health::Busy { processes: 3 },
        "job 8, an outsider and a PID /proc does not know all count"
    );

    // Graphics processes count too.
    rig.state(&NV_TWO.replace("minor=5", "minor=5 gprocs=77"));
    assert_eq!(
        rig.health(&*backend, &devices, &[])[1],
        Health::Busy { processes: 1 }
    );

    // A failed query: Unknown with the call and the library's error string.
    rig.state(&NV_TWO.replace("numa=1", "numa=1 fail=procs:999"));
    let h = rig.health(&*backend, &devices, &[]);
    let e = unknown(&h[0]);
    assert!(
        e.contains("nvmlDeviceGetComputeRunningProcesses_v3(0)")
            && e.contains("Unknown Error (999)"),
        "{e}"
    );
    assert_eq!(h[1], Health::Ok);

    // A lost GPU is unhealthy.
    rig.state(&NV_TWO.replace("minor=5", "minor=5 health=15"));
    let h = rig.health(&*backend, &devices, &[]);
    assert!(unhealthy(&h[1]).contains("GPU is lost"), "{:?}", h[1]);

    // Another GPU behind the same index: Unknown naming both UUIDs.
    rig.state(&NV_TWO.replace("GPU-aaaa", "GPU-cccc"));
    let h = rig.health(&*backend, &devices, &[]);
    let e = unknown(&h[0]);
    assert!(e.contains("GPU-aaaa") && e.contains("GPU-cccc"), "{e}");

    // The device count fails: every device is Unknown.
    rig.state(&format!("count 9\n{NV_TWO}"));
    let h = rig.health(&*backend, &devices, &[]);
    for h in &h {
        let e = unknown(h);
        assert!(
            e.contains("nvmlDeviceGetCount_v2") && e.contains("Driver Not Loaded"),
            "{e}"
        );
    }

    // A device that vanished.
    rig.state("device uuid=GPU-aaaa bdf=0000:3b:00.0 minor=3\n");
    let h = rig.health(&*backend, &devices, &[]);
    assert_eq!(h[0], Health::Ok);
    assert!(unknown(&h[1]).contains("nvmlDeviceGetHandleByIndex_v2(1)"));

    // Back to normal.
    rig.state(NV_TWO);
    assert_eq!(
        rig.health(&*backend, &devices, &[]),
        vec![Health::Ok, Health::Ok]
    );
}

#[test]
fn nvml_missing_symbol_names_symbol_and_library() {
    let rig = Rig::new();
    rig.state(NV_TWO);
    let lib = rig.lib("fake_nvml.c", "libnvml-nouuid.so", &["OMIT_DeviceGetUUID"]);
    let config = rig.config(BackendChoice::Only(Vendor::Nv), &[(Vendor::Nv, &lib)]);
    let err = select(&config).unwrap_err();
    assert!(
        matches!(&err, AccelError::MissingSymbol { symbol, .. } if symbol == "nvmlDeviceGetUUID")
    );
    let text = err.to_string();
    assert!(
        text.contains("nvmlDeviceGetUUID") && text.contains("libnvml-nouuid.so"),
        "{text}"
    );

    // Optional functions may be missing.
    let lib = rig.lib(
        "fake_nvml.c",
        "libnvml-old.so",
        &[
            "OMIT_DeviceGetNumaNodeId",
            "OMIT_DeviceGetGraphicsRunningProcesses_v3",
        ],
    );
    let (_, devices) = rig.one(Vendor::Nv, &lib);
    assert_eq!(devices[0].numa_node, None, "no NUMA API and no sysfs entry");
}
