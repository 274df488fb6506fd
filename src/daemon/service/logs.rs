//! Reading a job's output back from the journal, page by page.

use super::*;

/// A page of a job's output (see `Daemon::read_log`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogPage {
    pub lines: Vec<String>,
    /// Where the next page starts.
    pub cursor: String,
    /// The job's state when the page was read: once final, read until a page is empty.
    pub state: JobState,
    /// On the first page: 0, or the time (µs) before which the journal holds
    /// nothing any more, when that is after the job started (rotated away).
    pub missing_before: u64,
}

/// Reads of the journal one user may have under way at once (each opens the
/// journal's files: descriptors and memory in xlurmd).
pub const LOG_READS_PER_USER: usize = 4;
/// Reads of the journal under way at once, all users together.
pub const LOG_READS: usize = 32;
/// How long a read waits for its turn before it is refused.
pub const LOG_READ_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Turns to read the journal: at most [`LOG_READS_PER_USER`] per user and
/// [`LOG_READS`] in all; a read beyond waits up to [`LOG_READ_WAIT`].
pub struct LogReads {
    /// How long a read waits for its turn ([`LOG_READ_WAIT`]).
    wait: std::time::Duration,
    all: Arc<tokio::sync::Semaphore>,
    per_user: std::sync::Mutex<HashMap<u32, Arc<tokio::sync::Semaphore>>>,
}

impl Default for LogReads {
    fn default() -> Self {
        LogReads {
            wait: LOG_READ_WAIT,
            all: Arc::new(tokio::sync::Semaphore::new(LOG_READS)),
            per_user: std::sync::Mutex::default(),
        }
    }
}

/// A turn to read the journal, given back when dropped.
pub struct LogRead {
    _user: tokio::sync::OwnedSemaphorePermit,
    _all: tokio::sync::OwnedSemaphorePermit,
}

impl LogReads {
    /// Waits for user `uid`'s turn to read; refused past [`LOG_READ_WAIT`].
    pub async fn turn(&self, uid: u32) -> ApiResult<LogRead> {
        let mine = {
            let mut m = self.per_user.lock().unwrap_or_else(|e| e.into_inner());
            m.entry(uid)
                .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(LOG_READS_PER_USER)))
                .clone()
        };
        let wait = async {
            let user = mine.acquire_owned().await.ok()?;
            let all = self.all.clone().acquire_owned().await.ok()?;
            Some(LogRead {
                _user: user,
                _all: all,
            })
        };
        match tokio::time::timeout(self.wait, wait).await {
            Ok(Some(turn)) => Ok(turn),
            _ => Err(ApiError::LimitExceeded(format!(
                "too many reads of job output at once ({LOG_READS_PER_USER} per user, \
                 {LOG_READS} in all); try again in a moment"
            ))),
        }
    }
}

/// How long after its launch a job whose unit's start systemd has not yet
/// reported gets no look at the journal (see `read_log`).
const START_SETTLES_USEC: u64 = 3_000_000;

impl<U: Units> Daemon<U> {
    /// A page of job `id`'s output after `cursor`, for its owner and root.
    pub async fn read_log(
        &self,
        uid: u32,
        id: JobId,
        cursor: &str,
        max: u32,
    ) -> ApiResult<LogPage> {
        let (src, state, started, start_usec) = {
            let st = self.state.lock().await;
            if self.sight_of(&st, uid, id, false)? != Sight::Own {
                return Err(self.not_yours(&st, id, " and root may read its output"));
            }
            let job = st
                .full(id)
                .map_err(|e| ApiError::Failed(format!("reading job {id}'s record: {e:#}")))?
                .ok_or_else(|| no_such_job(id))?;
            let started = !job.invocation_id().is_empty();
            (
                self.log_source(&job),
                job.state(),
                started,
                job.start_usec(),
            )
        };
        let mut out = LogPage {
            lines: Vec::new(),
            cursor: cursor.to_string(),
            state,
            missing_before: 0,
        };
        // Until systemd has started its unit (its invocation is known), the
        // job has printed nothing: no look at the journal, which would take
        // CPU from that start (`xrun` asks as soon as its job is placed). For
        // a few seconds only: should the news of the start be lost, the
        // journal is read as ever.
        let settling = state == JobState::Running
            && !started
            && crate::wire::time::now_usec() < start_usec.saturating_add(START_SETTLES_USEC);
        if state == JobState::Pending || settling {
            return Ok(out);
        }
        let _turn = self.log_reads.turn(uid).await?;
        let max = max.clamp(1, 100_000);
        let read = |src| async move {
            crate::daemon::journal::read(src, cursor, max)
                .await
                .map_err(|e| ApiError::Failed(format!("reading the journal: {e:#}")))
        };
        let mut page = read(&src).await?;
        if page.lines.is_empty() && state.is_final() {
            // The job ended, but journald may still be storing what it printed
            // last (it lags under load): `journalctl --sync` returns once all
            // that was sent before it is stored. Then look once more. A --user
            // daemon may not ask journald to sync: it looks again for a second.
            if src.user_mode {
                for _ in 0..10 {
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    page = read(&src).await?;
                    if !page.lines.is_empty() {
                        break;
                    }
                }
            } else {
                match crate::daemon::journal::sync(&src.journalctl).await {
                    Ok(()) => page = read(&src).await?,
                    Err(e) => tracing::warn!(job = id, "job {id}: journalctl --sync: {e:#}"),
                }
            }
        }
        if cursor.is_empty() && (!page.lines.is_empty() || state.is_final()) {
            // The first page: has journald rotated the job's first lines away?
            match crate::daemon::journal::oldest_usec(
                &src.journalctl,
                src.uid,
                src.user_mode,
                src.start_usec,
            )
            .await
            {
                Ok(oldest) if oldest > src.start_usec => out.missing_before = oldest,
                Ok(oldest) => tracing::debug!(
                    job = id,
                    "job {id}: the journal's oldest entry of uid {} is from {oldest}, before the job",
                    src.uid
                ),
                Err(e) => tracing::warn!(job = id, "job {id}: reading the journal's head: {e:#}"),
            }
        }
        out.lines = page.lines;
        out.cursor = page.cursor;
        Ok(out)
    }

    /// Where job `job`'s output is in the journal.
    pub fn log_source(&self, job: &Job) -> crate::daemon::journal::Source {
        crate::daemon::journal::Source {
            id: job.id,
            uid: job.uid,
            unit: job.unit(),
            start_usec: job.start_usec(),
            user_mode: self.settings.unit.user_mode,
            journalctl: self.settings.journalctl.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reads_of_the_journal_are_bounded_per_user_and_in_all() {
        let reads = LogReads {
            wait: std::time::Duration::from_millis(50),
            ..LogReads::default()
        };
        let mut held = Vec::new();
        for _ in 0..LOG_READS_PER_USER {
            held.push(reads.turn(1000).await.unwrap());
        }
        // A fifth read of the same user waits, then is refused, saying why.
        let err = reads.turn(1000).await.err().expect("refused");
        assert!(
            matches!(&err, ApiError::LimitExceeded(t) if t.contains("at once")),
            "{err:?}"
        );
        // Another user reads meanwhile; a turn given back is taken again.
        let other = reads.turn(1001).await.unwrap();
        held.pop();
        held.push(reads.turn(1000).await.unwrap());
        drop(other);
        // All users together: at most LOG_READS.
        for uid in 2000..2000 + (LOG_READS - LOG_READS_PER_USER) as u32 {
            held.push(reads.turn(uid).await.unwrap());
        }
        assert!(reads.turn(3000).await.is_err(), "the 33rd read at once");
        held.truncate(1);
        assert!(reads.turn(3000).await.is_ok());
    }
}
