//! Asking polkit, within budgets: polkitd is shared by the whole machine
//! (logind, NetworkManager, udisks, pkexec), so no user may make xlurmd
//! hammer it, and no call may wait on it for ever.
//!
//! - a verdict is kept for [`VERDICT_TTL`] per bus name (the subject polkit
//!   judges) and kind of call (interactive or not): a client that calls in a
//!   loop asks polkit once a second;
//! - at most [`PER_USER`] checks of one user are in flight at once, the
//!   others wait their turn (a flood of new connections, each a new bus name,
//!   queues behind its own user, not in polkitd);
//! - a check has a deadline ([`TIMEOUT`], [`INTERACTIVE_TIMEOUT`] when the
//!   caller allowed an authentication dialog): past it the call is refused
//!   with `Failed`, naming polkit, and the message it pinned is let go.

use crate::wire::error::{ApiError, ApiResult};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
// tokio's clock, which tests can stop (`start_paused`).
use tokio::time::Instant;

/// How long a verdict is kept for the same bus name.
pub const VERDICT_TTL: Duration = Duration::from_secs(1);
/// Checks of one user in flight at once.
pub const PER_USER: usize = 2;
/// The most a non-interactive check may take.
pub const TIMEOUT: Duration = Duration::from_secs(10);
/// The most an interactive check may take (someone types a password).
pub const INTERACTIVE_TIMEOUT: Duration = Duration::from_secs(120);
/// Verdicts kept at most (older ones go first; each is a bus name).
const MAX_VERDICTS: usize = 4096;

/// The verdicts kept and each user's turns (see the module).
#[derive(Default)]
pub struct Polkit {
    verdicts: Mutex<HashMap<(String, bool), (Instant, bool)>>,
    turns: Mutex<HashMap<u32, Arc<tokio::sync::Semaphore>>>,
}

impl Polkit {
    /// Whether `sender` (of user `uid`) holds the authorization: a verdict
    /// kept, or `ask`'s, asked in `uid`'s turn and within the deadline.
    pub async fn check<F>(
        &self,
        uid: u32,
        sender: &str,
        interactive: bool,
        ask: impl FnOnce() -> F,
    ) -> ApiResult<bool>
    where
        F: std::future::Future<Output = ApiResult<bool>>,
    {
        let key = (sender.to_string(), interactive);
        if let Some(v) = self.kept(&key) {
            return Ok(v);
        }
        let turn = self.turn_of(uid);
        let limit = if interactive {
            INTERACTIVE_TIMEOUT
        } else {
            TIMEOUT
        };
        let answer = tokio::time::timeout(limit, async {
            let _turn = turn
                .acquire()
                .await
                .map_err(|_| ApiError::Failed("polkit checks are closed".into()))?;
            // Asked while this one waited its turn.
            if let Some(v) = self.kept(&key) {
                return Ok(v);
            }
            ask().await
        })
        .await
        .map_err(|_| {
            ApiError::Failed(format!(
                "polkit did not answer within {} s (polkitd busy, or an authentication agent that never answers); try again",
                limit.as_secs()
            ))
        })??;
        self.keep(key, answer);
        Ok(answer)
    }

    fn kept(&self, key: &(String, bool)) -> Option<bool> {
        let v = self.verdicts.lock().ok()?;
        v.get(key)
            .filter(|(at, _)| at.elapsed() < VERDICT_TTL)
            .map(|(_, ok)| *ok)
    }

    fn keep(&self, key: (String, bool), verdict: bool) {
        let Ok(mut v) = self.verdicts.lock() else {
            return;
        };
        if v.len() >= MAX_VERDICTS {
            v.retain(|_, (at, _)| at.elapsed() < VERDICT_TTL);
        }
        if v.len() < MAX_VERDICTS {
            v.insert(key, (Instant::now(), verdict));
        }
    }

    fn turn_of(&self, uid: u32) -> Arc<tokio::sync::Semaphore> {
        let mut t = self
            .turns
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Users with no check in flight are forgotten now and then.
        if t.len() > 1024 {
            t.retain(|_, s| Arc::strong_count(s) > 1);
        }
        t.entry(uid)
            .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(PER_USER)))
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test(start_paused = true)]
    async fn a_verdict_is_kept_a_second_per_bus_name() {
        let p = Polkit::default();
        let asked = AtomicUsize::new(0);
        let ask = || async {
            asked.fetch_add(1, Ordering::SeqCst);
            Ok(false)
        };
        for _ in 0..100 {
            assert!(!p.check(1000, ":1.5", false, ask).await.unwrap());
        }
        assert_eq!(asked.load(Ordering::SeqCst), 1, "a loop asks polkit once");
        // Another name, or an interactive call, is asked on its own.
        p.check(1000, ":1.6", false, ask).await.unwrap();
        p.check(1000, ":1.5", true, ask).await.unwrap();
        assert_eq!(asked.load(Ordering::SeqCst), 3);
        tokio::time::advance(VERDICT_TTL).await;
        p.check(1000, ":1.5", false, ask).await.unwrap();
        assert_eq!(
            asked.load(Ordering::SeqCst),
            4,
            "asked again a second later"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn one_users_flood_waits_its_turn_and_no_check_waits_for_ever() {
        let p = Arc::new(Polkit::default());
        let in_flight = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        // Bob's 16 connections, each a new bus name, polkit slow (1 s each).
        let mut bob = Vec::new();
        for k in 0..16 {
            let (p, in_flight, most) = (p.clone(), in_flight.clone(), most.clone());
            bob.push(tokio::spawn(async move {
                p.check(1001, &format!(":1.{k}"), false, || async {
                    let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                    Ok(false)
                })
                .await
            }));
        }
        tokio::task::yield_now().await;
        // Alice is not in bob's line.
        let t0 = tokio::time::Instant::now();
        assert!(p
            .check(1000, ":2.1", false, || async { Ok(true) })
            .await
            .unwrap());
        assert_eq!(t0.elapsed(), Duration::ZERO);
        for b in bob {
            // Past the deadline some of bob's are refused, naming polkit.
            match b.await.unwrap() {
                Ok(v) => assert!(!v),
                Err(e) => assert!(e.to_string().contains("polkit did not answer"), "{e}"),
            }
        }
        assert_eq!(
            most.load(Ordering::SeqCst),
            PER_USER,
            "bob's checks in polkitd at once"
        );
        // An agent that never answers: refused at the deadline, not pinned.
        let t0 = tokio::time::Instant::now();
        let e = p
            .check(1002, ":3.1", true, std::future::pending::<ApiResult<bool>>)
            .await
            .unwrap_err();
        assert_eq!(t0.elapsed(), INTERACTIVE_TIMEOUT);
        assert!(e.to_string().contains("120 s"), "{e}");
    }
}
