//! Following a job from the CLI: the signals that stop xrun, waiting for a
//! state change, riding out xlurmd going away for a moment, and streaming a
//! job's output page by page (xrun and `xlurm log`).

use super::client::{explain, SchedulerProxy};
use super::format::local_time;
use crate::wire::bus::transient;
use anyhow::Result;
use std::time::{Duration, Instant};

/// `eprintln!` that cannot panic: xrun ignores SIGPIPE, and its stderr may
/// be a pipe whose reader is gone (`xrun ... 2>&1 | head`).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

pub(super) use say;

pub(super) fn stamp() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// Whether standard output's reader went away: a pipe whose other end is
/// closed polls as an error.
pub(super) fn stdout_closed() -> bool {
    let mut fds = [nix::libc::pollfd {
        fd: 1,
        events: nix::libc::POLLOUT,
        revents: 0,
    }];
    // SAFETY: one valid pollfd, and no waiting.
    let n = unsafe { nix::libc::poll(fds.as_mut_ptr(), 1, 0) };
    n > 0 && fds[0].revents & nix::libc::POLLERR != 0
}

/// The signals that make xrun cancel its job: SIGINT, SIGTERM, SIGHUP.
pub(super) struct Stops {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Stops {
    pub(super) fn new() -> std::io::Result<Stops> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Stops {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    /// Returns when any of them arrives.
    pub(super) async fn next(&mut self) {
        tokio::select! {
            _ = self.int.recv() => {}
            _ = self.term.recv() => {}
            _ = self.hup.recv() => {}
        }
    }
}

/// Job state changes (`JobStateChanged`: every job's, as ID and state),
/// read off the bus by a task of their own from the moment of [`Changes::subscribe`].
///
/// zbus stops reading a connection, method replies included, while one of
/// its signal streams holds 64 unread messages. xrun and `xlurm top` make
/// calls between their looks at the changes, and xlurmd broadcasts every
/// job's: a burst (an array cancelled, a lane of short jobs) would leave
/// them waiting for a reply that is never read. Here the stream is always
/// read, and what it brings waits in a queue of its own.
pub(super) struct Changes(tokio::sync::mpsc::UnboundedReceiver<(u64, String)>);

impl Changes {
    /// Subscribes with one `AddMatch` whose sender is xlurmd's bus name (the
    /// proxy's own signal stream also asks for the name's owner and follows
    /// its changes: two more round trips before a submission, issue 21).
    /// The bus applies that sender to broadcasts only: anyone may send this
    /// connection a signal of its own, so each is checked against the name's
    /// owner here ([`Teller`]).
    pub(super) async fn subscribe(p: &SchedulerProxy<'_>) -> zbus::Result<Changes> {
        use futures_util::StreamExt;
        let rule = zbus::MatchRule::builder()
            .msg_type(zbus::message::Type::Signal)
            .sender(p.inner().destination().to_owned())
            .path(p.inner().path().to_owned())
            .interface(p.inner().interface().to_owned())
            .member("JobStateChanged")
            .build()?;
        let conn = p.inner().connection().clone();
        let mut stream = zbus::MessageStream::for_match_rule(rule, &conn, None).await?;
        let mut teller = Teller::new(p.inner().destination().to_string());
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(msg) = stream.next().await {
                let Ok(msg) = msg else { continue };
                let sender = msg.header().sender().map(|s| s.to_string());
                if !teller.is_owner(&conn, sender.as_deref()).await {
                    continue;
                }
                if let Ok(change) = msg.body().deserialize::<(u64, String)>() {
                    if tx.send(change).is_err() {
                        return;
                    }
                }
            }
        });
        Ok(Changes(rx))
    }

    /// The next change of any job; `None` once the connection is gone.
    pub(super) async fn next(&mut self) -> Option<(u64, String)> {
        self.0.recv().await
    }

    /// Forgets the changes heard so far: a look at the job that follows
    /// sees them all (a submission's PENDING and RUNNING arrive together;
    /// one look, not one per change, while systemd starts the job).
    pub(super) fn forget_heard(&mut self) {
        while self.0.try_recv().is_ok() {}
    }

    /// Returns when job `id` changes to a state other than `state` (never,
    /// once the connection is gone).
    pub(super) async fn wait_past(&mut self, id: u64, state: &str) {
        while let Some((j, s)) = self.0.recv().await {
            if j == id && s != state {
                return;
            }
        }
        std::future::pending::<()>().await;
    }

    /// Returns when job `id` changes state (never, once the connection is gone).
    pub(super) async fn wait_for(&mut self, id: u64) {
        while let Some((j, _)) = self.0.recv().await {
            if j == id {
                return;
            }
        }
        std::future::pending::<()>().await;
    }
}

/// Who may tell of job changes: the owner of xlurmd's bus name, as the bus
/// says. It is asked when a signal comes from a sender not known as the
/// owner (the first signal, or the first after xlurmd restarted under a new
/// unique name), at most once a second: a stream of forged signals costs
/// one question a second, and what is kept is only ever the bus's answer.
struct Teller {
    name: String,
    owner: Option<String>,
    asked: Option<Instant>,
}

impl Teller {
    fn new(name: String) -> Teller {
        Teller {
            name,
            owner: None,
            asked: None,
        }
    }

    async fn is_owner(&mut self, conn: &zbus::Connection, sender: Option<&str>) -> bool {
        let Some(sender) = sender else { return false };
        if self.owner.as_deref() == Some(sender) {
            return true;
        }
        if self
            .asked
            .is_some_and(|t| t.elapsed() < Duration::from_secs(1))
        {
            return false;
        }
        self.asked = Some(Instant::now());
        self.owner = conn
            .call_method(
                Some("org.freedesktop.DBus"),
                "/org/freedesktop/DBus",
                Some("org.freedesktop.DBus"),
                "GetNameOwner",
                &(self.name.as_str()),
            )
            .await
            .ok()
            .and_then(|reply| reply.body().deserialize::<String>().ok());
        self.owner.as_deref() == Some(sender)
    }
}

/// How long xrun and `xlurm log` wait for xlurmd to answer again (a restart
/// or an upgrade takes seconds) before giving up.
const OUTAGE_MAX: Duration = Duration::from_secs(120);

/// Rides out xlurmd going away for a moment: a call in flight when it stops
/// gets NoReply, and one made while it is gone may fail before bus
/// activation starts it again. Jobs are systemd's and keep running. Only
/// once xlurmd has answered: a first call that fails says so at once
/// ("xlurmd is not running: ...").
#[derive(Default)]
pub(super) struct Outage {
    pub(super) answered: bool,
    pub(super) since: Option<Instant>,
}

impl Outage {
    /// The call's answer; `None` when xlurmd is away and the caller should
    /// try again shortly; an error when the call failed for good, or xlurmd
    /// stayed away longer than `OUTAGE_MAX`.
    pub(super) fn check<T>(&mut self, answer: zbus::Result<T>, user: bool) -> Result<Option<T>> {
        match answer {
            Ok(v) => {
                self.answered = true;
                if self.since.take().is_some() {
                    say!("[{}] xlurmd answers again", stamp());
                }
                Ok(Some(v))
            }
            Err(e) if self.answered && transient(&e) => {
                let since = *self.since.get_or_insert_with(|| {
                    say!(
                        "[{}] xlurmd is not answering ({e}); waiting for it to come back...",
                        stamp()
                    );
                    Instant::now()
                });
                if since.elapsed() > OUTAGE_MAX {
                    return Err(explain(e, user).context(format!(
                        "xlurmd did not answer for {} s",
                        OUTAGE_MAX.as_secs()
                    )));
                }
                Ok(None)
            }
            Err(e) => Err(explain(e, user)),
        }
    }
}

/// Streams a job's output to stdout, page by page.
#[derive(Default)]
pub(super) struct LogStream {
    /// Whether xlurmd is away, and since when.
    pub(super) outage: Outage,
    cursor: String,
    /// Whether the "rotated away" warning was printed.
    warned: bool,
    /// Whether stdout was closed by its reader (EPIPE; only where SIGPIPE
    /// is ignored, as in xrun): nothing more is written.
    pub(super) closed: bool,
}

impl LogStream {
    /// Prints what is new; returns the number of lines and the job's state,
    /// or `None` while xlurmd is away (see `Outage`).
    pub(super) async fn pump(
        &mut self,
        p: &SchedulerProxy<'_>,
        id: u64,
        user: bool,
    ) -> Result<Option<(usize, String)>> {
        use std::io::Write;
        let answer = p.read_log(id, &self.cursor, 20_000).await;
        let Some((lines, cursor, state, missing_before)) = self.outage.check(answer, user)? else {
            return Ok(None);
        };
        if missing_before > 0 && !self.warned {
            self.warned = true;
            say!(
                "xlurm: job {id}'s output from before {} is no longer in the journal: \
                 journald rotated it away to stay within its size limits \
                 (admins: journalctl --disk-usage, SystemMaxUse= in journald.conf; \
                 --output PATH keeps a job's whole output in a file)",
                local_time(missing_before, true)
            );
        }
        self.cursor = cursor;
        let mut out = std::io::stdout().lock();
        let written = lines
            .iter()
            .try_for_each(|l| writeln!(out, "{l}"))
            .and_then(|()| out.flush());
        if written.is_err_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) {
            self.closed = true;
        }
        Ok(Some((lines.len(), state)))
    }

    /// After the job ended: reads until the journal has nothing more (it may
    /// still be writing the last lines when the unit ends).
    pub(super) async fn drain(
        &mut self,
        p: &SchedulerProxy<'_>,
        id: u64,
        user: bool,
    ) -> Result<()> {
        // The job's unit has been harvested by now, and journald has read the
        // job's stream to its end: read until a page comes back empty.
        let t0 = Instant::now();
        while !self.closed
            && (t0.elapsed() < Duration::from_secs(30) || self.outage.since.is_some())
        {
            match self.pump(p, id, user).await? {
                Some((0, _)) => break,
                Some(_) => {}
                None => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn changes_heard_before_a_look_wake_no_second_look() {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let mut changes = Changes(rx);
        tx.send((7, "PENDING".to_string())).unwrap();
        tx.send((7, "RUNNING".to_string())).unwrap();
        changes.forget_heard();
        // What comes after the look wakes the next one.
        tx.send((7, "COMPLETED".to_string())).unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(5), changes.wait_for(7))
            .await
            .unwrap();
        let next = tokio::time::timeout(std::time::Duration::from_millis(50), changes.next()).await;
        assert!(next.is_err(), "a change was left over: {next:?}");
    }
}
