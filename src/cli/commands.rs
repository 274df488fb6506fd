//! One function per verb.

use super::client::{connect, explain, get, get_str, Dict, SchedulerProxy};
use super::{
    BatchArgs, CancelArgs, Cli, Command, InfoArgs, LogArgs, QueueArgs, ResourceArgs, SubmitArgs,
};
use crate::core::request::{format_bytes, parse_bytes, parse_duration_secs};
use crate::wire::spec::entry;
use anyhow::{anyhow, bail, Context, Result};
use std::time::{Duration, Instant};

/// Exit codes of `xrun` for jobs that did not exit on their own; see the README.
pub const EXIT_TIMEOUT: i32 = 124;
pub const EXIT_LAUNCH_FAILED: i32 = 125;
pub const EXIT_LOST: i32 = 126;
pub const EXIT_OOM: i32 = 137;

pub async fn main(cli: Cli) -> Result<i32> {
    let user = cli.user;
    match cli.command {
        Command::Run(a) => run(a, user).await,
        Command::Batch(a) => batch(a, user).await,
        Command::Queue(a) => queue(a, user).await,
        Command::Cancel(a) => cancel(a, user).await,
        Command::Info(a) => info(a, user).await,
        Command::Log(a) => log(a, user).await,
        Command::Show(a) => {
            let q = QueueArgs {
                id: Some(a.id),
                all: false,
                mine: false,
                limit: None,
                json: a.json,
                log: false,
                follow: false,
            };
            queue(q, user).await
        }
        Command::Policy { policy } => {
            let p = connect(user).await?;
            p.set_policy(&policy).await.map_err(|e| explain(e, user))?;
            println!("policy set to {policy}");
            Ok(0)
        }
        Command::MaxRunning { max_running } => {
            let p = connect(user).await?;
            p.set_max_running(max_running)
                .await
                .map_err(|e| explain(e, user))?;
            println!("max running set to {max_running}");
            Ok(0)
        }
        Command::Exclude { devices } => set_disabled(&devices, true, user).await,
        Command::Include { devices } => set_disabled(&devices, false, user).await,
    }
}

/// `xlurm exclude|include [VENDOR:]ID[,ID...]`: without a vendor, the machine's only one.
async fn set_disabled(list: &str, disabled: bool, user: bool) -> Result<i32> {
    let p = connect(user).await?;
    let (vendor, ids) = match list.split_once(':') {
        Some((v, ids)) => (v.to_string(), ids),
        None => {
            let m = p.get_machine().await.map_err(|e| explain(e, user))?;
            let devices: Vec<Dict> = m
                .get("devices")
                .and_then(|v| v.try_clone().ok())
                .and_then(|v| Vec::<Dict>::try_from(v).ok())
                .unwrap_or_default();
            let mut vendors: Vec<String> = devices.iter().map(|d| get_str(d, "vendor")).collect();
            vendors.dedup();
            match &vendors[..] {
                [v] => (v.clone(), list),
                [] => bail!("this machine has no accelerators"),
                _ => bail!(
                    "several vendors here ({}): name one, e.g. nv:{list}",
                    vendors.join(", ")
                ),
            }
        }
    };
    let ids: Vec<u32> = ids
        .split(',')
        .map(|i| {
            i.trim()
                .parse::<u32>()
                .map_err(|_| anyhow!("{i:?} is not a device ID (e.g. 1,3 or nv:1,3)"))
        })
        .collect::<Result<_>>()?;
    p.set_devices_disabled(&vendor, ids.clone(), disabled)
        .await
        .map_err(|e| explain(e, user))?;
    let what = if disabled { "excluded" } else { "included" };
    println!(
        "{vendor} devices {} {what}",
        ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
    );
    Ok(0)
}

/// Finds `cmd` the way a shell would, so the job runs what the user meant.
pub fn resolve_command(cmd: &str, path_var: Option<&str>, cwd: &std::path::Path) -> Result<String> {
    if cmd.contains('/') {
        let p = std::path::Path::new(cmd);
        return Ok(if p.is_absolute() {
            p.to_path_buf()
        } else {
            cwd.join(p)
        }
        .display()
        .to_string());
    }
    for dir in path_var
        .unwrap_or("/usr/local/bin:/usr/bin:/bin")
        .split(':')
        .filter(|d| !d.is_empty())
    {
        let candidate = std::path::Path::new(dir).join(cmd);
        if let Ok(meta) = std::fs::metadata(&candidate) {
            use std::os::unix::fs::PermissionsExt;
            if meta.is_file() && meta.permissions().mode() & 0o111 != 0 {
                let full = if candidate.is_absolute() {
                    candidate
                } else {
                    cwd.join(candidate)
                };
                return Ok(full.display().to_string());
            }
        }
    }
    bail!("{cmd}: command not found in your PATH")
}

fn spec_from(res: &ResourceArgs, mut argv: Vec<String>, script: Option<String>) -> Result<Dict> {
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    if script.is_none() {
        let path = std::env::var("PATH").ok();
        argv[0] = resolve_command(&argv[0], path.as_deref(), &cwd)?;
    }
    let mut d = Dict::new();
    let mut add = |(k, v): (String, zbus::OwnedVariant)| {
        d.insert(k, v);
    };
    add(entry("argv", argv));
    add(entry("cwd", cwd.display().to_string()));
    if let Some(s) = script {
        add(entry("script", s));
    }
    if res.clean_env {
        add(entry("clean_env", true));
    } else {
        let env: Vec<String> = std::env::vars()
            .filter(|(k, _)| crate::wire::spec::valid_env_name(k))
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        add(entry("env", env));
    }
    if let Some(n) = &res.name {
        add(entry("name", n.clone()));
    }
    if let Some(c) = res.cpus {
        add(entry("cpus", c));
    }
    if let Some(m) = &res.mem {
        add(entry(
            "mem",
            parse_bytes(m).map_err(|e| anyhow!("--mem: {e}"))?,
        ));
    }
    let gpus = match (res.gpus, res.device_ids.len()) {
        (Some(g), n) if n > 0 && g as usize != n => {
            bail!("-g {g} does not match the {n} IDs given with -i")
        }
        (Some(g), _) => g,
        (None, n) if n > 0 => n as u32,
        (None, _) => 0,
    };
    add(entry("gpus", gpus));
    if !res.device_ids.is_empty() {
        add(entry("device_ids", res.device_ids.clone()));
    }
    if !res.exclude_device_ids.is_empty() {
        add(entry("exclude_device_ids", res.exclude_device_ids.clone()));
    }
    if let Some(v) = &res.vendor {
        add(entry("vendor", v.clone()));
    }
    if res.exclusive {
        add(entry("exclusive", true));
    }
    if res.numa_local {
        add(entry("numa_local", true));
    }
    if let Some(t) = &res.time_limit {
        add(entry(
            "time_limit",
            parse_duration_secs(t).map_err(|e| anyhow!("--time-limit: {e}"))?,
        ));
    }
    Ok(d)
}

/// An output file opened for `--output`, renamed once the job ID is known if
/// its name has `%j`.
pub struct OutputFile {
    file: std::fs::File,
    opened_as: std::path::PathBuf,
    template: Option<String>,
}

/// Opens `--output PATH` with the user's own rights (no symlink at the end),
/// so a path the user cannot write is refused before anything is queued.
pub fn open_output(path: &str, cwd: &std::path::Path) -> Result<OutputFile> {
    use std::os::unix::fs::OpenOptionsExt;
    let full = if path.starts_with('/') {
        std::path::PathBuf::from(path)
    } else {
        cwd.join(path)
    };
    let (opened_as, template) = if path.contains("%j") {
        let tmp = full
            .display()
            .to_string()
            .replace("%j", &format!("pending-{}", std::process::id()));
        (
            std::path::PathBuf::from(tmp),
            Some(full.display().to_string()),
        )
    } else {
        (full.clone(), None)
    };
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&opened_as)
        .map_err(|e| anyhow!("--output {}: {e}", opened_as.display()))?;
    Ok(OutputFile {
        file,
        opened_as,
        template,
    })
}

impl OutputFile {
    fn add_to(&self, spec: &mut Dict) {
        let fd = zbus::Fd::from(&self.file);
        if let Ok(v) = zbus::OwnedVariant::try_from(zbus::Variant::Fd(fd)) {
            spec.insert("output_fd".into(), v);
        }
        let (k, v) = entry(
            "output_path",
            self.template
                .clone()
                .unwrap_or_else(|| self.opened_as.display().to_string()),
        );
        spec.insert(k, v);
    }

    /// Gives the file its final name once the job ID is known.
    fn settle(&self, id: u64) -> Result<()> {
        if let Some(t) = &self.template {
            let target = t.replace("%j", &id.to_string());
            std::fs::rename(&self.opened_as, &target)
                .map_err(|e| anyhow!("renaming {} to {target}: {e}", self.opened_as.display()))?;
        }
        Ok(())
    }

    fn abandon(&self) {
        let _ = std::fs::remove_file(&self.opened_as);
    }
}

/// Submits `spec`, with its `--output` file if any.
async fn submit_with_output(
    p: &SchedulerProxy<'_>,
    mut spec: Dict,
    output: Option<OutputFile>,
    user: bool,
) -> Result<(u64, Dict)> {
    if let Some(o) = &output {
        o.add_to(&mut spec);
    }
    match p.submit(spec).await {
        Ok((id, info)) => {
            if let Some(o) = &output {
                o.settle(id)?;
            }
            Ok((id, info))
        }
        Err(e) => {
            if let Some(o) = &output {
                o.abandon();
            }
            Err(explain(e, user))
        }
    }
}

/// `eprintln!` that cannot panic: xrun ignores SIGPIPE, and its stderr may
/// be a pipe whose reader is gone (`xrun ... 2>&1 | head`).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

fn stamp() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// Exit code for a finished job as `xrun` reports it.
pub fn exit_code_of(job: &Dict) -> i32 {
    get::<i32>(job, "exit_code").unwrap_or(1)
}

async fn run(a: SubmitArgs, user: bool) -> Result<i32> {
    let p = connect(user).await?;
    let spec = spec_from(&a.res, a.command.clone(), None)?;
    let cwd = std::env::current_dir()?;
    let output = a
        .res
        .output
        .as_deref()
        .map(|o| open_output(o, &cwd))
        .transpose()?;
    // Subscribe before submitting, so no state change is missed.
    let mut changes = p.receive_job_state_changed().await?;
    // A closed stdout (`xrun ... | head`) must not kill xrun silently and
    // leave its job running unseen: writes then fail with EPIPE, and xrun
    // cancels the job like a shell pipeline's writer that dies of SIGPIPE.
    // SAFETY: changes only this signal's disposition, to ignore.
    unsafe {
        nix::libc::signal(nix::libc::SIGPIPE, nix::libc::SIG_IGN);
    }
    let (id, _) = submit_with_output(&p, spec, output, user).await?;
    // Created once, before the loop: a signal that arrives while xrun is busy
    // elsewhere is kept for the next select.
    let mut stops = Stops::new()?;
    let t0 = Instant::now();
    let (mut said_waiting, mut said_started, mut cancelled) = (false, false, false);
    let mut stream = LogStream::default();
    // It answered the submission.
    stream.outage.answered = true;
    loop {
        // xlurmd restarting (an upgrade, an admin): wait for it, signals and all.
        let Some(job) = stream.outage.check(p.get_job(id).await, user)? else {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                _ = stops.next(), if !cancelled => { cancelled = true; cancel_for_exit(&p, id, user).await; }
            }
            continue;
        };
        let state = get_str(&job, "state");
        if get::<u64>(&job, "start_time").unwrap_or(0) > 0 && state == "RUNNING" {
            if !said_started {
                say!("[{}] job {id}: Task started.", stamp());
                said_started = true;
            }
            stream.pump(&p, id, user).await?;
        }
        // The reader may go away while the job prints nothing: then only
        // poll tells.
        if !cancelled && (stream.closed || stdout_closed()) {
            say!(
                "[{}] job {id}: xrun's output was closed (its reader went away); cancelling...",
                stamp()
            );
            if let Err(e) = p.cancel(id).await {
                say!("xrun: cancelling job {id}: {}", explain(e, user));
            }
            // What a shell reports for a writer killed by SIGPIPE.
            return Ok(128 + nix::libc::SIGPIPE);
        }
        match state.as_str() {
            "PENDING" => {
                if !said_waiting && t0.elapsed() > Duration::from_secs(1) {
                    say!(
                        "[{}] job {id}: Waiting for resources... {}",
                        stamp(),
                        get_str(&job, "reason")
                    );
                    said_waiting = true;
                }
            }
            "RUNNING" => {
                if !said_started {
                    say!("[{}] job {id}: Task started.", stamp());
                    said_started = true;
                }
            }
            _ => {
                if !said_started && get::<u64>(&job, "start_time").unwrap_or(0) > 0 {
                    say!("[{}] job {id}: Task started.", stamp());
                }
                if get::<u64>(&job, "start_time").unwrap_or(0) > 0 {
                    stream.drain(&p, id, user).await?;
                }
                let code = exit_code_of(&job);
                let detail = get_str(&job, "detail");
                if state != "COMPLETED" && state != "FAILED"
                    || !detail.is_empty() && state == "FAILED"
                {
                    say!("[{}] job {id}: {state}: {detail}", stamp());
                } else {
                    say!("[{}] job {id}: {state} (exit {code})", stamp());
                }
                return Ok(code);
            }
        }
        // Output is polled while running; otherwise a state change wakes us
        // (with a slow poll as a safety net).
        let tick = if said_started { 200 } else { 1000 };
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(tick)) => {}
            _ = wait_for_change(&mut changes, id) => {}
            _ = stops.next(), if !cancelled => { cancelled = true; cancel_for_exit(&p, id, user).await; }
        }
    }
}

/// The signals that make xrun cancel its job: SIGINT, SIGTERM, SIGHUP.
struct Stops {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Stops {
    fn new() -> std::io::Result<Stops> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Stops {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    /// Returns when any of them arrives.
    async fn next(&mut self) {
        tokio::select! {
            _ = self.int.recv() => {}
            _ = self.term.recv() => {}
            _ = self.hup.recv() => {}
        }
    }
}

/// Whether standard output's reader went away: a pipe whose other end is
/// closed polls as an error.
fn stdout_closed() -> bool {
    let mut fds = [nix::libc::pollfd {
        fd: 1,
        events: nix::libc::POLLOUT,
        revents: 0,
    }];
    // SAFETY: one valid pollfd, and no waiting.
    let n = unsafe { nix::libc::poll(fds.as_mut_ptr(), 1, 0) };
    n > 0 && fds[0].revents & nix::libc::POLLERR != 0
}

/// Returns when job `id` changes state (or the signal stream ends).
async fn wait_for_change(changes: &mut super::client::JobStateChangedStream, id: u64) {
    use futures_util::StreamExt;
    while let Some(sig) = changes.next().await {
        if sig.args().is_ok_and(|a| a.id == id) {
            return;
        }
    }
    std::future::pending::<()>().await;
}

/// How long xrun and `xlurm log` wait for xlurmd to answer again (a restart
/// or an upgrade takes seconds) before giving up.
const OUTAGE_MAX: Duration = Duration::from_secs(120);

/// Rides out xlurmd going away for a moment: a call in flight when it stops
/// gets NoReply, and one made while it is gone may fail before bus
/// activation starts it again. Jobs are systemd's and keep running. Only
/// once xlurmd has answered: a first call that fails says so at once
/// ("xlurmd is not running: ...").
#[derive(Default)]
struct Outage {
    answered: bool,
    since: Option<Instant>,
}

impl Outage {
    /// The call's answer; `None` when xlurmd is away and the caller should
    /// try again shortly; an error when the call failed for good, or xlurmd
    /// stayed away longer than `OUTAGE_MAX`.
    fn check<T>(&mut self, answer: zbus::Result<T>, user: bool) -> Result<Option<T>> {
        match answer {
            Ok(v) => {
                self.answered = true;
                if self.since.take().is_some() {
                    say!("[{}] xlurmd answers again", stamp());
                }
                Ok(Some(v))
            }
            Err(e) if self.answered && crate::wire::bus::transient(&e) => {
                let since = *self.since.get_or_insert_with(|| {
                    say!(
                        "[{}] xlurmd is not answering ({e}); waiting for it to come back...",
                        stamp()
                    );
                    Instant::now()
                });
                if since.elapsed() > OUTAGE_MAX {
                    return Err(explain(e, user).context(format!(
                        "xlurmd did not answer for {} s",
                        OUTAGE_MAX.as_secs()
                    )));
                }
                Ok(None)
            }
            Err(e) => Err(explain(e, user)),
        }
    }
}

/// Streams a job's output to stdout, page by page.
#[derive(Default)]
struct LogStream {
    /// Whether xlurmd is away, and since when.
    outage: Outage,
    cursor: String,
    /// Whether the "rotated away" warning was printed.
    warned: bool,
    /// Whether stdout was closed by its reader (EPIPE; only where SIGPIPE
    /// is ignored, as in xrun): nothing more is written.
    closed: bool,
}

impl LogStream {
    /// Prints what is new; returns the number of lines and the job's state,
    /// or `None` while xlurmd is away (see `Outage`).
    async fn pump(
        &mut self,
        p: &SchedulerProxy<'_>,
        id: u64,
        user: bool,
    ) -> Result<Option<(usize, String)>> {
        use std::io::Write;
        let answer = p.read_log(id, &self.cursor, 20_000).await;
        let Some((lines, cursor, state, missing_before)) = self.outage.check(answer, user)? else {
            return Ok(None);
        };
        if missing_before > 0 && !self.warned {
            self.warned = true;
            say!(
                "xlurm: job {id}'s output from before {} is no longer in the journal: \
                 journald rotated it away to stay within its size limits \
                 (admins: journalctl --disk-usage, SystemMaxUse= in journald.conf; \
                 --output PATH keeps a job's whole output in a file)",
                local_time(missing_before, true)
            );
        }
        self.cursor = cursor;
        let mut out = std::io::stdout().lock();
        let written = lines
            .iter()
            .try_for_each(|l| writeln!(out, "{l}"))
            .and_then(|()| out.flush());
        if written.is_err_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) {
            self.closed = true;
        }
        Ok(Some((lines.len(), state)))
    }

    /// After the job ended: reads until the journal has nothing more (it may
    /// still be writing the last lines when the unit ends).
    async fn drain(&mut self, p: &SchedulerProxy<'_>, id: u64, user: bool) -> Result<()> {
        // The job's unit has been harvested by now, and journald has read the
        // job's stream to its end: read until a page comes back empty.
        let t0 = Instant::now();
        while !self.closed
            && (t0.elapsed() < Duration::from_secs(30) || self.outage.since.is_some())
        {
            match self.pump(p, id, user).await? {
                Some((0, _)) => break,
                Some(_) => {}
                None => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
        Ok(())
    }
}

async fn log(a: LogArgs, user: bool) -> Result<i32> {
    let p = connect(user).await?;
    let mut stream = LogStream::default();
    loop {
        let Some((n, state)) = stream.pump(&p, a.id, user).await? else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let done = !matches!(state.as_str(), "PENDING" | "RUNNING");
        if done {
            stream.drain(&p, a.id, user).await?;
            return Ok(0);
        }
        if !a.follow && n == 0 {
            return Ok(0);
        }
        if a.follow && n == 0 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

async fn cancel_for_exit(p: &SchedulerProxy<'_>, id: u64, user: bool) {
    say!("[{}] job {id}: cancelling...", stamp());
    if let Err(e) = p.cancel(id).await {
        say!("xrun: cancelling job {id}: {}", explain(e, user));
    }
}

/// `#SBATCH` options xlurm reads that take a value: `--mem 8G`, `--mem=8G`,
/// `-c 4`, `-c4` and `-c=4` are all the same.
const SBATCH_VALUED: &[&str] = &[
    "--gres",
    "--gpus",
    "-G",
    "--gpus-per-node",
    "--cpus-per-task",
    "-c",
    "--mem",
    "--mem-per-cpu",
    "--time",
    "-t",
    "--job-name",
    "-J",
    "--output",
    "-o",
    "--nodes",
    "-N",
    "--ntasks",
    "-n",
];

/// Slurm options that never take the next word as their value: flags, and
/// options whose value is optional and so only comes attached with `=`
/// (`--exclusive[=user]`). Any other option xlurm does not know takes the
/// next word as its value unless that word starts with `-`.
const SBATCH_FLAGS: &[&str] = &[
    "--exclusive",
    "--contiguous",
    "--get-user-env",
    "-H",
    "--hold",
    "-h",
    "--help",
    "-I",
    "--immediate",
    "--ignore-pbs",
    "-k",
    "--no-kill",
    "--no-requeue",
    "-O",
    "--overcommit",
    "-s",
    "--oversubscribe",
    "--parsable",
    "-Q",
    "--quiet",
    "--requeue",
    "--spread-job",
    "--test-only",
    "--usage",
    "--use-min-nodes",
    "-v",
    "--verbose",
    "-V",
    "--version",
    "-W",
    "--wait",
];

/// Splits what follows `#SBATCH` into words as Slurm does: quotes group,
/// a backslash escapes the next character, an unquoted `#` starts a comment.
fn sbatch_words(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (_, '\\') => {
                word.push(chars.next().ok_or("ends in a backslash")?);
                in_word = true;
            }
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '"' | '\'') => {
                quote = Some(c);
                in_word = true;
            }
            (None, '#') => break,
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            (None, c) => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if let Some(q) = quote {
        return Err(format!("has a {q} that is never closed"));
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

/// `--name=value`, `--name`, `-x`, `-xVALUE` or `-x=VALUE` as the option's
/// name and its attached value; `None` for a word that is no option.
fn sbatch_option(word: &str) -> Option<(String, Option<String>)> {
    if let Some(long) = word.strip_prefix("--").filter(|l| !l.is_empty()) {
        return Some(match long.split_once('=') {
            Some((k, v)) => (format!("--{k}"), Some(v.to_string())),
            None => (word.to_string(), None),
        });
    }
    let mut chars = word.strip_prefix('-')?.chars();
    let c = chars.next().filter(|c| *c != '-')?;
    let rest = chars.as_str();
    let value = (!rest.is_empty()).then(|| rest.strip_prefix('=').unwrap_or(rest).to_string());
    Some((format!("-{c}"), value))
}

/// A GPU request `[TYPE:]COUNT` (`--gpus`) or, for `--gres=gpu`,
/// `[:TYPE][:COUNT]` where a missing count is 1: the count and the type.
fn sbatch_gpus<'a>(
    parts: &[&'a str],
    count_optional: bool,
) -> Result<(u32, Option<&'a str>), String> {
    let count = |n: &str| n.parse::<u32>().ok();
    let form = || {
        if count_optional {
            "expected gpu, gpu:COUNT, gpu:TYPE or gpu:TYPE:COUNT".to_string()
        } else {
            "expected COUNT or TYPE:COUNT".to_string()
        }
    };
    match parts {
        [] if count_optional => Ok((1, None)),
        [n] => match count(n) {
            Some(c) => Ok((c, None)),
            None if count_optional && !n.is_empty() => Ok((1, Some(n))),
            None => Err(form()),
        },
        [t, n] if !t.is_empty() => count(n).map(|c| (c, Some(*t))).ok_or_else(form),
        _ => Err(form()),
    }
}

/// Slurm's memory sizes: a plain number is megabytes; `K`, `M`, `G`, `T`
/// suffixes as usual. As xlurm's size text (checked).
fn slurm_mem(v: &str) -> Result<String, String> {
    let text = if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        if v.bytes().all(|b| b == b'0') {
            return Err(
                "0 (all of a node's memory) is not supported here: give a size, \
                        or use --exclusive for the whole machine"
                    .into(),
            );
        }
        format!("{v}M")
    } else if v.ends_with(|c: char| c.is_ascii_digit()) {
        // 1.5 or 1e3 without a unit: Slurm refuses these; as bytes they would
        // make a budget that kills the job at once.
        return Err(format!(
            "{v:?}: a size without a unit is a whole number of megabytes (e.g. 4000, or 1.5G)"
        ));
    } else {
        v.to_string()
    };
    parse_bytes(&text)?;
    Ok(text)
}

/// `#SBATCH` directives xlurm understands, applied under the command line's
/// options (which win). Returns a warning for each directive it ignores;
/// a malformed directive it would use is an error naming its line.
pub fn apply_sbatch(script: &str, res: &mut ResourceArgs) -> Result<Vec<String>> {
    let mut warnings = Vec::new();
    let mut from_script = ResourceArgs::default();
    let mut mem_per_cpu: Option<u64> = None;
    for (i, line) in script.lines().enumerate() {
        let lineno = i + 1;
        let t = line.trim();
        if t.is_empty() {
            continue;
        }
        let Some(rest) = t.strip_prefix("#SBATCH") else {
            if t.starts_with('#') {
                continue;
            }
            break; // the first command ends the directives, as in Slurm
        };
        let words = sbatch_words(rest).map_err(|e| anyhow!("line {lineno}: #SBATCH line {e}"))?;
        let mut words = words.into_iter().peekable();
        while let Some(word) = words.next() {
            let (name, attached) = sbatch_option(&word).ok_or_else(|| {
                anyhow!(
                    "line {lineno}: #SBATCH {word:?} is not an option \
                     (#SBATCH lines hold options, e.g. #SBATCH --mem=8G)"
                )
            })?;
            let value = match attached {
                Some(v) => Some(v),
                None if SBATCH_VALUED.contains(&name.as_str()) => Some(
                    words
                        .next()
                        .ok_or_else(|| anyhow!("line {lineno}: #SBATCH {name} needs a value"))?,
                ),
                None if SBATCH_FLAGS.contains(&name.as_str()) => None,
                None => words.next_if(|w| !w.starts_with('-')),
            };
            let shown = match &value {
                Some(v) if name.starts_with("--") => format!("{name}={v}"),
                Some(v) => format!("{name} {v}"),
                None => name.clone(),
            };
            let bad = |e: &str| anyhow!("line {lineno}: #SBATCH {shown}: {e}");
            let v = value.as_deref().unwrap_or_default();
            match name.as_str() {
                "--gres" => {
                    let mut gpus = None;
                    for item in v.split(',') {
                        let parts: Vec<&str> = item.split(':').collect();
                        if parts[0] != "gpu" {
                            warnings.push(format!(
                                "#SBATCH --gres={item} is not supported here and was ignored"
                            ));
                            continue;
                        }
                        let (n, kind) = sbatch_gpus(&parts[1..], true).map_err(|e| bad(&e))?;
                        if let Some(k) = kind {
                            warnings.push(format!("#SBATCH --gres={item}: the GPU type {k} is ignored (choose a vendor with --device)"));
                        }
                        gpus = Some(gpus.unwrap_or(0u32).saturating_add(n));
                    }
                    if gpus.is_some() {
                        from_script.gpus = gpus;
                    }
                }
                "--gpus" | "-G" | "--gpus-per-node" => {
                    let parts: Vec<&str> = v.split(':').collect();
                    let (n, kind) = sbatch_gpus(&parts, false).map_err(|e| bad(&e))?;
                    if let Some(k) = kind {
                        warnings.push(format!(
                            "#SBATCH {shown}: the GPU type {k} is ignored (choose a vendor with --device)"
                        ));
                    }
                    from_script.gpus = Some(n);
                }
                "--cpus-per-task" | "-c" => match v.parse::<u32>() {
                    Ok(n) if n > 0 => from_script.cpus = Some(n),
                    _ => return Err(bad("expected a number of CPUs, at least 1")),
                },
                "--mem" => from_script.mem = Some(slurm_mem(v).map_err(|e| bad(&e))?),
                "--mem-per-cpu" => {
                    let text = slurm_mem(v).map_err(|e| bad(&e))?;
                    mem_per_cpu = Some(parse_bytes(&text).map_err(|e| bad(&e))?);
                }
                "--time" | "-t" => {
                    from_script.time_limit = if ["UNLIMITED", "INFINITE"]
                        .iter()
                        .any(|u| v.eq_ignore_ascii_case(u))
                    {
                        None
                    } else {
                        match slurm_time(v) {
                            Some(0) => None,
                            Some(s) => Some(s.to_string()),
                            None => {
                                return Err(bad(
                                    "expected MINUTES, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS or UNLIMITED",
                                ))
                            }
                        }
                    }
                }
                "--job-name" | "-J" if v.is_empty() => return Err(bad("the job name is empty")),
                "--job-name" | "-J" => from_script.name = Some(v.to_string()),
                "--output" | "-o" if v.is_empty() => return Err(bad("the file name is empty")),
                "--output" | "-o" => {
                    if v.replace("%j", "").contains('%') {
                        warnings.push(format!(
                            "#SBATCH {shown}: only %j (the job ID) is replaced here; other % patterns stay as written"
                        ));
                    }
                    from_script.output = Some(v.to_string());
                }
                "--exclusive" if value.is_none() => from_script.exclusive = true,
                // One node and one task is what every xlurm job is.
                "--nodes" | "-N" if matches!(v, "1" | "1-1") => {}
                "--ntasks" | "-n" if v == "1" => {}
                _ => warnings.push(format!(
                    "#SBATCH {shown} is not supported here and was ignored"
                )),
            }
        }
    }
    if from_script.mem.is_some() && mem_per_cpu.is_some() {
        bail!("#SBATCH --mem and --mem-per-cpu are mutually exclusive (as in Slurm): give one");
    }
    res.gpus = res.gpus.or(from_script.gpus);
    res.cpus = res.cpus.or(from_script.cpus);
    res.mem = res.mem.take().or(from_script.mem);
    if let (None, Some(per_cpu)) = (&res.mem, mem_per_cpu) {
        let cpus = res.cpus.unwrap_or(1);
        let total = per_cpu
            .checked_mul(u64::from(cpus))
            .ok_or_else(|| anyhow!("#SBATCH --mem-per-cpu times {cpus} CPUs is too large"))?;
        res.mem = Some(total.to_string());
    }
    res.time_limit = res.time_limit.take().or(from_script.time_limit);
    res.name = res.name.take().or(from_script.name);
    res.exclusive |= from_script.exclusive;
    res.output = res.output.take().or(from_script.output);
    Ok(warnings)
}

/// Slurm's `--time` forms: `MM`, `MM:SS`, `HH:MM:SS`, `D-HH[:MM[:SS]]`, as seconds.
fn slurm_time(v: &str) -> Option<u64> {
    let (days, rest) = match v.split_once('-') {
        Some((d, r)) => (Some(d.parse::<u64>().ok()?), r),
        None => (None, v),
    };
    let parts: Vec<u64> = rest
        .split(':')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let secs = match (days.is_some(), parts.as_slice()) {
        (false, [m]) => m.checked_mul(60)?,
        (false, [m, s]) => m.checked_mul(60)?.checked_add(*s)?,
        (_, [h, m, s]) => h
            .checked_mul(3600)?
            .checked_add(m.checked_mul(60)?)?
            .checked_add(*s)?,
        (true, [h]) => h.checked_mul(3600)?,
        (true, [h, m]) => h.checked_mul(3600)?.checked_add(m.checked_mul(60)?)?,
        _ => return None,
    };
    days.unwrap_or(0).checked_mul(86400)?.checked_add(secs)
}

async fn batch(mut a: BatchArgs, user: bool) -> Result<i32> {
    let (script, args, file_name) = match (&a.wrap, a.script.split_first()) {
        (Some(w), None) => (format!("#!/bin/bash\n{w}\n"), Vec::new(), None),
        (Some(_), Some(_)) => bail!("give either --wrap 'COMMAND' or a script, not both"),
        (None, Some((path, rest))) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read batch script {path}"))?;
            let name = std::path::Path::new(path)
                .file_name()
                .map(|n| n.to_string_lossy().to_string());
            (text, rest.to_vec(), name)
        }
        (None, None) => bail!("give a batch script (xbatch job.sh) or --wrap 'COMMAND'"),
    };
    let source = a.script.first().map_or("--wrap", String::as_str);
    for w in apply_sbatch(&script, &mut a.res).with_context(|| source.to_string())? {
        eprintln!("xbatch: warning: {w}");
    }
    // -n, then #SBATCH --job-name, then the script's file name.
    if a.res.name.is_none() {
        a.res.name = Some(file_name.unwrap_or_else(|| "wrap".into()));
    }
    let p = connect(user).await?;
    let spec = spec_from(&a.res, args, Some(script))?;
    let cwd = std::env::current_dir()?;
    let output = a
        .res
        .output
        .as_deref()
        .map(|o| open_output(o, &cwd))
        .transpose()?;
    let (id, info) = submit_with_output(&p, spec, output, user).await?;
    let mem = get::<u64>(&info, "mem")
        .map(format_bytes)
        .unwrap_or_default();
    println!("Submitted batch job {id}");
    eprintln!(
        "memory budget {mem}{}",
        if get::<bool>(&info, "mem_default").unwrap_or(false) {
            " (default)"
        } else {
            ""
        }
    );
    Ok(0)
}

async fn cancel(a: CancelArgs, user: bool) -> Result<i32> {
    let p = connect(user).await?;
    let mut rc = 0;
    for id in a.ids {
        match p.cancel(id).await {
            Ok(_) => println!("job {id} cancelled"),
            Err(e) => {
                eprintln!("xcancel: job {id}: {}", explain(e, user));
                rc = 1;
            }
        }
    }
    Ok(rc)
}

fn local_time(usec: u64, with_year: bool) -> String {
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

fn dict_to_json(d: &Dict) -> serde_json::Value {
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

async fn queue(a: QueueArgs, user: bool) -> Result<i32> {
    let p = connect(user).await?;
    if let (Some(id), true) = (a.id, a.log) {
        drop(p);
        return log(
            LogArgs {
                id,
                follow: a.follow,
            },
            user,
        )
        .await;
    }
    if let Some(id) = a.id {
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
    if a.json {
        emit(&json_text(&jobs)?)?;
        return Ok(0);
    }
    emit(&queue_table(&jobs, a.all, crate::wire::time::now_usec()))?;
    Ok(0)
}

/// The `xqueue` table. `now` is microseconds since the epoch.
pub fn queue_table(jobs: &[crate::wire::queue::Line<'_>], all: bool, now: u64) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>6} {:<10} {:<16} {:<13} {:<10} {:>4} {:>7} {:<14} {:>10} {}",
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
    for j in jobs {
        let time = match &*j.state {
            "PENDING" => now.saturating_sub(j.submit_time),
            "RUNNING" => now.saturating_sub(j.start_time),
            _ if j.start_time > 0 => j.end_time.saturating_sub(j.start_time),
            _ => 0,
        } / 1_000_000;
        let mem = format!("{}{}", format_bytes(j.mem), if j.spread { "+" } else { "" });
        let last = match &*j.state {
            "PENDING" => j.reason.to_string(),
            "RUNNING" => String::new(),
            _ if j.exit_code >= 0 => j.exit_code.to_string(),
            _ => String::new(),
        };
        let name: String = j.name.chars().take(16).collect();
        let _ = writeln!(
            out,
            "{:>6} {:<10} {:<16} {:<13} {:<10} {:>4} {:>7} {:<14} {:>10} {}",
            j.id,
            j.user,
            name,
            j.state,
            j.devices,
            j.cpus,
            mem,
            local_time(j.start_time, all),
            duration(time),
            last
        );
    }
    out
}

/// `xqueue ID`'s text: one "Key: value" line per known field.
fn job_text(job: &Dict) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let id = get::<u64>(job, "id").unwrap_or(0);
    let mut line = |k: &str, v: String| {
        let _ = writeln!(out, "{k:>14}: {v}");
    };
    line("Job", id.to_string());
    line("Name", get_str(job, "name"));
    line("User", get_str(job, "user"));
    line("State", get_str(job, "state"));
    let reason = get_str(job, "reason");
    if !reason.is_empty() {
        line("Reason", reason);
    }
    if let Some(argv) = get::<Vec<String>>(job, "argv") {
        line("Command", argv.join(" "));
        line("WorkDir", get_str(job, "cwd"));
    }
    if let Some(o) = get::<String>(job, "output") {
        let err = get_str(job, "output_error");
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
            get::<u32>(job, "cpus").unwrap_or(0),
            format_bytes(get::<u64>(job, "mem").unwrap_or(0)),
            get_str(job, "devices_requested")
        ),
    );
    if let Some(cpus) = get::<String>(job, "alloc_cpus") {
        line(
            "Allocated",
            format!(
                "CPUs {cpus}, memory nodes {}, devices {}",
                get_str(job, "alloc_mem_nodes"),
                get_str(job, "devices")
            ),
        );
    }
    line(
        "Submitted",
        local_time(get::<u64>(job, "submit_time").unwrap_or(0), true),
    );
    line(
        "Started",
        local_time(get::<u64>(job, "start_time").unwrap_or(0), true),
    );
    line(
        "Ended",
        local_time(get::<u64>(job, "end_time").unwrap_or(0), true),
    );
    if let Some(c) = get::<i32>(job, "exit_code") {
        line("Exit code", c.to_string());
    }
    let detail = get_str(job, "detail");
    if !detail.is_empty() {
        line("Detail", detail);
    }
    if let Some(n) = get::<u64>(job, "cpu_nsec") {
        line("CPU time", duration(n / 1_000_000_000));
    }
    if let Some(n) = get::<u64>(job, "memory_peak") {
        line("Memory peak", format_bytes(n));
    }
    let unit = get_str(job, "unit");
    line("Unit", unit.clone());
    line(
        "See",
        format!("systemctl status {unit}; journalctl -u {unit}"),
    );
    out
}

async fn info(a: InfoArgs, user: bool) -> Result<i32> {
    let p = connect(user).await?;
    let m = p.get_machine().await.map_err(|e| explain(e, user))?;
    if a.json {
        emit(&json_text(&dict_to_json(&m))?)?;
        return Ok(0);
    }
    emit(&machine_text(&m))?;
    Ok(0)
}

/// `xinfo`'s text: the policy and counts, the NUMA nodes, the devices.
fn machine_text(m: &Dict) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "policy {}, max running {}, {} pending, {} running",
        get_str(m, "policy"),
        get::<u32>(m, "max_running").unwrap_or(0),
        get::<u32>(m, "pending").unwrap_or(0),
        get::<u32>(m, "running").unwrap_or(0)
    );
    let nodes: Vec<Dict> = m
        .get("nodes")
        .and_then(|v| v.try_clone().ok())
        .and_then(|v| Vec::<Dict>::try_from(v).ok())
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "{:<6} {:<16} {:<16} {:>10} {:>10}",
        "NODE", "CPUS", "FREE", "MEM", "MEM FREE"
    );
    for n in &nodes {
        let _ = writeln!(
            out,
            "{:<6} {:<16} {:<16} {:>10} {:>10}",
            format!("node{}", get::<u32>(n, "id").unwrap_or(0)),
            get_str(n, "cpus"),
            get_str(n, "cpus_free"),
            format_bytes(get::<u64>(n, "mem").unwrap_or(0)),
            format_bytes(get::<u64>(n, "mem_free").unwrap_or(0))
        );
    }
    let devices: Vec<Dict> = m
        .get("devices")
        .and_then(|v| v.try_clone().ok())
        .and_then(|v| Vec::<Dict>::try_from(v).ok())
        .unwrap_or_default();
    if devices.is_empty() {
        let _ = writeln!(out, "no accelerators");
    }
    for d in &devices {
        let job = get::<u64>(d, "job").unwrap_or(0);
        let mut state = if get::<bool>(d, "disabled").unwrap_or(false) {
            "disabled".to_string()
        } else {
            get_str(d, "health")
        };
        if job > 0 {
            state = format!("{state}, job {job}");
        }
        let _ = writeln!(
            out,
            "{}:{} {} node {} {}",
            get_str(d, "vendor"),
            get::<u32>(d, "index").unwrap_or(0),
            get_str(d, "uuid"),
            get::<i32>(d, "numa_node").unwrap_or(-1),
            state
        );
        let err = get_str(d, "monitoring_error");
        if !err.is_empty() {
            let _ = writeln!(out, "    {err}");
        }
    }
    out
}

/// Pretty JSON and a newline.
fn json_text<T: serde::Serialize>(v: &T) -> Result<String> {
    Ok(serde_json::to_string_pretty(v)? + "\n")
}

/// Writes a command's whole output at once: a reader that stops early
/// (`xqueue 5 | grep -q RUNNING` under `set -o pipefail`) then never makes
/// the command die of SIGPIPE between two of its lines, as long as the
/// output fits the pipe's buffer (64 KiB on Linux). Longer output, like any
/// program's, may still meet a reader gone.
fn emit(text: &str) -> Result<()> {
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
    fn sbatch_lines_fill_in_under_command_line_options() {
        let script = "#!/bin/bash\n#SBATCH --gres=gpu:2\n#SBATCH --cpus-per-task=4 --mem=8G\n#SBATCH --time=1-02:00:00\n#SBATCH --job-name=train\n#SBATCH --partition=gpu\n#SBATCH --exclusive\necho hi\n#SBATCH --gpus=7\n";
        let mut res = ResourceArgs {
            cpus: Some(2),
            ..Default::default()
        };
        let warnings = apply_sbatch(script, &mut res).unwrap();
        assert_eq!(res.gpus, Some(2));
        assert_eq!(res.cpus, Some(2), "command line wins");
        assert_eq!(res.mem.as_deref(), Some("8G"));
        assert_eq!(res.time_limit.as_deref(), Some("93600"));
        assert_eq!(res.name.as_deref(), Some("train"));
        assert!(res.exclusive);
        assert_eq!(
            warnings,
            vec!["#SBATCH --partition=gpu is not supported here and was ignored"]
        );
    }

    fn sbatch(lines: &str) -> ResourceArgs {
        let mut res = ResourceArgs::default();
        let warnings = apply_sbatch(&format!("#!/bin/bash\n{lines}\necho hi\n"), &mut res)
            .unwrap_or_else(|e| panic!("{lines:?}: {e:#}"));
        assert_eq!(warnings, Vec::<String>::new(), "{lines:?}");
        res
    }

    fn sbatch_error(lines: &str) -> String {
        let mut res = ResourceArgs::default();
        match apply_sbatch(&format!("#!/bin/bash\n{lines}\necho hi\n"), &mut res) {
            Ok(w) => panic!("{lines:?} was accepted (warnings {w:?})"),
            Err(e) => format!("{e:#}"),
        }
    }

    #[test]
    fn sbatch_options_take_their_value_from_the_next_word() {
        let res = sbatch(
            "#SBATCH --mem 8G\n#SBATCH -c 4\n#SBATCH -t 1:00:00\n#SBATCH -J name\n\
             #SBATCH --output file\n#SBATCH -G 2",
        );
        assert_eq!(res.mem.as_deref(), Some("8G"));
        assert_eq!(res.cpus, Some(4));
        assert_eq!(res.time_limit.as_deref(), Some("3600"));
        assert_eq!(res.name.as_deref(), Some("name"));
        assert_eq!(res.output.as_deref(), Some("file"));
        assert_eq!(res.gpus, Some(2));
        assert_eq!(sbatch("#SBATCH --gres gpu:2").gpus, Some(2));
        assert_eq!(sbatch("#SBATCH --job-name -x").name.as_deref(), Some("-x"));
        let res = sbatch("#SBATCH --cpus-per-task 3 --time 90 --job-name a --exclusive --gpus 1");
        assert_eq!(
            (
                res.cpus,
                res.time_limit.as_deref(),
                res.name.as_deref(),
                res.exclusive,
                res.gpus
            ),
            (Some(3), Some("5400"), Some("a"), true, Some(1))
        );
    }

    #[test]
    fn sbatch_short_options_take_attached_values() {
        let res = sbatch("#SBATCH -c4 -t30 -Jtrain -G1 -oout.%j");
        assert_eq!(res.cpus, Some(4));
        assert_eq!(res.time_limit.as_deref(), Some("1800"));
        assert_eq!(res.name.as_deref(), Some("train"));
        assert_eq!(res.gpus, Some(1));
        assert_eq!(res.output.as_deref(), Some("out.%j"));
        assert_eq!(sbatch("#SBATCH -c=6").cpus, Some(6));
    }

    #[test]
    fn sbatch_mem_without_a_unit_is_megabytes() {
        assert_eq!(sbatch("#SBATCH --mem=4096").mem.as_deref(), Some("4096M"));
        assert_eq!(sbatch("#SBATCH --mem 512").mem.as_deref(), Some("512M"));
        assert_eq!(sbatch("#SBATCH --mem=2g").mem.as_deref(), Some("2g"));
        // --mem-per-cpu: per CPU, times the CPUs asked for (1 if none).
        let res = sbatch("#SBATCH --mem-per-cpu=1000 -c 4");
        assert_eq!(res.mem.as_deref(), Some(&*(4000u64 << 20).to_string()));
        let res = sbatch("#SBATCH --mem-per-cpu 2G");
        assert_eq!(res.mem.as_deref(), Some(&*(2u64 << 30).to_string()));
        let mut res = ResourceArgs {
            cpus: Some(2),
            ..Default::default()
        };
        apply_sbatch("#SBATCH --mem-per-cpu=1G -c 8\n", &mut res).unwrap();
        assert_eq!(
            res.mem.as_deref(),
            Some(&*(2u64 << 30).to_string()),
            "-c 2 wins"
        );
        let mut res = ResourceArgs {
            mem: Some("3G".into()),
            ..Default::default()
        };
        apply_sbatch("#SBATCH --mem-per-cpu=1G\n", &mut res).unwrap();
        assert_eq!(res.mem.as_deref(), Some("3G"), "-m wins");
    }

    #[test]
    fn sbatch_gres_gpu_without_a_count_is_one() {
        assert_eq!(sbatch("#SBATCH --gres=gpu").gpus, Some(1));
        assert_eq!(sbatch("#SBATCH --gres=gpu:3").gpus, Some(3));
        assert_eq!(sbatch("#SBATCH --gres=gpu:0").gpus, Some(0));
        assert_eq!(sbatch("#SBATCH --gpus-per-node=2").gpus, Some(2));
        let mut res = ResourceArgs::default();
        let w = apply_sbatch("#SBATCH --gres=gpu:a100:2,nic:1 --gpus=v100:3\n", &mut res).unwrap();
        assert_eq!(res.gpus, Some(3), "the last directive wins");
        assert_eq!(w.len(), 3, "{w:?}");
        assert!(
            w[0].contains("--gres=gpu:a100:2: the GPU type a100 is ignored"),
            "{w:?}"
        );
        assert!(w[1].contains("--gres=nic:1 is not supported"), "{w:?}");
        assert!(w[2].contains("the GPU type v100 is ignored"), "{w:?}");
        let mut res = ResourceArgs::default();
        apply_sbatch("#SBATCH --gres=gpu:tesla\n", &mut res).unwrap();
        assert_eq!(res.gpus, Some(1));
    }

    #[test]
    fn sbatch_words_follow_slurm_quoting_and_comments() {
        let res = sbatch("#SBATCH --job-name=\"my job\" # a comment --mem=1G");
        assert_eq!(res.name.as_deref(), Some("my job"));
        assert_eq!(res.mem, None, "after # is a comment");
        assert_eq!(sbatch("#SBATCH -J 'a b'").name.as_deref(), Some("a b"));
        assert_eq!(sbatch("#SBATCH -J a\\ b").name.as_deref(), Some("a b"));
        // Directives stop at the first command; comments and blank lines do not stop them.
        let res = sbatch("# setup\n\n#SBATCH -c 2\nexport X=1\n#SBATCH -c 9");
        assert_eq!(res.cpus, Some(2));
    }

    #[test]
    fn sbatch_slurm_only_options_are_warned_about_with_their_values() {
        let mut res = ResourceArgs::default();
        let w = apply_sbatch(
            "#SBATCH --partition gpu -A proj --requeue --mail-type=END -e err.txt -N 1 -n 1 -c 2\n\
             #SBATCH --nodes=2 --ntasks 4 --exclusive=user\n",
            &mut res,
        )
        .unwrap();
        assert_eq!(
            res.cpus,
            Some(2),
            "the value of an unknown option is not taken for an option"
        );
        assert!(!res.exclusive, "--exclusive=user is not --exclusive");
        let ignored: Vec<&str> = w
            .iter()
            .map(|w| {
                w.strip_prefix("#SBATCH ")
                    .and_then(|w| w.strip_suffix(" is not supported here and was ignored"))
                    .unwrap_or(w)
            })
            .collect();
        assert_eq!(
            ignored,
            [
                "--partition=gpu",
                "-A proj",
                "--requeue",
                "--mail-type=END",
                "-e err.txt",
                "--nodes=2",
                "--ntasks=4",
                "--exclusive=user"
            ]
        );
        // UNLIMITED and 0 leave the time limit to --max-lifetime.
        assert_eq!(sbatch("#SBATCH -t UNLIMITED").time_limit, None);
        assert_eq!(sbatch("#SBATCH -t 0").time_limit, None);
        assert_eq!(
            sbatch("#SBATCH -t 0-05").time_limit.as_deref(),
            Some("18000")
        );
        assert_eq!(
            sbatch("#SBATCH -t 2-0").time_limit.as_deref(),
            Some("172800")
        );
        assert_eq!(
            sbatch("#SBATCH -t 10:30").time_limit.as_deref(),
            Some("630")
        );
    }

    #[test]
    fn sbatch_bad_directives_are_errors_naming_the_line() {
        for (lines, wanted) in [
            ("#SBATCH -c", "line 2: #SBATCH -c needs a value"),
            ("#SBATCH --mem", "line 2: #SBATCH --mem needs a value"),
            (
                "#SBATCH -c four",
                "line 2: #SBATCH -c four: expected a number of CPUs",
            ),
            (
                "#SBATCH --cpus-per-task=0",
                "expected a number of CPUs, at least 1",
            ),
            (
                "#SBATCH --mem=lots",
                "line 2: #SBATCH --mem=lots: invalid size",
            ),
            ("#SBATCH --mem=8X", "invalid size"),
            ("#SBATCH --mem=1.5", "whole number of megabytes"),
            ("#SBATCH --mem-per-cpu 1e3", "whole number of megabytes"),
            (
                "#SBATCH --mem=0",
                "0 (all of a node's memory) is not supported",
            ),
            ("#SBATCH -t 1:xx", "#SBATCH -t 1:xx: expected MINUTES"),
            ("#SBATCH -t 1:2:3:4", "expected MINUTES"),
            ("#SBATCH -t 999999999999999999999", "expected MINUTES"),
            ("#SBATCH --gres=gpu:a:b:c", "expected gpu, gpu:COUNT"),
            ("#SBATCH --gres=gpu:", "expected gpu, gpu:COUNT"),
            ("#SBATCH --gpus=a100", "expected COUNT or TYPE:COUNT"),
            ("#SBATCH -G -1", "expected COUNT or TYPE:COUNT"),
            ("#SBATCH -J ''", "the job name is empty"),
            ("#SBATCH --output=", "the file name is empty"),
            (
                "#SBATCH -J \"unclosed",
                "line 2: #SBATCH line has a \" that is never closed",
            ),
            ("#SBATCH -J x\\", "ends in a backslash"),
            ("#SBATCH 4", "line 2: #SBATCH \"4\" is not an option"),
            (
                "#SBATCH -c 1\n#SBATCH - x",
                "line 3: #SBATCH \"-\" is not an option",
            ),
            ("#SBATCH --mem=1G --mem-per-cpu=1G", "mutually exclusive"),
        ] {
            let e = sbatch_error(lines);
            assert!(e.contains(wanted), "{lines:?}: {e:?} lacks {wanted:?}");
        }
    }

    fn summary(id: u64, state: &str) -> crate::wire::queue::JobSummary {
        crate::wire::queue::JobSummary {
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
        }
    }

    #[test]
    fn queue_table_snapshot() {
        let jobs = [summary(1, "PENDING"), summary(2, "FAILED")];
        let jobs: Vec<_> = jobs
            .iter()
            .map(crate::wire::queue::JobSummary::line)
            .collect();
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
            16,
            "the documented JSON schema has 16 keys"
        );
    }

    #[test]
    fn slurm_times() {
        assert_eq!(slurm_time("30"), Some(1800));
        assert_eq!(slurm_time("1:30"), Some(90));
        assert_eq!(slurm_time("2:00:00"), Some(7200));
        assert_eq!(slurm_time("1-0"), Some(86400));
        assert_eq!(slurm_time("0-5"), Some(18000), "D-HH even with 0 days");
        assert_eq!(slurm_time("1-2:30"), Some(95400));
        assert_eq!(slurm_time("-5"), None);
        assert_eq!(slurm_time(""), None);
        assert_eq!(slurm_time("x"), None);
    }

    #[test]
    fn durations_and_commands() {
        assert_eq!(duration(3661), "01:01:01");
        assert_eq!(duration(90061), "1-01:01:01");
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("tool");
        std::fs::write(&exe, "#!/bin/sh\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = dir.path().display().to_string();
        assert_eq!(
            resolve_command("tool", Some(&path), dir.path()).unwrap(),
            exe.display().to_string()
        );
        assert!(resolve_command("nope-xyz", Some(&path), dir.path()).is_err());
        assert_eq!(
            resolve_command("./a/b", None, std::path::Path::new("/w")).unwrap(),
            "/w/./a/b"
        );
    }
}
