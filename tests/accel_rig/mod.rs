//! The scratch machine of the accelerator tests (`tests/accel_*.rs`): a state
//! file the simulated vendor libraries (tests/accel/fake_*.c) re-read on every
//! call, those libraries built with `cc`, and fake /sys, /proc and /dev trees.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use xlurm::accel::{
    assess_all, library_override_var, select, AccelConfig, Backend, BackendChoice,
    DiscoveredDevice, ProcCgroups,
};
use xlurm::core::{Health, JobId, Vendor};

pub const SOURCES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/accel");

/// A scratch machine: a state file, built fakes, fake /sys and /proc.
pub struct Rig {
    pub dir: tempfile::TempDir,
}

impl Rig {
    pub fn new() -> Self {
        let rig = Rig {
            dir: tempfile::tempdir().unwrap(),
        };
        std::fs::create_dir_all(rig.sysfs().join("bus/pci/devices")).unwrap();
        std::fs::create_dir_all(rig.proc()).unwrap();
        std::fs::create_dir_all(rig.dev()).unwrap();
        rig.state("");
        rig
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn state_path(&self) -> PathBuf {
        self.path("state")
    }

    pub fn sysfs(&self) -> PathBuf {
        self.path("sys")
    }

    pub fn proc(&self) -> PathBuf {
        self.path("proc")
    }

    pub fn dev(&self) -> PathBuf {
        self.path("dev")
    }

    /// Device nodes in the fake /dev (plain files: discovery only checks they exist).
    pub fn dev_nodes(&self, names: &[&str]) {
        for name in names {
            std::fs::write(self.dev().join(name), "").unwrap();
        }
    }

    /// Rewrites the state file every fake re-reads on each call.
    pub fn state(&self, text: &str) {
        let tmp = self.path("state.tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, self.state_path()).unwrap();
    }

    /// Compiles `tests/accel/<source>` (a shared library unless `executable`).
    pub fn compile(&self, source: &str, out: &str, defines: &[&str], executable: bool) -> PathBuf {
        let output = self.path(out);
        let mut cmd = Command::new("cc");
        if !executable {
            cmd.args(["-shared", "-fPIC"]);
        }
        cmd.args(["-O0", "-Wall", "-Wextra", "-Werror", "-I", SOURCES])
            .arg(format!(
                "-DFAKE_STATE_PATH=\"{}\"",
                self.state_path().display()
            ))
            .args(defines.iter().map(|d| format!("-D{d}")))
            .arg("-o")
            .arg(&output)
            .arg(Path::new(SOURCES).join(source));
        let result = cmd.output().unwrap_or_else(|e| {
            panic!("these tests need a C compiler: cannot run `cc` ({e}); install gcc or clang")
        });
        assert!(
            result.status.success(),
            "cc failed for {source}:\n{}",
            String::from_utf8_lossy(&result.stderr)
        );
        output
    }

    pub fn lib(&self, source: &str, out: &str, defines: &[&str]) -> PathBuf {
        self.compile(source, out, defines, false)
    }

    /// A PCI device in the fake sysfs, with a NUMA node and DRM node names.
    pub fn pci(&self, bdf: &str, numa: i32, drm: &[&str]) {
        let dir = self.sysfs().join("bus/pci/devices").join(bdf);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("numa_node"), format!("{numa}\n")).unwrap();
        for name in drm {
            std::fs::create_dir_all(dir.join("drm").join(name)).unwrap();
        }
    }

    /// A process in the fake /proc, in `cgroup`, holding `open` device nodes.
    pub fn process(&self, pid: u32, cgroup: &str, open: &[&str]) {
        let dir = self.proc().join(pid.to_string());
        std::fs::create_dir_all(dir.join("fd")).unwrap();
        std::fs::write(dir.join("cgroup"), format!("0::{cgroup}\n")).unwrap();
        for (fd, target) in open.iter().enumerate() {
            std::os::unix::fs::symlink(target, dir.join("fd").join((fd + 3).to_string())).unwrap();
        }
    }

    /// A config using `libs`; every other vendor points at a missing file, so nothing on
    /// the host (a real driver) can leak into a test.
    pub fn config(&self, backend: BackendChoice, libs: &[(Vendor, &Path)]) -> AccelConfig {
        let mut env: HashMap<String, String> = HashMap::new();
        for vendor in Vendor::ALL {
            let path = libs
                .iter()
                .find(|(v, _)| *v == vendor)
                .map(|(_, p)| p.to_path_buf())
                .unwrap_or_else(|| self.path(&format!("absent-{vendor}.so")));
            env.insert(
                library_override_var(vendor).into(),
                path.display().to_string(),
            );
        }
        env.insert(
            "XLURM_HCU_HEALTH_TOOL".into(),
            self.path("hy-smi").display().to_string(),
        );
        env.insert("PATH".into(), "/nonexistent".into());
        let mut config = AccelConfig::from_env(backend, |k| env.get(k).map(Into::into));
        config.sysfs_root = self.sysfs();
        config.proc_root = self.proc();
        config.dev_root = self.dev();
        config.tool_timeout = Duration::from_secs(5);
        config
    }

    pub fn one(
        &self,
        vendor: Vendor,
        lib: &Path,
    ) -> (std::sync::Arc<dyn Backend>, Vec<DiscoveredDevice>) {
        let selection = select(&self.config(BackendChoice::Only(vendor), &[(vendor, lib)]))
            .unwrap_or_else(|e| panic!("{vendor}: {e}"));
        assert!(selection.warnings.is_empty());
        assert_eq!(selection.active.len(), 1);
        let active = selection.active.into_iter().next().unwrap();
        assert_eq!(active.backend.vendor(), vendor);
        (active.backend, active.devices)
    }

    /// Polls and assesses: `holders` maps device index to the holding job.
    pub fn health(
        &self,
        backend: &dyn Backend,
        devices: &[DiscoveredDevice],
        holders: &[(u32, JobId)],
    ) -> Vec<Health> {
        let cgroups = ProcCgroups::new(self.proc());
        let poll = backend.poll(devices);
        assess_all(
            devices,
            &poll,
            |d| holders.iter().find(|(i, _)| *i == d.index).map(|(_, j)| *j),
            |pid| cgroups.job_of(pid),
        )
    }
}

/// Each device's answers from one poll of `backend` (which must not fail).
pub fn polls(backend: &dyn Backend, devices: &[DiscoveredDevice]) -> Vec<xlurm::accel::DevicePoll> {
    backend.poll(devices).unwrap()
}

/// Each device's load from one poll of `backend`.
pub fn loads(backend: &dyn Backend, devices: &[DiscoveredDevice]) -> Vec<xlurm::accel::Load> {
    polls(backend, devices)
        .into_iter()
        .map(|p| p.load)
        .collect()
}
