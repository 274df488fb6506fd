//! The metrics text against the rules `promtool check metrics` and an
//! OpenMetrics parser apply, checked by a small parser of both formats.

use super::*;
use crate::wire::queue::JobSummary;
use zbus::{OwnedVariant as OwnedValue, Variant as Value};

fn put(m: &mut Dict, k: &str, v: Value<'_>) {
    m.insert(k.into(), OwnedValue::try_from(v).unwrap());
}

fn job(id: u64, user: &str, state: &str, reason: &str) -> JobSummary {
    JobSummary {
        id,
        name: "n".into(),
        uid: 1000,
        user: user.into(),
        state: state.into(),
        reason: reason.into(),
        submit_time: 0,
        start_time: 0,
        end_time: 0,
        time_limit: 60,
        cpus: 1,
        mem: 1 << 30,
        spread: false,
        devices: "nv:0".into(),
        exit_code: -1,
        detail: "".into(),
        array: "".into(),
    }
}

fn machine() -> Dict {
    let mut m = Dict::new();
    let mut n = Dict::new();
    put(&mut n, "id", 0u32.into());
    put(&mut n, "cpus", "0-3".into());
    put(&mut n, "cpus_free", "2-3".into());
    put(&mut n, "mem", (8u64 << 30).into());
    put(&mut n, "mem_free", (6u64 << 30).into());
    put(&mut m, "nodes", vec![n].into());
    let mut d = Dict::new();
    put(&mut d, "vendor", "nv".into());
    put(&mut d, "index", 0u32.into());
    put(&mut d, "uuid", "GPU-\"odd\"\\name".into());
    put(&mut d, "health", "ok".into());
    put(&mut d, "disabled", false.into());
    put(&mut d, "job", 7u64.into());
    put(&mut d, "util_pct", 37u32.into());
    put(&mut d, "mem_used", 1024u64.into());
    put(&mut d, "mem_total", 4096u64.into());
    let mut free = Dict::new();
    put(&mut free, "vendor", "nv".into());
    put(&mut free, "index", 1u32.into());
    put(&mut free, "uuid", "GPU-1".into());
    put(&mut free, "health", "busy".into());
    put(&mut free, "disabled", true.into());
    put(&mut free, "job", 0u64.into());
    put(&mut m, "devices", vec![d, free].into());
    put(&mut m, "submitted_total", 12u64.into());
    put(&mut m, "started_total", 9u64.into());
    put(&mut m, "sched_passes_total", 30u64.into());
    put(&mut m, "sched_pass_nsec_total", 1_500_000_000u64.into());
    put(&mut m, "sched_last_pass_nsec", 250_000u64.into());
    m
}

fn text(open: bool) -> String {
    let jobs = [
        job(7, "alice", "RUNNING", "IdleGPU"),
        job(8, "alice", "PENDING", "Resources (CPUs: needs 4, 2 free)"),
        job(9, "bob", "PENDING", "Priority (held for an earlier job)"),
        job(10, "bob", "PENDING", "Resources (GPUs)"),
    ];
    let lines: Vec<_> = jobs.iter().map(JobSummary::line).collect();
    render(&families(&machine(), &lines), open)
}

/// A parsed sample: name, labels, value.
type Sample = (String, Vec<(String, String)>, f64);

fn is_name(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some('a'..='z' | '_'))
        && c.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// Parses `labels="..."` with the formats' escapes.
fn labels(mut s: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    while !s.is_empty() {
        let (k, rest) = s.split_once("=\"").ok_or(format!("no =\" in {s}"))?;
        if !is_name(k) {
            return Err(format!("bad label name {k}"));
        }
        let mut v = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => v.push('\n'),
                    Some((_, c @ ('\\' | '"'))) => v.push(c),
                    other => return Err(format!("bad escape {other:?}")),
                },
                Some((i, '"')) => break i,
                Some((_, c)) => v.push(c),
                None => return Err("unterminated label value".into()),
            }
        };
        out.push((k.to_string(), v));
        s = &rest[end + 1..];
        s = s.strip_prefix(',').unwrap_or(s);
    }
    Ok(out)
}

/// Checks `text` as promtool (0.0.4) or an OpenMetrics parser would; returns
/// the samples.
fn check(text: &str, open: bool) -> Result<Vec<Sample>, String> {
    let mut samples = Vec::new();
    let (mut family, mut kind) = (String::new(), String::new());
    let mut seen = std::collections::BTreeSet::new();
    let mut lines: Vec<&str> = text.lines().collect();
    if open {
        if lines.pop() != Some("# EOF") {
            return Err("no # EOF at the end".into());
        }
    } else if text.contains("# EOF") {
        return Err("# EOF in the 0.0.4 text".into());
    }
    for line in lines {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').ok_or("HELP without text")?;
            if !is_name(name) || help.is_empty() || !seen.insert(name.to_string()) {
                return Err(format!("bad or repeated HELP {name}"));
            }
            family = name.to_string();
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, k) = rest.split_once(' ').ok_or("TYPE without type")?;
            if name != family {
                return Err(format!("TYPE {name} not after its HELP"));
            }
            if k == "counter" && (open == name.ends_with("_total")) {
                return Err(format!(
                    "counter family {name} named wrongly for this format"
                ));
            }
            if !["counter", "gauge"].contains(&k) {
                return Err(format!("type {k}"));
            }
            kind = k.to_string();
        } else if let Some(rest) = line.strip_prefix("# UNIT ") {
            let (name, unit) = rest.split_once(' ').ok_or("UNIT without unit")?;
            if !open || name != family || !name.ends_with(&format!("_{unit}")) {
                return Err(format!("bad UNIT line {line}"));
            }
        } else if line.starts_with('#') || line.is_empty() {
            return Err(format!("stray line {line:?}"));
        } else {
            let (head, value) = line.rsplit_once(' ').ok_or("sample without value")?;
            let value: f64 = value.parse().map_err(|e| format!("{line}: {e}"))?;
            let (name, l) = match head.split_once('{') {
                Some((n, rest)) => (n, labels(rest.strip_suffix('}').ok_or("no }")?)?),
                None => (head, vec![]),
            };
            let want = if kind == "counter" && open {
                format!("{family}_total")
            } else {
                family.clone()
            };
            if name != want {
                return Err(format!("sample {name} outside its family {family}"));
            }
            if kind == "counter" && value < 0.0 {
                return Err(format!("negative counter {line}"));
            }
            samples.push((name.to_string(), l, value));
        }
    }
    Ok(samples)
}

fn value(samples: &[Sample], name: &str, want: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|(n, l, _)| {
            n == name
                && want
                    .iter()
                    .all(|(k, v)| l.iter().any(|(lk, lv)| lk == k && lv == v))
        })
        .map(|s| s.2)
}

#[test]
fn both_formats_parse_and_carry_the_figures() {
    for open in [false, true] {
        let t = text(open);
        let s = check(&t, open).unwrap_or_else(|e| panic!("{e}\n{t}"));
        let v = |name: &str, l: &[(&str, &str)]| value(&s, name, l);
        assert_eq!(
            v("xlurm_jobs", &[("state", "pending"), ("user", "bob")]),
            Some(2.0)
        );
        assert_eq!(
            v("xlurm_jobs", &[("state", "running"), ("user", "alice")]),
            Some(1.0)
        );
        assert_eq!(
            v("xlurm_pending_jobs", &[("reason", "Resources")]),
            Some(2.0)
        );
        assert_eq!(
            v("xlurm_pending_jobs", &[("reason", "Priority")]),
            Some(1.0)
        );
        assert_eq!(v("xlurm_flagged_jobs", &[("flag", "IdleGPU")]), Some(1.0));
        assert_eq!(v("xlurm_node_cpus", &[("node", "0")]), Some(4.0));
        assert_eq!(v("xlurm_node_cpus_free", &[("node", "0")]), Some(2.0));
        assert_eq!(
            v("xlurm_node_memory_free_bytes", &[("node", "0")]),
            Some((6u64 << 30) as f64)
        );
        assert_eq!(
            v("xlurm_device_utilization_ratio", &[("device", "nv:0")]),
            Some(0.37)
        );
        assert_eq!(
            v("xlurm_device_memory_total_bytes", &[("device", "nv:0")]),
            Some(4096.0)
        );
        // The holder and its owner; a label value with quotes and a backslash
        // reads back as it was.
        assert_eq!(
            v(
                "xlurm_device_info",
                &[
                    ("device", "nv:0"),
                    ("job", "7"),
                    ("user", "alice"),
                    ("uuid", "GPU-\"odd\"\\name")
                ]
            ),
            Some(1.0)
        );
        assert_eq!(
            v(
                "xlurm_device_info",
                &[("device", "nv:1"), ("health", "disabled"), ("job", "")]
            ),
            Some(1.0)
        );
        // nv:1 reported no load: no sample rather than a made-up 0.
        assert_eq!(
            v("xlurm_device_utilization_ratio", &[("device", "nv:1")]),
            None
        );
        assert_eq!(v("xlurm_submitted_jobs_total", &[]), Some(12.0));
        assert_eq!(v("xlurm_scheduling_pass_seconds_total", &[]), Some(1.5));
        assert_eq!(v("xlurm_scheduling_last_pass_seconds", &[]), Some(0.00025));
    }
}

#[test]
fn the_checker_catches_what_promtool_would() {
    // Each of these must fail the check: it is what makes the tests above mean something.
    let bad = [
        (
            "# HELP a_total x\n# TYPE a_total counter\na_total 1\n",
            true,
        ),
        ("# HELP a x\n# TYPE a counter\na_total 1\n", false),
        ("# HELP a x\n# TYPE a gauge\nb 1\n", false),
        ("# HELP a x\n# TYPE a gauge\na{l=\"x} 1\n", false),
        ("# HELP a x\n# TYPE a gauge\na one\n", false),
        ("# HELP a x\n# TYPE a gauge\na 1\n", true),
        ("# HELP A x\n# TYPE A gauge\nA 1\n", false),
    ];
    for (t, open) in bad {
        assert!(check(t, open).is_err(), "{t:?} passed");
    }
}

#[test]
fn the_file_is_replaced_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("xlurm.prom");
    write_atomic(&path, "one\n").unwrap();
    write_atomic(&path, "two\n").unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "two\n");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "no temporary left"
    );
}
