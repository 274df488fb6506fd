//! How the CLI writes what it shows: local times, durations, JSON, and
//! output written at once.

use super::client::{get, Dict};
use anyhow::Result;

pub(super) fn local_time(usec: u64, with_year: bool) -> String {
    if usec == 0 {
        return "-".into();
    }
    let secs = (usec / 1_000_000) as libc::time_t;
    // SAFETY: localtime_r writes only into `tm`, which we own.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let ok = unsafe { !libc::localtime_r(&secs, &mut tm).is_null() };
    if !ok {
        return "-".into();
    }
    let base = format!(
        "{:02}-{:02} {:02}:{:02}:{:02}",
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    );
    if with_year {
        format!("{}-{base}", tm.tm_year + 1900)
    } else {
        base
    }
}

/// `HH:MM:SS`, or `D-HH:MM:SS` past a day.
pub fn duration(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    if d > 0 {
        format!("{d}-{h:02}:{m:02}:{s:02}")
    } else {
        format!("{h:02}:{m:02}:{s:02}")
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
    }
}
