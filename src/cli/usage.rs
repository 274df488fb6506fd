//! `xlurm usage`: a usage report from the accounting log (`GetUsage`), like
//! `sacct`/`sreport`: per user and per day, week or month.

use super::client::{connect, explain, Dict};
use super::format::{duration, emit};
use crate::core::request::format_bytes;
use crate::wire::keys;
use anyhow::{bail, Result};
use std::fmt::Write;

/// This machine's offset from UTC now, seconds east (where days begin).
pub fn local_offset() -> i32 {
    let now = crate::wire::time::now_usec() / 1_000_000;
    let t = now as libc::time_t;
    // SAFETY: localtime_r fills the zeroed tm it is given.
    unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&t, &mut tm).is_null() {
            return 0;
        }
        tm.tm_gmtoff as i32
    }
}

/// A time given on the command line, seconds since the epoch: a local date
/// `YYYY-MM-DD` (its midnight), or a duration ago (`30d`, `12h`).
pub fn parse_when(text: &str, now: u64, offset: i32) -> Result<u64> {
    let t = text.trim();
    let date: Vec<&str> = t.split('-').collect();
    if let [y, m, d] = date[..] {
        if let (Ok(y), Ok(m), Ok(d)) = (y.parse::<i64>(), m.parse::<u32>(), d.parse::<u32>()) {
            if (1970..=9999).contains(&y) && (1..=12).contains(&m) && (1..=31).contains(&d) {
                let days = crate::core::accounting::days_from_civil(y, m, d);
                let (cy, cm, cd) = crate::core::accounting::civil(days);
                if (cy, cm, cd) != (y, m, d) {
                    bail!("{t:?} is not a date");
                }
                let secs = days * 86_400 - i64::from(offset);
                return Ok(u64::try_from(secs.max(0)).unwrap_or(0));
            }
        }
        bail!("{t:?} is not a date (YYYY-MM-DD) nor a duration ago (30d, 12h)");
    }
    match crate::core::request::parse_duration_secs(t) {
        Ok(ago) => Ok(now.saturating_sub(ago)),
        Err(_) => bail!("{t:?} is not a date (YYYY-MM-DD) nor a duration ago (30d, 12h)"),
    }
}

/// The states a row shows in columns of their own; the rest are OTHER.
const SHOWN: [&str; 3] = ["COMPLETED", "FAILED", "CANCELLED"];

fn state_count(row: &Dict, state: &str) -> u64 {
    keys::usage::STATES
        .get(row)
        .and_then(|m| m.get(state).copied())
        .unwrap_or(0)
}

/// The report as a table.
pub fn table(rows: &[Dict]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<10} {:<10} {:>6} {:>9} {:>6} {:>9} {:>5} {:>9} {:>9} {:>8} {:>10} {:>20} {:>5}",
        "PERIOD",
        "USER",
        "JOBS",
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "OTHER",
        "CPU-H",
        "CPU-USED",
        "GPU-H",
        "WAIT(MED)",
        "MEM PEAK p50/p90/max",
        "GPU%"
    );
    for r in rows {
        let jobs = keys::usage::JOBS.get(r).unwrap_or(0);
        let shown: u64 = SHOWN.iter().map(|s| state_count(r, s)).sum();
        let mem = match (
            keys::usage::MEM_PEAK_P50.get(r),
            keys::usage::MEM_PEAK_P90.get(r),
            keys::usage::MEM_PEAK_MAX.get(r),
        ) {
            (Some(a), Some(b), Some(c)) => {
                format!(
                    "{}/{}/{}",
                    format_bytes(a),
                    format_bytes(b),
                    format_bytes(c)
                )
            }
            _ => "-".into(),
        };
        let _ = writeln!(
            out,
            "{:<10} {:<10} {:>6} {:>9} {:>6} {:>9} {:>5} {:>9.1} {:>9.1} {:>8.1} {:>10} {:>20} {:>5}",
            keys::usage::PERIOD.text(r),
            keys::usage::USER.text(r),
            jobs,
            state_count(r, "COMPLETED"),
            state_count(r, "FAILED"),
            state_count(r, "CANCELLED"),
            jobs.saturating_sub(shown),
            keys::usage::CPU_HOURS.get(r).unwrap_or(0.0),
            keys::usage::CPU_USED_HOURS.get(r).unwrap_or(0.0),
            keys::usage::GPU_HOURS.get(r).unwrap_or(0.0),
            keys::usage::WAIT_MEDIAN.get(r).map_or("-".into(), |w| duration(u64::from(w))),
            mem,
            keys::usage::GPU_UTIL.get(r).map_or("-".into(), |u| format!("{u:.0}")),
        );
    }
    out
}

/// The report as CSV (a header, then one line per row; states by name).
pub fn csv(rows: &[Dict]) -> String {
    let mut out = String::from(
        "period,user,uid,jobs,completed,failed,cancelled,other,cpu_hours,cpu_used_hours,gpu_hours,wait_median_secs,mem_peak_p50,mem_peak_p90,mem_peak_max,gpu_util\n",
    );
    let opt = |v: Option<String>| v.unwrap_or_default();
    for r in rows {
        let jobs = keys::usage::JOBS.get(r).unwrap_or(0);
        let shown: u64 = SHOWN.iter().map(|s| state_count(r, s)).sum();
        // User names are login names: no commas or quotes to escape.
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{},{:.3},{:.3},{:.3},{},{},{},{},{}",
            keys::usage::PERIOD.text(r),
            keys::usage::USER.text(r),
            keys::usage::UID.get(r).unwrap_or(0),
            jobs,
            state_count(r, "COMPLETED"),
            state_count(r, "FAILED"),
            state_count(r, "CANCELLED"),
            jobs.saturating_sub(shown),
            keys::usage::CPU_HOURS.get(r).unwrap_or(0.0),
            keys::usage::CPU_USED_HOURS.get(r).unwrap_or(0.0),
            keys::usage::GPU_HOURS.get(r).unwrap_or(0.0),
            opt(keys::usage::WAIT_MEDIAN.get(r).map(|w| w.to_string())),
            opt(keys::usage::MEM_PEAK_P50.get(r).map(|v| v.to_string())),
            opt(keys::usage::MEM_PEAK_P90.get(r).map(|v| v.to_string())),
            opt(keys::usage::MEM_PEAK_MAX.get(r).map(|v| v.to_string())),
            opt(keys::usage::GPU_UTIL.get(r).map(|v| format!("{v:.1}"))),
        );
    }
    out
}

/// `xlurm usage`.
pub(super) async fn usage(a: &super::args::UsageArgs, user: bool) -> Result<i32> {
    use crate::wire::spec::entry;
    let now = crate::wire::time::now_usec() / 1_000_000;
    let offset = local_offset();
    let mut opts = Dict::new();
    let mut set = |(k, v): (String, zbus::OwnedVariant)| {
        opts.insert(k, v);
    };
    set(entry("period", a.period.as_str()));
    set(entry("since", parse_when(&a.since, now, offset)?));
    if let Some(u) = &a.until {
        set(entry("until", parse_when(u, now, offset)?));
    }
    set(entry("all_users", a.all));
    set(entry("utc_offset", offset));
    let p = connect(user).await?;
    let rows = p.get_usage(opts).await.map_err(|e| explain(e, user))?;
    if a.json {
        let list: Vec<serde_json::Value> = rows.iter().map(super::format::dict_to_json).collect();
        emit(&super::format::json_text(&list)?)?;
    } else if a.csv {
        emit(&csv(&rows))?;
    } else {
        emit(&table(&rows))?;
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn when_is_a_local_date_or_a_duration_ago() {
        let now = 1_800_000_000;
        assert_eq!(parse_when("30d", now, 0).unwrap(), now - 30 * 86_400);
        assert_eq!(parse_when("2026-12-02", 0, 0).unwrap(), 1_796_169_600);
        // Local midnight at UTC+2 is 22:00 UTC the day before.
        assert_eq!(
            parse_when("2026-12-02", 0, 7200).unwrap(),
            1_796_169_600 - 7200
        );
        for bad in ["2026-02-30", "2026-13-01", "yesterday", "1-2-3-4", ""] {
            assert!(parse_when(bad, now, 0).is_err(), "{bad}");
        }
    }

    #[test]
    fn table_and_csv_show_each_row() {
        let put = |m: &mut Dict, k: &str, v: zbus::Variant<'_>| {
            m.insert(k.into(), zbus::OwnedVariant::try_from(v).unwrap());
        };
        let mut r = Dict::new();
        put(&mut r, "period", "2026-12-01".into());
        put(&mut r, "user", "alice".into());
        put(&mut r, "uid", 1001u32.into());
        put(&mut r, "jobs", 5u64.into());
        let states = std::collections::HashMap::from([
            ("COMPLETED".to_string(), 3u64),
            ("FAILED".to_string(), 1),
            ("TIMEOUT".to_string(), 1),
        ]);
        put(&mut r, "states", states.into());
        put(&mut r, "cpu_hours", 12.5f64.into());
        put(&mut r, "cpu_used_hours", 6.25f64.into());
        put(&mut r, "gpu_hours", 2.0f64.into());
        put(&mut r, "wait_median", 90u32.into());
        put(&mut r, "mem_peak_p50", (1u64 << 30).into());
        put(&mut r, "mem_peak_p90", (2u64 << 30).into());
        put(&mut r, "mem_peak_max", (4u64 << 30).into());
        put(&mut r, "gpu_util", 61.4f64.into());
        let t = table(std::slice::from_ref(&r));
        let line = t.lines().nth(1).unwrap();
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(
            cols,
            [
                "2026-12-01",
                "alice",
                "5",
                "3",
                "1",
                "0",
                "1",
                "12.5",
                "6.2",
                "2.0",
                "00:01:30",
                "1G/2G/4G",
                "61"
            ]
        );
        let c = csv(&[r]);
        assert_eq!(
            c.lines().nth(1).unwrap(),
            "2026-12-01,alice,1001,5,3,1,0,1,12.500,6.250,2.000,90,1073741824,2147483648,4294967296,61.4"
        );
    }
}
