//! One monitoring round of one backend: poll it off the event loop, then judge the
//! answer against who held each device *while the poll ran*.
//!
//! A poll takes time (it runs on a blocking thread, up to its timeout), and jobs are
//! given devices meanwhile. So the holders are read twice: just before the poll, and
//! again after it returns, under the lock that allocation takes; judging and updating
//! the books happen under that same lock. A device whose holder changed in between was
//! given to (or taken from) a job while the library was answering, so the poll cannot
//! say whose processes were whose: its busy-or-free verdict is not used this round and
//! the device keeps its health until the next round, with a settled holder, judges it.
//! Verdicts that do not depend on the holder (unknown, unhealthy) apply at once. A
//! device just given to a job is thus never "busy" because its job's process appears.

use super::{assess_all, DevicePoll, DiscoveredDevice, Load, Poller, QueryError};
use crate::core::{Health, JobId};
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// Who holds a device: the job holding it now, and the last job it was given
/// to (kept after that job lets go; job IDs are never reused). Two reads with
/// the same `Hold` saw no hand-over in between, even one that came and went.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Hold {
    pub now: Option<JobId>,
    pub last: Option<JobId>,
}

/// Each device's [`Hold`] for one backend, by device index.
pub type Holders = BTreeMap<u32, Hold>;

/// Each device's new health from one poll (in `devices` order), or `None` where the
/// device keeps its current health: it changed hands between `before` (read when the
/// poll started) and `after` (read when it returned; a job given the device and gone
/// again counts) and the verdict would be `Ok` or `Busy`, which depend on the holder.
/// Everything else is [`assess_all`] against `after`.
pub fn judge(
    devices: &[DiscoveredDevice],
    poll: &Result<Vec<DevicePoll>, QueryError>,
    before: &Holders,
    after: &Holders,
    job_of_pid: impl Fn(u32) -> Option<JobId>,
) -> Vec<Option<Health>> {
    let fresh = assess_all(
        devices,
        poll,
        |d| after.get(&d.index).and_then(|h| h.now),
        job_of_pid,
    );
    devices
        .iter()
        .zip(fresh)
        .map(|(d, health)| {
            let settled = before.get(&d.index) == after.get(&d.index);
            match health {
                Health::Ok | Health::Busy { .. } if !settled => None,
                health => Some(health),
            }
        })
        .collect()
}

/// One round: reads the holds from `state` (`holder_of`), polls (within `timeout`),
/// finds the job of every process the poll reported (`job_of_pid`, before taking the
/// lock again), then, under `state`'s lock, reads the holders again, [`judge`]s, and
/// hands the verdicts to `apply` (`None`: keep the device's health) with each device's
/// load (none when the poll failed as a whole).
pub async fn round<S, R>(
    poller: &Poller,
    timeout: Duration,
    state: &tokio::sync::Mutex<S>,
    holder_of: impl Fn(&S, &DiscoveredDevice) -> Hold,
    job_of_pid: impl Fn(u32) -> Option<JobId>,
    apply: impl FnOnce(&mut S, Vec<Option<Health>>, Vec<Load>) -> R,
) -> R {
    let devices = poller.devices();
    let holders = |st: &S| -> Holders {
        devices
            .iter()
            .map(|d| (d.index, holder_of(st, d)))
            .collect()
    };
    let before = holders(&*state.lock().await);
    let poll = poller.poll(timeout).await;
    let jobs: HashMap<u32, Option<JobId>> = match &poll {
        Ok(polls) => polls
            .iter()
            .filter_map(|p| p.processes.as_ref().ok())
            .flatten()
            .map(|&pid| (pid, job_of_pid(pid)))
            .collect(),
        Err(_) => HashMap::new(),
    };
    let mut st = state.lock().await;
    let after = holders(&st);
    let verdicts = judge(devices, &poll, &before, &after, |pid| {
        jobs.get(&pid).copied().flatten()
    });
    let loads = devices
        .iter()
        .map(|d| match &poll {
            Ok(polls) => polls
                .iter()
                .find(|p| p.index == d.index)
                .map(|p| p.load)
                .unwrap_or_default(),
            Err(_) => Load::default(),
        })
        .collect();
    apply(&mut st, verdicts, loads)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accel::{AccelError, Backend, Condition};
    use crate::core::Vendor;
    use std::path::Path;
    use std::sync::{mpsc, Arc, Mutex};

    /// A backend whose poll says "started", waits for "go", then reports `pids` on
    /// device 0.
    struct SlowBackend {
        started: Mutex<mpsc::Sender<()>>,
        go: Mutex<mpsc::Receiver<Vec<u32>>>,
    }

    impl Backend for SlowBackend {
        fn vendor(&self) -> Vendor {
            Vendor::Nv
        }
        fn library(&self) -> &Path {
            Path::new("fake")
        }
        fn api(&self) -> &'static str {
            "fake"
        }
        fn discover(&self) -> Result<Vec<DiscoveredDevice>, AccelError> {
            Ok(vec![device()])
        }
        fn poll(&self, _: &[DiscoveredDevice]) -> Result<Vec<DevicePoll>, QueryError> {
            let _ = self.started.lock().unwrap().send(());
            let pids = self.go.lock().unwrap().recv().unwrap_or_default();
            Ok(vec![DevicePoll {
                index: 0,
                uuid: Ok("GPU-0".into()),
                load: Load {
                    util_pct: Some(pids.len() as u8),
                    ..Default::default()
                },
                processes: Ok(pids),
                condition: Ok(Condition::Healthy),
            }])
        }
    }

    fn device() -> DiscoveredDevice {
        DiscoveredDevice {
            vendor: Vendor::Nv,
            index: 0,
            uuid: "GPU-0".into(),
            pci_bdf: None,
            numa_node: None,
            device_nodes: vec![],
        }
    }

    /// The daemon's books, reduced to device 0's hold and health.
    #[derive(Default)]
    struct Books {
        hold: Hold,
        health: Health,
        /// Device 0's load in the last round.
        load: Load,
    }

    impl Books {
        fn give(&mut self, job: JobId) {
            self.hold = Hold {
                now: Some(job),
                last: Some(job),
            };
        }
        fn free(&mut self) {
            self.hold.now = None;
        }
    }

    /// Job 7 owns PIDs 100 and 101; anything else is no job's.
    fn job_of(pid: u32) -> Option<JobId> {
        matches!(pid, 100 | 101).then_some(7)
    }

    /// Runs one round; `during` runs while the backend is inside its poll, and returns
    /// the PIDs the poll then reports.
    async fn one_round(
        poller: &Poller,
        started: &Arc<Mutex<mpsc::Receiver<()>>>,
        go: &mpsc::Sender<Vec<u32>>,
        books: &tokio::sync::Mutex<Books>,
        during: impl FnOnce(&mut Books) -> Vec<u32>,
    ) {
        let poll = round(
            poller,
            Duration::from_secs(10),
            books,
            |b, _| b.hold,
            job_of,
            |b, verdicts, loads| {
                if let Some(Some(h)) = verdicts.into_iter().next() {
                    b.health = h;
                }
                b.load = loads[0];
            },
        );
        let meanwhile = async {
            let started = started.clone();
            tokio::task::spawn_blocking(move || started.lock().unwrap().recv())
                .await
                .unwrap()
                .unwrap();
            let pids = during(&mut *books.lock().await);
            go.send(pids).unwrap();
        };
        tokio::join!(poll, meanwhile);
    }

    #[tokio::test]
    async fn a_device_given_during_the_poll_is_not_busy_with_its_jobs_process() {
        let (started_tx, started_rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel();
        let backend = SlowBackend {
            started: Mutex::new(started_tx),
            go: Mutex::new(go_rx),
        };
        let poller = Poller::new(Arc::new(backend), vec![device()]);
        let started = Arc::new(Mutex::new(started_rx));
        let books = tokio::sync::Mutex::new(Books::default());

        // Job 7 gets the free device while the library is answering, and its process
        // shows up in that answer: still Ok, not busy.
        one_round(&poller, &started, &go_tx, &books, |b| {
            b.give(7);
            vec![100]
        })
        .await;
        assert_eq!(books.lock().await.health, Health::Ok);

        // Settled holder: its own processes are fine, an outsider makes it busy.
        one_round(&poller, &started, &go_tx, &books, |_| vec![100, 101]).await;
        assert_eq!(books.lock().await.health, Health::Ok);
        one_round(&poller, &started, &go_tx, &books, |_| vec![100, 9]).await;
        // Every round hands on the device's load (here: the PIDs it reported).
        assert_eq!(books.lock().await.load.util_pct, Some(2));
        assert_eq!(books.lock().await.health, Health::Busy { processes: 1 });

        // Job 7 ends during a poll that still sees its process: the device keeps its
        // health this round, and the next round judges it with no holder.
        one_round(&poller, &started, &go_tx, &books, |b| {
            b.free();
            vec![100]
        })
        .await;
        assert_eq!(books.lock().await.health, Health::Busy { processes: 1 });
        one_round(&poller, &started, &go_tx, &books, |_| vec![]).await;
        assert_eq!(books.lock().await.health, Health::Ok);

        // Job 8 is given the free device and ends, both during one poll that sees
        // its process: no holder before or after, yet not busy.
        one_round(&poller, &started, &go_tx, &books, |b| {
            b.give(8);
            b.free();
            vec![200]
        })
        .await;
        assert_eq!(books.lock().await.health, Health::Ok);
    }

    #[test]
    fn a_holder_change_keeps_only_busy_or_free_verdicts_back() {
        let devices = [device()];
        let hold = |now, last| Hold { now, last };
        let held: Holders = [(0, hold(Some(7), Some(7)))].into_iter().collect();
        let free: Holders = [(0, hold(None, None))].into_iter().collect();
        let polled = |pids: &[u32]| {
            Ok(vec![DevicePoll {
                index: 0,
                uuid: Ok("GPU-0".into()),
                processes: Ok(pids.to_vec()),
                condition: Ok(Condition::Healthy),
                load: Default::default(),
            }])
        };
        // What the old snapshot-only judgement said: busy with job 7's own process.
        assert_eq!(
            assess_all(&devices, &polled(&[100]), |_| None, job_of),
            vec![Health::Busy { processes: 1 }]
        );
        assert_eq!(
            judge(&devices, &polled(&[100]), &free, &held, job_of),
            vec![None]
        );
        assert_eq!(
            judge(&devices, &polled(&[9]), &free, &held, job_of),
            vec![None]
        );
        assert_eq!(
            judge(&devices, &polled(&[100]), &held, &held, job_of),
            vec![Some(Health::Ok)]
        );
        // Unknown does not depend on the holder: it applies at once.
        let failed = Err(QueryError::new("count", "boom"));
        assert!(matches!(
            &judge(&devices, &failed, &free, &held, job_of)[..],
            [Some(Health::Unknown { .. })]
        ));
    }
}
