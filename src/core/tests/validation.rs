//! Validation: every impossible request is refused, naming what exists.

use super::*;

#[test]
fn rejects_impossible_requests_with_what_exists() {
    let s = sched(two_nodes(), Policy::FifoStrict);
    let cases: Vec<(Request, &str)> = vec![
        (
            Request {
                cpus: 0,
                ..req(1, 0)
            },
            "at least 1 CPU",
        ),
        (
            Request {
                cpus: 9,
                ..req(1, 0)
            },
            "at most 8 (node0: 4 CPUs, node1: 4 CPUs)",
        ),
        (
            Request {
                mem_bytes: Some(0),
                ..req(1, 0)
            },
            "0 bytes",
        ),
        (
            Request {
                mem_bytes: Some(17 * GIB),
                ..req(1, 0)
            },
            "at most 16G",
        ),
        (
            Request {
                mem_bytes: Some(u64::MAX),
                ..req(1, 0)
            },
            "at most 16G",
        ),
        (
            Request {
                cpus: 5,
                numa_local: true,
                ..req(1, 0)
            },
            "largest node has 4",
        ),
        (
            Request {
                mem_bytes: Some(9 * GIB),
                numa_local: true,
                ..req(1, 0)
            },
            "largest node has 8G",
        ),
        (
            Request {
                time_limit_secs: Some(0),
                ..req(1, 0)
            },
            "0 seconds",
        ),
        (
            Request {
                time_limit_secs: Some(3601),
                ..req(1, 0)
            },
            "maximum job lifetime 3600s",
        ),
        (req(1, 5), "enabled: nv:4"),
    ];
    for (r, want) in cases {
        let err = s
            .validate(&r)
            .expect_err(&format!("{r:?} accepted"))
            .to_string();
        assert!(err.contains(want), "{err:?} lacks {want:?}");
    }
}

#[test]
fn rejects_bad_device_lists() {
    let mut m = two_nodes();
    m.devices.push(Device::new(Vendor::Asc, 7, "asc-7", None));
    let m = Machine::new(m.topology.clone(), m.devices);
    let mut s = sched(m, Policy::FifoStrict);
    let dev = |count, vendor, ids: &[u32], exclude: &[u32]| Request {
        devices: DeviceRequest {
            count,
            vendor,
            ids: ids.to_vec(),
            exclude: exclude.to_vec(),
        },
        ..req(1, 0)
    };
    use RequestError as E;
    let cases: Vec<(Request, RequestError)> = vec![
        (dev(1, None, &[0], &[1]), E::IdsWithExclude),
        (
            dev(1, None, &[0, 1], &[]),
            E::CountMismatch { count: 1, ids: 2 },
        ),
        (dev(2, None, &[1, 1], &[]), E::DuplicateId(1)),
        (dev(2, None, &[], &[1, 1]), E::DuplicateId(1)),
        (
            dev(1, Some(Vendor::Nv), &[9], &[]),
            E::UnknownId {
                vendor: Vendor::Nv,
                id: 9,
                have: "0-3".into(),
            },
        ),
        (
            dev(1, Some(Vendor::Mtt), &[], &[]),
            E::NoSuchVendor {
                vendor: Vendor::Mtt,
                have: "nv:4, asc:1".into(),
            },
        ),
        (
            dev(2, None, &[0, 7], &[]),
            E::IdsSpanVendors {
                ids: "0,7".into(),
                have: "nv:4, asc:1".into(),
            },
        ),
        (dev(0, None, &[], &[1]), E::ExcludeWithoutCount),
        (
            dev(1, Some(Vendor::Nv), &[], &[5]),
            E::UnknownId {
                vendor: Vendor::Nv,
                id: 5,
                have: "0-3".into(),
            },
        ),
        (
            dev(1, None, &[], &[9]),
            E::UnknownExcludedId {
                id: 9,
                have: "nv 0-3, asc 7".into(),
            },
        ),
        (
            dev(4, Some(Vendor::Nv), &[], &[0]),
            E::TooManyDevices {
                count: 4,
                have: "nv:4, asc:1".into(),
            },
        ),
    ];
    for (r, want) in cases {
        assert_eq!(s.validate(&r), Err(want), "{r:?}");
    }
    // Excluding an ID of one of several vendors is fine.
    assert!(s.validate(&dev(1, None, &[], &[7])).is_ok());
    // A vendor is settled from exact IDs: 7 exists only for Ascend.
    let d = s.validate(&dev(1, None, &[7], &[])).unwrap();
    assert_eq!(d.devices.vendor, Some(Vendor::Asc));
    // A disabled device cannot be named at submission.
    s.set_disabled(Vendor::Nv, &[2], true).unwrap();
    assert_eq!(
        s.validate(&dev(1, Some(Vendor::Nv), &[2], &[])),
        Err(E::DisabledId {
            vendor: Vendor::Nv,
            id: 2
        })
    );
    assert!(s.validate(&dev(4, Some(Vendor::Nv), &[], &[])).is_err());
    // No accelerators at all.
    let cpu_only = sched(
        Machine::new(Topology::single(2, GIB), vec![]),
        Policy::FifoStrict,
    );
    assert_eq!(cpu_only.validate(&req(1, 1)), Err(E::NoDevices));
}

#[test]
fn set_disabled_validates_whole_list_first() {
    let mut s = sched(two_nodes(), Policy::FifoStrict);
    assert!(s.set_disabled(Vendor::Nv, &[0, 9], true).is_err());
    assert!(
        s.machine().devices.iter().all(|d| !d.disabled),
        "partial change"
    );
    assert_eq!(
        s.set_disabled(Vendor::Nv, &[1, 1], true),
        Err(RequestError::DuplicateId(1))
    );
    s.set_disabled(Vendor::Nv, &[1], true).unwrap();
    s.set_disabled(Vendor::Nv, &[1], true).unwrap();
    assert!(s.machine().devices[1].disabled);
}

#[test]
fn device_requests_are_equal_exactly_when_every_field_is() {
    use crate::core::{DeviceRequest, Vendor};
    let base = DeviceRequest {
        count: 2,
        vendor: Some(Vendor::Nv),
        ids: vec![],
        exclude: vec![],
    };
    assert_eq!(base, base.clone());
    let differ = [
        DeviceRequest {
            count: 1,
            ..base.clone()
        },
        DeviceRequest {
            vendor: None,
            ..base.clone()
        },
        DeviceRequest {
            ids: vec![0, 1],
            ..base.clone()
        },
        DeviceRequest {
            exclude: vec![3],
            ..base.clone()
        },
    ];
    for d in &differ {
        assert_ne!(&base, d);
    }
    let with_ids = DeviceRequest {
        ids: vec![0, 1],
        ..base.clone()
    };
    assert_eq!(with_ids, with_ids.clone());
    assert_ne!(
        with_ids,
        DeviceRequest {
            ids: vec![0, 2],
            ..base.clone()
        }
    );
    assert_ne!(
        with_ids,
        DeviceRequest {
            ids: vec![1, 0],
            ..base
        }
    );
}
