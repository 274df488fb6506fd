//! Fair share and per-user limits at the daemon's edge: the settings from
//! xlurmd's options and `/etc/xlurm/limits.json`, and what is kept in the
//! state directory (the usage ledger, limits set live). The rules themselves
//! are the core's (`core::priority`, `core::fairshare`, `core::limits`).

use super::options::Options;
use super::startup::Refusal;
use crate::core::{PriorityConfig, PriorityMode, UserLimit, UserLimits};
use crate::wire::keys;
use anyhow::{Context, Result};
use std::collections::BTreeMap;
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

/// `--usage-weights`: `auto`, or `gpu=N,mem-gib=N` (either may be left out),
/// each a finite number of CPUs, 0 or more; what is left out stays as
/// `machine` gives it ([`UsageWeights::for_machine`]).
pub fn usage_weights(
    text: &str,
    machine: &crate::core::Machine,
) -> Result<crate::core::fairshare::UsageWeights, String> {
    let mut w = crate::core::fairshare::UsageWeights::for_machine(machine);
    if text == "auto" {
        return Ok(w);
    }
    for part in text.split(',') {
        let (key, value) = part
            .split_once('=')
            .ok_or_else(|| format!("{part:?}: give gpu=N or mem-gib=N (or auto)"))?;
        let n: f64 = value
            .trim()
            .parse()
            .ok()
            .filter(|n: &f64| n.is_finite() && *n >= 0.0 && *n <= 1e6)
            .ok_or_else(|| format!("{part:?}: {value:?} is not a number from 0 to 1000000"))?;
        match key.trim() {
            "gpu" => w.gpu = n,
            "mem-gib" => w.mem_gib = n,
            k => {
                return Err(format!(
                    "{k:?}: the weights are gpu and mem-gib (a CPU is 1)"
                ))
            }
        }
    }
    Ok(w)
}

/// Where the names in a limits file are looked up: NSS in the daemon
/// ([`Nss`]), a table in tests.
pub trait Directory {
    fn uid(&self, user: &str) -> Option<u32>;
    fn gid(&self, group: &str) -> Option<u32>;
    fn user_name(&self, uid: u32) -> Option<String>;
    fn group_name(&self, gid: u32) -> Option<String>;
}

/// The system's users and groups (NSS: may block, so off the event loop).
pub struct Nss;

impl Directory for Nss {
    fn uid(&self, user: &str) -> Option<u32> {
        nix::unistd::User::from_name(user)
            .ok()
            .flatten()
            .map(|u| u.uid.as_raw())
    }
    fn gid(&self, group: &str) -> Option<u32> {
        nix::unistd::Group::from_name(group)
            .ok()
            .flatten()
            .map(|g| g.gid.as_raw())
    }
    fn user_name(&self, uid: u32) -> Option<String> {
        nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
            .ok()
            .flatten()
            .map(|u| u.name)
    }
    fn group_name(&self, gid: u32) -> Option<String> {
        nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(gid))
            .ok()
            .flatten()
            .map(|g| g.name)
    }
}

/// The limits file as the admin writes it: users and groups by name or by
/// numeric ID.
#[derive(serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
#[derive(Default)]
struct LimitsFile {
    default: UserLimit,
    groups: BTreeMap<String, UserLimit>,
    users: BTreeMap<String, UserLimit>,
}

/// Parses limits from JSON text, users and groups by name or ID, naming
/// what is wrong (an unknown name, one account named twice).
pub fn parse_user_limits(text: &str, dir: &dyn Directory) -> Result<UserLimits, String> {
    if text.len() as u64 > MAX_LIMITS_BYTES {
        return Err(format!("over {MAX_LIMITS_BYTES} bytes"));
    }
    let file: LimitsFile =
        serde_json::from_str(text).map_err(|e| format!("not valid limits: {e}"))?;
    Ok(UserLimits {
        default: file.default,
        groups: by_id(file.groups, "group", "GID", |n| dir.gid(n))?,
        users: by_id(file.users, "user", "UID", |n| dir.uid(n))?,
    })
}

/// `entries` keyed by ID: a key of digits is the ID, any other a name.
fn by_id(
    entries: BTreeMap<String, UserLimit>,
    what: &str,
    id_name: &str,
    lookup: impl Fn(&str) -> Option<u32>,
) -> Result<BTreeMap<u32, UserLimit>, String> {
    let mut out: BTreeMap<u32, (String, UserLimit)> = BTreeMap::new();
    for (key, limit) in entries {
        let id = if !key.is_empty() && key.bytes().all(|b| b.is_ascii_digit()) {
            key.parse::<u32>()
                .map_err(|_| format!("{what}s: {key} is not a {id_name}"))?
        } else {
            lookup(&key).ok_or_else(|| {
                format!(
                    "{what}s: there is no {what} named {key:?} (give a {what} name or a {id_name})"
                )
            })?
        };
        if let Some((first, _)) = out.get(&id) {
            return Err(format!(
                "{what}s: {first:?} and {key:?} are the same {what} ({id_name} {id}); set it once"
            ));
        }
        out.insert(id, (key, limit));
    }
    Ok(out.into_iter().map(|(id, (_, l))| (id, l)).collect())
}

/// Limits as JSON for `GetUserLimits`: users and groups by name where the
/// system knows them, else by ID (either reads back in).
pub fn render_user_limits(limits: &UserLimits, dir: &dyn Directory) -> String {
    let named = |m: &BTreeMap<u32, UserLimit>, name: &dyn Fn(u32) -> Option<String>| {
        m.iter()
            .map(|(id, l)| (name(*id).unwrap_or_else(|| id.to_string()), l.clone()))
            .collect()
    };
    let file = LimitsFile {
        default: limits.default.clone(),
        groups: named(&limits.groups, &|g| dir.group_name(g)),
        users: named(&limits.users, &|u| dir.user_name(u)),
    };
    serde_json::to_string_pretty(&file).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

/// Reads `--user-limits`: none when the file does not exist.
pub fn read_user_limits(path: &Path) -> Result<UserLimits, Refusal> {
    match read_small(path) {
        Ok(None) => Ok(UserLimits::default()),
        Ok(Some(text)) => parse_user_limits(&text, &Nss)
            .map_err(|e| Refusal(format!("--user-limits {}: {e}", path.display()))),
        Err(e) => Err(Refusal(format!("--user-limits: {e:#}"))),
    }
}

/// Limits set live, if any were.
pub fn load_user_limits(state_dir: &Path) -> Result<Option<UserLimits>> {
    let path = state_dir.join(LIMITS_FILE);
    match read_small(&path)? {
        None => Ok(None),
        Some(text) => parse_user_limits(&text, &Nss)
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
    m: &mut crate::wire::dict::Dict,
    job: &super::job::Job,
    sched: &crate::core::Scheduler,
) {
    keys::job::NICE.put(m, job.nice);
    let now = crate::wire::time::now_usec() / 1_000_000;
    if let Some(p) = sched.priority(job.id, now) {
        keys::job::PRIORITY.put(m, p.priority);
        keys::job::FAIRSHARE.put(m, p.fairshare);
        keys::job::AGE.put(m, p.age);
    }
    // One walk of the queue for both.
    if let Some((bound, expected)) = sched.starts(job.id, now) {
        let (at, why) = explained(bound);
        keys::job::ESTIMATED_START.put(m, at);
        keys::job::ESTIMATE.put(m, why);
        keys::job::EXPECTED_START.put(m, expected.time().unwrap_or(0));
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
    sched.estimated_start(id, now).map(explained)
}

/// An estimated start as `GetJob` gives it: the time (0 when it cannot be
/// bounded) and how it was reached or why there is none.
fn explained(e: crate::core::estimate::Estimate) -> (u64, String) {
    match &e {
        crate::core::estimate::Estimate::At { time } => (
            *time,
            "from running jobs' time limits and the jobs ahead".to_string(),
        ),
        crate::core::estimate::Estimate::Unknown(_) => (0, e.to_string()),
    }
}

/// `GetShares`: one a{sv} per user of `rows`, named.
pub fn shares(rows: Vec<crate::core::fairshare::ShareRow>) -> Vec<crate::wire::dict::Dict> {
    rows.into_iter()
        .map(|r| {
            let mut m = crate::wire::dict::Dict::new();
            keys::share::UID.put(&mut m, r.uid);
            keys::share::USER.put(&mut m, super::service::user_name(r.uid).0);
            keys::share::SHARES.put(&mut m, r.raw_shares);
            keys::share::NORM_SHARES.put(&mut m, r.norm_shares);
            keys::share::USAGE.put(&mut m, r.raw_usage);
            keys::share::EFFECTIVE_USAGE.put(&mut m, r.effective_usage);
            keys::share::FAIR_SHARE.put(&mut m, r.fair_share);
            m
        })
        .collect()
}

/// `GetMachine`'s `limits`: one a{sv} per limit that holds for the caller:
/// `resource` (as reasons name it), `used`, `limit`, `scope` (`user`,
/// `group`, `default`) and `text` (the line `xinfo` prints).
pub fn standing(limits: &[crate::core::Standing]) -> Vec<crate::wire::dict::Dict> {
    use crate::core::Scope;
    limits
        .iter()
        .map(|l| {
            let mut m = crate::wire::dict::Dict::new();
            keys::standing::RESOURCE.put(&mut m, l.label());
            keys::standing::USED.put(&mut m, l.used);
            keys::standing::LIMIT.put(&mut m, l.limit);
            let scope = match l.scope {
                Scope::User(_) => "user",
                Scope::Group(_) => "group",
                Scope::Default => "default",
            };
            keys::standing::SCOPE.put(&mut m, scope.into());
            keys::standing::TEXT.put(&mut m, l.to_string());
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

    /// alice is 1001, bob 1002; group research is 2000.
    struct Table;

    impl Directory for Table {
        fn uid(&self, user: &str) -> Option<u32> {
            [("alice", 1001), ("bob", 1002)]
                .into_iter()
                .find_map(|(n, id)| (n == user).then_some(id))
        }
        fn gid(&self, group: &str) -> Option<u32> {
            (group == "research").then_some(2000)
        }
        fn user_name(&self, uid: u32) -> Option<String> {
            [("alice", 1001), ("bob", 1002)]
                .into_iter()
                .find_map(|(n, id)| (id == uid).then(|| n.to_string()))
        }
        fn group_name(&self, gid: u32) -> Option<String> {
            (gid == 2000).then(|| "research".to_string())
        }
    }

    #[test]
    fn usage_weights_default_to_the_machines_and_refuse_what_is_not_a_weight() {
        use crate::core::{Machine, Topology};
        let gib = 1u64 << 30;
        let m = Machine::new(Topology::single(8, 16 * gib), vec![]);
        let auto = usage_weights("auto", &m).unwrap();
        assert_eq!((auto.cpu, auto.mem_gib), (1.0, 0.5));
        let w = usage_weights("gpu=16, mem-gib=0.25", &m).unwrap();
        assert_eq!((w.cpu, w.gpu, w.mem_gib), (1.0, 16.0, 0.25));
        let w = usage_weights("gpu=4", &m).unwrap();
        assert_eq!((w.gpu, w.mem_gib), (4.0, 0.5));
        for (bad, says) in [
            ("cpu=2", "the weights are gpu and mem-gib"),
            ("gpu", "give gpu=N"),
            ("gpu=-1", "not a number from 0"),
            ("gpu=NaN", "not a number from 0"),
            ("mem-gib=inf", "not a number from 0"),
        ] {
            let e = usage_weights(bad, &m).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn limits_name_users_and_groups_by_name_or_id_and_read_back_as_shown() {
        let text = r#"{"default": {"shares": 2},
            "groups": {"research": {"gpus": 8}, "3000": {"cpus": 4}},
            "users": {"alice": {"gpus": 1, "shares": 5}, "1500": {"running_jobs": 2}}}"#;
        let limits = parse_user_limits(text, &Table).unwrap();
        assert_eq!(limits.groups[&2000].gpus, Some(8));
        assert_eq!(limits.groups[&3000].cpus, Some(4));
        assert_eq!(limits.users[&1001].gpus, Some(1));
        assert_eq!(limits.users[&1500].running_jobs, Some(2));
        assert_eq!(limits.shares(1001, None), Some(5));
        assert_eq!(limits.shares(1002, Some(2000)), Some(2));
        // Shown by name where the system knows one, and it reads back.
        let shown = render_user_limits(&limits, &Table);
        assert!(
            shown.contains("\"alice\"") && shown.contains("\"research\""),
            "{shown}"
        );
        assert!(
            shown.contains("\"1500\"") && shown.contains("\"3000\""),
            "{shown}"
        );
        assert_eq!(parse_user_limits(&shown, &Table).unwrap(), limits);

        // An unknown name, an account twice, a bad ID: refused, naming it.
        let err = parse_user_limits(r#"{"users": {"alce": {"gpus": 1}}}"#, &Table).unwrap_err();
        assert!(err.contains("no user named \"alce\""), "{err}");
        let err = parse_user_limits(r#"{"groups": {"reserch": {}}}"#, &Table).unwrap_err();
        assert!(err.contains("no group named \"reserch\""), "{err}");
        let err = parse_user_limits(r#"{"users": {"alice": {}, "1001": {}}}"#, &Table).unwrap_err();
        assert!(err.contains("same user (UID 1001)"), "{err}");
        let err = parse_user_limits(r#"{"users": {"99999999999": {}}}"#, &Table).unwrap_err();
        assert!(err.contains("not a UID"), "{err}");
        let err = parse_user_limits(r#"{"users": {"alice": {"shares": -1}}}"#, &Table).unwrap_err();
        assert!(err.contains("invalid value"), "{err}");
    }

    #[test]
    fn limits_and_usage_survive_a_restart_and_bad_files_name_themselves() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(load_user_limits(dir.path()).unwrap(), None);
        let limits = parse_user_limits(
            r#"{"default": {"running_jobs": 4}, "users": {"1001": {"gpus": 1}}}"#,
            &Table,
        )
        .unwrap();
        assert_eq!(limits.default.running_jobs, Some(4));
        assert_eq!(limits.users[&1001].gpus, Some(1));
        save_user_limits(dir.path(), &limits).unwrap();
        assert_eq!(load_user_limits(dir.path()).unwrap(), Some(limits));
        let err = parse_user_limits(r#"{"users": {"1001": {"gpu": 1}}}"#, &Table).unwrap_err();
        assert!(err.contains("gpu"), "{err}");
        let huge = format!("{{\"default\": {{}}{}}}", " ".repeat(1 << 20));
        assert!(parse_user_limits(&huge, &Table)
            .unwrap_err()
            .contains("over"));
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
