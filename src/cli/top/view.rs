//! What `xlurm top` draws: the header, node and device rows, the running and
//! pending tables, full screen (`draw`) or once as text (`text`).

use super::{Job, Model, Ui};
use crate::core::request::format_bytes;
use crate::wire::keys;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Paragraph, Row as TRow, Table};
use ratatui::Frame;
use std::fmt::Write;

pub(super) fn hms(secs: u64) -> String {
    crate::cli::format::duration(secs)
}

/// The NUMA nodes' lines.
pub(super) fn node_rows(m: &Model) -> Vec<[String; 3]> {
    keys::machine::NODES
        .get(&m.machine)
        .unwrap_or_default()
        .iter()
        .map(|n| {
            let count = |k: keys::Key<String>| {
                crate::core::CpuSet::parse_list(&k.text(n))
                    .map(|s| s.len())
                    .unwrap_or(0)
            };
            let (cpus, free) = (count(keys::node::CPUS), count(keys::node::CPUS_FREE));
            let mem = keys::node::MEM.get(n).unwrap_or(0);
            let mem_free = keys::node::MEM_FREE.get(n).unwrap_or(0);
            [
                keys::node::ID.get(n).unwrap_or(0).to_string(),
                format!("{}/{}", cpus - free.min(cpus), cpus),
                format!(
                    "{}/{}",
                    format_bytes(mem - mem_free.min(mem)),
                    format_bytes(mem)
                ),
            ]
        })
        .collect()
}

/// The accelerators' lines.
pub(super) fn device_rows(m: &Model) -> Vec<[String; 4]> {
    keys::machine::DEVICES
        .get(&m.machine)
        .unwrap_or_default()
        .iter()
        .map(|d| {
            let id = format!(
                "{}:{}",
                keys::device::VENDOR.text(d),
                keys::device::INDEX.get(d).unwrap_or(0)
            );
            let util = keys::device::UTIL_PCT
                .get(d)
                .map_or("-".into(), |u| format!("{u}%"));
            let mem = match (
                keys::device::MEM_USED.get(d),
                keys::device::MEM_TOTAL.get(d),
            ) {
                (Some(u), Some(t)) => format!("{}/{}", format_bytes(u), format_bytes(t)),
                _ => "-".into(),
            };
            let job = keys::device::JOB.get(d).unwrap_or(0);
            let health = keys::device::HEALTH.text(d);
            let holder = if keys::device::DISABLED.get(d).unwrap_or(false) {
                "disabled".to_string()
            } else if job > 0 {
                let user = m.jobs.get(&job).map_or("", |j| j.user.as_str());
                format!("job {job} {user}")
            } else if health == "busy" {
                "outside process".into()
            } else if health == "ok" {
                "free".into()
            } else {
                health
            };
            [id, util, mem, holder]
        })
        .collect()
}

pub(super) fn running_row(j: &Job, now: u64) -> [String; 7] {
    let elapsed = now.saturating_sub(j.start) / 1_000_000;
    [
        j.id.to_string(),
        j.user.clone(),
        j.name.chars().take(12).collect(),
        format!("{}/{}", hms(elapsed), hms(j.limit)),
        format!("{}c {}", j.cpus, format_bytes(j.mem)),
        j.gpu_util
            .map_or(j.devices.clone(), |u| format!("{} {u:.0}%", j.devices)),
        j.reason.clone(),
    ]
}

pub(super) fn pending_row(j: &Job, now: u64) -> [String; 5] {
    let waited = now.saturating_sub(j.submit) / 1_000_000;
    [
        j.id.to_string(),
        j.user.clone(),
        j.name.chars().take(12).collect(),
        j.reason.split(" (").next().unwrap_or("").to_string(),
        j.expected.map_or(format!("waits {}", hms(waited)), |t| {
            crate::cli::format::local_time(t, false)
        }),
    ]
}

pub(super) fn header(m: &Model, ui: &Ui) -> String {
    let (run, wait) = m.listed(ui);
    format!(
        "xlurm top  {}  {} running, {} pending{}  sort {}  keys q s m Enter c",
        keys::machine::POLICY.text(&m.machine),
        run.len(),
        wait.len(),
        if ui.mine { " (yours)" } else { "" },
        ui.sort.name()
    )
}

/// Draws the view into `f`.
pub fn draw(f: &mut Frame, m: &Model, ui: &Ui) {
    let area = f.area();
    let nodes = node_rows(m);
    let devices = device_rows(m);
    let [top, rest, foot] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(0),
        Constraint::Length(1),
    ])
    .areas(area);
    f.render_widget(Paragraph::new(header(m, ui)), top);
    f.render_widget(Paragraph::new(ui.message.clone()), foot);
    if let Some(lines) = &ui.detail {
        let text: Vec<Line> = lines.iter().map(|l| Line::from(l.as_str())).collect();
        let block = Block::default()
            .borders(Borders::ALL)
            .title(" job (any key: back) ");
        f.render_widget(Paragraph::new(text).block(block), rest);
        return;
    }
    let machine_h = (nodes.len().max(devices.len()) as u16 + 3).min(rest.height / 2);
    let [machine, jobs] =
        Layout::vertical([Constraint::Length(machine_h), Constraint::Min(0)]).areas(rest);
    let [left, right] =
        Layout::horizontal([Constraint::Percentage(40), Constraint::Percentage(60)]).areas(machine);
    let bold = Style::default().add_modifier(Modifier::BOLD);
    f.render_widget(
        Table::new(
            nodes.into_iter().map(TRow::new),
            [
                Constraint::Length(4),
                Constraint::Length(7),
                Constraint::Min(10),
            ],
        )
        .header(TRow::new(["NODE", "CPUS", "MEMORY"]).style(bold))
        .block(Block::default().borders(Borders::ALL).title(" NUMA nodes ")),
        left,
    );
    f.render_widget(
        Table::new(
            devices.into_iter().map(TRow::new),
            [
                Constraint::Length(6),
                Constraint::Length(5),
                Constraint::Length(11),
                Constraint::Min(8),
            ],
        )
        .header(TRow::new(["DEV", "BUSY", "MEMORY", "HOLDER"]).style(bold))
        .block(
            Block::default()
                .borders(Borders::ALL)
                .title(" accelerators "),
        ),
        right,
    );
    let (run, wait) = m.listed(ui);
    let half = (jobs.height / 2).max(3);
    let [ra, pa] = Layout::vertical([Constraint::Length(half), Constraint::Min(0)]).areas(jobs);
    let sel = |i: usize, offset: usize| {
        if ui.selected == i + offset {
            Style::default().add_modifier(Modifier::REVERSED)
        } else {
            Style::default()
        }
    };
    // Only the rows that fit are built: a queue of 10,000 costs what a screen does.
    let fit = |a: Rect| a.height.saturating_sub(3) as usize;
    let first = |selected: usize, rows: usize, n: usize| -> usize {
        if selected >= rows && rows > 0 {
            (selected + 1 - rows).min(n.saturating_sub(rows))
        } else {
            0
        }
    };
    let rskip = first(
        ui.selected.min(run.len().saturating_sub(1)),
        fit(ra),
        run.len(),
    );
    f.render_widget(
        Table::new(
            run.iter()
                .enumerate()
                .skip(rskip)
                .take(fit(ra))
                .map(|(i, j)| TRow::new(running_row(j, m.now)).style(sel(i, 0))),
            [
                Constraint::Length(6),
                Constraint::Length(8),
                Constraint::Length(12),
                Constraint::Length(17),
                Constraint::Length(7),
                Constraint::Length(10),
                Constraint::Min(7),
            ],
        )
        .header(
            TRow::new([
                "ID",
                "USER",
                "NAME",
                "ELAPSED/LIMIT",
                "CPU MEM",
                "DEVICES",
                "FLAG",
            ])
            .style(bold),
        )
        .block(
            Block::default()
                .borders(Borders::ALL)
                .title(format!(" running ({}) ", run.len())),
        ),
        ra,
    );
    let psel = ui.selected.saturating_sub(run.len());
    let pskip = if ui.selected >= run.len() {
        first(psel, fit(pa), wait.len())
    } else {
        0
    };
    f.render_widget(
        Table::new(
            wait.iter()
                .enumerate()
                .skip(pskip)
                .take(fit(pa))
                .map(|(i, j)| TRow::new(pending_row(j, m.now)).style(sel(i, run.len()))),
            [
                Constraint::Length(6),
                Constraint::Length(8),
                Constraint::Length(12),
                Constraint::Length(16),
                Constraint::Min(12),
            ],
        )
        .header(TRow::new(["ID", "USER", "NAME", "REASON", "START"]).style(bold))
        .block(
            Block::default()
                .borders(Borders::ALL)
                .title(format!(" pending ({}) ", wait.len())),
        ),
        pa,
    );
}

/// The view once, as text (standard output is not a terminal).
pub fn text(m: &Model, ui: &Ui) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", header(m, ui));
    let _ = writeln!(out, "\nNODE CPUS     MEMORY");
    for [n, c, mem] in node_rows(m) {
        let _ = writeln!(out, "{n:<4} {c:<8} {mem}");
    }
    let _ = writeln!(out, "\nDEV     BUSY  MEMORY        HOLDER");
    for [d, u, mem, h] in device_rows(m) {
        let _ = writeln!(out, "{d:<7} {u:<5} {mem:<13} {h}");
    }
    let (run, wait) = m.listed(ui);
    let _ = writeln!(out, "\nRUNNING ({})", run.len());
    for j in run {
        let _ = writeln!(out, "{}", running_row(j, m.now).join("  ").trim_end());
    }
    let _ = writeln!(out, "\nPENDING ({})", wait.len());
    for j in wait {
        let _ = writeln!(out, "{}", pending_row(j, m.now).join("  ").trim_end());
    }
    out
}
