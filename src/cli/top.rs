//! `xlurm top`: a live full-screen view of the machine and its queue.
//!
//! NUMA nodes with their CPUs and memory budgets in use, each accelerator
//! with its load and holder, the running jobs (elapsed of their limit, their
//! accelerators' use) and the pending ones (reason, expected start). One
//! listing at the start, then the daemon's `JobStateChanged` signals keep
//! the job table up to date (a changed job is read alone, an ended one
//! dropped); the machine (`GetMachine`: the device polls) and the few jobs
//! on screen are read every 2 s. Never the whole queue again.
//!
//! Keys: `q` quits, `s` changes the order, `m` shows only your jobs,
//! up/down (or j/k) select, Enter shows the selected job (and its last
//! output lines), `c` cancels it (your own; `y` confirms). When standard
//! output is not a terminal it prints the view once, as text.

use super::client::{connect, explain, get, get_str, Dict, SchedulerProxy};
use crate::core::request::format_bytes;
use anyhow::Result;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Paragraph, Row as TRow, Table};
use ratatui::Frame;
use std::collections::BTreeMap;
use std::fmt::Write;

/// One job as the view shows it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Job {
    pub id: u64,
    pub uid: u32,
    pub user: String,
    pub name: String,
    pub state: String,
    pub reason: String,
    pub submit: u64,
    pub start: u64,
    pub limit: u64,
    pub cpus: u32,
    pub mem: u64,
    pub devices: String,
    /// Read for jobs on screen: mean busy percent of its accelerators.
    pub gpu_util: Option<f64>,
    /// Read for pending jobs on screen: expected or latest start (µs).
    pub expected: Option<u64>,
}

impl Job {
    /// From a queue line.
    pub fn of_line(l: &crate::wire::queue::Line<'_>) -> Job {
        Job {
            id: l.id,
            uid: l.uid,
            user: l.user.to_string(),
            name: l.name.to_string(),
            state: l.state.to_string(),
            reason: l.reason.to_string(),
            submit: l.submit_time,
            start: l.start_time,
            limit: l.time_limit,
            cpus: l.cpus,
            mem: l.mem,
            devices: l.devices.to_string(),
            ..Job::default()
        }
    }

    /// From `GetJob`'s dict.
    pub fn of_dict(d: &Dict) -> Job {
        let devices =
            get::<String>(d, "devices").unwrap_or_else(|| get_str(d, "devices_requested"));
        let expected = get::<u64>(d, "expected_start")
            .filter(|t| *t > 0)
            .or_else(|| get::<u64>(d, "estimated_start").filter(|t| *t > 0))
            .map(|s| s * 1_000_000);
        Job {
            id: get::<u64>(d, "id").unwrap_or(0),
            uid: get::<u32>(d, "uid").unwrap_or(0),
            user: get_str(d, "user"),
            name: get_str(d, "name"),
            state: get_str(d, "state"),
            reason: get_str(d, "reason"),
            submit: get::<u64>(d, "submit_time").unwrap_or(0),
            start: get::<u64>(d, "start_time").unwrap_or(0),
            limit: get::<u64>(d, "time_limit").unwrap_or(0),
            cpus: get::<u32>(d, "cpus").unwrap_or(0),
            mem: get::<u64>(d, "mem").unwrap_or(0),
            devices,
            gpu_util: get::<f64>(d, "gpu_util_mean"),
            expected,
        }
    }
}

/// What the view shows: the machine and the active jobs.
#[derive(Debug, Clone, Default)]
pub struct Model {
    pub machine: Dict,
    pub jobs: BTreeMap<u64, Job>,
    /// Microseconds since the epoch.
    pub now: u64,
    /// The viewer (for `m`, and whose jobs `c` may cancel).
    pub me: u32,
}

/// How the job tables are ordered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Sort {
    #[default]
    Id,
    User,
    /// Running: longest elapsed first; pending: longest waiting first.
    Time,
}

impl Sort {
    fn next(self) -> Sort {
        match self {
            Sort::Id => Sort::User,
            Sort::User => Sort::Time,
            Sort::Time => Sort::Id,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Sort::Id => "id",
            Sort::User => "user",
            Sort::Time => "time",
        }
    }
}

/// The viewer's choices.
#[derive(Debug, Clone, Default)]
pub struct Ui {
    pub sort: Sort,
    pub mine: bool,
    /// Index into [`Model::listed`].
    pub selected: usize,
    /// A job's detail lines, shown instead of the tables.
    pub detail: Option<Vec<String>>,
    /// A cancel waiting for `y`.
    pub confirm: Option<u64>,
    pub message: String,
}

impl Model {
    /// The running, then the pending jobs, as listed (filter and order).
    pub fn listed(&self, ui: &Ui) -> (Vec<&Job>, Vec<&Job>) {
        let mut run: Vec<&Job> = Vec::new();
        let mut wait: Vec<&Job> = Vec::new();
        for j in self.jobs.values().filter(|j| !ui.mine || j.uid == self.me) {
            match j.state.as_str() {
                "RUNNING" => run.push(j),
                "PENDING" => wait.push(j),
                _ => {}
            }
        }
        for list in [&mut run, &mut wait] {
            match ui.sort {
                Sort::Id => {}
                Sort::User => list.sort_by(|a, b| a.user.cmp(&b.user).then(a.id.cmp(&b.id))),
                Sort::Time => {
                    list.sort_by_key(|j| (if j.start > 0 { j.start } else { j.submit }, j.id))
                }
            }
        }
        (run, wait)
    }

    /// The selected job, if any.
    pub fn selected(&self, ui: &Ui) -> Option<&Job> {
        let (run, wait) = self.listed(ui);
        run.into_iter().chain(wait).nth(ui.selected)
    }
}

fn hms(secs: u64) -> String {
    super::format::duration(secs)
}

/// The NUMA nodes' lines.
fn node_rows(m: &Model) -> Vec<[String; 3]> {
    get::<Vec<Dict>>(&m.machine, "nodes")
        .unwrap_or_default()
        .iter()
        .map(|n| {
            let count = |k: &str| {
                crate::core::CpuSet::parse_list(&get_str(n, k))
                    .map(|s| s.len())
                    .unwrap_or(0)
            };
            let (cpus, free) = (count("cpus"), count("cpus_free"));
            let mem = get::<u64>(n, "mem").unwrap_or(0);
            let mem_free = get::<u64>(n, "mem_free").unwrap_or(0);
            [
                get::<u32>(n, "id").unwrap_or(0).to_string(),
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
fn device_rows(m: &Model) -> Vec<[String; 4]> {
    get::<Vec<Dict>>(&m.machine, "devices")
        .unwrap_or_default()
        .iter()
        .map(|d| {
            let id = format!(
                "{}:{}",
                get_str(d, "vendor"),
                get::<u32>(d, "index").unwrap_or(0)
            );
            let util = get::<u32>(d, "util_pct").map_or("-".into(), |u| format!("{u}%"));
            let mem = match (get::<u64>(d, "mem_used"), get::<u64>(d, "mem_total")) {
                (Some(u), Some(t)) => format!("{}/{}", format_bytes(u), format_bytes(t)),
                _ => "-".into(),
            };
            let job = get::<u64>(d, "job").unwrap_or(0);
            let health = get_str(d, "health");
            let holder = if get::<bool>(d, "disabled").unwrap_or(false) {
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

fn running_row(j: &Job, now: u64) -> [String; 7] {
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

fn pending_row(j: &Job, now: u64) -> [String; 5] {
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

fn header(m: &Model, ui: &Ui) -> String {
    let (run, wait) = m.listed(ui);
    format!(
        "xlurm top  {}  {} running, {} pending{}  sort {}  keys q s m Enter c",
        get_str(&m.machine, "policy"),
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

/// Reads the machine and the running jobs on screen again (every 2 s),
/// and with `pending` the pending ones on screen (their expected start is
/// a walk of the queue for xlurmd: every 10 s).
async fn refresh(
    p: &SchedulerProxy<'_>,
    m: &mut Model,
    ui: &Ui,
    (rows, pending): (usize, bool),
    user: bool,
) -> Result<()> {
    m.machine = p.get_machine().await.map_err(|e| explain(e, user))?;
    m.now = crate::wire::time::now_usec();
    let (run, wait) = m.listed(ui);
    let shown: Vec<u64> = run
        .iter()
        .take(rows)
        .chain(wait.iter().take(if pending { rows } else { 0 }))
        .map(|j| j.id)
        .collect();
    for id in shown {
        match p.get_job(id).await {
            Ok(d) => {
                m.jobs.insert(id, Job::of_dict(&d));
            }
            Err(_) => {
                m.jobs.remove(&id);
            }
        }
    }
    Ok(())
}

/// The selected job's detail and its last output lines.
async fn detail(p: &SchedulerProxy<'_>, id: u64) -> Vec<String> {
    let mut lines: Vec<String> = match p.get_job(id).await {
        Ok(d) => super::queue::job_text(&d)
            .lines()
            .map(str::to_string)
            .collect(),
        Err(e) => vec![format!("job {id}: {e}")],
    };
    if let Ok((log, _, _, _)) = p.read_log(id, "", 1000).await {
        lines.push(String::new());
        lines.push("last output:".into());
        let from = log.len().saturating_sub(10);
        lines.extend(log[from..].iter().cloned());
    }
    lines
}

/// The model as the view starts: every active job (one listing), the
/// machine, and the first `rows` jobs of each table read whole.
pub async fn load(p: &SchedulerProxy<'_>, ui: &Ui, rows: usize, user: bool) -> Result<Model> {
    let mut m = Model {
        me: nix::unistd::getuid().as_raw(),
        ..Model::default()
    };
    let listing = super::queue::active_jobs(p, user).await?;
    for l in listing.lines()? {
        m.jobs.insert(l.id, Job::of_line(&l));
    }
    refresh(p, &mut m, ui, (rows, true), user).await?;
    Ok(m)
}

/// `xlurm top`.
pub(super) async fn top(mine: bool, user: bool) -> Result<i32> {
    use std::io::IsTerminal;
    let p = connect(user).await?;
    // Subscribed before the listing: no change is missed between them.
    let mut changes = super::follow::Changes::subscribe(&p).await?;
    let mut ui = Ui {
        mine,
        ..Ui::default()
    };
    let mut m = load(&p, &ui, 20, user).await?;
    if !std::io::stdout().is_terminal() {
        super::format::emit(&text(&m, &ui))?;
        return Ok(0);
    }
    let mut terminal = ratatui::init();
    let (keys_tx, mut keys) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        while let Ok(ev) = ratatui::crossterm::event::read() {
            if keys_tx.send(ev).is_err() {
                break;
            }
        }
    });
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(2));
    let mut ticks = 0u64;
    let result: Result<()> = async {
        loop {
            let rows = terminal.size().map(|s| s.height as usize / 3).unwrap_or(10);
            terminal.draw(|f| draw(f, &m, &ui))?;
            tokio::select! {
                _ = tick.tick() => {
                    ticks += 1;
                    if let Err(e) = refresh(&p, &mut m, &ui, (rows, ticks.is_multiple_of(5)), user).await {
                        ui.message = format!("{e:#}");
                    }
                }
                Some((id, state)) = changes.next() => {
                    if state == "PENDING" || state == "RUNNING" {
                        if let Ok(d) = p.get_job(id).await {
                            m.jobs.insert(id, Job::of_dict(&d));
                        }
                    } else {
                        m.jobs.remove(&id);
                    }
                }
                Some(ev) = keys.recv() => {
                    use ratatui::crossterm::event::{Event, KeyCode, KeyEventKind};
                    let Event::Key(k) = ev else { continue };
                    if k.kind != KeyEventKind::Press {
                        continue;
                    }
                    if ui.detail.take().is_some() {
                        continue;
                    }
                    if let Some(id) = ui.confirm.take() {
                        if k.code == KeyCode::Char('y') {
                            ui.message = match p.cancel(id).await {
                                Ok(_) => format!("job {id}: cancelled"),
                                Err(e) => format!("job {id}: {}", explain(e, user)),
                            };
                        } else {
                            ui.message = "not cancelled".into();
                        }
                        continue;
                    }
                    let (run, wait) = m.listed(&ui);
                    let n = run.len() + wait.len();
                    match k.code {
                        KeyCode::Char('q') | KeyCode::Esc => break,
                        KeyCode::Char('s') => ui.sort = ui.sort.next(),
                        KeyCode::Char('m') => {
                            ui.mine = !ui.mine;
                            ui.selected = 0;
                        }
                        KeyCode::Down | KeyCode::Char('j') => ui.selected = (ui.selected + 1).min(n.saturating_sub(1)),
                        KeyCode::Up | KeyCode::Char('k') => ui.selected = ui.selected.saturating_sub(1),
                        KeyCode::Enter => {
                            if let Some(id) = m.selected(&ui).map(|j| j.id) {
                                ui.detail = Some(detail(&p, id).await);
                            }
                        }
                        KeyCode::Char('c') => match m.selected(&ui) {
                            Some(j) if j.uid == m.me || m.me == 0 => {
                                ui.message = format!("cancel job {} ({})? y/n", j.id, j.name);
                                ui.confirm = Some(j.id);
                            }
                            Some(j) => ui.message = format!("job {} is {}'s: you may cancel only your own", j.id, j.user),
                            None => {}
                        },
                        _ => {}
                    }
                }
            }
        }
        Ok(())
    }
    .await;
    ratatui::restore();
    result.map(|()| 0)
}

#[cfg(test)]
mod tests;
