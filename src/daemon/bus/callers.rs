//! Who a bus connection belongs to: the uid the bus broker vouches for
//! (`GetConnectionUnixUser`), asked once per connection rather than once
//! per call.
//!
//! Keeping the answer is sound: a unique name (`:1.42`) names one
//! connection for the broker's whole life and is never given to another, and
//! the broker takes a connection's credentials from its socket when it
//! connects, never from what it sends later. A client that makes several
//! calls (`xrun` follows its job with `GetJob` and `ReadLog`, `xlurm top`
//! polls) then costs the broker one round trip in all, not one per call.
//!
//! Keyed by unique name alone: xlurmd has one bus connection (to one
//! broker) and exits when it loses it, so every name comes from that
//! broker.
//!
//! Bounded: at most [`CAPACITY`] connections are kept; the next one past
//! that empties the list, so a flood of one-call clients costs a lookup
//! each, as without the list, and never more memory.

use std::collections::HashMap;
use std::sync::Mutex;
use zbus::names::UniqueName;
use zbus::Connection;

/// Connections whose uid is kept.
pub const CAPACITY: usize = 4096;

/// The uids of the connections that called lately.
#[derive(Debug, Default)]
pub struct Callers {
    known: Mutex<HashMap<String, u32>>,
}

impl Callers {
    /// The uid of the connection `sender`, as the broker on `conn` says.
    pub async fn uid(&self, conn: &Connection, sender: &UniqueName<'_>) -> zbus::fdo::Result<u32> {
        if let Some(uid) = self.known(sender.as_str()) {
            return Ok(uid);
        }
        let dbus = zbus::fdo::DBusProxy::new(conn).await?;
        let uid = dbus.get_connection_unix_user(sender.clone().into()).await?;
        self.keep(sender.as_str(), uid);
        Ok(uid)
    }

    fn known(&self, sender: &str) -> Option<u32> {
        self.known.lock().ok()?.get(sender).copied()
    }

    fn keep(&self, sender: &str, uid: u32) {
        if let Ok(mut known) = self.known.lock() {
            if known.len() >= CAPACITY {
                known.clear();
            }
            known.insert(sender.to_string(), uid);
        }
    }

    /// How many connections are kept (for tests).
    pub fn len(&self) -> usize {
        self.known.lock().map(|k| k.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_per_connection_and_bounded() {
        let c = Callers::default();
        assert!(c.is_empty());
        c.keep(":1.1", 1000);
        c.keep(":1.2", 1001);
        assert_eq!(c.known(":1.1"), Some(1000));
        assert_eq!(c.known(":1.2"), Some(1001));
        assert_eq!(c.known(":1.3"), None);
        for i in 0..CAPACITY {
            c.keep(&format!(":2.{i}"), 7);
        }
        // Full: the one past the bound started the list again.
        assert!(c.len() <= CAPACITY, "{}", c.len());
        assert_eq!(c.known(":1.1"), None);
        assert_eq!(c.known(&format!(":2.{}", CAPACITY - 1)), Some(7));
    }
}
