//! `xqueue` and `xlurm show`: the queue as a table or JSON, or one job.

use super::cancel::cancel;
use super::client::{connect, explain, Dict};
use super::format::{
    dict_to_json, duration, emit, json_text, local_time, push_duration, push_local_time,
};
use super::log::log;
use super::{CancelArgs, LogArgs, QueueArgs};
use crate::core::request::format_bytes;
use crate::wire::keys;
use crate::wire::queue::Line;
use crate::wire::spec::entry;
use anyhow::Result;

pub(super) async fn queue(a: QueueArgs, user: bool) -> Result<i32> {
    if !a.cancel.is_empty() {
        return cancel(CancelArgs { ids: a.cancel }, user).await;
    }
    let p = connect(user).await?;
    if let (Some(id), true) = (&a.id, a.log) {
        drop(p);
        return log(
            LogArgs {
                id: id.clone(),
                follow: a.follow,
            },
            user,
        )
        .await;
    }
    if let Some(r) = &a.id {
        let id = super::cancel::resolve(&p, r, user).await?;
        let job = p.get_job(id).await.map_err(|e| explain(e, user))?;
        if a.json {
            emit(&json_text(&dict_to_json(&job))?)?;
            return Ok(0);
        }
        emit(&job_text(&job))?;
        return Ok(0);
    }
    let mut filter = Dict::new();
    let (k, v) = entry("all_users", !a.mine);
    filter.insert(k, v);
    let (k, v) = entry("finished", a.all);
    filter.insert(k, v);
    if a.start {
        let (k, v) = entry("states", vec!["PENDING".to_string()]);
        filter.insert(k, v);
    }
    match a.limit.unwrap_or(if a.all { 1000 } else { 100 }) {
        0 => {}
        n => {
            let (k, v) = entry("limit", n);
            filter.insert(k, v);
        }
    }
    // By descriptor: any number of jobs, and far faster than a D-Bus array.
    let fd = p
        .list_jobs_by_file_descriptor(filter)
        .await
        .map_err(|e| explain(e, user))?;
    let listing = crate::wire::queue::read_fd(fd.into())?;
    let jobs = listing.lines()?;
    if a.start {
        return starts(&p, &jobs, a.json).await;
    }
    if a.json {
        emit(&json_text(&jobs)?)?;
        return Ok(0);
    }
    let mut out = std::io::stdout().lock();
    write_queue_table(&jobs, a.all, crate::wire::time::now_usec(), &mut out)?;
    std::io::Write::flush(&mut out)?;
    Ok(0)
}

/// Every active job the caller may see (every user's where the queue is
/// public), in one `ListJobsByFileDescriptor`.
pub(crate) async fn active_jobs(
    p: &super::client::SchedulerProxy<'_>,
    user: bool,
) -> Result<crate::wire::queue::Listing> {
    let mut filter = Dict::new();
    let (k, v) = entry("all_users", true);
    filter.insert(k, v);
    let fd = p
        .list_jobs_by_file_descriptor(filter)
        .await
        .map_err(|e| explain(e, user))?;
    crate::wire::queue::read_fd(fd.into())
}

/// The `xqueue` table. `now` is microseconds since the epoch.
pub fn queue_table(jobs: &[Line<'_>], all: bool, now: u64) -> String {
    let mut out = Vec::new();
    write_queue_table(jobs, all, now, &mut out).expect("writing to memory");
    String::from_utf8(out).expect("the table is built from strings")
}

/// Writes the `xqueue` table to `w` in pieces of about 64 KiB, as it is
/// built: a 100,000-job table is 13 MB that need never be whole in memory.
pub fn write_queue_table(
    jobs: &[Line<'_>],
    all: bool,
    now: u64,
    w: &mut impl std::io::Write,
) -> std::io::Result<()> {
    use std::fmt::Write;
    const PIECE: usize = 64 << 10;
    let mut out = String::with_capacity(PIECE + 1024);
    // Wide enough for the longest array label (123_[5-99%8]).
    let w_id = jobs
        .iter()
        .map(|j| j.array.chars().count())
        .max()
        .unwrap_or(0)
        .max(6);
    let _ = writeln!(
        out,
        "{:>w_id$} {:<10} {:<16} {:<13} {:<10} {:>4} {:>7} {:<14} {:>10} {}",
        "ID",
        "USER",
        "NAME",
        "STATE",
        "DEVICES",
        "CPUS",
        "MEM",
        "START",
        "TIME",
        if all { "EXIT/REASON" } else { "REASON" }
    );
    // Cells are padded here, not by `format!`'s `{:<10}`, which writes
    // each space on its own, and numbers written by `itoa`: `fmt` was most
    // of a 100,000-job table's time. Jobs of a batch share a memory budget.
    let mut cell = String::new();
    let mut mem: Option<(u64, bool, String)> = None;
    let mut num = itoa::Buffer::new();
    for j in jobs {
        let time = match &*j.state {
            "PENDING" => now.saturating_sub(j.submit_time),
            "RUNNING" => now.saturating_sub(j.start_time),
            _ if j.start_time > 0 => j.end_time.saturating_sub(j.start_time),
            _ => 0,
        } / 1_000_000;
        // An array's task as Slurm names it (123_4), its pending rest 123_[5-99%8].
        let id = if j.array.is_empty() {
            num.format(j.id)
        } else {
            &j.array
        };
        pad(&mut out, id, w_id, Align::Right);
        out.push(' ');
        pad(&mut out, &j.user, 10, Align::Left);
        out.push(' ');
        let name_end = j
            .name
            .char_indices()
            .nth(16)
            .map_or(j.name.len(), |(i, _)| i);
        pad(&mut out, &j.name[..name_end], 16, Align::Left);
        out.push(' ');
        pad(&mut out, &j.state, 13, Align::Left);
        out.push(' ');
        pad(&mut out, &j.devices, 10, Align::Left);
        out.push(' ');
        pad(&mut out, num.format(j.cpus), 4, Align::Right);
        out.push(' ');
        if !matches!(&mem, Some((m, s, _)) if *m == j.mem && *s == j.spread) {
            let mut text = format_bytes(j.mem);
            if j.spread {
                text.push('+');
            }
            mem = Some((j.mem, j.spread, text));
        }
        if let Some((_, _, text)) = &mem {
            pad(&mut out, text, 7, Align::Right);
        }
        out.push(' ');
        cell.clear();
        push_local_time(&mut cell, j.start_time, all);
        pad(&mut out, &cell, 14, Align::Left);
        out.push(' ');
        cell.clear();
        push_duration(&mut cell, time);
        pad(&mut out, &cell, 10, Align::Right);
        out.push(' ');
        match &*j.state {
            // A flag (IdleGPU) when the daemon set one.
            "PENDING" | "RUNNING" => out.push_str(&j.reason),
            _ if j.exit_code >= 0 => out.push_str(num.format(j.exit_code)),
            _ => {}
        }
        out.push('\n');
        if out.len() >= PIECE {
            w.write_all(out.as_bytes())?;
            out.clear();
        }
    }
    w.write_all(out.as_bytes())
}

enum Align {
    Left,
    Right,
}

/// `s` in a cell `width` characters wide (never cut), as `{:<width$}` and
/// `{:>width$}` would put it.
fn pad(out: &mut String, s: &str, width: usize, align: Align) {
    fn spaces(out: &mut String, mut n: usize) {
        const SPACES: &str = "                                ";
        while n > 0 {
            let k = n.min(SPACES.len());
            out.push_str(&SPACES[..k]);
            n -= k;
        }
    }
    let chars = if s.is_ascii() {
        s.len()
    } else {
        s.chars().count()
    };
    let fill = width.saturating_sub(chars);
    match align {
        Align::Left => {
            out.push_str(s);
            spaces(out, fill);
        }
        Align::Right => {
            spaces(out, fill);
            out.push_str(s);
        }
    }
}

/// `xqueue --start`: each pending job's priority and estimated start (one
/// `GetJob` each), highest priority first.
async fn starts(
    p: &super::client::SchedulerProxy<'_>,
    jobs: &[Line<'_>],
    json: bool,
) -> Result<i32> {
    let mut rows = Vec::with_capacity(jobs.len());
    for j in jobs {
        // A job that started or ended meanwhile is left out.
        let Ok(d) = p.get_job(j.id).await else {
            continue;
        };
        if keys::job::STATE.text(&d) != "PENDING" {
            continue;
        }
        rows.push(d);
    }
    let prio = |d: &Dict| keys::job::PRIORITY.get(d).unwrap_or(i64::MIN);
    rows.sort_by_key(|d| (std::cmp::Reverse(prio(d)), keys::job::ID.get(d)));
    if json {
        let keys = [
            "id",
            "user",
            "name",
            "priority",
            "estimated_start",
            "estimate",
            "expected_start",
            "reason",
        ];
        let list: Vec<serde_json::Value> = rows
            .iter()
            .map(|d| {
                let full = dict_to_json(d);
                let picked = keys
                    .iter()
                    .filter_map(|k| Some((k.to_string(), full.get(*k)?.clone())))
                    .collect::<serde_json::Map<_, _>>();
                serde_json::Value::Object(picked)
            })
            .collect();
        emit(&json_text(&list)?)?;
        return Ok(0);
    }
    let mut out = format!(
        "{:>6} {:<10} {:<16} {:>9} {:<20} {:<20} {}\n",
        "ID", "USER", "NAME", "PRIORITY", "START (bound)", "EXPECTED", "REASON"
    );
    let when = |at: u64| {
        if at == 0 {
            "N/A".to_string()
        } else {
            local_time(at * 1_000_000, false)
        }
    };
    for d in &rows {
        let at = keys::job::ESTIMATED_START.get(d).unwrap_or(0);
        let mut name = keys::job::NAME.text(d);
        name.truncate(16);
        out.push_str(&format!(
            "{:>6} {:<10} {:<16} {:>9} {:<20} {:<20} {}\n",
            keys::job::ID.get(d).unwrap_or(0),
            keys::job::USER.text(d),
            name,
            prio(d).max(0),
            when(at),
            when(keys::job::EXPECTED_START.get(d).unwrap_or(0)),
            if at == 0 {
                keys::job::ESTIMATE.text(d)
            } else {
                keys::job::REASON.text(d)
            }
        ));
    }
    emit(&out)?;
    Ok(0)
}

/// `xqueue ID`'s text: one "Key: value" line per known field.
pub(super) fn job_text(job: &Dict) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let id = keys::job::ID.get(job).unwrap_or(0);
    let mut line = |k: &str, v: String| {
        let _ = writeln!(out, "{k:>14}: {v}");
    };
    line("Job", id.to_string());
    let array = keys::job::ARRAY.text(job);
    if !array.is_empty() {
        line("Array", array);
    }
    line("Name", keys::job::NAME.text(job));
    line("User", keys::job::USER.text(job));
    line("State", keys::job::STATE.text(job));
    let reason = keys::job::REASON.text(job);
    if !reason.is_empty() {
        line("Reason", reason);
    }
    let dependency = keys::job::DEPENDENCY.text(job);
    if !dependency.is_empty() {
        line("Dependency", dependency);
    }
    match keys::job::RESTART_COUNT.get(job) {
        Some(n) if n > 0 => line("Restarts", format!("{n} (queued again after it was lost)")),
        _ if keys::job::REQUEUE.get(job) == Some(true) => {
            line("Requeue", "yes (queued again if lost)".into())
        }
        _ => {}
    }
    let hold = keys::job::HOLD.text(job);
    if !hold.is_empty() {
        line("Hold", format!("{hold} (xlurm release {id})"));
    }
    if let Some(p) = keys::job::PRIORITY.get(job) {
        let f = |k: keys::Key<f64>| k.get(job).unwrap_or(0.0);
        let nice = keys::job::NICE.get(job).unwrap_or(0);
        line(
            "Priority",
            format!(
                "{p} (fair share {:.3}, age {:.3}, nice {nice})",
                f(keys::job::FAIRSHARE),
                f(keys::job::AGE)
            ),
        );
    }
    if let Some(at) = keys::job::ESTIMATED_START.get(job) {
        let why = keys::job::ESTIMATE.text(job);
        line(
            "EstStart",
            if at == 0 {
                why
            } else {
                format!(
                    "{} ({why})",
                    crate::cli::format::local_time(at * 1_000_000, false)
                )
            },
        );
    }
    if let Some(at) = keys::job::EXPECTED_START.get(job).filter(|at| *at > 0) {
        line(
            "Expected",
            format!(
                "{} (if jobs take what completed jobs like them recently took; not a bound)",
                crate::cli::format::local_time(at * 1_000_000, false)
            ),
        );
    }
    if let Some(argv) = keys::job::ARGV.get(job) {
        line("Command", argv.join(" "));
        line("WorkDir", keys::job::CWD.text(job));
    }
    if let Some(o) = keys::job::OUTPUT.get(job) {
        let err = keys::job::OUTPUT_ERROR.text(job);
        line(
            "Output",
            if err.is_empty() {
                o
            } else {
                format!("{o} ({err})")
            },
        );
    }
    line(
        "Requested",
        format!(
            "{} CPUs, {}, devices {}",
            keys::job::CPUS.get(job).unwrap_or(0),
            format_bytes(keys::job::MEM.get(job).unwrap_or(0)),
            keys::job::DEVICES_REQUESTED.text(job)
        ),
    );
    if let Some(cpus) = keys::job::ALLOC_CPUS.get(job) {
        line(
            "Allocated",
            format!(
                "CPUs {cpus}, memory nodes {}, devices {}",
                keys::job::ALLOC_MEM_NODES.text(job),
                keys::job::DEVICES.text(job)
            ),
        );
    }
    line(
        "Submitted",
        local_time(keys::job::SUBMIT_TIME.get(job).unwrap_or(0), true),
    );
    line(
        "Started",
        local_time(keys::job::START_TIME.get(job).unwrap_or(0), true),
    );
    line(
        "Ended",
        local_time(keys::job::END_TIME.get(job).unwrap_or(0), true),
    );
    if let Some(c) = keys::job::EXIT_CODE.get(job) {
        line("Exit code", c.to_string());
    }
    let detail = keys::job::DETAIL.text(job);
    if !detail.is_empty() {
        line("Detail", detail);
    }
    if let Some(n) = keys::job::CPU_NSEC.get(job) {
        line("CPU time", duration(n / 1_000_000_000));
    }
    if let Some(n) = keys::job::MEMORY_PEAK.get(job) {
        line("Memory peak", format_bytes(n));
    }
    if let Some(e) = crate::cli::format::efficiency(job) {
        line("Efficiency", e);
    }
    let unit = keys::job::UNIT.text(job);
    line("Unit", unit.clone());
    line(
        "See",
        format!("systemctl status {unit}; journalctl -u {unit}"),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::queue::JobSummary;

    fn summary(id: u64, state: &str) -> JobSummary {
        JobSummary {
            id,
            name: "a-very-long-job-name-indeed".into(),
            uid: 1001,
            user: "alice".into(),
            state: state.into(),
            reason: if state == "PENDING" {
                "Priority (held for an earlier job)".into()
            } else {
                "".into()
            },
            submit_time: 1_000_000,
            start_time: 0,
            end_time: 0,
            time_limit: 60,
            cpus: 2,
            mem: 3 << 30,
            spread: true,
            devices: "auto:1".into(),
            exit_code: if state == "FAILED" { 7 } else { -1 },
            detail: "".into(),
            array: "".into(),
        }
    }

    #[test]
    fn cells_are_padded_as_format_pads_them() {
        for s in [
            "",
            "a",
            "alice",
            "ünïcödé-näme",
            "exactly-ten",
            &"x".repeat(40),
        ] {
            for w in [0, 1, 4, 10, 16, 40, 70] {
                let mut left = String::new();
                pad(&mut left, s, w, Align::Left);
                assert_eq!(left, format!("{s:<w$}"), "{s:?} left in {w}");
                let mut right = String::new();
                pad(&mut right, s, w, Align::Right);
                assert_eq!(right, format!("{s:>w$}"), "{s:?} right in {w}");
            }
        }
    }

    #[test]
    fn queue_table_snapshot() {
        let jobs = [summary(1, "PENDING"), summary(2, "FAILED")];
        let jobs: Vec<_> = jobs.iter().map(JobSummary::line).collect();
        let table = queue_table(&jobs, true, 3_661_000_000 + 1_000_000);
        let want = concat!(
            "    ID USER       NAME             STATE         DEVICES    CPUS     MEM START                TIME EXIT/REASON\n",
            "     1 alice      a-very-long-job- PENDING       auto:1        2     3G+ -                01:01:01 Priority (held for an earlier job)\n",
            "     2 alice      a-very-long-job- FAILED        auto:1        2     3G+ -                00:00:00 7\n",
        );
        assert_eq!(table, want);
        let json = serde_json::to_value(&jobs[0]).unwrap();
        assert_eq!(json["state"], "PENDING");
        assert_eq!(json["exit_code"], -1);
        assert_eq!(
            json.as_object().unwrap().len(),
            17,
            "the documented JSON schema has 17 keys"
        );
    }

    /// The ID column is as wide as the widest label in characters: a
    /// listed label cut with `…` (3 bytes, 1 character) starts the line.
    #[test]
    fn a_cut_array_label_is_the_widest_id_and_starts_its_line() {
        let mut cut = summary(7, "PENDING");
        cut.array = "7_[0-1,3-4,…]".into();
        let jobs = [cut, summary(8, "PENDING")];
        let jobs: Vec<_> = jobs.iter().map(JobSummary::line).collect();
        let table = queue_table(&jobs, false, 2_000_000);
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[1].starts_with("7_[0-1,3-4,…] alice"), "{table}");
        assert!(lines[0].starts_with("           ID USER"), "{table}");
    }
}
