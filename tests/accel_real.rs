//! Smoke test against a real NVIDIA driver (ignored by default; needs a GPU machine):
//!
//! ```sh
//! cargo test --test accel_real -- --ignored --nocapture
//! ```
//!
//! It checks the hand-written NVML table against `nvidia-smi`: the same UUIDs and PCI
//! addresses in the same order, device nodes that exist with the reported minor, and a
//! poll that finds every device healthy (and a process of ours when one runs).

use std::process::Command;
use std::time::Duration;
use xlurm::accel::{assess_all, select, AccelConfig, BackendChoice, Poller};
use xlurm::core::{Health, Vendor};

#[test]
#[ignore = "needs an NVIDIA GPU and driver"]
fn real_nvml_matches_nvidia_smi() {
    let config = AccelConfig::from_env(BackendChoice::Only(Vendor::Nv), |k| std::env::var_os(k));
    let selection = select(&config).expect("NVML backend");
    let active = &selection.active[0];
    println!(
        "{} via {}",
        active.backend.api(),
        active.backend.library().display()
    );
    for d in &active.devices {
        println!("{d:?}");
    }

    let smi = Command::new("nvidia-smi")
        .args(["--query-gpu=index,uuid,pci.bus_id", "--format=csv,noheader"])
        .output()
        .expect("nvidia-smi");
    assert!(smi.status.success());
    let text = String::from_utf8(smi.stdout).unwrap();
    let rows: Vec<Vec<String>> = text
        .lines()
        .map(|l| l.split(',').map(|f| f.trim().to_string()).collect())
        .collect();
    assert_eq!(rows.len(), active.devices.len());
    for (row, d) in rows.iter().zip(&active.devices) {
        assert_eq!(row[0], d.index.to_string());
        assert_eq!(row[1], d.uuid);
        assert_eq!(
            xlurm::accel::normalize_bdf(&row[2]).as_deref(),
            d.pci_bdf.as_deref(),
            "PCI address of device {}",
            d.index
        );
        for node in &d.device_nodes {
            if node.to_str().unwrap().starts_with("/dev/nvidia") && !node.ends_with("uvm-tools") {
                assert!(node.exists(), "{} missing", node.display());
            }
        }
    }

    let rt = tokio::runtime::Runtime::new().unwrap();
    let poller = Poller::new(active.backend.clone(), active.devices.clone());
    let poll = rt.block_on(poller.poll(Duration::from_secs(10)));
    println!("{poll:?}");
    let health = assess_all(&active.devices, &poll, |_| None, |_| None);
    for (d, h) in active.devices.iter().zip(&health) {
        println!("{} {} -> {h:?}", d.index, d.uuid);
        assert!(
            matches!(h, Health::Ok | Health::Busy { .. }),
            "device {} is {h:?}",
            d.index
        );
    }
}
