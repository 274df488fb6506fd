//! Checking a submission's `a{sv}` spec. Every malformed spec is refused with
//! a message naming the key and what is valid; nothing is half-accepted.

use crate::core::{DeviceRequest, Request, Vendor};
use crate::wire::spec::{valid_env_name, KEYS};
use std::collections::HashMap;
use zbus::OwnedVariant;

/// Bounds on what one submission may carry.
pub const MAX_ARGV_BYTES: usize = 1 << 20;
pub const MAX_ARGS: usize = 65_536;
pub const MAX_ENV_BYTES: usize = 1 << 20;
pub const MAX_ENV_VARS: usize = 8_192;
pub const MAX_SCRIPT_BYTES: usize = 1 << 20;
pub const MAX_NAME_CHARS: usize = 200;
/// Longest `dependency` and `array` texts (256 targets of long IDs fit).
pub const MAX_DEPENDENCY_BYTES: usize = 8_192;
pub const MAX_ARRAY_BYTES: usize = 4_096;
pub const MAX_DEVICE_IDS: usize = 1_024;
/// Longest path the kernel (and systemd's `path_is_valid`) accepts, without the NUL.
pub const MAX_PATH_BYTES: usize = 4_095;
/// Longest path component (`NAME_MAX`).
pub const MAX_PATH_COMPONENT_BYTES: usize = 255;

/// A checked submission, before it meets the machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    pub argv: Vec<String>,
    pub script: Option<String>,
    pub cwd: String,
    pub env: Option<Vec<String>>,
    pub name: String,
    pub request: Request,
    /// `gpus_default`, with no `gpus` and no `device_ids` given: one device
    /// on a machine with accelerators, none without (the CLI's default,
    /// settled by xlurmd so that a submission is one call).
    pub gpus_default: bool,
    /// `--nice`: positive lowers the job's priority (checked against the
    /// caller at submission: `core::priority::check_nice`).
    pub nice: i32,
    /// The submitter's umask, for the files the job creates (its unit's
    /// `UMask=`; an array task's `--output` file is one); `None` from a
    /// client that sent none: systemd's 0022.
    pub umask: Option<u32>,
    /// `--hold`: queued held by its owner (`xlurm release` lets it go).
    pub hold: bool,
    /// `--dependency` (checked against the jobs it names at submission).
    pub dependency: Option<crate::core::Dependency>,
    /// `--kill-on-invalid-dep=yes`.
    pub kill_on_invalid_dep: bool,
    /// `--requeue`: queued again if LOST.
    pub requeue: bool,
    /// `--array`: one record for its tasks until they start.
    pub array: Option<crate::core::ArraySpec>,
    /// An array's `--output` (`%A_%a`...): absolute, opened by each task as
    /// its user when it starts.
    pub output_template: Option<String>,
}

impl Spec {
    /// The bytes of its argv, script and environment: at most what its
    /// record holds of them (`Job::held_bytes`), so a budget check on this
    /// refuses nothing the full check would let in.
    pub fn command_bytes(&self) -> u64 {
        let strings = self
            .argv
            .iter()
            .chain(self.script.iter())
            .chain(self.env.iter().flatten());
        strings.map(|s| s.len() as u64).sum()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SpecError(pub String);

fn err<T>(msg: impl Into<String>) -> Result<T, SpecError> {
    Err(SpecError(msg.into()))
}

struct Reader<'a> {
    map: &'a HashMap<String, OwnedVariant>,
}

impl Reader<'_> {
    fn get<T>(&self, key: &str) -> Result<Option<T>, SpecError>
    where
        T: TryFrom<OwnedVariant>,
    {
        let Some(v) = self.map.get(key) else {
            return Ok(None);
        };
        let want = KEYS
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, t)| *t)
            .unwrap_or("?");
        let got = v.value_signature().to_string();
        match v.try_clone().ok().and_then(|v| T::try_from(v).ok()) {
            Some(x) => Ok(Some(x)),
            None => err(format!("spec key {key:?} must have type {want}, not {got}")),
        }
    }
}

fn check_text(what: &str, s: &str) -> Result<(), SpecError> {
    if s.contains('\0') {
        return err(format!("{what} contains a NUL byte"));
    }
    Ok(())
}

/// Refuses a path no kernel call can take and systemd's `path_is_valid` rejects
/// (a unit with such an `ExecStart=` is refused by systemd after the job was queued).
fn check_path(what: &str, p: &str) -> Result<(), SpecError> {
    if p.len() > MAX_PATH_BYTES {
        return err(format!(
            "{what} is too long ({} bytes; at most {MAX_PATH_BYTES})",
            p.len()
        ));
    }
    if p.split('/').any(|c| c.len() > MAX_PATH_COMPONENT_BYTES) {
        return err(format!(
            "{what} has a path component longer than {MAX_PATH_COMPONENT_BYTES} bytes"
        ));
    }
    Ok(())
}

/// Checks a spec's keys, types and sizes: pure, no I/O. Resource checks
/// against the machine happen later, in `core::request::validate`, and the
/// working directory is looked at with the submitter's rights in
/// `as_user::Checker::check_specs`.
pub fn parse(map: &HashMap<String, OwnedVariant>) -> Result<Spec, SpecError> {
    if let Some(k) = map.keys().find(|k| !KEYS.iter().any(|(name, _)| name == k)) {
        let valid: Vec<&str> = KEYS.iter().map(|(k, _)| *k).collect();
        return err(format!(
            "unknown spec key {k:?} (valid keys: {})",
            valid.join(", ")
        ));
    }
    let r = Reader { map };
    let script: Option<String> = r.get("script")?;
    let argv: Vec<String> = r.get("argv")?.unwrap_or_default();
    if argv.is_empty() && script.is_none() {
        return err("spec key \"argv\" is missing or empty: give the command to run");
    }
    if argv.len() > MAX_ARGS || argv.iter().map(|a| a.len() + 1).sum::<usize>() > MAX_ARGV_BYTES {
        return err(format!("the command line is too long (at most {MAX_ARGS} arguments and {MAX_ARGV_BYTES} bytes)"));
    }
    for a in &argv {
        check_text("an argument", a)?;
    }
    if script.is_none() && !argv[0].starts_with('/') {
        return err(format!(
            "argv[0] {:?} must be an absolute path (xrun and xbatch resolve it with your PATH)",
            argv[0].chars().take(200).collect::<String>()
        ));
    }
    if script.is_none() {
        check_path("argv[0]", &argv[0])?;
    }
    if let Some(s) = &script {
        if s.len() > MAX_SCRIPT_BYTES {
            return err(format!(
                "the batch script is too large (at most {MAX_SCRIPT_BYTES} bytes)"
            ));
        }
        check_text("the batch script", s)?;
    }
    let Some(cwd) = r.get::<String>("cwd")? else {
        return err("spec key \"cwd\" is missing: give the absolute working directory");
    };
    check_text("cwd", &cwd)?;
    if !cwd.starts_with('/') {
        return err(format!(
            "working directory {:?} is not an absolute path",
            cwd.chars().take(200).collect::<String>()
        ));
    }
    check_path("the working directory", &cwd)?;
    // Whether it is a directory the submitter may enter is checked with the
    // submitter's rights, off the event loop (`as_user`), not here.
    let env: Option<Vec<String>> = r.get("env")?;
    let clean_env: bool = r.get("clean_env")?.unwrap_or(false);
    if let Some(env) = &env {
        if env.len() > MAX_ENV_VARS
            || env.iter().map(|e| e.len() + 1).sum::<usize>() > MAX_ENV_BYTES
        {
            return err(format!("the environment is too large (at most {MAX_ENV_VARS} variables and {MAX_ENV_BYTES} bytes)"));
        }
        for kv in env {
            check_text("an environment entry", kv)?;
            match kv.split_once('=') {
                Some((name, _)) if valid_env_name(name) => {}
                _ => {
                    return err(format!(
                        "environment entry {:?} is not NAME=VALUE with NAME matching [A-Za-z_][A-Za-z0-9_]*",
                        kv.chars().take(80).collect::<String>()
                    ))
                }
            }
        }
    }
    let name: String = match r.get::<String>("name")? {
        Some(n) => n,
        None => derive_name(&argv, script.is_some()),
    };
    check_name(&name)?;
    let vendor = match r.get::<String>("vendor")? {
        None => None,
        Some(v) if v == "auto" => None,
        Some(v) => Some(v.parse::<Vendor>().map_err(|e| SpecError(e.to_string()))?),
    };
    let ids: Vec<u32> = r.get("device_ids")?.unwrap_or_default();
    let exclude: Vec<u32> = r.get("exclude_device_ids")?.unwrap_or_default();
    if ids.len() > MAX_DEVICE_IDS || exclude.len() > MAX_DEVICE_IDS {
        return err(format!("at most {MAX_DEVICE_IDS} device IDs"));
    }
    let umask: Option<u32> = r.get("umask")?;
    if let Some(m) = umask.filter(|m| *m > 0o777) {
        return err(format!(
            "umask {m:o} is not a file mode mask: it is at most 0777 (octal)"
        ));
    }
    let gpus: Option<u32> = r.get("gpus")?;
    let gpus_default = r.get("gpus_default")?.unwrap_or(false) && gpus.is_none() && ids.is_empty();
    let count = gpus.unwrap_or(ids.len() as u32);
    let request = Request {
        cpus: r.get("cpus")?.unwrap_or(1),
        mem_bytes: r.get("mem")?,
        devices: DeviceRequest {
            count,
            vendor,
            ids,
            exclude,
        },
        exclusive: r.get("exclusive")?.unwrap_or(false),
        numa_local: r.get("numa_local")?.unwrap_or(false),
        time_limit_secs: r.get("time_limit")?,
    };
    Ok(Spec {
        argv,
        script,
        cwd,
        env: if clean_env { None } else { env },
        name,
        request,
        gpus_default,
        nice: r.get("nice")?.unwrap_or(0),
        umask,
        hold: r.get("hold")?.unwrap_or(false),
        dependency: match r.get::<String>("dependency")? {
            Some(d) => Some(dependency(&d)?),
            None => None,
        },
        kill_on_invalid_dep: r.get("kill_on_invalid_dep")?.unwrap_or(false),
        requeue: r.get("requeue")?.unwrap_or(false),
        output_template: match r.get::<String>("output_template")? {
            None => None,
            Some(t) => {
                check_text("output_template", &t)?;
                check_path("output_template", &t)?;
                if !t.starts_with('/') {
                    return err("spec key \"output_template\" must be an absolute path");
                }
                if !map.contains_key("array") {
                    return err("spec key \"output_template\" is for arrays; a single job passes \"output_fd\"");
                }
                Some(t)
            }
        },
        array: match r.get::<String>("array")? {
            Some(a) if a.len() > MAX_ARRAY_BYTES => {
                return err(format!(
                    "spec key \"array\" is {} bytes long (at most {MAX_ARRAY_BYTES})",
                    a.len()
                ))
            }
            Some(a) => Some(
                crate::core::ArraySpec::parse(&a)
                    .map_err(|e| SpecError(format!("spec key \"array\": {e}")))?,
            ),
            None => None,
        },
    })
}

/// A `dependency` key's value, checked (its errors quote what they refuse,
/// so the text is bounded first).
fn dependency(d: &str) -> Result<crate::core::Dependency, SpecError> {
    if d.len() > MAX_DEPENDENCY_BYTES {
        return err(format!(
            "spec key \"dependency\" is {} bytes long (at most {MAX_DEPENDENCY_BYTES})",
            d.len()
        ));
    }
    crate::core::dependency::parse(d)
        .map_err(|e| SpecError(format!("spec key \"dependency\": {e}")))
}

fn check_name(name: &str) -> Result<(), SpecError> {
    if name.is_empty()
        || name.chars().count() > MAX_NAME_CHARS
        || name.chars().any(char::is_control)
    {
        return err(format!(
            "job name must be 1-{MAX_NAME_CHARS} printable characters"
        ));
    }
    Ok(())
}

/// What `Update` may change of a job, each as its spec key (`dependency`
/// empty: clear it). A running job's time limit only.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    pub time_limit_secs: Option<u64>,
    pub cpus: Option<u32>,
    pub mem_bytes: Option<u64>,
    pub gpus: Option<u32>,
    pub name: Option<String>,
    pub nice: Option<i32>,
    /// `Some(None)`: clear it.
    pub dependency: Option<Option<crate::core::Dependency>>,
}

/// The spec keys `Update` takes.
pub const UPDATE_KEYS: [&str; 7] = [
    "time_limit",
    "cpus",
    "mem",
    "gpus",
    "name",
    "nice",
    "dependency",
];

impl Changes {
    /// Whether it changes more than the time limit.
    pub fn beyond_time_limit(&self) -> bool {
        let Changes {
            time_limit_secs: _,
            cpus,
            mem_bytes,
            gpus,
            name,
            nice,
            dependency,
        } = self;
        cpus.is_some()
            || mem_bytes.is_some()
            || gpus.is_some()
            || name.is_some()
            || nice.is_some()
            || dependency.is_some()
    }
}

/// Checks an `Update`'s changes: known keys of the right types, a valid
/// name and dependency, at least one change. Pure, as [`parse`].
pub fn parse_changes(map: &HashMap<String, OwnedVariant>) -> Result<Changes, SpecError> {
    if let Some(k) = map.keys().find(|k| !UPDATE_KEYS.contains(&k.as_str())) {
        return err(format!(
            "{k:?} cannot be updated (keys: {})",
            UPDATE_KEYS.join(", ")
        ));
    }
    if map.is_empty() {
        return err(format!(
            "nothing to change: give one of {}",
            UPDATE_KEYS.join(", ")
        ));
    }
    let r = Reader { map };
    let name: Option<String> = r.get("name")?;
    if let Some(n) = &name {
        check_name(n)?;
    }
    let dependency = match r.get::<String>("dependency")? {
        None => None,
        Some(d) if d.is_empty() => Some(None),
        Some(d) => Some(Some(dependency(&d)?)),
    };
    Ok(Changes {
        time_limit_secs: r.get("time_limit")?,
        cpus: r.get("cpus")?,
        mem_bytes: r.get("mem")?,
        gpus: r.get("gpus")?,
        name,
        nice: r.get("nice")?,
        dependency,
    })
}

fn derive_name(argv: &[String], batch: bool) -> String {
    let base = argv
        .first()
        .map(|a| a.rsplit('/').next().unwrap_or(a).to_string())
        .filter(|s| !s.is_empty());
    match (base, batch) {
        (Some(b), _) => b.chars().take(MAX_NAME_CHARS).collect(),
        (None, true) => "batch".into(),
        (None, false) => "job".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::spec::entry;
    use zbus::Variant;

    fn base() -> HashMap<String, OwnedVariant> {
        HashMap::from([
            entry("argv", vec!["/bin/echo".to_string(), "hi".to_string()]),
            entry("cwd", "/tmp"),
        ])
    }

    fn with(k: &str, v: impl Into<Variant<'static>>) -> HashMap<String, OwnedVariant> {
        let mut m = base();
        let (k, v) = entry(k, v);
        m.insert(k, v);
        m
    }

    #[test]
    fn a_good_spec_parses() {
        let mut m = base();
        m.extend([
            entry("gpus", 2u32),
            entry("vendor", "nvidia"),
            entry("mem", 1u64 << 30),
            entry("env", vec!["A=1".to_string()]),
        ]);
        let s = parse(&m).unwrap();
        assert_eq!(s.name, "echo");
        assert_eq!(s.request.devices.count, 2);
        assert_eq!(s.request.devices.vendor, Some(Vendor::Nv));
        assert_eq!(s.request.mem_bytes, Some(1 << 30));
        assert_eq!(s.env, Some(vec!["A=1".to_string()]));
        assert_eq!(s.request.cpus, 1);
    }

    #[test]
    fn a_umask_is_a_mode_mask_or_refused() {
        assert_eq!(parse(&with("umask", 0o027u32)).unwrap().umask, Some(0o027));
        assert_eq!(
            parse(&base()).unwrap().umask,
            None,
            "an older client: systemd's"
        );
        let e = parse(&with("umask", 0o1777u32)).unwrap_err().0;
        assert!(e.contains("umask 1777") && e.contains("0777"), "{e}");
        assert!(parse(&with("umask", "022")).is_err(), "u, not a string");
    }

    #[test]
    fn bad_specs_are_refused_with_the_key() {
        let mut no_argv = base();
        no_argv.remove("argv");
        let mut no_cwd = base();
        no_cwd.remove("cwd");
        let cases: Vec<(HashMap<String, OwnedVariant>, &str)> = vec![
            (with("bogus", 1u32), "unknown spec key \"bogus\""),
            (with("cpus", "four"), "\"cpus\" must have type u, not s"),
            (with("mem", -1i64), "\"mem\" must have type t, not x"),
            (with("argv", Vec::<String>::new()), "missing or empty"),
            (no_argv, "missing or empty"),
            (no_cwd, "\"cwd\" is missing"),
            (with("cwd", "relative/dir"), "not an absolute path"),
            (
                with("cwd", format!("/{}", "d".repeat(256))),
                "longer than 255",
            ),
            (with("cwd", "/a".repeat(2048)), "too long"),
            (
                with("argv", vec![format!("/bin/{}", "x".repeat(256))]),
                "longer than 255",
            ),
            (with("argv", vec!["/x".repeat(2048)]), "too long"),
            (
                with("argv", vec!["echo".to_string()]),
                "must be an absolute path",
            ),
            (with("argv", vec!["/bin/x\0y".to_string()]), "NUL"),
            (with("env", vec!["1BAD=x".to_string()]), "not NAME=VALUE"),
            (with("env", vec!["NOEQUALS".to_string()]), "not NAME=VALUE"),
            (with("env", vec!["A-B=1".to_string()]), "not NAME=VALUE"),
            (with("vendor", "amd"), "unknown device vendor"),
            (with("name", "a\nb"), "printable"),
            (with("name", ""), "printable"),
            (
                with("argv", vec!["/x".to_string(); MAX_ARGS + 1]),
                "too long",
            ),
            (
                with("script", "x".repeat(MAX_SCRIPT_BYTES + 1)),
                "too large",
            ),
            (
                with("device_ids", vec![0u32; MAX_DEVICE_IDS + 1]),
                "at most",
            ),
            (
                with("env", vec!["A=1".to_string(); MAX_ENV_VARS + 1]),
                "too large",
            ),
        ];
        for (m, want) in cases {
            let e = parse(&m).expect_err(want).to_string();
            assert!(e.contains(want), "{e:?} lacks {want:?}");
        }
    }

    #[test]
    fn the_working_directory_is_not_looked_at_here() {
        // Parsing is pure: whether the directory exists, and for whom, is for
        // `as_user` to say with the submitter's rights.
        for cwd in ["/nonexistent/xlurm-spec-test", "/proc/self/status"] {
            assert_eq!(parse(&with("cwd", cwd)).unwrap().cwd, cwd);
        }
    }

    #[test]
    fn ids_imply_the_count_and_clean_env_drops_env() {
        let mut m = with("device_ids", vec![1u32, 3]);
        m.extend([
            entry("env", vec!["A=1".to_string()]),
            entry("clean_env", true),
        ]);
        let s = parse(&m).unwrap();
        assert_eq!(s.request.devices.count, 2);
        assert_eq!(s.env, None);
        let batch = HashMap::from([entry("script", "echo hi\n"), entry("cwd", "/")]);
        let s = parse(&batch).unwrap();
        assert_eq!(s.name, "batch");
        assert!(s.argv.is_empty());
    }
}
