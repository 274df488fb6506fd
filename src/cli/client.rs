//! The client side of org.xlurm.Scheduler1, with errors that say how to fix them.

use anyhow::{anyhow, Result};

pub use crate::wire::dict::Dict;

#[zbus::proxy(
    interface = "org.xlurm.Scheduler1",
    default_service = "org.xlurm.Scheduler1",
    default_path = "/org/xlurm/Scheduler1"
)]
pub trait Scheduler {
    fn submit(&self, spec: Dict) -> zbus::Result<(u64, Dict)>;
    fn submit_many(&self, specs: Vec<Dict>) -> zbus::Result<Vec<u64>>;
    fn cancel(&self, id: u64) -> zbus::Result<String>;
    fn cancel_task(&self, array: u64, index: u32) -> zbus::Result<(u64, String)>;
    fn find_task(&self, array: u64, index: u32) -> zbus::Result<u64>;
    fn hold(&self, id: u64) -> zbus::Result<bool>;
    fn release(&self, id: u64) -> zbus::Result<bool>;
    fn update(&self, id: u64, changes: Dict) -> zbus::Result<()>;
    fn get_job(&self, id: u64) -> zbus::Result<Dict>;
    fn list_jobs(&self, filter: Dict) -> zbus::Result<(Vec<crate::wire::queue::JobSummary>, bool)>;
    fn list_jobs_by_file_descriptor(&self, filter: Dict) -> zbus::Result<zbus::OwnedFd>;
    fn get_machine(&self) -> zbus::Result<Dict>;
    fn get_usage(&self, options: Dict) -> zbus::Result<Vec<Dict>>;
    fn read_log(
        &self,
        id: u64,
        cursor: &str,
        max_lines: u32,
    ) -> zbus::Result<(Vec<String>, String, String, u64)>;
    fn set_policy(&self, policy: &str) -> zbus::Result<()>;
    fn get_shares(&self) -> zbus::Result<Vec<Dict>>;
    fn get_user_limits(&self) -> zbus::Result<String>;
    fn set_user_limits(&self, limits: &str) -> zbus::Result<()>;
    fn set_max_running(&self, max_running: u32) -> zbus::Result<()>;
    fn set_gate(&self, on: bool) -> zbus::Result<()>;
    #[zbus(property)]
    fn gate(&self) -> zbus::Result<bool>;
    fn set_devices_disabled(&self, vendor: &str, ids: Vec<u32>, disabled: bool)
        -> zbus::Result<()>;
    #[zbus(signal)]
    fn job_state_changed(&self, id: u64, state: String) -> zbus::Result<()>;
}

/// Connects to xlurmd; the error names the fix.
pub async fn connect(user: bool) -> Result<SchedulerProxy<'static>> {
    let conn = if user {
        zbus::Connection::session().await
    } else {
        zbus::Connection::system().await
    }
    .map_err(|e| {
        anyhow!(
            "cannot reach the {} bus ({e}): is D-Bus running?",
            if user { "session" } else { "system" }
        )
    })?;
    let proxy = SchedulerProxy::new(&conn).await?;
    Ok(proxy)
}

/// Turns a D-Bus error into one line a user can act on.
pub fn explain(e: zbus::Error, user: bool) -> anyhow::Error {
    if let zbus::Error::MethodError(name, msg, _) = &e {
        let text = msg.clone().unwrap_or_default();
        return match name.as_str() {
            "org.freedesktop.DBus.Error.ServiceUnknown"
            | "org.freedesktop.DBus.Error.NameHasNoOwner" => {
                if user {
                    anyhow!(
                        "xlurmd is not running on your session bus: start it with `xlurmd --user`"
                    )
                } else {
                    anyhow!("xlurmd is not running: sudo systemctl start xlurmd")
                }
            }
            "org.freedesktop.DBus.Error.UnknownMethod" => {
                anyhow!(
                    "xlurmd is too old for this client ({text}): upgrade xlurm and restart xlurmd"
                )
            }
            n if n.starts_with(crate::wire::error::PREFIX) => {
                anyhow!("{text}")
            }
            _ => anyhow!("{name}: {text}"),
        };
    }
    anyhow!("{e}")
}

pub use crate::wire::dict::get;

pub fn get_str(d: &Dict, key: &str) -> String {
    get::<String>(d, key).unwrap_or_default()
}
