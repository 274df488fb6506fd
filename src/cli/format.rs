//! How the CLI writes what it shows: local times, durations, JSON, and
//! output written at once.

use super::client::{get, Dict};
use crate::wire::keys;
use anyhow::Result;

pub(super) fn local_time(usec: u64, with_year: bool) -> String {
    let mut out = String::new();
    push_local_time(&mut out, usec, with_year);
    out
}

/// Appends [`local_time`] to `out` (`[YYYY-]MM-DD HH:MM:SS` in local time,
/// `-` for 0), without a `format!` per call: `xqueue` writes one per row.
pub(super) fn push_local_time(out: &mut String, usec: u64, with_year: bool) {
    if usec == 0 {
        out.push('-');
        return;
    }
    let secs = (usec / 1_000_000) as libc::time_t;
    // SAFETY: localtime_r writes only into `tm`, which we own.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let ok = unsafe { !libc::localtime_r(&secs, &mut tm).is_null() };
    if !ok {
        out.push('-');
        return;
    }
    if with_year {
        out.push_str(itoa::Buffer::new().format(i64::from(tm.tm_year) + 1900));
        out.push('-');
    }
    push_2(out, tm.tm_mon + 1);
    out.push('-');
    push_2(out, tm.tm_mday);
    out.push(' ');
    push_2(out, tm.tm_hour);
    out.push(':');
    push_2(out, tm.tm_min);
    out.push(':');
    push_2(out, tm.tm_sec);
}

/// `v` as `{:02}` would write it.
fn push_2(out: &mut String, v: impl Into<i64>) {
    let v = v.into();
    if (0..10).contains(&v) {
        out.push('0');
    }
    out.push_str(itoa::Buffer::new().format(v));
}

/// `HH:MM:SS`, or `D-HH:MM:SS` past a day.
/// How well a job used what it held, in one line (`xqueue ID`, the end of
/// `xrun`): CPU efficiency once it ended, its accelerators' mean and peak
/// busy percent and memory peak where read. `None` when nothing is known.
pub fn efficiency(job: &Dict) -> Option<String> {
    let mut parts = Vec::new();
    if let Some(e) = keys::job::CPU_EFFICIENCY.get(job) {
        parts.push(format!(
            "CPU {:.0}% of {} CPUs",
            e * 100.0,
            keys::job::CPUS.get(job).unwrap_or(0)
        ));
    }
    if let Some(mean) = keys::job::GPU_UTIL_MEAN.get(job) {
        parts.push(format!(
            "accelerators {mean:.0}% busy on average (peak {}%)",
            keys::job::GPU_UTIL_PEAK.get(job).unwrap_or(0)
        ));
    }
    if let Some(peak) = keys::job::GPU_MEM_PEAK.get(job) {
        parts.push(format!(
            "device memory peak {}",
            crate::core::request::format_bytes(peak)
        ));
    }
    if let Some(flag) = keys::job::FLAG.get(job) {
        parts.push(format!("{flag}: an accelerator stays idle"));
    }
    (!parts.is_empty()).then(|| parts.join(", "))
}

pub fn duration(secs: u64) -> String {
    let mut out = String::new();
    push_duration(&mut out, secs);
    out
}

/// Appends [`duration`] to `out`.
pub(super) fn push_duration(out: &mut String, secs: u64) {
    let (d, h, m, s) = (secs / 86400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    if d > 0 {
        out.push_str(itoa::Buffer::new().format(d));
        out.push('-');
    }
    for (i, v) in [h, m, s].into_iter().enumerate() {
        if i > 0 {
            out.push(':');
        }
        // Each is below 100 (h < 24, m and s < 60).
        push_2(out, v as i64);
    }
}

pub(super) fn dict_to_json(d: &Dict) -> serde_json::Value {
    let mut m = serde_json::Map::new();
    let mut keys: Vec<&String> = d.keys().collect();
    keys.sort();
    for k in keys {
        let v = &d[k];
        let j = if let Some(s) = get::<String>(d, k) {
            serde_json::json!(s)
        } else if let Some(x) = get::<u64>(d, k) {
            serde_json::json!(x)
        } else if let Some(x) = get::<u32>(d, k) {
            serde_json::json!(x)
        } else if let Some(x) = get::<i32>(d, k) {
            serde_json::json!(x)
        } else if let Some(x) = get::<bool>(d, k) {
            serde_json::json!(x)
        } else if let Some(x) = get::<f64>(d, k) {
            serde_json::json!(x)
        } else if let Some(x) = get::<std::collections::HashMap<String, u64>>(d, k) {
            serde_json::json!(x.into_iter().collect::<std::collections::BTreeMap<_, _>>())
        } else if let Some(x) = get::<Vec<String>>(d, k) {
            serde_json::json!(x)
        } else if let Some(x) = v
            .try_clone()
            .ok()
            .and_then(|v| Vec::<Dict>::try_from(v).ok())
        {
            serde_json::Value::Array(x.iter().map(dict_to_json).collect())
        } else {
            serde_json::Value::Null
        };
        m.insert(k.clone(), j);
    }
    serde_json::Value::Object(m)
}

/// Pretty JSON and a newline.
pub(super) fn json_text<T: serde::Serialize>(v: &T) -> Result<String> {
    Ok(serde_json::to_string_pretty(v)? + "\n")
}

/// Writes a command's whole output at once: a reader that stops early
/// (`xqueue 5 | grep -q RUNNING` under `set -o pipefail`) then never makes
/// the command die of SIGPIPE between two of its lines, as long as the
/// output fits the pipe's buffer (64 KiB on Linux). Longer output, like any
/// program's, may still meet a reader gone.
pub(super) fn emit(text: &str) -> Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(duration(3661), "01:01:01");
        assert_eq!(duration(90061), "1-01:01:01");
        // As `format!` writes them, across every field's carry.
        for secs in (0..200_000u64).step_by(7).chain([86_399, 86_400, u64::MAX]) {
            let (d, h, m, s) = (secs / 86400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
            let want = if d > 0 {
                format!("{d}-{h:02}:{m:02}:{s:02}")
            } else {
                format!("{h:02}:{m:02}:{s:02}")
            };
            assert_eq!(duration(secs), want, "{secs}");
        }
    }

    #[test]
    fn local_times_are_localtime_r_formatted() {
        assert_eq!(local_time(0, true), "-");
        for secs in (0..4_000_000_000i64)
            .step_by(99_991_987)
            .chain([1, 59, 86_399])
        {
            let mut tm: libc::tm = unsafe { std::mem::zeroed() };
            assert!(!unsafe { libc::localtime_r(&secs, &mut tm) }.is_null());
            let base = format!(
                "{:02}-{:02} {:02}:{:02}:{:02}",
                tm.tm_mon + 1,
                tm.tm_mday,
                tm.tm_hour,
                tm.tm_min,
                tm.tm_sec
            );
            let usec = secs as u64 * 1_000_000 + 999_999;
            assert_eq!(local_time(usec, false), base);
            assert_eq!(
                local_time(usec, true),
                format!("{}-{base}", tm.tm_year + 1900)
            );
        }
    }

    #[test]
    fn efficiency_says_what_is_known_and_nothing_else() {
        let put = |m: &mut Dict, k: &str, v: zbus::Variant<'_>| {
            m.insert(k.into(), zbus::OwnedVariant::try_from(v).unwrap());
        };
        let mut m = Dict::new();
        assert_eq!(efficiency(&m), None);
        put(&mut m, "cpus", 4u32.into());
        put(&mut m, "cpu_efficiency", 0.254f64.into());
        assert_eq!(efficiency(&m).unwrap(), "CPU 25% of 4 CPUs");
        put(&mut m, "gpu_util_mean", 47.6f64.into());
        put(&mut m, "gpu_util_peak", 99u32.into());
        put(&mut m, "gpu_mem_peak", (3u64 << 30).into());
        put(&mut m, "flag", "IdleGPU".into());
        assert_eq!(
            efficiency(&m).unwrap(),
            "CPU 25% of 4 CPUs, accelerators 48% busy on average (peak 99%), \
             device memory peak 3G, IdleGPU: an accelerator stays idle"
        );
    }
}
