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

impl<U: Units> Daemon<U> {
    /// A page of job `id`'s output after `cursor`, for its owner and root.
    pub async fn read_log(
        &self,
        uid: u32,
        id: JobId,
        cursor: &str,
        max: u32,
    ) -> ApiResult<LogPage> {
        let (src, state) = {
            let st = self.state.lock().await;
            if self.sight_of(&st, uid, id, false)? != Sight::Own {
                return Err(self.not_yours(&st, id, " and root may read its output"));
            }
            let job = st
                .full(id)
                .map_err(|e| ApiError::Failed(format!("reading job {id}'s record: {e:#}")))?
                .ok_or_else(|| no_such_job(id))?;
            (self.log_source(&job), job.state)
        };
        let mut out = LogPage {
            lines: Vec::new(),
            cursor: cursor.to_string(),
            state,
            missing_before: 0,
        };
        if state == JobState::Pending {
            return Ok(out);
        }
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
            start_usec: job.start_usec,
            user_mode: self.settings.unit.user_mode,
            journalctl: self.settings.journalctl.clone(),
        }
    }
}
