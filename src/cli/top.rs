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

mod view;

use super::client::{connect, explain, Dict, SchedulerProxy};
use crate::wire::keys;
use anyhow::Result;
use std::collections::BTreeMap;
pub use view::{draw, text};

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
        let devices = keys::job::DEVICES
            .get(d)
            .unwrap_or_else(|| keys::job::DEVICES_REQUESTED.text(d));
        let expected = keys::job::EXPECTED_START
            .get(d)
            .filter(|t| *t > 0)
            .or_else(|| keys::job::ESTIMATED_START.get(d).filter(|t| *t > 0))
            .map(|s| s * 1_000_000);
        Job {
            id: keys::job::ID.get(d).unwrap_or(0),
            uid: keys::job::UID.get(d).unwrap_or(0),
            user: keys::job::USER.text(d),
            name: keys::job::NAME.text(d),
            state: keys::job::STATE.text(d),
            reason: keys::job::REASON.text(d),
            submit: keys::job::SUBMIT_TIME.get(d).unwrap_or(0),
            start: keys::job::START_TIME.get(d).unwrap_or(0),
            limit: keys::job::TIME_LIMIT.get(d).unwrap_or(0),
            cpus: keys::job::CPUS.get(d).unwrap_or(0),
            mem: keys::job::MEM.get(d).unwrap_or(0),
            devices,
            gpu_util: keys::job::GPU_UTIL_MEAN.get(d),
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
