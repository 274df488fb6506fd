//! Following job units through systemd's signals: only systemd's own (see
//! [`SystemdSender`]), each turned into a verdict (`outcome::Tracker`) and
//! handed to the daemon.

use crate::daemon::service::Daemon;
use crate::daemon::systemd::outcome::Verdict;
use crate::daemon::systemd::{SystemdSender, SYSTEMD_NAME};
use std::sync::Arc;
use std::time::Duration;

/// Follows job units' `PropertiesChanged` signals (see `outcome::Tracker`).
/// Only systemd's own signals count (see [`SystemdSender`]): anything else,
/// whatever it says and whoever it is addressed to, is dropped before it is
/// read, so a forged signal neither touches a job nor costs systemd a call.
pub async fn spawn_unit_watcher(
    d: Arc<Daemon>,
    conn: zbus::Connection,
    lost: Arc<tokio::sync::Notify>,
) -> Option<tokio::task::JoinHandle<()>> {
    use futures_util::StreamExt;
    let stream = |rule: zbus::Result<zbus::MatchRule<'static>>, what: &'static str| {
        let conn = conn.clone();
        async move {
            let rule = rule
                .map_err(|e| tracing::error!("building the {what} match: {e}"))
                .ok()?;
            zbus::MessageStream::for_match_rule(rule, &conn, std::num::NonZeroUsize::new(1024))
                .await
                .map_err(|e| tracing::error!("subscribing to {what}: {e}"))
                .ok()
        }
    };
    let units = zbus::MatchRule::builder()
        .msg_type(zbus::message::Type::Signal)
        .sender(SYSTEMD_NAME)
        .interface("org.freedesktop.DBus.Properties")
        .member("PropertiesChanged")
        .path_namespace("/org/freedesktop/systemd1/unit")
        .build();
    let owners = zbus::MatchRule::builder()
        .msg_type(zbus::message::Type::Signal)
        .sender("org.freedesktop.DBus")
        .interface("org.freedesktop.DBus")
        .member("NameOwnerChanged")
        .add_arg(SYSTEMD_NAME)
        .build();
    // Subscribed to owner changes before asking for the owner: a change in
    // between is not missed.
    let mut owners = stream(owners, "systemd's owner changes").await?;
    let mut units = stream(units, "unit signals").await?;
    let owner = match zbus::fdo::DBusProxy::new(&conn).await {
        Ok(bus) => bus.get_name_owner(SYSTEMD_NAME.try_into().ok()?).await.ok(),
        Err(_) => None,
    };
    let mut systemd = SystemdSender::new(owner.map(|o| o.to_string()));
    if systemd.owner().is_none() {
        tracing::warn!("{SYSTEMD_NAME} has no owner on the bus: unit signals wait for one");
    }
    Some(tokio::spawn(async move {
        let mut tracker = crate::daemon::systemd::outcome::Tracker::default();
        let mut forged = Forged::default();
        loop {
            let msg = tokio::select! {
                // Owner changes first: the bus sends a new owner's name before
                // its signals, and both queues are filled in that order.
                biased;
                m = owners.next() => {
                    match m {
                        Some(Ok(m)) => {
                            if systemd.on_owner_changed(&m) {
                                tracing::info!("systemd's bus name is now owned by {:?}", systemd.owner());
                                // Units followed so far are read afresh when they end.
                                tracker = crate::daemon::systemd::outcome::Tracker::default();
                            }
                        }
                        Some(Err(_)) => {}
                        // The connection is gone (and with it every stream).
                        None => break,
                    }
                    continue;
                }
                m = units.next() => match m {
                    Some(Ok(m)) => m,
                    Some(Err(_)) => continue,
                    None => break,
                },
            };
            if !systemd.sent(&msg) {
                forged.seen(&msg);
                continue;
            }
            let Some((id, signal)) = crate::daemon::systemd::job_signal(&msg) else {
                continue;
            };
            let d = d.clone();
            match tracker.on(id, signal) {
                Verdict::Nothing => {}
                Verdict::Started(invocation) => {
                    tokio::spawn(async move { d.invocation_heard(id, invocation).await });
                }
                Verdict::Finished(status) => {
                    tokio::spawn(async move { d.reconcile_with(id, Some(status)).await });
                }
                Verdict::Read => {
                    tokio::spawn(async move { d.reconcile(id).await });
                }
            }
        }
        // Both streams end only with the connection.
        lost.notify_one();
    }))
}

/// Unit signals not sent by systemd, for the admin: the first is logged at
/// once, later ones at most once a minute as a count (a flood costs a
/// counter, not a journal line each).
#[derive(Default)]
struct Forged {
    count: u64,
    logged: u64,
    last_log: Option<std::time::Instant>,
}

impl Forged {
    fn seen(&mut self, msg: &zbus::Message) {
        self.count += 1;
        let due = self
            .last_log
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(60));
        if !due {
            return;
        }
        let header = msg.header();
        let sender = header.sender().map_or("(none)", |s| s.as_str());
        let path = header.path().map_or("(none)", |p| p.as_str());
        tracing::warn!(
            "ignored {} unit signal(s) not sent by systemd (forged?); the last from {sender} for {path}",
            self.count - self.logged
        );
        self.logged = self.count;
        self.last_log = Some(std::time::Instant::now());
    }
}
