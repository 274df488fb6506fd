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

#[path = "../accel_rig/mod.rs"]
mod accel_rig;
use accel_rig::{Rig, SOURCES};

mod loading;
mod nvidia;
mod vendors;

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
