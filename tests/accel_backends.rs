//! The accelerator backends against simulated vendor libraries (tests/accel/fake_*.c),
//! compiled here with `cc` into a temporary directory. Each test bakes its own state
//! file's path into its libraries, rewrites that file between polls, and gives xlurm a
//! fake sysfs and procfs tree.
//!
//! Without a C compiler these tests fail: they never skip.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use xlurm::accel::{
    assess_all, device_allow, library_override_var, open_backend, select, visibility_env,
    AccelConfig, AccelError, BackendChoice, DiscoveredDevice, LibrarySearch, Poller, NONE_VISIBLE,
    VISIBILITY_VARIABLES,
};
use xlurm::core::{DeviceRef, Health, Vendor};

mod accel_rig;
use accel_rig::{Rig, SOURCES};

fn unknown(h: &Health) -> &str {
    match h {
        Health::Unknown { error } => error,
        other => panic!("expected Unknown, got {other:?}"),
    }
}

fn unhealthy(h: &Health) -> &str {
    match h {
        Health::Unhealthy { error } => error,
        other => panic!("expected Unhealthy, got {other:?}"),
    }
}

fn env_map(vendor: Option<Vendor>, devices: &[&DiscoveredDevice]) -> HashMap<String, String> {
    let refs: Vec<DeviceRef> = devices.iter().map(|d| d.device_ref()).collect();
    let env = visibility_env(vendor, &refs).unwrap();
    let map: HashMap<String, String> = env.iter().cloned().collect();
    assert_eq!(map.len(), env.len(), "no variable twice");
    for var in VISIBILITY_VARIABLES {
        assert!(map.contains_key(var), "{var} missing");
    }
    map
}

fn paths(list: &[&str]) -> Vec<PathBuf> {
    list.iter().map(PathBuf::from).collect()
}

// ---------------------------------------------------------------- NVIDIA

const NV_TWO: &str = "\
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

#[test]
fn override_paths_disable_the_search_and_fail_clearly() {
    let rig = Rig::new();
    let missing = rig.path("no-such-libnvidia-ml.so");
    let config = rig.config(BackendChoice::Only(Vendor::Nv), &[(Vendor::Nv, &missing)]);
    let err = select(&config).unwrap_err();
    assert!(matches!(err, AccelError::Load { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains(&missing.display().to_string())
            && text.contains("XLURM_NVML_LIBRARY")
            && text.contains("search disabled"),
        "{text}"
    );

    let config = rig.config(
        BackendChoice::Only(Vendor::Asc),
        &[(Vendor::Asc, Path::new("libdcmi.so"))],
    );
    let err = select(&config).unwrap_err();
    assert!(
        matches!(
            err,
            AccelError::RelativeOverride {
                var: "XLURM_DCMI_LIBRARY",
                ..
            }
        ),
        "{err:?}"
    );

    // Empty values count as unset; the daemon's environment is the only input.
    let config = AccelConfig::from_env(BackendChoice::Auto, |k| match k {
        "XLURM_NVML_LIBRARY" => Some("".into()),
        "XLURM_MXSML_LIBRARY" => Some("/opt/x/libmxsml.so".into()),
        _ => None,
    });
    assert!(!config.libraries.contains_key(&Vendor::Nv));
    assert_eq!(
        config.libraries[&Vendor::Mx],
        PathBuf::from("/opt/x/libmxsml.so")
    );
}

/// Each vendor's simulated library source, and the file name its loader would use.
fn fake_source(vendor: Vendor) -> (&'static str, &'static str) {
    match vendor {
        Vendor::Nv => ("fake_nvml.c", "libnvidia-ml.so.1"),
        Vendor::Asc => ("fake_dcmi.c", "libdcmi.so"),
        Vendor::Mtt => ("fake_mtml.c", "libmtml.so"),
        Vendor::Mx => ("fake_mxsml.c", "libmxsml.so"),
        Vendor::Ppu => ("fake_hgml.c", "libhgml.so"),
        Vendor::Hcu => ("fake_rocm_smi.c", "librocm_smi64.so"),
    }
}

#[test]
fn every_vendor_names_a_missing_override_and_its_variable() {
    let rig = Rig::new();
    for vendor in Vendor::ALL {
        let missing = rig.path(&format!("gone/{}", fake_source(vendor).1));
        let config = rig.config(BackendChoice::Only(vendor), &[(vendor, &missing)]);
        let err = select(&config).unwrap_err();
        assert!(matches!(err, AccelError::Load { .. }), "{vendor}: {err:?}");
        let text = err.to_string();
        assert!(
            text.contains(&missing.display().to_string())
                && text.contains(library_override_var(vendor))
                && text.contains("search disabled"),
            "{vendor}: {text}"
        );
    }
}

#[test]
fn every_vendor_searches_its_fixed_paths_in_order_then_reports_not_installed() {
    let rig = Rig::new();
    rig.state("device uuid=X-0 bdf=0000:01:00.0\n");
    rig.compile("fake_hy_smi.c", "hy-smi", &[], true);
    for vendor in Vendor::ALL {
        let (source, name) = fake_source(vendor);
        let dir = |d: &str| {
            let dir = rig.path(&format!("{vendor}/{d}"));
            std::fs::create_dir_all(&dir).unwrap();
            dir.join(name)
        };
        let (first, second, broken) = (dir("first"), dir("second"), dir("broken"));
        let loader_name = format!("libxlurm-absent-{vendor}.so");
        let mut config = rig.config(BackendChoice::Only(vendor), &[]);
        config.libraries.remove(&vendor);
        let mut search = |candidates: &[&PathBuf]| {
            config.library_search.insert(
                vendor,
                LibrarySearch {
                    candidates: candidates.iter().map(|p| p.to_path_buf()).collect(),
                    loader_name: loader_name.clone(),
                },
            );
            open_backend(vendor, &config).map(|b| b.library().to_path_buf())
        };

        // Missing candidates are skipped; a broken one is passed over.
        let built = rig.lib(source, &format!("{vendor}/second/{name}"), &[]);
        assert_eq!(built, second);
        std::fs::write(&broken, "not a shared object").unwrap();
        assert_eq!(
            search(&[&first, &broken, &second]).unwrap(),
            second,
            "{vendor}"
        );
        // The first that loads wins.
        rig.lib(source, &format!("{vendor}/first/{name}"), &[]);
        assert_eq!(search(&[&first, &second]).unwrap(), first, "{vendor}");

        // Nothing anywhere: "not installed", naming what was tried and the override.
        let err = search(&[&rig.path("nowhere/lib.so")]).unwrap_err();
        assert!(err.is_not_installed(), "{vendor}: {err:?}");
        let text = err.to_string();
        assert!(
            text.contains(&rig.path("nowhere/lib.so").display().to_string())
                && text.contains(&loader_name)
                && text.contains(library_override_var(vendor)),
            "{vendor}: {text}"
        );
    }
    // The documented defaults are what a fresh configuration searches.
    let config = AccelConfig::new(BackendChoice::Auto);
    for vendor in Vendor::ALL {
        assert_eq!(
            config.library_search[&vendor],
            LibrarySearch::default_for(vendor)
        );
        assert_eq!(
            LibrarySearch::default_for(vendor).loader_name,
            fake_source(vendor).1
        );
    }
    assert_eq!(
        LibrarySearch::default_for(Vendor::Mx).candidates,
        paths(&[
            "/opt/mxdriver/lib/libmxsml.so",
            "/opt/maca/lib/libmxsml.so",
            "/opt/mxn100/lib/libmxsml.so"
        ])
    );
}

#[test]
fn init_failure_of_a_named_vendor_is_an_error() {
    let rig = Rig::new();
    rig.state(&format!("init 9\n{NV_TWO}"));
    let lib = rig.lib("fake_nvml.c", "libnvidia-ml.so.1", &[]);
    let err =
        select(&rig.config(BackendChoice::Only(Vendor::Nv), &[(Vendor::Nv, &lib)])).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("nvmlInit_v2") && text.contains("Driver Not Loaded (9)"),
        "{text}"
    );

    // No devices at all is an error for a named vendor too.
    rig.state("");
    let err =
        select(&rig.config(BackendChoice::Only(Vendor::Nv), &[(Vendor::Nv, &lib)])).unwrap_err();
    assert!(err.to_string().contains("no devices"), "{err}");
}

// ---------------------------------------------------------------- selection

#[test]
fn auto_keeps_working_vendors_and_warns_about_the_rest() {
    let rig = Rig::new();
    rig.pci("0000:3d:00.0", 0, &["renderD130", "card2"]);
    rig.pci("0000:3b:00.0", 0, &["renderD129", "card1"]);
    rig.state(
        "device uuid=GPU-aaaa bdf=0000:3b:00.0 minor=0\n\
         device uuid=MX-1 bdf=0000:3d:00.0\n",
    );
    let nv = rig.lib("fake_nvml.c", "libnvidia-ml.so.1", &[]);
    let mx = rig.lib("fake_mxsml.c", "libmxsml.so", &[]);
    // An Ascend library whose init fails.
    std::fs::write(rig.path("asc-state"), "init -8005\ndevice\n").unwrap();
    let asc = rig.path("libdcmi.so");
    let out = Command::new("cc")
        .args(["-shared", "-fPIC", "-I", SOURCES])
        .arg(format!(
            "-DFAKE_STATE_PATH=\"{}\"",
            rig.path("asc-state").display()
        ))
        .arg("-o")
        .arg(&asc)
        .arg(Path::new(SOURCES).join("fake_dcmi.c"))
        .output()
        .expect("cc");
    assert!(out.status.success());

    let config = rig.config(
        BackendChoice::Auto,
        &[(Vendor::Nv, &nv), (Vendor::Asc, &asc), (Vendor::Mx, &mx)],
    );
    let selection = select(&config).unwrap();
    let vendors: Vec<Vendor> = selection
        .active
        .iter()
        .map(|a| a.backend.vendor())
        .collect();
    assert_eq!(vendors, vec![Vendor::Nv, Vendor::Mx]);
    assert_eq!(
        selection.devices().count(),
        4,
        "both fakes read the same state: 2 each"
    );
    let warned: Vec<Option<Vendor>> = selection.warnings.iter().map(|w| w.vendor()).collect();
    assert_eq!(
        warned,
        vec![
            Some(Vendor::Asc),
            Some(Vendor::Mtt),
            Some(Vendor::Ppu),
            Some(Vendor::Hcu)
        ]
    );
    let asc_warning = selection.warnings[0].to_string();
    assert!(
        asc_warning.contains("dcmiv2_init") && asc_warning.contains("-8005"),
        "{asc_warning}"
    );
    assert!(selection.warnings[1]
        .to_string()
        .contains("XLURM_MTML_LIBRARY"));

    // The same failing vendor, named, is an error.
    let config = rig.config(BackendChoice::Only(Vendor::Asc), &[(Vendor::Asc, &asc)]);
    let err = select(&config).unwrap_err();
    assert!(err.to_string().contains("dcmiv2_init"), "{err}");
}

#[test]
fn none_touches_no_library() {
    let rig = Rig::new();
    // Every override is broken; `none` must not care.
    let config = rig.config(BackendChoice::None, &[]);
    let selection = select(&config).unwrap();
    assert!(selection.active.is_empty() && selection.warnings.is_empty());
    assert_eq!(
        "none".parse::<BackendChoice>().unwrap(),
        BackendChoice::None
    );
    assert_eq!(
        "auto".parse::<BackendChoice>().unwrap(),
        BackendChoice::Auto
    );
    assert_eq!(
        "metax".parse::<BackendChoice>().unwrap(),
        BackendChoice::Only(Vendor::Mx)
    );
    assert!("amd".parse::<BackendChoice>().is_err());

    // A CPU job sees no device of any kind.
    let env = visibility_env(None, &[]).unwrap();
    assert_eq!(env.len(), VISIBILITY_VARIABLES.len());
    assert!(env.iter().all(|(_, v)| v == NONE_VISIBLE));
    assert!(device_allow(&[], &[]).unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poller_times_out_instead_of_stalling() {
    let rig = Rig::new();
    rig.state(NV_TWO);
    let lib = rig.lib("fake_nvml.c", "libnvidia-ml.so.1", &[]);
    let (backend, devices) = rig.one(Vendor::Nv, &lib);
    let poller = Poller::new(backend, devices);
    assert_eq!(poller.poll(Duration::from_secs(5)).await.unwrap().len(), 2);

    rig.state(&format!("sleep_ms 1500\n{NV_TWO}"));
    let started = std::time::Instant::now();
    let err = poller.poll(Duration::from_millis(200)).await.unwrap_err();
    assert!(err.message.contains("no answer within 200 ms"), "{err}");
    assert!(started.elapsed() < Duration::from_millis(1200));
    // The stuck call still holds its thread: the next poll fails at once.
    let err = poller.poll(Duration::from_secs(5)).await.unwrap_err();
    assert!(err.message.contains("previous poll"), "{err}");
    let health = poller
        .poll_health(Duration::from_secs(5), |_| None, |_| None)
        .await;
    assert!(health.iter().all(|h| matches!(h, Health::Unknown { .. })));

    rig.state(NV_TWO);
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let health = poller
        .poll_health(Duration::from_secs(5), |_| None, |_| None)
        .await;
    assert_eq!(health, vec![Health::Ok, Health::Ok]);
}

// ---------------------------------------------------------------- Ascend

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

// ---------------------------------------------------------------- Moore Threads

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

// ---------------------------------------------------------------- MetaX

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

// ---------------------------------------------------------------- T-Head PPU

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

// ---------------------------------------------------------------- Hygon HCU

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

#[test]
fn visibility_env_rejects_mismatched_devices() {
    let r = |vendor, index| DeviceRef {
        vendor,
        index,
        uuid: format!("U{index}"),
    };
    assert!(visibility_env(None, &[r(Vendor::Nv, 0)]).is_err());
    let err = visibility_env(Some(Vendor::Nv), &[r(Vendor::Nv, 0), r(Vendor::Asc, 1)]).unwrap_err();
    assert!(err.to_string().contains("asc"), "{err}");
    // A vendor with no devices is as good as a CPU job.
    let env = visibility_env(Some(Vendor::Mx), &[]).unwrap();
    assert!(env.iter().all(|(_, v)| v == NONE_VISIBLE));
}
