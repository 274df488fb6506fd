//! Calls in flight: how many method calls each connection and each user may
//! have waiting for xlurmd's answer.
//!
//! Every call xlurmd receives runs as its own task until it is answered, and
//! keeps its message (up to the bus's `max_message_size`, 32 MiB on the
//! system bus) until then. Some calls wait on purpose: a `ReadLog` beyond a
//! user's share waits up to 10 s for a turn, a submission waits for its
//! working directories to be checked. A client that sends calls without
//! waiting for their answers could otherwise hold any number of them; the
//! bus broker bounds only the calls of one connection (128 pending replies
//! on the system bus) and the connections of one user (256).
//!
//! So a call is admitted only while its connection has fewer than
//! [`PER_CONNECTION`] calls in flight and its user fewer than [`PER_USER`];
//! past either, it is answered at once with `LimitExceeded`, naming which.
//! Well-behaved clients never come near: the CLI waits for each answer, and
//! `xrun` has at most two calls out at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Calls one connection may have in flight.
pub const PER_CONNECTION: usize = 32;
/// Calls one user may have in flight, over all their connections.
pub const PER_USER: usize = 128;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Connection(String),
    User(u32),
}

/// The calls in flight, counted per connection and per user.
#[derive(Debug, Default)]
pub struct InFlight {
    counts: Mutex<HashMap<Key, usize>>,
}

/// One admitted call, counted until it is dropped.
#[derive(Debug)]
pub struct Admitted {
    table: Arc<InFlight>,
    key: Key,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        if let Ok(mut counts) = self.table.counts.lock() {
            if let Some(n) = counts.get_mut(&self.key) {
                *n -= 1;
                if *n == 0 {
                    counts.remove(&self.key);
                }
            }
        }
    }
}

impl InFlight {
    /// Admits a call from the connection `sender`, or says why not.
    pub fn from_connection(self: &Arc<Self>, sender: &str) -> Result<Admitted, String> {
        self.admit(Key::Connection(sender.to_string()), PER_CONNECTION)
            .ok_or_else(|| {
                format!(
                    "this connection has {PER_CONNECTION} calls to xlurmd waiting for answers, \
                     the most it may: wait for their answers before sending more"
                )
            })
    }

    /// Admits a call from the user `uid`, or says why not.
    pub fn from_user(self: &Arc<Self>, uid: u32) -> Result<Admitted, String> {
        self.admit(Key::User(uid), PER_USER).ok_or_else(|| {
            format!(
                "uid {uid} has {PER_USER} calls to xlurmd waiting for answers over all its \
                 connections, the most a user may: wait for their answers before sending more"
            )
        })
    }

    fn admit(self: &Arc<Self>, key: Key, cap: usize) -> Option<Admitted> {
        let mut counts = self.counts.lock().ok()?;
        let n = counts.entry(key.clone()).or_default();
        if *n >= cap {
            return None;
        }
        *n += 1;
        Some(Admitted {
            table: self.clone(),
            key,
        })
    }

    /// Connections and users with calls in flight (for tests: nothing is
    /// kept for those without).
    pub fn len(&self) -> usize {
        self.counts.lock().map(|c| c.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_connection_and_each_user_has_its_own_cap() {
        let t = Arc::new(InFlight::default());
        let a: Vec<_> = (0..PER_CONNECTION)
            .map(|_| t.from_connection(":1.1").unwrap())
            .collect();
        let err = t.from_connection(":1.1").unwrap_err();
        assert!(err.contains("this connection has 32 calls"), "{err}");
        // Another connection is not held back by the first.
        let b = t.from_connection(":1.2").unwrap();
        let users: Vec<_> = (0..PER_USER).map(|_| t.from_user(1000).unwrap()).collect();
        let err = t.from_user(1000).unwrap_err();
        assert!(err.contains("uid 1000 has 128 calls"), "{err}");
        let other = t.from_user(1001).unwrap();
        assert_eq!(t.len(), 4);
        drop((b, other));
        assert_eq!(t.len(), 2, "a count of none is not kept");
        drop(users);
        drop(a);
        assert!(t.is_empty());
    }

    #[test]
    fn an_answered_call_makes_room_for_the_next() {
        let t = Arc::new(InFlight::default());
        let mut held: Vec<_> = (0..PER_CONNECTION)
            .map(|_| t.from_connection(":1.7").unwrap())
            .collect();
        assert!(t.from_connection(":1.7").is_err());
        held.pop();
        held.push(t.from_connection(":1.7").unwrap());
        assert!(t.from_connection(":1.7").is_err());
    }
}
