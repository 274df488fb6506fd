//! Accounting: one fixed-size record per ended job, and the usage report
//! over them (`xlurm usage`, like `sacct`/`sreport`): per user and per day,
//! week or month, jobs by final state, CPU-hours, GPU-hours, median wait,
//! memory peak distribution and accelerator efficiency. Pure: the daemon
//! keeps the records in monthly files (`daemon::accounting`).

use std::collections::BTreeMap;

/// Bytes of one record on disk.
pub const RECORD_BYTES: usize = 48;

/// A job's end as accounting keeps it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Record {
    pub id: u64,
    /// When it ended, seconds since the epoch.
    pub end: u32,
    /// From submission to start, seconds (0 if it never started).
    pub wait: u32,
    /// From start to end, seconds (0 if it never started).
    pub run: u32,
    pub uid: u32,
    pub cpus: u16,
    pub gpus: u8,
    /// Its final state, as an index into the daemon's states (`state_name`).
    pub state: u8,
    /// Its accelerators' mean busy percent; 255: not known.
    pub gpu_util: u8,
    /// Its memory peak, bytes (0: not known).
    pub mem_peak: u64,
    /// CPU time used, seconds.
    pub cpu_secs: u32,
    /// Its accelerators' device memory peak, MiB (0: not known).
    pub gpu_mem_peak_mib: u32,
}

impl Record {
    pub fn encode(&self) -> [u8; RECORD_BYTES] {
        let mut b = [0u8; RECORD_BYTES];
        b[0..8].copy_from_slice(&self.id.to_le_bytes());
        b[8..12].copy_from_slice(&self.end.to_le_bytes());
        b[12..16].copy_from_slice(&self.wait.to_le_bytes());
        b[16..20].copy_from_slice(&self.run.to_le_bytes());
        b[20..24].copy_from_slice(&self.uid.to_le_bytes());
        b[24..26].copy_from_slice(&self.cpus.to_le_bytes());
        b[26] = self.gpus;
        b[27] = self.state;
        b[28] = self.gpu_util;
        // 29..32: zero (a version byte could go here).
        b[32..40].copy_from_slice(&self.mem_peak.to_le_bytes());
        b[40..44].copy_from_slice(&self.cpu_secs.to_le_bytes());
        b[44..48].copy_from_slice(&self.gpu_mem_peak_mib.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8; RECORD_BYTES]) -> Record {
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(x)
        };
        Record {
            id: u64_at(0),
            end: u32_at(8),
            wait: u32_at(12),
            run: u32_at(16),
            uid: u32_at(20),
            cpus: u16::from_le_bytes([b[24], b[25]]),
            gpus: b[26],
            state: b[27],
            gpu_util: b[28],
            mem_peak: u64_at(32),
            cpu_secs: u32_at(40),
            gpu_mem_peak_mib: u32_at(44),
        }
    }

    /// The records in `bytes` (whole records; a torn tail is left out).
    pub fn all(bytes: &[u8]) -> impl Iterator<Item = Record> + '_ {
        bytes.chunks_exact(RECORD_BYTES).map(|c| {
            let mut b = [0u8; RECORD_BYTES];
            b.copy_from_slice(c);
            Record::decode(&b)
        })
    }
}

/// How a report groups time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Period {
    Day,
    /// Weeks start on Monday.
    Week,
    Month,
}

impl std::str::FromStr for Period {
    type Err = String;
    fn from_str(s: &str) -> Result<Period, String> {
        match s {
            "day" => Ok(Period::Day),
            "week" => Ok(Period::Week),
            "month" => Ok(Period::Month),
            _ => Err(format!("{s:?}: give day, week or month")),
        }
    }
}

/// The civil date (year, month 1-12, day 1-31) of `days` since 1970-01-01
/// (Howard Hinnant's `civil_from_days`).
pub fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// Days since 1970-01-01 of a civil date (`days_from_civil`).
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The first day (days since the epoch) of the period holding `days`.
pub fn period_start(period: Period, days: i64) -> i64 {
    match period {
        Period::Day => days,
        // 1970-01-01 was a Thursday: Monday is 3 days before.
        Period::Week => days - (days + 3).rem_euclid(7),
        Period::Month => {
            let (y, m, _) = civil(days);
            days_from_civil(y, m, 1)
        }
    }
}

/// `YYYY-MM-DD` of `days`, or `YYYY-MM` for a month.
pub fn label(period: Period, days: i64) -> String {
    let (y, m, d) = civil(days);
    match period {
        Period::Month => format!("{y:04}-{m:02}"),
        _ => format!("{y:04}-{m:02}-{d:02}"),
    }
}

/// Which records a report takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    pub period: Period,
    /// Jobs that ended in `[since, until)`, seconds since the epoch.
    pub since: u64,
    pub until: u64,
    /// Only this user's jobs (`None`: everyone's).
    pub uid: Option<u32>,
    /// Seconds east of UTC, for where days begin.
    pub utc_offset: i32,
}

/// One row of a report: one user in one period.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Row {
    /// The period's first day, days since the epoch (local to the query).
    pub day: i64,
    pub uid: u32,
    /// Jobs by final state (index as in [`Record::state`]).
    pub states: BTreeMap<u8, u64>,
    /// CPUs held times how long, hours.
    pub cpu_hours: f64,
    /// CPU time used, hours.
    pub cpu_used_hours: f64,
    /// Accelerators held times how long, hours.
    pub gpu_hours: f64,
    /// Median wait from submission to start of the jobs that started, seconds.
    pub wait_median: Option<u32>,
    /// Memory peak of the jobs that reported one: median, 90th percentile
    /// and highest, bytes.
    pub mem_p50: Option<u64>,
    pub mem_p90: Option<u64>,
    pub mem_max: Option<u64>,
    /// Mean busy percent of its accelerators, weighted by GPU-hours.
    pub gpu_util: Option<f64>,
}

impl Row {
    pub fn jobs(&self) -> u64 {
        self.states.values().sum()
    }
}

#[derive(Default)]
struct Acc {
    row: Row,
    waits: Vec<u32>,
    mems: Vec<u64>,
    util_weight: f64,
    util_sum: f64,
}

/// The `q`-th quantile (0..=1) of `v`, nearest rank; reorders `v`.
fn quantile<T: Copy + Ord>(v: &mut [T], q: f64) -> Option<T> {
    if v.is_empty() {
        return None;
    }
    let k = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    Some(*v.select_nth_unstable(k).1)
}

/// The report over `records` for `q`: rows by period, then user.
pub fn report(records: impl IntoIterator<Item = Record>, q: &Query) -> Vec<Row> {
    let mut acc: BTreeMap<(i64, u32), Acc> = BTreeMap::new();
    for r in records {
        let end = u64::from(r.end);
        if end < q.since || end >= q.until || q.uid.is_some_and(|u| u != r.uid) {
            continue;
        }
        let local = i64::from(r.end) + i64::from(q.utc_offset);
        let day = period_start(q.period, local.div_euclid(86_400));
        let a = acc.entry((day, r.uid)).or_default();
        *a.row.states.entry(r.state).or_default() += 1;
        let run_h = f64::from(r.run) / 3600.0;
        a.row.cpu_hours += f64::from(r.cpus) * run_h;
        a.row.cpu_used_hours += f64::from(r.cpu_secs) / 3600.0;
        let gpu_h = f64::from(r.gpus) * run_h;
        a.row.gpu_hours += gpu_h;
        if r.run > 0 {
            a.waits.push(r.wait);
        }
        if r.mem_peak > 0 {
            a.mems.push(r.mem_peak);
        }
        if r.gpu_util != 255 && gpu_h > 0.0 {
            a.util_weight += gpu_h;
            a.util_sum += gpu_h * f64::from(r.gpu_util);
        }
    }
    acc.into_iter()
        .map(|((day, uid), mut a)| {
            a.row.day = day;
            a.row.uid = uid;
            a.row.wait_median = quantile(&mut a.waits, 0.5);
            a.row.mem_p50 = quantile(&mut a.mems, 0.5);
            a.row.mem_p90 = quantile(&mut a.mems, 0.9);
            a.row.mem_max = a.mems.iter().copied().max();
            a.row.gpu_util = (a.util_weight > 0.0).then(|| a.util_sum / a.util_weight);
            a.row
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(id: u64, end: u32, uid: u32, state: u8) -> Record {
        Record {
            id,
            end,
            wait: 10,
            run: 3600,
            uid,
            cpus: 2,
            gpus: 1,
            state,
            gpu_util: 50,
            mem_peak: 1 << 30,
            cpu_secs: 1800,
            gpu_mem_peak_mib: 1024,
        }
    }

    #[test]
    fn a_record_is_48_bytes_and_reads_back_as_written() {
        let r = Record {
            id: u64::MAX - 1,
            end: 1_790_000_000,
            wait: 7,
            run: 99,
            uid: 1001,
            cpus: 512,
            gpus: 8,
            state: 3,
            gpu_util: 255,
            mem_peak: 3 << 40,
            cpu_secs: 12_345,
            gpu_mem_peak_mib: 81_920,
        };
        let b = r.encode();
        assert_eq!(b.len(), RECORD_BYTES);
        assert_eq!(Record::decode(&b), r);
        // A torn tail (a crash mid-write) is left out.
        let mut bytes = [b, rec(2, 1, 2, 0).encode()].concat();
        bytes.extend_from_slice(&[1, 2, 3]);
        let back: Vec<Record> = Record::all(&bytes).collect();
        assert_eq!(back.len(), 2);
        assert_eq!(back[0], r);
    }

    #[test]
    fn civil_dates_round_trip_and_periods_start_where_they_should() {
        assert_eq!(civil(0), (1970, 1, 1));
        assert_eq!(civil(-1), (1969, 12, 31));
        // 2000-02-29 (a leap day of a century divisible by 400).
        let d = days_from_civil(2000, 2, 29);
        assert_eq!(civil(d), (2000, 2, 29));
        assert_eq!(civil(d + 1), (2000, 3, 1));
        for days in (-800_000..800_000).step_by(997) {
            let (y, m, dd) = civil(days);
            assert_eq!(days_from_civil(y, m, dd), days);
        }
        // 2026-12-02 is a Wednesday: its week starts Monday 2026-11-30.
        let wed = days_from_civil(2026, 12, 2);
        assert_eq!(
            label(Period::Week, period_start(Period::Week, wed)),
            "2026-11-30"
        );
        let mon = days_from_civil(2026, 11, 30);
        assert_eq!(period_start(Period::Week, mon), mon);
        assert_eq!(period_start(Period::Week, mon - 1), mon - 7);
        assert_eq!(
            label(Period::Month, period_start(Period::Month, wed)),
            "2026-12"
        );
        assert_eq!(label(Period::Day, wed), "2026-12-02");
    }

    #[test]
    fn the_report_sums_per_user_and_period_and_takes_medians_and_quantiles() {
        let day = 86_400u32;
        let base = 20_000 * day; // a day boundary in UTC
        let mut rs = vec![
            rec(1, base + 10, 1000, 0),
            rec(2, base + 20, 1000, 1),
            rec(3, base + 30, 1001, 0),
            rec(4, base + day + 5, 1000, 0),
        ];
        rs[1].wait = 30;
        rs[1].mem_peak = 4 << 30;
        rs[1].gpu_util = 100;
        rs[1].gpus = 3;
        // Never started: counted, not in the wait median.
        rs.push(Record {
            run: 0,
            wait: 0,
            gpus: 0,
            mem_peak: 0,
            cpu_secs: 0,
            ..rec(5, base + 40, 1000, 2)
        });
        let q = Query {
            period: Period::Day,
            since: 0,
            until: u64::MAX,
            uid: None,
            utc_offset: 0,
        };
        let rows = report(rs.clone(), &q);
        assert_eq!(rows.len(), 3);
        let a = &rows[0];
        assert_eq!((a.day, a.uid, a.jobs()), (20_000, 1000, 3));
        assert_eq!(a.states, BTreeMap::from([(0, 1), (1, 1), (2, 1)]));
        assert_eq!(a.cpu_hours, 4.0);
        assert_eq!(a.cpu_used_hours, 1.0);
        assert_eq!(a.gpu_hours, 4.0);
        // Waits 10 and 30: the lower median by nearest rank.
        assert_eq!(a.wait_median, Some(10));
        assert_eq!(
            (a.mem_p50, a.mem_p90, a.mem_max),
            (Some(1 << 30), Some(4 << 30), Some(4 << 30))
        );
        // 1 GPU-hour at 50 %, 3 at 100 %.
        assert_eq!(a.gpu_util, Some((50.0 + 300.0) / 4.0));
        assert_eq!((rows[1].day, rows[1].uid), (20_000, 1001));
        assert_eq!((rows[2].day, rows[2].uid), (20_001, 1000));

        // One user's, a window, another time zone: at UTC-1 the jobs just
        // after midnight UTC ended the day before, and the one 5 s into the
        // next UTC day is on the first day.
        let q = Query {
            uid: Some(1000),
            since: u64::from(base + 15),
            utc_offset: -3600,
            ..q
        };
        let rows = report(rs, &q);
        let got: Vec<(i64, u64)> = rows.iter().map(|r| (r.day, r.jobs())).collect();
        assert_eq!(got, [(19_999, 2), (20_000, 1)]);
    }
}
