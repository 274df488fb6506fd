//! Fair share and per-user limits at the daemon's edge: the settings from
//! xlurmd's options and `/etc/xlurm/limits.json`, and what is kept in the
//! state directory (the usage ledger, limits set live). The rules themselves
//! are the core's (`core::priority`, `core::fairshare`, `core::limits`).

use super::options::Options;
use super::run::Refusal;
use crate::core::{PriorityConfig, PriorityMode, UserLimits};
use anyhow::{Context, Result};
use std::path::Path;

/// The usage ledger's file in the state directory.
pub const USAGE_FILE: &str = "fairshare.json";
/// Limits set live (`SetUserLimits`), in the state directory.
pub const LIMITS_FILE: &str = "user-limits.json";
/// Largest limits file read (a few thousand users' settings).
const MAX_LIMITS_BYTES: u64 = 1 << 20;

/// `--priority` and `--fairshare-half-life`.
pub fn priority_config(o: &Options) -> Result<PriorityConfig, Refusal> {
    let mode: PriorityMode = o
        .priority
        .parse()
        .map_err(|e| Refusal(format!("--priority: {e}")))?;
    let half_life_secs = crate::core::request::parse_duration_secs(&o.fairshare_half_life)
        .map_err(|e| Refusal(format!("--fairshare-half-life: {e}")))?;
    Ok(PriorityConfig {
        mode,
        half_life_secs,
        ..PriorityConfig::default()
    })
}

/// Parses limits from JSON text, naming what is wrong.
pub fn parse_user_limits(text: &str) -> Result<UserLimits, String> {
    if text.len() as u64 > MAX_LIMITS_BYTES {
        return Err(format!("over {MAX_LIMITS_BYTES} bytes"));
    }
    serde_json::from_str(text).map_err(|e| format!("not valid limits: {e}"))
}

/// Reads `--user-limits`: none when the file does not exist.
pub fn read_user_limits(path: &Path) -> Result<UserLimits, Refusal> {
    match read_small(path) {
        Ok(None) => Ok(UserLimits::default()),
        Ok(Some(text)) => parse_user_limits(&text)
            .map_err(|e| Refusal(format!("--user-limits {}: {e}", path.display()))),
        Err(e) => Err(Refusal(format!("--user-limits: {e:#}"))),
    }
}

/// Limits set live, if any were.
pub fn load_user_limits(state_dir: &Path) -> Result<Option<UserLimits>> {
    let path = state_dir.join(LIMITS_FILE);
    match read_small(&path)? {
        None => Ok(None),
        Some(text) => parse_user_limits(&text)
            .map(Some)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display())),
    }
}

/// Keeps limits set live, so they survive a restart.
pub fn save_user_limits(state_dir: &Path, limits: &UserLimits) -> Result<()> {
    let text = serde_json::to_vec_pretty(limits)?;
    super::store::write_atomic(state_dir, LIMITS_FILE, &text)
}

/// The usage ledger as last saved.
pub fn load_usage(state_dir: &Path) -> Result<Option<crate::core::fairshare::UsageLedger>> {
    let path = state_dir.join(USAGE_FILE);
    match read_small(&path)? {
        None => Ok(None),
        Some(text) => serde_json::from_str(&text)
            .map(Some)
            .with_context(|| format!("{}: not a usage ledger", path.display())),
    }
}

/// Saves the usage ledger (a few bytes per user, every minute).
pub fn save_usage(state_dir: &Path, ledger: &crate::core::fairshare::UsageLedger) -> Result<()> {
    let text = serde_json::to_vec(ledger)?;
    super::store::write_atomic(state_dir, USAGE_FILE, &text)
}

/// A pending job's place in the queue for `GetJob`: `priority` and its
/// parts (`fairshare`, `age`), `nice`, and `estimated_start` (seconds since
/// the epoch, 0 when it cannot be bounded) with `estimate` saying why.
pub fn put_schedule(
    m: &mut super::api::Dict,
    job: &super::job::Job,
    sched: &crate::core::Scheduler,
) {
    use super::api::put;
    put(m, "nice", job.nice);
    let now = crate::wire::time::now_usec() / 1_000_000;
    if let Some(p) = sched.priority(job.id, now) {
        put(m, "priority", p.priority);
        put(m, "fairshare", p.fairshare);
        put(m, "age", p.age);
    }
    if let Some((at, why)) = estimate(sched, job.id, now) {
        put(m, "estimated_start", at);
        put(m, "estimate", why);
    }
}

/// When queued job `id` is estimated to start (seconds since the epoch; 0
/// when it cannot be bounded) and how that was reached or why it cannot be,
/// at `now` (seconds); `None` unless it is in the queue.
pub fn estimate(
    sched: &crate::core::Scheduler,
    id: crate::core::JobId,
    now: u64,
) -> Option<(u64, String)> {
    let e = sched.estimated_start(id, now)?;
    Some(match &e {
        crate::core::estimate::Estimate::At { time } => (
            *time,
            "from running jobs' time limits and the jobs ahead".to_string(),
        ),
        crate::core::estimate::Estimate::Unknown(_) => (0, e.to_string()),
    })
}

/// `GetShares`: one a{sv} per user of `rows`, named.
pub fn shares(rows: Vec<crate::core::fairshare::ShareRow>) -> Vec<super::api::Dict> {
    use super::api::put;
    rows.into_iter()
        .map(|r| {
            let mut m = super::api::Dict::new();
            put(&mut m, "uid", r.uid);
            put(&mut m, "user", super::service::user_name(r.uid).0);
            put(&mut m, "shares", r.raw_shares);
            put(&mut m, "norm_shares", r.norm_shares);
            put(&mut m, "usage", r.raw_usage);
            put(&mut m, "effective_usage", r.effective_usage);
            put(&mut m, "fair_share", r.fair_share);
            m
        })
        .collect()
}

/// A small file's text; `None` when it does not exist.
fn read_small(path: &Path) -> Result<Option<String>> {
    use std::io::Read;
    let f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let mut text = String::new();
    f.take(MAX_LIMITS_BYTES + 1)
        .read_to_string(&mut text)
        .with_context(|| format!("reading {}", path.display()))?;
    if text.len() as u64 > MAX_LIMITS_BYTES {
        anyhow::bail!("{} is over {MAX_LIMITS_BYTES} bytes", path.display());
    }
    Ok(Some(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_and_usage_survive_a_restart_and_bad_files_name_themselves() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(load_user_limits(dir.path()).unwrap(), None);
        let limits = parse_user_limits(
            r#"{"default": {"running_jobs": 4}, "users": {"1001": {"gpus": 1}}}"#,
        )
        .unwrap();
        assert_eq!(limits.default.running_jobs, Some(4));
        assert_eq!(limits.users[&1001].gpus, Some(1));
        save_user_limits(dir.path(), &limits).unwrap();
        assert_eq!(load_user_limits(dir.path()).unwrap(), Some(limits));
        let err = parse_user_limits(r#"{"users": {"1001": {"gpu": 1}}}"#).unwrap_err();
        assert!(err.contains("gpu"), "{err}");
        let huge = format!("{{\"default\": {{}}{}}}", " ".repeat(1 << 20));
        assert!(parse_user_limits(&huge).unwrap_err().contains("over"));
        let missing = read_user_limits(&dir.path().join("none.json")).unwrap();
        assert!(missing.is_empty());
        std::fs::write(dir.path().join("bad.json"), "{").unwrap();
        let Refusal(msg) = read_user_limits(&dir.path().join("bad.json")).unwrap_err();
        assert!(msg.contains("bad.json"), "{msg}");
        let ledger = crate::core::fairshare::UsageLedger::new(3600);
        save_usage(dir.path(), &ledger).unwrap();
        assert!(load_usage(dir.path()).unwrap().is_some());
        std::fs::write(dir.path().join(USAGE_FILE), "[").unwrap();
        assert!(load_usage(dir.path()).is_err());
    }
}
