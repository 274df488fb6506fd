//! Tests of `device_gate.rs`.
use super::*;

const PROC_DEVICES: &str = "Character devices:
  1 mem
  4 /dev/vc/0
  4 tty
  5 /dev/tty
 10 misc
136 pts
137 pts
195 nvidia-frontend
226 drm
235 nvidia-uvm
240 weird[0]

Block devices:
  8 sd
259 blkext
";

#[test]
fn everything_but_the_accelerators_majors_is_allowed() {
    let drivers = parse_proc_devices(PROC_DEVICES);
    assert_eq!(drivers.len(), 13);
    assert!(drivers.iter().any(|d| d.block && d.major == 259));
    let accel = BTreeSet::from([195, 235]);
    let allow = allow_list(&drivers, &accel);
    assert_eq!(
        allow,
        [
            "char-mem rwm",
            "char-/dev/vc/0 rwm",
            "char-tty rwm",
            "char-/dev/tty rwm",
            "char-misc rwm",
            "char-pts rwm",
            "char-drm rwm",
            "block-sd rwm",
            "block-blkext rwm",
        ]
    );
    // A name shared by an accelerator's major is left out whole.
    let allow = allow_list(&drivers, &BTreeSet::from([137]));
    assert!(
        !allow.iter().any(|a| a.starts_with("char-pts")),
        "{allow:?}"
    );
    assert!(allow.contains(&"char-nvidia-frontend rwm".to_string()));
    let text = closed_dropin(&allow);
    assert!(text.contains("[Slice]\nDevicePolicy=closed\nDeviceAllow=\nDeviceAllow=char-mem rwm\n"));
    assert_eq!(parse_setting("on\n"), Some(true));
    assert_eq!(parse_setting("off"), Some(false));
    assert_eq!(parse_setting("maybe"), None);
}

#[test]
fn the_drop_ins_close_the_user_slices_and_system_slice_and_let_exempt_services_through() {
    let dir = tempfile::tempdir().unwrap();
    let allow = vec!["char-mem rwm".to_string()];
    let exempt = parse_exempt(" nvidia-persistenced.service,,dcgm.service ").unwrap();
    let all = dropins(dir.path(), &allow, true, &exempt);
    let names: Vec<String> = all
        .iter()
        .map(|(p, _)| p.strip_prefix(dir.path()).unwrap().display().to_string())
        .collect();
    assert_eq!(
        names,
        [
            "user-.slice.d/50-xlurm-gate.conf",
            "system.slice.d/50-xlurm-gate.conf",
            "user-0.slice.d/50-xlurm-gate.conf",
            "nvidia-persistenced.service.d/50-xlurm-gate.conf",
            "dcgm.service.d/50-xlurm-gate.conf",
        ]
    );
    assert!(all[1]
        .1
        .contains("DevicePolicy=closed\nDeviceAllow=\nDeviceAllow=char-mem rwm\n"));
    assert!(all[2].1.contains("DevicePolicy=auto"));
    assert!(all[3].1.contains("[Service]\nSlice=accel.slice\n"));
    // xlurmd in system.slice: the user slices only.
    let user_only = dropins(dir.path(), &allow, false, &[]);
    assert!(!user_only
        .iter()
        .any(|(p, _)| p.starts_with(dir.path().join("system.slice.d"))));
    // What is on disk is found again (the time limit's drop-ins are not the gate's).
    for (p, t) in &all {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, t).unwrap();
    }
    std::fs::create_dir_all(dir.path().join("xlurm-job-1.service.d")).unwrap();
    std::fs::write(
        dir.path().join("xlurm-job-1.service.d/50-time-limit.conf"),
        "",
    )
    .unwrap();
    assert_eq!(existing_dropins(dir.path()).len(), 5);
    // What is on disk is what is wanted: nothing to do again.
    let on_disk = existing_dropins(dir.path());
    assert!(same_dropins(&on_disk, &all));
    // Not when a text differs (a new driver in the list) or one is missing.
    let more = dropins(
        dir.path(),
        &["char-mem rwm".into(), "char-tty rwm".into()],
        true,
        &exempt,
    );
    assert!(!same_dropins(&on_disk, &more));
    assert!(!same_dropins(&on_disk, &user_only));
}

#[test]
fn gate_exempt_takes_service_names_only() {
    assert_eq!(parse_exempt("").unwrap(), Vec::<String>::new());
    assert_eq!(parse_exempt("a@1.service").unwrap(), ["a@1.service"]);
    for bad in [
        "nvidia-persistenced",
        ".service",
        "../x.service",
        "a b.service",
        "x.slice",
        "xlurmd.service",
    ] {
        assert!(parse_exempt(bad).is_err(), "{bad}");
    }
    assert!(parse_exempt("x/y.service")
        .unwrap_err()
        .contains("x/y.service"));
}

#[test]
fn xlurmd_in_system_slice_is_seen_from_its_cgroup() {
    assert!(in_system_slice("0::/system.slice/xlurmd.service\n"));
    assert!(!in_system_slice("0::/accel.slice/xlurmd.service\n"));
    assert!(!in_system_slice(
        "0::/user.slice/user-1000.slice/session-2.scope\n"
    ));
    assert!(!in_system_slice("1:name=systemd:/system.slice/x.service\n"));
}
