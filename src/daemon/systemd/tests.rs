//! Tests of `systemd/`: parsing what the manager reports.

use super::signals::BUS_DRIVER;
use super::*;

fn signal(sender: Option<&str>, path: &str, iface: &str, member: &str) -> zbus::Message {
    let b = zbus::Message::signal(path, iface, member);
    let b = match sender {
        Some(s) => b.sender(s),
        None => b,
    };
    b.build(&()).unwrap()
}

/// A `NameOwnerChanged` as the bus (sender `org.freedesktop.DBus`) or a
/// peer (a unique name) sends it.
fn owner_changed(sender: &str, name: &str, new: &str) -> zbus::Message {
    zbus::Message::signal(
        "/org/freedesktop/DBus",
        "org.freedesktop.DBus",
        "NameOwnerChanged",
    )
    .sender(sender)
    .build(&(name, ":1.1", new))
    .unwrap()
}

const UNIT: &str = "/org/freedesktop/systemd1/unit/xlurm_2djob_2d7_2eservice";
const PROPS: &str = "org.freedesktop.DBus.Properties";

#[test]
fn only_the_current_owner_of_systemds_name_speaks_for_systemd() {
    let mut systemd = SystemdSender::new(Some(":1.1".into()));
    let from = |s: Option<&str>| signal(s, UNIT, PROPS, "PropertiesChanged");
    assert!(systemd.sent(&from(Some(":1.1"))));
    assert!(
        !systemd.sent(&from(Some(":1.42"))),
        "another user's connection"
    );
    assert!(!systemd.sent(&from(None)), "no sender at all");

    // A forged NameOwnerChanged (from a user, not the bus) moves nothing.
    assert!(!systemd.on_owner_changed(&owner_changed(":1.42", SYSTEMD_NAME, ":1.42")));
    assert_eq!(systemd.owner(), Some(":1.1"));
    // The bus's word about another name moves nothing either.
    assert!(!systemd.on_owner_changed(&owner_changed(BUS_DRIVER, "org.example.X", ":1.42")));
    assert_eq!(systemd.owner(), Some(":1.1"));

    // systemd re-executes: its name goes away, then comes back under a new owner.
    assert!(systemd.on_owner_changed(&owner_changed(BUS_DRIVER, SYSTEMD_NAME, "")));
    assert_eq!(systemd.owner(), None);
    assert!(!systemd.sent(&from(Some(":1.1"))), "the old owner is gone");
    assert!(systemd.on_owner_changed(&owner_changed(BUS_DRIVER, SYSTEMD_NAME, ":1.9")));
    assert!(systemd.sent(&from(Some(":1.9"))));
    assert!(!systemd.sent(&from(Some(":1.1"))));
}

#[test]
fn without_an_owner_nothing_speaks_for_systemd() {
    let systemd = SystemdSender::new(None);
    assert!(!systemd.sent(&signal(Some(":1.1"), UNIT, PROPS, "PropertiesChanged")));
}

#[test]
fn unit_paths_are_escaped_like_systemd() {
    assert_eq!(
        unit_path("xlurm-job-12.service"),
        "/org/freedesktop/systemd1/unit/xlurm_2djob_2d12_2eservice"
    );
    assert_eq!(unit_path("1a.b"), "/org/freedesktop/systemd1/unit/_31a_2eb");
    for unit in ["xlurm-job-12.service", "1a.b", "a_b@c.d"] {
        assert_eq!(unit_of_path(&unit_path(unit)).as_deref(), Some(unit));
    }
    assert_eq!(unit_of_path("/org/freedesktop/systemd1/unit/x_2"), None);
    assert_eq!(unit_of_path("/org/freedesktop/systemd1/unit/x_zz"), None);
    assert_eq!(unit_of_path("/org/freedesktop/systemd1/job/1"), None);
}

#[test]
fn slices_nest_by_the_dashes_in_their_names() {
    let root = std::path::Path::new("/sys/fs/cgroup");
    assert_eq!(slice_cgroup(root, "xlurm.slice"), root.join("xlurm.slice"));
    assert_eq!(
        slice_cgroup(root, "batch-gpu-a.slice"),
        root.join("batch.slice/batch-gpu.slice/batch-gpu-a.slice")
    );
}

#[test]
fn memory_peak_is_asked_of_systemd_256_and_later() {
    assert!(!has_memory_peak("252.39-1~deb12u1"));
    assert!(!has_memory_peak("255"));
    assert!(has_memory_peak("256.7"));
    assert!(has_memory_peak("257"));
    assert!(has_memory_peak("fake"), "when it cannot tell, ask");
}

#[test]
fn a_cgroups_memory_peak_is_read_as_systemd_reports_it() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(read_memory_peak(dir.path()), None);
    std::fs::write(dir.path().join("memory.peak"), "73728\n").unwrap();
    assert_eq!(read_memory_peak(dir.path()), Some(73_728));
    std::fs::write(dir.path().join("memory.peak"), "max\n").unwrap();
    assert_eq!(read_memory_peak(dir.path()), None, "not a number");
}
