//! The double's unit objects: a job unit's Unit and Service interfaces, a
//! slice's Unit and Slice interfaces, with the properties xlurmd reads.

use super::{Shared, SliceDropIn};
use std::sync::{Arc, Mutex};
use zbus::OwnedVariant;

pub struct UnitObj {
    pub(super) active_state: String,
    pub(super) sub_state: String,
    pub(super) invocation: Vec<u8>,
}

pub struct ServiceObj {
    pub(super) result: String,
    pub(super) exec_main_code: i32,
    pub(super) exec_main_status: i32,
    pub(super) memory_max: u64,
    /// Accounting, known once the unit ran (`u64::MAX`: unset, as systemd says).
    pub(super) memory_peak: u64,
    pub(super) cpu_usage_nsec: u64,
}

#[zbus::interface(name = "org.freedesktop.systemd1.Unit")]
impl UnitObj {
    #[zbus(property)]
    fn active_state(&self) -> String {
        self.active_state.clone()
    }
    #[zbus(property)]
    fn sub_state(&self) -> String {
        self.sub_state.clone()
    }
    #[zbus(property, name = "InvocationID")]
    fn invocation_id(&self) -> Vec<u8> {
        self.invocation.clone()
    }
}

/// A slice whose properties were set: its device policy, as systemd
/// reports it (a winning drop-in's, else the last set, else `auto`).
pub struct SliceObj {
    pub(super) shared: Arc<Mutex<Shared>>,
    pub(super) name: String,
}

/// The same slice's Unit interface: the drop-ins read for it.
pub struct SliceUnitObj {
    pub(super) shared: Arc<Mutex<Shared>>,
}

impl SliceObj {
    /// Setting `name` as systemd reports it: the winning drop-in's
    /// (`from_drop_in`), else the last set, else `default`.
    fn setting<T: TryFrom<OwnedVariant>>(
        &self,
        name: &str,
        from_drop_in: impl Fn(&SliceDropIn) -> T,
        default: T,
    ) -> T {
        let Ok(s) = self.shared.lock() else {
            return default;
        };
        match &s.slice_drop_in {
            Some(d) => from_drop_in(d),
            None => s
                .last_set(&self.name, name)
                .and_then(|v| T::try_from(v).ok())
                .unwrap_or(default),
        }
    }
}

#[zbus::interface(name = "org.freedesktop.systemd1.Slice")]
impl SliceObj {
    #[zbus(property)]
    fn device_policy(&self) -> String {
        self.setting("DevicePolicy", |d| d.policy.clone(), "auto".into())
    }
    #[zbus(property)]
    fn device_allow(&self) -> Vec<(String, String)> {
        self.setting("DeviceAllow", |d| d.allow.clone(), Vec::new())
    }
}

#[zbus::interface(name = "org.freedesktop.systemd1.Unit")]
impl SliceUnitObj {
    #[zbus(property)]
    fn drop_in_paths(&self) -> Vec<String> {
        self.shared
            .lock()
            .ok()
            .and_then(|s| Some(vec![s.slice_drop_in.as_ref()?.path.clone()]))
            .unwrap_or_default()
    }
}

#[zbus::interface(name = "org.freedesktop.systemd1.Service")]
impl ServiceObj {
    #[zbus(property)]
    fn result(&self) -> String {
        self.result.clone()
    }
    #[zbus(property)]
    fn exec_main_code(&self) -> i32 {
        self.exec_main_code
    }
    #[zbus(property)]
    fn exec_main_status(&self) -> i32 {
        self.exec_main_status
    }
    #[zbus(property)]
    fn memory_max(&self) -> u64 {
        self.memory_max
    }
    #[zbus(property)]
    fn memory_peak(&self) -> u64 {
        self.memory_peak
    }
    #[zbus(property, name = "CPUUsageNSec")]
    fn cpu_usage_nsec(&self) -> u64 {
        self.cpu_usage_nsec
    }
}
