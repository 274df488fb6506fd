//! What systemd says on the bus and who may say it: unit object paths, the
//! one sender whose unit signals count, and what a job unit's
//! `PropertiesChanged` reports.

use super::outcome::UnitSignal;
use std::collections::HashMap;
use zbus::Variant;

/// The D-Bus object path of a unit (systemd escapes names: `-` is `_2d`).
pub fn unit_path(unit: &str) -> String {
    let mut path = String::from("/org/freedesktop/systemd1/unit/");
    for (i, b) in unit.bytes().enumerate() {
        if b.is_ascii_alphanumeric() && !(i == 0 && b.is_ascii_digit()) {
            path.push(b as char);
        } else {
            path.push_str(&format!("_{b:02x}"));
        }
    }
    path
}

/// The unit a D-Bus object path names (the reverse of [`unit_path`]);
/// `None` for a path outside systemd's units or a malformed escape.
pub fn unit_of_path(path: &str) -> Option<String> {
    let escaped = path.strip_prefix("/org/freedesktop/systemd1/unit/")?;
    let mut unit = Vec::with_capacity(escaped.len());
    let mut bytes = escaped.bytes();
    while let Some(b) = bytes.next() {
        if b == b'_' {
            let hex = [bytes.next()?, bytes.next()?];
            unit.push(u8::from_str_radix(std::str::from_utf8(&hex).ok()?, 16).ok()?);
        } else {
            unit.push(b);
        }
    }
    String::from_utf8(unit).ok()
}

/// The well-known name systemd's manager owns on the bus.
pub const SYSTEMD_NAME: &str = "org.freedesktop.systemd1";

/// Who speaks for systemd on the bus: the unique name (`:1.1`) that owns
/// [`SYSTEMD_NAME`] now. The bus daemon stamps every message with its
/// sender's unique name, so the sender is the one part of a signal no one
/// can forge; its path, destination and contents are anyone's to choose (any
/// user may address a signal to xlurmd's unique name, and the bus delivers it
/// whatever xlurmd's match rules say). A unit signal counts only when its
/// sender is the current owner, followed through the bus's own
/// `NameOwnerChanged` (systemd takes a new unique name when it re-executes).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SystemdSender {
    owner: Option<String>,
}

/// The bus daemon's own name: the sender of `NameOwnerChanged`.
pub(super) const BUS_DRIVER: &str = "org.freedesktop.DBus";

impl SystemdSender {
    /// Starts from the owner the bus named (`GetNameOwner`); `None` when
    /// systemd has no name on the bus now (every unit signal is then ignored
    /// until the bus announces one).
    pub fn new(owner: Option<String>) -> SystemdSender {
        SystemdSender { owner }
    }

    /// The unique name accepted now.
    pub fn owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }

    /// Whether `msg` was sent by systemd.
    pub fn sent(&self, msg: &zbus::Message) -> bool {
        let header = msg.header();
        match (header.sender(), &self.owner) {
            (Some(sender), Some(owner)) => sender.as_str() == owner,
            _ => false,
        }
    }

    /// Takes in a `NameOwnerChanged` signal: one sent by the bus itself about
    /// [`SYSTEMD_NAME`] moves the accepted sender to the new owner (none if
    /// the name was released). Returns whether it did; a forged one (any
    /// other sender) or one about another name changes nothing.
    pub fn on_owner_changed(&mut self, msg: &zbus::Message) -> bool {
        let header = msg.header();
        let from_bus = header.sender().is_some_and(|s| s.as_str() == BUS_DRIVER);
        if !from_bus
            || header.interface().map(|i| i.as_str()) != Some(BUS_DRIVER)
            || header.member().map(|m| m.as_str()) != Some("NameOwnerChanged")
        {
            return false;
        }
        let body = msg.body();
        let Ok((name, _old, new)) = body.deserialize::<(&str, &str, &str)>() else {
            return false;
        };
        if name != SYSTEMD_NAME {
            return false;
        }
        self.owner = (!new.is_empty()).then(|| new.to_string());
        true
    }
}

/// The job and what it said, for a `PropertiesChanged` signal of a job's
/// unit (`xlurm-job-<id>.service`); `None` for any other message.
pub fn job_signal(msg: &zbus::Message) -> Option<(u64, UnitSignal)> {
    let header = msg.header();
    let path = header.path()?;
    let id = crate::unit_name::job_of(&unit_of_path(path.as_str())?)?;
    let body = msg.body();
    type Changed<'a> = (&'a str, HashMap<&'a str, Variant<'a>>, Vec<&'a str>);
    let Ok((iface, changed, _)) = body.deserialize::<Changed<'_>>() else {
        return Some((id, UnitSignal::Unclear));
    };
    let text = |k: &str| changed.get(k).and_then(|v| String::try_from(v).ok());
    let int = |k: &str| changed.get(k).and_then(|v| i32::try_from(v).ok());
    let signal = match iface {
        "org.freedesktop.systemd1.Service" => {
            match (text("Result"), int("ExecMainCode"), int("ExecMainStatus")) {
                (Some(result), Some(exec_main_code), Some(exec_main_status)) => {
                    UnitSignal::Service {
                        result,
                        exec_main_code,
                        exec_main_status,
                    }
                }
                _ => UnitSignal::Unclear,
            }
        }
        "org.freedesktop.systemd1.Unit" => {
            let invocation = match changed.get("InvocationID") {
                Some(Variant::Array(a)) => Some(
                    a.inner()
                        .iter()
                        .map(|b| match b {
                            Variant::U8(b) => format!("{b:02x}"),
                            _ => String::new(),
                        })
                        .collect::<String>(),
                ),
                _ => None,
            };
            let job = changed
                .get("Job")
                .and_then(|v| <(u32, zbus::ObjectPath<'_>)>::try_from(v).ok());
            match (text("ActiveState"), text("SubState"), invocation, job) {
                (Some(active_state), Some(sub_state), Some(invocation_id), Some((job, _))) => {
                    UnitSignal::Unit {
                        active_state,
                        sub_state,
                        invocation_id,
                        pending_job: job != 0,
                    }
                }
                _ => UnitSignal::Unclear,
            }
        }
        _ => UnitSignal::Unclear,
    };
    Some((id, signal))
}
