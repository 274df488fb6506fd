//! Finding and opening the vendors' libraries (override variables, fixed
//! paths), choosing backends (`auto`, a named vendor, `none`), and a poll
//! that stalls.

use super::nvidia::NV_TWO;
use super::*;

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
